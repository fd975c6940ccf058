"""``regroup bench cluster-failover``: how long a consumer group goes without a coordinator when the node
holding it is killed.

A cluster is started (regroup: N nodes and a private etcd; Kafka: N brokers and one KRaft controller), a
topic with one replica per node gets a group of confluent-kafka (librdkafka) consumers that each commit
their partitions' offsets every ``--commit-interval-ms`` and record when each commit is acknowledged. Each
round SIGKILLs the node that coordinates the group and measures, from the signal:

- **coordinator named** — FindCoordinator, asked of a surviving node every 50 ms, names a live node;
- **group Stable** — that coordinator describes the group as Stable with every member;
- **first commit acknowledged** — the first member's commit after the kill comes back without error.

Then the killed node is started again on its data and the next round waits until it is back in every ISR.
Both systems run with their defaults for noticing a dead node (``broker.session.timeout.ms`` = 9 s in
both), which dominates the times; the rest is election, loading the group and the clients' retries.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import statistics
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from regroup.bench.groups.brokers import BenchTargetError, ClusterTarget, start_broker

__all__ = ["FailoverRound", "main", "run_rounds"]

_POLL_S = 0.05


@dataclass
class FailoverRound:
    killed: int
    new_coordinator: int | None = None
    coordinator_named_s: float | None = None
    stable_s: float | None = None
    first_commit_s: float | None = None
    rebalances: int = 0
    errors: dict[str, int] = field(default_factory=dict)


class _Members:
    """``count`` librdkafka consumers in one group, each on its own thread, committing periodically."""

    def __init__(self, bootstrap: str, group: str, topic: str, count: int, commit_interval_ms: int) -> None:
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.acks: list[float] = []
        self.assigns: list[float] = []
        self.errors: dict[str, int] = {}
        self._threads = [
            threading.Thread(
                target=self._run,
                args=(bootstrap, group, topic, commit_interval_ms / 1000),
                name=f"member-{i}",
                daemon=True,
            )
            for i in range(count)
        ]

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(60)

    def acked_after(self, t0: float) -> float | None:
        with self._lock:
            later = [t for t in self.acks if t > t0]
        return min(later) if later else None

    def assigns_after(self, t0: float) -> int:
        with self._lock:
            return sum(1 for t in self.assigns if t > t0)

    def take_errors(self) -> dict[str, int]:
        with self._lock:
            errors, self.errors = self.errors, {}
        return errors

    def _note(self, what: str) -> None:
        with self._lock:
            self.errors[what] = self.errors.get(what, 0) + 1

    def _run(self, bootstrap: str, group: str, topic: str, interval: float) -> None:
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        def on_assign(consumer: Any, partitions: list[Any]) -> None:
            with self._lock:
                self.assigns.append(time.perf_counter())

        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                # The Java consumer's defaults, as members of the group benchmarks use.
                "session.timeout.ms": 45000,
                "heartbeat.interval.ms": 3000,
                # Connection failures to the killed node are expected; keep stderr for the benchmark.
                "log_level": 2,
            }
        )
        consumer.subscribe([topic], on_assign=on_assign)
        offset = 0
        next_commit = time.perf_counter()
        try:
            while not self._stop.is_set():
                consumer.poll(0.05)
                now = time.perf_counter()
                assigned = consumer.assignment()
                if now < next_commit or not assigned:
                    continue
                next_commit = now + interval
                offset += 1
                try:
                    consumer.commit(
                        offsets=[TopicPartition(topic, tp.partition, offset) for tp in assigned],
                        asynchronous=False,
                    )
                except KafkaException as exc:
                    self._note(exc.args[0].name() if exc.args else type(exc).__name__)
                else:
                    with self._lock:
                        self.acks.append(time.perf_counter())
        finally:
            consumer.close()


@dataclass(frozen=True)
class _Seen:
    coordinator: int | None
    state: str | None = None
    members: int = 0


def _probe(addresses: Sequence[tuple[str, int]], group: str) -> _Seen:
    """FindCoordinator asked of a live node, then DescribeGroups at the coordinator it names — with
    regroup's admin client and fresh connections each time, so no client-side cache hides a change."""
    from regroup.admin.client import AdminClient, AdminError, BrokerUnreachableError

    async def probe() -> _Seen:
        bootstrap = ",".join(f"{host}:{port}" for host, port in addresses)
        admin = AdminClient(bootstrap, timeout_ms=1500)
        try:
            node = (await admin.find_coordinators([group]))[group]
            if isinstance(node, AdminError):
                return _Seen(None)
            described = (await admin.describe_groups([group], consumer_only=False))[group]
            if isinstance(described, AdminError):
                return _Seen(node.node_id)
            return _Seen(described.coordinator.node_id, described.state, len(described.members))
        finally:
            await admin.close()

    try:
        return asyncio.run(probe())
    except (OSError, TimeoutError, AdminError, BrokerUnreachableError):
        return _Seen(None)


def _wait(condition: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(_POLL_S)


def _in_every_isr(admin: Any, node_id: int, topics: Sequence[str]) -> bool:
    try:
        metadata = admin.list_topics(timeout=5)
    except Exception:  # a cluster still settling: ask again
        return False
    for name in topics:
        topic = metadata.topics.get(name)
        if topic is None or topic.error is not None:
            return False
        if any(node_id in p.replicas and node_id not in p.isrs for p in topic.partitions.values()):
            return False
    return True


def run_rounds(
    target: ClusterTarget,
    *,
    members: int = 3,
    partitions: int = 6,
    rounds: int = 3,
    commit_interval_ms: int = 100,
    timeout: float = 120.0,
    progress: bool = True,
) -> list[FailoverRound]:
    """Run ``rounds`` coordinator kills on a started cluster ``target``."""
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic

    def note(text: str) -> None:
        if progress:
            print(f"[cluster-failover on {target.kind}] {text}", file=sys.stderr, flush=True)

    stamp = f"{os.getpid()}-{time.monotonic_ns() % 10**9}"
    group, topic = f"bench-failover-{stamp}", f"bench-failover-{stamp}"
    admin = AdminClient({"bootstrap.servers": target.bootstrap, "log_level": 2})
    for future in admin.create_topics([NewTopic(topic, partitions, -1)]).values():
        future.result(60)
    fleet = _Members(target.bootstrap, group, topic, members, commit_interval_ms)
    fleet.start()
    results: list[FailoverRound] = []
    try:
        for n in range(rounds):
            note(f"round {n + 1}: waiting for the group to be Stable with {members} members and committing")

            everyone = [target.node_address(i) for i in target.node_ids]

            def stable_group() -> _Seen | None:
                seen = _probe(everyone, group)  # noqa: B023 - called before the loop moves on
                return seen if seen.state == "Stable" and seen.members == members else None

            stable = _wait(stable_group, timeout, "a Stable group")
            _wait(lambda: fleet.acked_after(time.perf_counter() - 0.5), timeout, "commits")
            fleet.take_errors()
            victim = stable.coordinator
            assert victim is not None
            survivors = [target.node_address(i) for i in target.node_ids if i != victim]
            round_ = FailoverRound(killed=victim)
            note(f"round {n + 1}: SIGKILL node {victim}, the group's coordinator")
            t0 = time.perf_counter()
            target.signal_node(victim, signal.SIGKILL)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                seen = _probe(survivors, group)
                now = time.perf_counter() - t0
                if seen.coordinator is not None and seen.coordinator != victim:
                    if round_.coordinator_named_s is None:
                        round_.coordinator_named_s = now
                        round_.new_coordinator = seen.coordinator
                    if seen.state == "Stable" and seen.members == members:
                        round_.stable_s = now
                        break
                time.sleep(_POLL_S)
            acked = _wait(lambda: fleet.acked_after(t0), timeout, "a commit after the kill")  # noqa: B023
            round_.first_commit_s = acked - t0
            round_.rebalances = fleet.assigns_after(t0)
            round_.errors = fleet.take_errors()
            results.append(round_)
            note(
                f"round {n + 1}: coordinator named after {_fmt(round_.coordinator_named_s)}, Stable after "
                f"{_fmt(round_.stable_s)}, first commit after {_fmt(round_.first_commit_s)}"
            )
            note(f"round {n + 1}: restarting node {victim} and waiting until it is back in every ISR")
            target.start_node(victim)
            _wait(lambda: _in_every_isr(admin, victim, [topic, "__consumer_offsets"]), timeout, "ISR")  # noqa: B023
    finally:
        fleet.stop()
    return results


def _fmt(seconds: float | None) -> str:
    return "–" if seconds is None else f"{seconds:.2f} s"


_MEASURES = (
    ("coordinator named (s)", "coordinator_named_s"),
    ("group Stable (s)", "stable_s"),
    ("first commit acknowledged (s)", "first_commit_s"),
)


def _median(rounds: Sequence[FailoverRound], attr: str) -> float | None:
    values = [v for v in (getattr(r, attr) for r in rounds) if v is not None]
    return statistics.median(values) if values else None


def main(
    *,
    nodes: int,
    broker: str,
    against: str | None,
    members: int,
    partitions: int,
    rounds: int,
    commit_interval_ms: int,
    broker_config: dict[str, str],
    timeout: float,
    json_output: bool,
    progress: bool,
) -> int:
    kinds = [broker] + ([against] if against and against != broker else [])
    runs: dict[str, list[FailoverRound]] = {}
    versions: dict[str, str] = {}
    failed: dict[str, str] = {}
    for kind in kinds:
        if progress:
            print(f"[cluster-failover] starting a {kind} cluster of {nodes}", file=sys.stderr, flush=True)
        try:
            target = start_broker(kind, broker_config, nodes)
        except (BenchTargetError, ValueError) as exc:
            failed[kind] = str(exc)
            continue
        assert isinstance(target, ClusterTarget)
        versions[kind] = target.version
        try:
            runs[kind] = run_rounds(
                target,
                members=members,
                partitions=partitions,
                rounds=rounds,
                commit_interval_ms=commit_interval_ms,
                timeout=timeout,
                progress=progress,
            )
        except (TimeoutError, BenchTargetError) as exc:
            failed[kind] = f"{type(exc).__name__}: {exc}"
        finally:
            target.close()
    if json_output:
        doc = {
            "nodes": nodes,
            "members": members,
            "partitions": partitions,
            "commit_interval_ms": commit_interval_ms,
            "versions": versions,
            "runs": {k: [asdict(r) for r in v] for k, v in runs.items()},
            "errors": failed,
        }
        print(json.dumps(doc, indent=2))
        return 1 if failed else 0
    print(
        f"regroup bench cluster-failover: {nodes} nodes, {members} members committing every "
        f"{commit_interval_ms} ms, topic of {partitions} partitions, SIGKILL of the coordinator's node"
    )
    for kind, version in versions.items():
        print(f"  {kind}: {version}")
    for kind, error in failed.items():
        print(f"  {kind} failed: {error}")
    shown = [k for k in kinds if k in runs]
    header = ["median of rounds", *shown] + ([f"{shown[0]} / {shown[1]}"] if len(shown) == 2 else [])
    table = [header]
    for label, attr in _MEASURES:
        values = [_median(runs[k], attr) for k in shown]
        row = [label, *("–" if v is None else f"{v:.2f}" for v in values)]
        if len(values) == 2:
            a, b = values
            row.append("–" if a is None or not b else f"{a / b:.2f}")
        table.append(row)
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    for row in table:
        cells = "".join(f"  {c.rjust(w)}" for c, w in zip(row[1:], widths[1:], strict=True))
        print("  " + row[0].ljust(widths[0]) + cells)
    for kind in shown:
        print(f"  {kind} rounds (killed → new coordinator: named / Stable / first commit; rebalances):")
        for r in runs[kind]:
            errors = ", ".join(f"{k}={v}" for k, v in sorted(r.errors.items()))
            print(
                f"    node {r.killed} → {r.new_coordinator}: {_fmt(r.coordinator_named_s)} / "
                f"{_fmt(r.stable_s)} / {_fmt(r.first_commit_s)}; {r.rebalances}"
                + (f"; commit errors {errors}" if errors else "")
            )
    return 1 if failed else 0
