"""Differential fixtures: one Apache Kafka reference broker and one regroup broker per session (plus an
"alternative" pair with an initial rebalance delay and a group size limit, started only when needed), the
shared topics, and a runner that executes the selected scenarios concurrently in the background so that
their real-time pauses overlap."""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Final

import pytest

from differential.allowlist import render_markdown
from differential.dsl import Scenario
from differential.harness import PairResult, run_pair, start_pair
from regroup.refkafka import skip_reason
from support import compat_report
from support.brokers import BrokerPair, stop_shared
from support.tools import missing

METHOD = """\
Each differential scenario is a script of requests written with regroup's codecs
(`tests/differential/dsl.py`), run at the same time against Apache Kafka (the reference broker of
`regroup.refkafka`) and against regroup, both started with the same coordinator settings
(`TEST_BROKER_CONFIG`: 5 `__consumer_offsets` partitions, no initial rebalance delay, 1 s minimum session
timeout; an alternative pair adds a 1.5 s initial delay, `group.max.size=2` and a 1 s expiration check).
Timers run on real time with short timeouts. Every answer is compared field by field after this
normalisation, and nothing else:

- member-id UUID suffixes become placeholders numbered by the JoinGroup answer that handed them out;
- throttle times are dropped; FindCoordinator node id/host/port become placeholders when the lookup
  succeeded;
- lists whose order Kafka does not define are sorted (member lists, multi-group answers, per-partition
  answers); ListGroups is reduced to the scenario's own groups; ApiVersions to the consumer-group APIs.

Any other difference fails the scenario unless the allowlist below covers it.

Not compared, on purpose: transactional offsets (regroup has no transaction coordinator, so TxnOffsetCommit
is compared up to its group and topic validation only); the KIP-848 protocol (not advertised by regroup:
only the ApiVersions difference, allowlisted); coordinator loading and unloading (one broker lifetime per
session); the fixed 5-minute join timeout of new members (too long for the suite); a "consumer" group whose
selected protocol's metadata is not a parseable subscription (Kafka 4.3.1 never completes that join phase:
the JoinGroup times out, so there is no reference behaviour to compare with).
"""

compat_report.add_section("Differential method", lambda: METHOD)
compat_report.add_section("Differential allowlist", render_markdown)

# Broker settings of the alternative pair, on top of the mirrored test configuration.
ALT_SETTINGS: Final = {
    "group.initial.rebalance.delay.ms": "1500",
    "group.max.size": "2",
    "offsets.retention.check.interval.ms": "1000",
}
# Scenarios running at the same time (each uses two connections per actor per broker).
PARALLEL: Final = int(os.environ.get("REGROUP_DIFF_PARALLEL", "6"))


class DifferentialRunner:
    """Runs scenarios on a broker pair in a thread pool; results are fetched by the tests."""

    def __init__(self) -> None:
        self._nonce = uuid.uuid4().hex[:6]
        self._pool = ThreadPoolExecutor(max_workers=PARALLEL, thread_name_prefix="scenario")
        self._futures: dict[str, Future[PairResult]] = {}
        self._pairs: dict[bool, Future[BrokerPair]] = {}
        self._lock = threading.Lock()
        self._starter = ThreadPoolExecutor(max_workers=2, thread_name_prefix="brokers")

    def _pair(self, alt: bool) -> Future[BrokerPair]:
        with self._lock:
            if alt not in self._pairs:
                self._pairs[alt] = self._starter.submit(start_pair, ALT_SETTINGS if alt else None)
            return self._pairs[alt]

    def group_of(self, scenario: Scenario) -> str:
        return f"diff-{self._nonce}-{scenario.name}"

    def _execute(self, scenario: Scenario) -> PairResult:
        pair = self._pair(scenario.alt).result()
        return run_pair(scenario, pair.kafka_address, pair.regroup.address, self.group_of(scenario))

    def submit(self, scenario: Scenario) -> Future[PairResult]:
        with self._lock:
            if scenario.name not in self._futures:
                self._futures[scenario.name] = self._pool.submit(self._execute, scenario)
            return self._futures[scenario.name]

    def start_pairs(self, alt: bool) -> None:
        self._pair(False)
        if alt:
            self._pair(True)

    def result(self, scenario: Scenario) -> PairResult:
        return self.submit(scenario).result()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._starter.shutdown(wait=True)


@pytest.fixture(scope="session")
def differential(request: pytest.FixtureRequest) -> Iterator[DifferentialRunner]:
    reason = skip_reason()
    if reason:
        missing(reason)
    runner = DifferentialRunner()
    selected = [
        item.callspec.params["scenario"]
        for item in request.session.items
        if hasattr(item, "callspec") and isinstance(item.callspec.params.get("scenario"), Scenario)
    ]
    runner.start_pairs(alt=any(s.alt for s in selected))
    # Long scenarios first: they bound the wall time.
    for scenario in sorted(selected, key=lambda s: -sum(st.pause for st in s.steps)):
        runner.submit(scenario)
    try:
        yield runner
    finally:
        runner.close()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    compat_report.record_report(report)


def pytest_sessionfinish(session: pytest.Session) -> None:
    compat_report.write_if_requested()
    stop_shared()
