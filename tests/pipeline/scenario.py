"""Group churn with real clients (kafka-python), recording what the clients and the admin APIs saw.

Groups:
- ``g-churn`` (range, orders + payments): A joins, B joins, C joins, B leaves, A leaves, C leaves → Empty;
  then more records arrive on orders-0, so the Empty group lags.
- ``g-rr`` (roundrobin): two members subscribed to orders + payments commit, then re-subscribe to orders
  only and stay (Stable) for the rest of the session: their payments offsets are unsubscribed.
- ``g-admin``: admin-form commits only (a simple group, no group metadata).
- ``g-gone``: one member commits and leaves, then DeleteGroups removes the group.
- ``g-stuck`` (``clicks``, records stamped with the time they are produced): one member, which commits
  chosen offsets itself: 20 records on each partition, a commit of clicks-0 at 20 and clicks-1 at 5, then
  10 more records on clicks-0 and 4 on clicks-1 and a commit of clicks-1 at 15. clicks-0 is stuck (its
  offset does not move while records arrive, lag 10, owner known); clicks-1 catches up (lag 15 → 9).
- ``g-slow`` (``events``, retention.ms 3 h, segments rolled by record time): admin commits at offsets 2
  (events-0) and 3 (events-1) of records stamped hours ago. Retention deletes events-0's two oldest
  segments (offsets 0–9) before the group read them: 8 records lost. Record timestamps, not the clock,
  drive the roll and the deletion, so the log does not change while the tests run: the next deletion is
  due an hour and a half after the scenario.

Each member counts the offset-commit records it caused (one per partition per commit), per member id.
"""

from __future__ import annotations

import json
import queue
import shutil
import sys
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

with warnings.catch_warnings():
    # kafka-python 3.0.12 loads its JSON with the deprecated importlib.resources.read_text at import time.
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.consumer.subscription_state import ConsumerRebalanceListener
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from kafka.structs import OffsetAndMetadata

TOPICS = {"orders": 3, "payments": 2, "audit": 1}
CLICKS = "clicks"
EVENTS = "events"
# Segments roll when a batch is stamped a minute after the segment's first batch; whole segments whose
# newest record is older than three hours are deleted (at the broker's retention check, every second in
# these tests: brokers.GROUP_SETTINGS).
EVENTS_CONFIGS = {"retention.ms": str(3 * 3_600_000), "segment.ms": "60000"}
TOPIC_CONFIGS = {EVENTS: EVENTS_CONFIGS}
ALL_TOPICS = {**TOPICS, CLICKS: 2, EVENTS: 2}
GROUPS = ("g-churn", "g-rr", "g-admin", "g-gone", "g-stuck", "g-slow")
# CreateTime of the produced records, set by the producer: two hours and one hour before the scenario
# runs (recent enough that the brokers' 7-day time retention leaves them alone).
BASE_AGE_MS = 2 * 3_600_000
LATE_AGE_MS = 3_600_000


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


@dataclass(frozen=True)
class Observed:
    """One assignment a member received: its generation, member id and partitions."""

    member: str
    generation: int
    member_id: str
    partitions: tuple[tuple[str, int], ...]
    at_ms: int


class Member(threading.Thread):
    """A kafka-python consumer in its own thread: polls, commits after every poll that returned records
    (unless ``commit_polled`` is false), records each assignment and counts the offset-commit records its
    commits wrote (``commit_records``, per member id); ``pause()`` stops polling but keeps it in the group
    (the client's heartbeat thread keeps the session alive); ``call(fn)`` runs ``fn(consumer)`` in the
    member's thread."""

    def __init__(
        self,
        name: str,
        bootstrap: str,
        group: str,
        topics: list[str],
        assignor: Any,
        log: list[Observed],
        *,
        commit_polled: bool = True,
    ) -> None:
        super().__init__(name=name, daemon=True)
        self._commit_polled = commit_polled
        self.member = name
        self._servers = bootstrap
        self._group = group
        self._topics = topics
        self._assignor = assignor
        self._log = log
        self._commands: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._paused = threading.Event()
        self._closed = threading.Event()
        self.error: BaseException | None = None
        self.assignment: tuple[tuple[str, int], ...] = ()
        self.generation = -1
        self.consumed = 0
        self.commit_records: dict[str, int] = {}

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # reported by the test through .error
            self.error = exc
        finally:
            self._closed.set()

    def _run(self) -> None:
        consumer = KafkaConsumer(
            bootstrap_servers=self._servers,
            group_id=self._group,
            client_id=self.member,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            partition_assignment_strategy=[self._assignor],
            session_timeout_ms=10_000,
            heartbeat_interval_ms=300,
            max_poll_interval_ms=1_800_000,
        )
        member = self

        class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
            def on_partitions_revoked(self, revoked: Any) -> None:
                pass

            def on_partitions_assigned(self, assigned: Any) -> None:
                gen = consumer._coordinator._generation
                parts = tuple(sorted((tp.topic, tp.partition) for tp in assigned))
                member.assignment = parts
                member.generation = gen.generation_id
                member._log.append(
                    Observed(member.member, gen.generation_id, gen.member_id, parts, int(time.time() * 1000))
                )

        # Know the topics' partitions before joining: a kafka-python leader whose metadata lacks them
        # assigns nothing, and rejoins only if it notices the metadata change afterwards.
        for topic in self._topics:
            wait_for(lambda t=topic: bool(consumer.partitions_for_topic(t)), 120, f"metadata of {topic}")
        consumer.subscribe(self._topics, listener=Listener())
        try:
            while True:
                try:
                    cmd, arg = self._commands.get_nowait()
                except queue.Empty:
                    cmd, arg = "", None
                if cmd == "close":
                    return
                if cmd == "subscribe":
                    consumer.subscribe(arg, listener=Listener())
                if cmd == "call":
                    fn, done = arg
                    try:
                        done.put((True, fn(consumer)))
                    except Exception as exc:  # handed to the caller
                        done.put((False, exc))
                if cmd == "pause":
                    self._paused.set()
                if self._paused.is_set():
                    time.sleep(0.05)
                    continue
                batch = consumer.poll(timeout_ms=100)
                n = sum(len(v) for v in batch.values())
                if n and self._commit_polled:
                    self.commit(consumer, consumer._subscription.all_consumed_offsets())
                self.consumed += n
        finally:
            consumer.close(autocommit=False)

    def commit(self, consumer: Any, offsets: dict[Any, Any]) -> None:
        """Commit ``offsets`` (in this member's thread) and count the records written: one per partition."""
        member_id = consumer._coordinator._generation.member_id
        consumer.commit(offsets)
        self.commit_records[member_id] = self.commit_records.get(member_id, 0) + len(offsets)

    def call(self, fn: Callable[[Any], Any], timeout: float = 30) -> Any:
        """``fn(consumer)`` run in the member's thread; its result, or its exception raised here."""
        done: queue.Queue[tuple[bool, Any]] = queue.Queue()
        self._commands.put(("call", (fn, done)))
        ok, value = done.get(timeout=timeout)
        if not ok:
            raise value
        return value

    def close(self) -> None:
        self._commands.put(("close", None))
        self._closed.wait(30)
        self.join(30)

    def pause(self) -> None:
        self._commands.put(("pause", None))
        wait_for(self._paused.is_set, 10, f"{self.member} to pause")

    def resubscribe(self, topics: list[str]) -> None:
        self._commands.put(("subscribe", topics))


@dataclass
class Scenario:
    bootstrap: str
    data_dir: Path
    observed: dict[str, list[Observed]]
    produced: dict[tuple[str, int, int], int]  # (topic, partition, offset) → timestamp ms
    committed: dict[str, dict[tuple[str, int], tuple[int, str, int]]]  # OffsetFetch: offset, metadata, epoch
    end_offsets: dict[tuple[str, int], int]  # ListOffsets(latest)
    start_offsets: dict[tuple[str, int], int]  # ListOffsets(earliest)
    described: dict[str, dict[str, Any]]  # DescribeGroups: state, protocol type and data, member ids
    left_empty_ms: dict[str, tuple[int, int]]  # group → wall-clock window in which it became Empty
    admin_commit_ms: tuple[int, int]
    snapshot_ms: int
    late_ts: int  # CreateTime of the first record produced after g-churn went Empty
    # group → member id → offset-commit records its commits wrote
    member_commits: dict[str, dict[str, int]]
    # g-stuck's commits: wall-clock bounds of each, as (before, after)
    stuck_commit_ms: list[tuple[int, int]]
    stuck_joined_ms: tuple[int, int]  # S started before the first, was assigned before the second
    slow_commit_ms: tuple[int, int]
    live_members: list[Member] = field(default_factory=list)

    def close(self) -> None:
        for m in self.live_members:
            m.close()

    def to_json(self) -> str:
        return json.dumps(
            {
                "bootstrap": self.bootstrap,
                "data_dir": str(self.data_dir),
                "observed": {g: [asdict(o) for o in obs] for g, obs in self.observed.items()},
                "produced": [[t, p, o, ts] for (t, p, o), ts in self.produced.items()],
                "committed": {g: [[t, p, *v] for (t, p), v in c.items()] for g, c in self.committed.items()},
                "end_offsets": [[t, p, o] for (t, p), o in self.end_offsets.items()],
                "start_offsets": [[t, p, o] for (t, p), o in self.start_offsets.items()],
                "described": self.described,
                "left_empty_ms": self.left_empty_ms,
                "admin_commit_ms": self.admin_commit_ms,
                "snapshot_ms": self.snapshot_ms,
                "late_ts": self.late_ts,
                "member_commits": self.member_commits,
                "stuck_commit_ms": self.stuck_commit_ms,
                "stuck_joined_ms": self.stuck_joined_ms,
                "slow_commit_ms": self.slow_commit_ms,
            }
        )

    @classmethod
    def from_json(cls, text: str) -> Scenario:
        d = json.loads(text)
        return cls(
            bootstrap=d["bootstrap"],
            data_dir=Path(d["data_dir"]),
            observed={
                g: [
                    Observed(
                        o["member"],
                        o["generation"],
                        o["member_id"],
                        tuple(tuple(x) for x in o["partitions"]),
                        o["at_ms"],
                    )
                    for o in obs
                ]
                for g, obs in d["observed"].items()
            },
            produced={(t, p, o): ts for t, p, o, ts in d["produced"]},
            committed={g: {(t, p): (o, m, e) for t, p, o, m, e in c} for g, c in d["committed"].items()},
            end_offsets={(t, p): o for t, p, o in d["end_offsets"]},
            start_offsets={(t, p): o for t, p, o in d["start_offsets"]},
            described=d["described"],
            left_empty_ms={g: (a, b) for g, (a, b) in d["left_empty_ms"].items()},
            admin_commit_ms=tuple(d["admin_commit_ms"]),
            snapshot_ms=d["snapshot_ms"],
            late_ts=d["late_ts"],
            member_commits=d["member_commits"],
            stuck_commit_ms=[(a, b) for a, b in d["stuck_commit_ms"]],
            stuck_joined_ms=tuple(d["stuck_joined_ms"]),
            slow_commit_ms=tuple(d["slow_commit_ms"]),
        )


def _produce(
    producer: KafkaProducer, topic: str, partition: int, count: int, ts: int | None, step: int = 0
) -> dict[tuple[str, int, int], int]:
    """``count`` records stamped ``ts + i*step`` (``ts`` None: the producer's clock), acknowledged."""
    futures = [
        producer.send(
            topic,
            key=f"k{i}".encode(),
            value=f"{topic}-{partition}-{i}".encode(),
            partition=partition,
            timestamp_ms=None if ts is None else ts + i * step,
            headers=[("n", str(i).encode())] if i % 4 == 0 else None,
        )
        for i in range(count)
    ]
    producer.flush()
    out = {}
    for f in futures:
        md = f.get(timeout=30)
        out[(topic, partition, md.offset)] = md.timestamp
    return out


def _explain(bootstrap: str, group: str, members: list[Member], log: list[Observed]) -> None:
    """What a group that would not settle looked like: to stderr, which the test shows on failure."""
    from regroup.admin.cli import main as groups_main

    out = sys.stderr
    for m in members:
        print(f"{m.member}: generation {m.generation}, assignment {m.assignment}, {m.error!r}", file=out)
    for o in log[-12:]:
        print(f"  observed {o}", file=out)
    groups_main(["--bootstrap-server", bootstrap, "--history", "--group", group], out=out, err=out)


def run(bootstrap: str, data_dir: Path) -> Scenario:
    started = int(time.time() * 1000)
    base_ts, late_ts = started - BASE_AGE_MS, started - LATE_AGE_MS
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics(
        [NewTopic(t, n, 1, topic_configs=TOPIC_CONFIGS.get(t, {})) for t, n in ALL_TOPICS.items()]
    )
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    produced: dict[tuple[str, int, int], int] = {}
    for topic, parts in TOPICS.items():
        for p in range(parts):
            produced |= _produce(producer, topic, p, 10, base_ts + p * 10_000, 1000)

    observed: dict[str, list[Observed]] = {g: [] for g in GROUPS}
    churn = observed["g-churn"]

    def member(
        name: str, group: str, topics: list[str], assignor: Any, *, commit_polled: bool = True
    ) -> Member:
        m = Member(name, bootstrap, group, topics, assignor, observed[group], commit_polled=commit_polled)
        m.start()
        return m

    def settled(members: list[Member], log: list[Observed], total: int) -> Callable[[], bool]:
        def check() -> bool:
            for m in members:
                if m.error is not None:
                    raise AssertionError(f"{m.member} failed: {m.error!r}")
            gens = {m.generation for m in members}
            assigned = sum(len(m.assignment) for m in members)
            latest = max((o.generation for o in log), default=-1)
            return len(gens) == 1 and gens == {latest} and assigned == total

        return check

    def quiet(members: list[Member], log: list[Observed], total: int) -> Callable[[], bool]:
        is_settled = settled(members, log, total)

        def check() -> bool:
            if not is_settled():
                return False
            generation = members[0].generation
            time.sleep(1.5)
            return is_settled() and members[0].generation == generation

        return check

    probe = KafkaConsumer(bootstrap_servers=bootstrap)
    # kafka-python's offset lookups leave out partitions of topics missing from the client's metadata.
    for topic in ALL_TOPICS:
        wait_for(lambda t=topic: bool(probe.partitions_for_topic(t)), 120, f"metadata of {topic}")

    def caught_up(group: str, topics: list[str]) -> Callable[[], bool]:
        tps = [TopicPartition(t, p) for t in topics for p in range(TOPICS[t])]

        def check() -> bool:
            ends = probe.end_offsets(tps)
            offsets = admin.list_group_offsets(group).get(group, {})
            return all(offsets.get(tp) is not None and offsets[tp].offset == ends[tp] for tp in tps)

        return check

    both = ["orders", "payments"]
    a = member("A", "g-churn", both, RangePartitionAssignor)
    wait_for(settled([a], churn, 5), 120, "A alone")
    wait_for(caught_up("g-churn", both), 120, "A to consume everything")
    b = member("B", "g-churn", both, RangePartitionAssignor)
    wait_for(settled([a, b], churn, 5), 120, "A+B")
    c = member("C", "g-churn", both, RangePartitionAssignor)
    wait_for(settled([a, b, c], churn, 5), 120, "A+B+C")
    b.close()
    wait_for(settled([a, c], churn, 5), 120, "A+C after B left")
    a.close()
    wait_for(settled([c], churn, 5), 120, "C after A left")
    before_empty = int(time.time() * 1000)
    c.close()
    after_empty = int(time.time() * 1000)
    produced |= _produce(producer, "orders", 0, 5, late_ts, 1000)

    r1 = member("R1", "g-rr", both, RoundRobinPartitionAssignor)
    wait_for(settled([r1], observed["g-rr"], 5), 120, "R1")
    r2 = member("R2", "g-rr", both, RoundRobinPartitionAssignor)
    rr = [r1, r2]
    wait_for(settled(rr, observed["g-rr"], 5), 120, "g-rr")
    wait_for(caught_up("g-rr", both), 120, "g-rr to consume everything")
    for m in rr:
        m.resubscribe(["orders"])
    wait_for(settled(rr, observed["g-rr"], 3), 120, "g-rr on orders only")
    wait_for(
        lambda: all(m.assignment and all(t == "orders" for t, _ in m.assignment) for m in rr),
        30,
        "resubscription",
    )
    wait_for(caught_up("g-rr", ["orders"]), 120, "g-rr to consume the late records")
    # kafka-python rejoins once more when its metadata catches up with the new subscription; pause only
    # when the generation has stayed the same for a while, so that the group stays Stable.
    try:
        wait_for(quiet(rr, observed["g-rr"], 3), 60, "g-rr to stay in one generation")
    except AssertionError:
        _explain(bootstrap, "g-rr", rr, observed["g-rr"])
        raise
    for m in rr:
        m.pause()

    gone = member("G", "g-gone", ["audit"], RangePartitionAssignor)
    wait_for(settled([gone], observed["g-gone"], 1), 120, "g-gone")
    wait_for(caught_up("g-gone", ["audit"]), 120, "g-gone to consume")
    gone.close()
    admin.delete_groups(["g-gone"])

    admin_start = int(time.time() * 1000)
    admin.alter_group_offsets(
        "g-admin",
        {
            TopicPartition("audit", 0): OffsetAndMetadata(7, "set by admin", -1),
            TopicPartition("orders", 1): OffsetAndMetadata(3, "", -1),
        },
    )
    admin_end = int(time.time() * 1000)

    # g-slow and retention: three segments on events-0 (5 records each, stamped 6 h, 5 h and 1 h ago),
    # two on events-1 (1 h 30 min and 30 min ago). The first two of events-0 are past retention.ms.
    for partition, ages in ((0, (6 * 3_600_000, 5 * 3_600_000, 3_600_000)), (1, (5_400_000, 1_800_000))):
        for age in ages:
            produced |= _produce(producer, EVENTS, partition, 5, started - age, 1000)
    slow_start = int(time.time() * 1000)
    admin.alter_group_offsets(
        "g-slow",
        {
            TopicPartition(EVENTS, 0): OffsetAndMetadata(2, "", -1),
            TopicPartition(EVENTS, 1): OffsetAndMetadata(3, "", -1),
        },
    )
    slow_end = int(time.time() * 1000)
    events0 = TopicPartition(EVENTS, 0)
    wait_for(lambda: probe.beginning_offsets([events0])[events0] == 10, 120, "retention to delete events-0")

    # g-stuck: one member, which commits only the offsets chosen here.
    stuck_start = int(time.time() * 1000)
    stuck = member("S", "g-stuck", [CLICKS], RangePartitionAssignor, commit_polled=False)
    wait_for(settled([stuck], observed["g-stuck"], 2), 120, "S")
    # As for g-rr: kafka-python may rejoin once more right after its first generation; go on only once
    # S has stayed in one generation, or the tables would see a generation S never reported.
    wait_for(quiet([stuck], observed["g-stuck"], 2), 60, "S to stay in one generation")
    stuck_assigned = int(time.time() * 1000)
    clicks = [TopicPartition(CLICKS, p) for p in range(2)]
    for p in range(2):
        produced |= _produce(producer, CLICKS, p, 20, None)
    stuck_commits = []

    def commit(offsets: dict[int, int]) -> None:
        before = int(time.time() * 1000)
        chosen = {clicks[p]: OffsetAndMetadata(o, "", -1) for p, o in offsets.items()}
        stuck.call(lambda consumer: stuck.commit(consumer, chosen))
        after = int(time.time() * 1000)
        stuck_commits.append((before, after))
        # What is produced next is stamped after this commit was written.
        wait_for(lambda: int(time.time() * 1000) > after, 5, "the clock to move on")

    commit({0: 20, 1: 5})
    produced |= _produce(producer, CLICKS, 0, 10, None)
    produced |= _produce(producer, CLICKS, 1, 4, None)
    commit({1: 15})
    producer.close()

    members = [a, b, c, *rr, gone, stuck]
    member_commits: dict[str, dict[str, int]] = {}
    for m in members:
        member_commits.setdefault(m._group, {}).update(m.commit_records)

    committed: dict[str, dict[tuple[str, int], tuple[int, str, int]]] = {}
    for g in GROUPS:
        fetched = admin.list_group_offsets(g).get(g, {})
        committed[g] = {
            (tp.topic, tp.partition): (om.offset, om.metadata, om.leader_epoch)
            for tp, om in fetched.items()
            if om.offset >= 0
        }
    tps = [TopicPartition(t, p) for t, n in ALL_TOPICS.items() for p in range(n)]
    end_offsets = {(tp.topic, tp.partition): o for tp, o in probe.end_offsets(tps).items()}
    start_offsets = {(tp.topic, tp.partition): o for tp, o in probe.beginning_offsets(tps).items()}
    probe.close()
    described = {
        g: {
            "state": d["group_state"],
            "protocol_type": d["protocol_type"],
            "protocol_data": d["protocol_data"],
            "members": sorted(m["member_id"] for m in d["members"]),
        }
        for g, d in admin.describe_groups(list(GROUPS)).items()
    }
    admin.close()
    return Scenario(
        bootstrap=bootstrap,
        data_dir=data_dir,
        observed=observed,
        produced=produced,
        committed=committed,
        end_offsets=end_offsets,
        start_offsets=start_offsets,
        described=described,
        left_empty_ms={"g-churn": (before_empty, after_empty)},
        admin_commit_ms=(admin_start, admin_end),
        snapshot_ms=int(time.time() * 1000),
        late_ts=late_ts,
        member_commits=member_commits,
        stuck_commit_ms=stuck_commits,
        stuck_joined_ms=(stuck_start, stuck_assigned),
        slow_commit_ms=(slow_start, slow_end),
        live_members=[*rr, stuck],
    )


@dataclass(frozen=True)
class CoordinatorGeneration:
    """A generation as regroup's coordinator recorded it in ``__group_events``: Stable once the leader's
    assignment was durable, Empty when the join phase ended with no members."""

    generation: int
    state: str
    leader: str | None
    protocol: str | None
    members: frozenset[str]
    join_completed_ms: int
    stable_ms: int | None


def coordinator_generations(data_dir: Path, until_ms: int) -> dict[str, list[CoordinatorGeneration]] | None:
    """Every generation completed by ``until_ms``, per group, read from the ``__group_events`` topic of a
    regroup data directory (the coordinator's own rebalance timeline, independent of
    ``__consumer_offsets``); None when the broker keeps no such topic (Apache Kafka). Generations whose
    leader never got its assignment written (interrupted by another rebalance) are left out."""
    from regroup.protocol.group_events import GROUP_EVENTS_TOPIC, assemble_timeline, decode_event
    from regroup.protocol.record_batch import decode_batches

    dirs = sorted(data_dir.glob(f"{GROUP_EVENTS_TOPIC}-*"))
    if not dirs:
        return None
    events = []
    for d in dirs:
        for segment in sorted(d.glob("*.log")):
            for batch in decode_batches(segment.read_bytes(), allow_partial_tail=True):
                for record in batch.records:
                    event = decode_event(record.key, record.value)
                    if event is not None:
                        events.append(event)
    out: dict[str, list[CoordinatorGeneration]] = {}
    for group in sorted({e["group_id"] for e in events}):
        mine = sorted((e for e in events if e["group_id"] == group), key=lambda e: e["time_ms"])
        for g in assemble_timeline(group, mine, until_ms)["generations"]:
            if g["join_completed_ms"] > until_ms:
                continue
            members = frozenset(m["member_id"] for m in g["members"])
            if members and g["stable_ms"] is None:
                continue
            out.setdefault(group, []).append(
                CoordinatorGeneration(
                    generation=g["generation_id"],
                    state="Stable" if members else "Empty",
                    leader=g["leader_id"] if members else None,
                    protocol=g["protocol_name"] if members else None,
                    members=members,
                    join_completed_ms=g["join_completed_ms"],
                    stable_ms=g["stable_ms"],
                )
            )
    return out


def copy_to_regroup_layout(
    source: Path, target: Path, topics: list[str], configs: dict[str, dict[str, str]] | None = None
) -> None:
    """Copy the listed topics' partitions of a broker data directory into a fresh regroup data directory,
    batch by batch through regroup's own log (``regroup.log.LogManager``), with the topics' ``configs``
    and each partition's log start offset (where retention has deleted segments)."""
    from regroup.log import LogManager
    from regroup.protocol.record_batch import iter_batches

    if target.exists():
        shutil.rmtree(target)
    logs = LogManager(target)
    logs.load()
    now = int(time.time() * 1000)
    for topic in topics:
        dirs = sorted(source.glob(f"{topic}-*"), key=lambda d: int(d.name.rsplit("-", 1)[1]))
        settings = {"cleanup.policy": "compact"} if topic == "__consumer_offsets" else {}
        settings.update((configs or {}).get(topic, {}))
        logs.create_topic(topic, len(dirs), settings, internal=topic.startswith("__"))
        for d in dirs:
            plog = logs.partition(topic, int(d.name.rsplit("-", 1)[1]))
            assert plog is not None
            for segment in sorted(d.glob("*.log")):
                data = segment.read_bytes()
                scan = iter_batches(data)
                for pos, header in scan:
                    if plog.log_end_offset == 0 < header.base_offset:
                        plog.reset_to(header.base_offset)  # the first batch retention left
                    plog.append(data[pos : pos + header.size], now_ms=now, validate=False)
    logs.close()


def main() -> None:
    """Run the scenario against ``argv[1]`` (bootstrap servers) whose data lives in ``argv[2]``, print it
    as one JSON line, keep the still-running members in their groups until stdin closes, then close
    them. A subprocess keeps the clients' threads and sockets out of the test process."""
    from support.kafka_python_join import patch_kafka_python_join

    patch_kafka_python_join()  # this process is not the pytest process, which patched its own kafka-python
    scenario = run(sys.argv[1], Path(sys.argv[2]))
    print(scenario.to_json(), flush=True)
    sys.stdin.read()
    scenario.close()


if __name__ == "__main__":
    main()
