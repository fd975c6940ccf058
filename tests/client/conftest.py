"""Fixtures for the client tests.

``bootstrap`` is the broker the membership tests run against. It is parametrized over broker kinds;
today only ``kafka`` (the Apache Kafka reference broker) exists. To run the same tests against
regroup's own broker, add a ``"regroup"`` entry to ``BROKER_KINDS`` and start it in ``_start_broker``,
or point ``REGROUP_TEST_BOOTSTRAP`` at a running one (the ``external`` kind). The broker must have
``group.min.session.timeout.ms`` ≤ 6000 and ``group.initial.rebalance.delay.ms`` = 0, as in
``refkafka.TEST_BROKER_CONFIG``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.support import ServeProcess
from regroup import refkafka

# Each kind carries the marker selecting it (``-m kafka`` runs the Apache Kafka ones).
BROKER_KINDS = [
    pytest.param("kafka", marks=pytest.mark.kafka),
    pytest.param("regroup", marks=pytest.mark.interop),
]
# A broker someone else started (e.g. ``regroup serve``): REGROUP_TEST_BOOTSTRAP=host:port.
EXTERNAL_BOOTSTRAP = os.environ.get("REGROUP_TEST_BOOTSTRAP")
if EXTERNAL_BOOTSTRAP:
    BROKER_KINDS.append(pytest.param("external", marks=pytest.mark.interop))


@contextlib.contextmanager
def _start_broker(kind: str) -> Iterator[str]:
    if kind == "kafka":
        reason = refkafka.skip_reason()
        if reason is not None:
            pytest.skip(reason)
        with refkafka.KafkaReference() as ref:
            yield ref.bootstrap_servers
        return
    if kind == "regroup":
        # The same settings the reference broker runs with, so both see the same timeouts and delays.
        overrides = [
            arg
            for key, value in refkafka.TEST_BROKER_CONFIG.items()
            if key.startswith(("group.", "offsets.", "num.partitions", "auto.create"))
            for arg in ("--override", f"{key}={value}")
        ]
        with tempfile.TemporaryDirectory(prefix="regroup-client-") as tmp:
            proc = ServeProcess(Path(tmp) / "data", *overrides).wait_ready()
            try:
                yield proc.bootstrap
            finally:
                if proc.proc.poll() is None:
                    proc.terminate()
        return
    if kind == "external" and EXTERNAL_BOOTSTRAP:
        yield EXTERNAL_BOOTSTRAP
        return
    raise pytest.UsageError(f"unknown broker kind {kind!r}")


@pytest.fixture(scope="session", params=BROKER_KINDS)
def bootstrap(request: pytest.FixtureRequest) -> Iterator[str]:
    """``host:port`` of a running broker with regroup's test settings (min session timeout 1000 ms,
    no initial rebalance delay)."""
    with _start_broker(request.param) as servers:
        yield servers


@pytest.fixture
def run() -> Iterator[asyncio.Runner]:
    with asyncio.Runner() as runner:
        yield runner
