"""Broker processes for cross-broker tests: ``regroup serve`` with settings mirrored from the Apache Kafka
reference broker's test configuration, and a helper that waits until a broker's group coordinator answers
for every ``__consumer_offsets`` partition."""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from regroup.client.blocking import BlockingConnection
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages.offset_fetch import (
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchResponse,
)
from regroup.refkafka import TEST_BROKER_CONFIG, KafkaReference
from regroup.runtime.ports import free_port
from support.kafka_wire import Address, find_coordinator, partition_for, retry

__all__ = [
    "BrokerPair",
    "RegroupServer",
    "group_ids_per_partition",
    "mirrored_settings",
    "shared_kafka",
    "shared_pair",
    "shared_regroup",
    "stop_shared",
    "wait_coordinators_ready",
]

READY = re.compile(r"ready on (\S+):(\d+) \(node (\d+), cluster (\S+), data (.+)\)")


def mirrored_settings(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """regroup settings equal to the reference broker's: the same ``__consumer_offsets`` partition count,
    rebalance delay and session bounds, so a group lands on the same partition with the same timers."""
    settings = dict(TEST_BROKER_CONFIG)
    settings.update(extra or {})
    return settings


class RegroupServer:
    """``regroup serve`` as a subprocess on 127.0.0.1; its output goes to ``<workdir>/regroup.log``."""

    def __init__(self, settings: Mapping[str, str] | None = None, workdir: Path | None = None) -> None:
        self._own_workdir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="regroup-serve-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.settings = mirrored_settings(settings)
        self.log_path = self.workdir / "regroup.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.host = "127.0.0.1"
        self.port = 0
        self.cluster_id = ""

    @property
    def address(self) -> Address:
        return (self.host, self.port)

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 60.0) -> RegroupServer:
        for _attempt in range(3):
            port = free_port()
            settings = {
                **self.settings,
                "listeners": f"PLAINTEXT://127.0.0.1:{port}",
                "log.dirs": str(self.workdir / "data"),
            }
            cmd = [sys.executable, "-m", "regroup.cli", "serve"]
            for key, value in settings.items():
                cmd += ["--override", f"{key}={value}"]
            env = {k: v for k, v in os.environ.items() if not k.startswith("REGROUP_")}
            with self.log_path.open("ab") as log:
                self.proc = subprocess.Popen(
                    cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
                )
            if self._wait_ready(timeout):
                return self
            self.stop()
        raise AssertionError(f"regroup serve did not become ready:\n{self.log_tail()}")

    def _wait_ready(self, timeout: float) -> bool:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = READY.search(self.log_path.read_text(errors="replace"))
            if match:
                self.host, self.port, self.cluster_id = match.group(1), int(match.group(2)), match.group(4)
                return True
            if self.proc.poll() is not None:
                return False
            time.sleep(0.05)
        return False

    def log_tail(self, lines: int = 60) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM (SIGKILL after ``timeout``); a temporary workdir is removed after a clean exit."""
        proc, self.proc = self.proc, None
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._own_workdir and proc.returncode == 0:
            shutil.rmtree(self.workdir, ignore_errors=True)
        return proc.returncode

    def __enter__(self) -> RegroupServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def group_ids_per_partition(partitions: int, prefix: str = "warmup-") -> list[str]:
    """One group id hashing to each ``__consumer_offsets`` partition."""
    found: dict[int, str] = {}
    i = 0
    while len(found) < partitions:
        gid = f"{prefix}{i}"
        found.setdefault(partition_for(gid, partitions), gid)
        i += 1
    return [found[p] for p in range(partitions)]


def wait_coordinators_ready(address: Address, partitions: int, timeout: float = 60.0) -> None:
    """Block until FindCoordinator and OffsetFetch succeed for a group on every ``__consumer_offsets``
    partition (Kafka creates the topic lazily and then loads each partition)."""
    with BlockingConnection(address) as conn:
        for gid in group_ids_per_partition(partitions):
            find_coordinator(conn, gid, timeout)

            def fetch(gid: str = gid) -> int:
                r = conn.request(
                    OffsetFetchRequest(groups=[OffsetFetchRequestGroup(group_id=gid, topics=None)]),
                    OffsetFetchResponse,
                    version=8,
                )
                return r.groups[0].error_code

            retry(fetch, lambda code: code == ErrorCode.NONE, timeout, f"coordinator load for {gid}")


# ------------------------------------------------------------------------------- brokers shared per session


@dataclass
class BrokerPair:
    """An Apache Kafka reference broker and a regroup broker with the same coordinator settings."""

    kafka: KafkaReference
    regroup: RegroupServer

    @property
    def kafka_address(self) -> Address:
        return ("127.0.0.1", self.kafka.port)

    @property
    def addresses(self) -> dict[str, Address]:
        return {"kafka": self.kafka_address, "regroup": self.regroup.address}


_SHARED: dict[tuple[str, tuple[tuple[str, str], ...]], Future[Any]] = {}
_SHARED_LOCK = threading.Lock()
_STARTER = ThreadPoolExecutor(max_workers=4, thread_name_prefix="broker-start")


def _key(kind: str, settings: Mapping[str, str] | None) -> tuple[str, tuple[tuple[str, str], ...]]:
    return kind, tuple(sorted((settings or {}).items()))


def _start_regroup(settings: Mapping[str, str] | None) -> RegroupServer:
    server = RegroupServer(settings).start()
    try:
        wait_coordinators_ready(server.address, int(server.settings["offsets.topic.num.partitions"]))
    except BaseException:
        server.stop()
        raise
    return server


def _start_kafka(settings: Mapping[str, str] | None) -> KafkaReference:
    kafka = KafkaReference(settings).start()
    try:
        partitions = int({**TEST_BROKER_CONFIG, **(settings or {})}["offsets.topic.num.partitions"])
        wait_coordinators_ready(("127.0.0.1", kafka.port), partitions)
    except BaseException:
        kafka.stop()
        raise
    return kafka


def _shared(kind: str, settings: Mapping[str, str] | None) -> Future[Any]:
    key = _key(kind, settings)
    with _SHARED_LOCK:
        if key not in _SHARED:
            start = _start_kafka if kind == "kafka" else _start_regroup
            _SHARED[key] = _STARTER.submit(start, dict(settings or {}))
        return _SHARED[key]


def shared_regroup(settings: Mapping[str, str] | None = None) -> Future[RegroupServer]:
    """A regroup broker (settings mirrored from the reference broker's, plus ``settings``) shared by every
    test of the session; started in the background on first request. Ready when the future resolves."""
    return _shared("regroup", settings)


def shared_kafka(settings: Mapping[str, str] | None = None) -> Future[KafkaReference]:
    """The Apache Kafka reference broker with ``settings`` over its test configuration, shared likewise."""
    return _shared("kafka", settings)


def shared_pair(settings: Mapping[str, str] | None = None) -> BrokerPair:
    """Both brokers with the same settings (started concurrently); raises if either cannot start."""
    kafka, regroup = shared_kafka(settings), shared_regroup(settings)
    return BrokerPair(kafka.result(), regroup.result())


def stop_shared() -> None:
    """Stop every shared broker (idempotent; called at the end of the session)."""
    with _SHARED_LOCK:
        futures = list(_SHARED.values())
        _SHARED.clear()
    for fut in futures:
        with contextlib.suppress(Exception):
            fut.result().stop()


atexit.register(stop_shared)
