"""The cross-client matrix against regroup: for every client, a group of three members on a 12-partition
topic with a producer of the same client; one member restarts, one leaves cleanly, one is killed
(see ``support.client_matrix``). Rows run three at a time in the background so that their waits overlap;
a client that cannot be installed skips locally and fails in CI."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pytest

from support import compat_report
from support.brokers import RegroupServer
from support.client_matrix import GroupScenario, MatrixResult, run_group_scenario
from support.clients import franz_go_row, java_row, kafkajs_row, kcat_row, python_row

PARALLEL: Final = int(os.environ.get("REGROUP_MATRIX_PARALLEL", "3"))


@dataclass(frozen=True)
class Row:
    key: str
    label: str
    make: Callable[[Path], tuple[GroupScenario, str]]
    heavy: bool = False  # four JVMs: never two such rows at once on a 2-core machine


ROWS: Final = [
    Row(
        "java-range",
        "Java KafkaConsumer, classic protocol, eager range",
        lambda wd: java_row("java-range", "range", False, wd),
        heavy=True,
    ),
    Row(
        "confluent-kafka",
        "confluent-kafka (Python, librdkafka), range",
        lambda wd: python_row("confluent", "range"),
    ),
    Row("franz-go", "franz-go (Go), cooperative-sticky", lambda wd: franz_go_row("cooperative-sticky")),
    Row(
        "java-cooperative-sticky",
        "Java KafkaConsumer, classic protocol, cooperative-sticky",
        lambda wd: java_row("java-coop", "cooperative-sticky", False, wd),
        heavy=True,
    ),
    Row("kafka-python", "kafka-python, range", lambda wd: python_row("kafka-python", "range")),
    Row("kafkajs", "kafkajs (Node.js), round robin", lambda wd: kafkajs_row()),
    Row(
        "java-static",
        "Java KafkaConsumer, classic protocol, static membership (group.instance.id), range",
        lambda wd: java_row("java-static", "range", True, wd),
        heavy=True,
    ),
    Row("aiokafka", "aiokafka, round robin", lambda wd: python_row("aiokafka", "roundrobin")),
    Row("kcat", "kcat -G (librdkafka balanced consumer, auto-commit)", lambda wd: kcat_row()),
    Row(
        "java-consumer-protocol",
        "Java KafkaConsumer, consumer protocol (KIP-848), uniform",
        lambda wd: java_row("java-kip848", "uniform", False, wd, protocol="consumer"),
        heavy=True,
    ),
    Row(
        "java-consumer-protocol-static",
        "Java KafkaConsumer, consumer protocol (KIP-848), static membership (group.instance.id), uniform",
        lambda wd: java_row("java-kip848-static", "uniform", True, wd, protocol="consumer"),
        heavy=True,
    ),
    Row(
        "confluent-kafka-consumer-protocol",
        "confluent-kafka, consumer protocol (KIP-848)",
        lambda wd: python_row("confluent", "uniform", protocol="consumer"),
    ),
]


@dataclass
class Outcome:
    result: MatrixResult | None
    version: str
    error: BaseException | None


class MatrixRunner:
    def __init__(self, server: RegroupServer, workdir: Path) -> None:
        self.server = server
        self.workdir = workdir
        self._pool = ThreadPoolExecutor(max_workers=PARALLEL, thread_name_prefix="matrix")
        self._futures: dict[str, Future[Outcome]] = {}
        self._lock = threading.Lock()
        self._heavy = threading.Semaphore(1)

    def _run(self, row: Row) -> Outcome:
        if row.heavy:
            with self._heavy:
                return self._run_row(row)
        return self._run_row(row)

    def _run_row(self, row: Row) -> Outcome:
        version = "?"
        try:
            scenario, version = row.make(self.workdir)
            partitions = int(self.server.settings["offsets.topic.num.partitions"])
            result = run_group_scenario(scenario, self.server.address, partitions, self.workdir / row.key)
            return Outcome(result, version, None)
        except BaseException as exc:  # includes pytest's skip/fail outcomes, re-raised on the test thread
            return Outcome(None, version, exc)

    def submit(self, row: Row) -> Future[Outcome]:
        with self._lock:
            if row.key not in self._futures:
                self._futures[row.key] = self._pool.submit(self._run, row)
            return self._futures[row.key]

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


@pytest.fixture(scope="session")
def matrix(
    request: pytest.FixtureRequest, regroup_server: RegroupServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[MatrixRunner]:
    # REGROUP_MATRIX_LOGS keeps every client's stdout/stderr (e.g. as CI artifacts).
    logs = os.environ.get("REGROUP_MATRIX_LOGS")
    workdir = Path(logs) if logs else tmp_path_factory.mktemp("matrix")
    workdir.mkdir(parents=True, exist_ok=True)
    runner = MatrixRunner(regroup_server, workdir)
    for item in request.session.items:
        callspec = getattr(item, "callspec", None)
        row = callspec.params.get("row") if callspec is not None else None
        if isinstance(row, Row):
            runner.submit(row)
    try:
        yield runner
    finally:
        runner.close()


@pytest.mark.interop
@pytest.mark.parametrize("row", ROWS, ids=[r.key for r in ROWS])
def test_client_matrix(matrix: MatrixRunner, row: Row) -> None:
    outcome = matrix.submit(row).result()
    if outcome.error is not None:
        if isinstance(outcome.error, Exception) and not isinstance(outcome.error, AssertionError):
            compat_report.record_client(
                compat_report.ClientResult(
                    row.label, outcome.version, "group of 3: restart, leave, kill", f"ERROR: {outcome.error}"
                )
            )
        raise outcome.error
    result = outcome.result
    assert result is not None
    compat_report.record_client(
        compat_report.ClientResult(
            row.label,
            outcome.version,
            "group of 3: restart, leave, kill",
            "pass" if result.passed else "FAIL",
            checks=result.checks,
            seconds=result.seconds,
        )
    )
    assert result.passed, "\n".join(result.failures) + f"\ntimeline: {result.info.get('timeline')}"
