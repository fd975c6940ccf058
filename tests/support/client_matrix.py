"""The cross-client scenario: real client processes forming a consumer group against a broker.

Every client is driven the same way — a member or producer process printing the JSON events of Apache
Kafka's ``VerifiableConsumer``/``VerifiableProducer`` (``records_consumed`` with offset ranges,
``partitions_assigned``/``partitions_revoked``, ``offsets_committed``, ``producer_send_success``) — so one
scenario and one set of checks serve Java, librdkafka, Python, Go and Node clients:

1. a producer writes to a 12-partition topic for the whole scenario;
2. members A, B, C form a group and consume;
3. C restarts (clean close, then a new process with the same name/instance id);
4. A leaves cleanly (SIGTERM);
5. B is killed (SIGKILL); the survivor takes over once B's session expires;
6. the producer stops, the survivor drains and commits, then shuts down.

Rows of the KIP-848 consumer protocol (``GroupScenario.protocol == "consumer"``) are observed with
ConsumerGroupDescribe and their records are the consumer-group ones (member assignments, type 8; group epochs,
type 3) instead of GroupMetadata.

Checks: **no loss** (every offset in the log was consumed by some member), **exclusive ownership** (no
partition in two members' assignments within one generation — for consumer groups: held, assigned or
pending revocation, by two members at any point of the record sequence — from the coordinator's own
records in ``__consumer_offsets``, and — for clients that report revocations — no overlap between the
owners' own assigned/revoked intervals), **convergence** (after every step the group is Stable with the
expected members and a full, disjoint assignment), **resume** (no member ever consumes below an offset that
was already committed a moment earlier, and the final committed offsets equal the log end offsets).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from regroup.client.blocking import BlockingConnection
from regroup.protocol.messages.consumer_group_describe import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
)
from regroup.protocol.messages.describe_groups import DescribeGroupsRequest, DescribeGroupsResponse
from regroup.protocol.records.consumer_protocol import ConsumerProtocolAssignment
from regroup.refkafka import TEST_BROKER_CONFIG
from support.consumer_offsets import group_records
from support.kafka_wire import (
    Address,
    committed_offsets,
    create_topics,
    end_offsets,
)

__all__ = [
    "ClientProcess",
    "Command",
    "GroupScenario",
    "MatrixResult",
    "describe_assignment",
    "describe_consumer_assignment",
    "run_group_scenario",
]

PARTITIONS = 12
SESSION_TIMEOUT_MS = 4000
CONSUMER_SESSION_TIMEOUT_MS = int(TEST_BROKER_CONFIG["group.consumer.session.timeout.ms"])
"""KIP-848 members get the broker's session timeout (``group.consumer.session.timeout.ms`` of the test
brokers)."""
HEARTBEAT_INTERVAL_MS = 500
PRODUCE_RATE = 100.0
MEMBERS = ("A", "B", "C")

Adapter = Callable[[str], dict[str, Any] | None]


def json_events(line: str) -> dict[str, Any] | None:
    """VerifiableConsumer/VerifiableProducer-style output: one JSON object with a "name" per line."""
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        event = json.loads(line)
    except ValueError:
        return None
    return event if isinstance(event, dict) and "name" in event else None


def kcat_records(line: str) -> dict[str, Any] | None:
    """kcat -J message lines become one-record ``records_consumed`` events stamped on arrival."""
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        msg = json.loads(line)
    except ValueError:
        return None
    if not isinstance(msg, dict) or "offset" not in msg or "partition" not in msg:
        return None
    p, o = int(msg["partition"]), int(msg["offset"])
    return {
        "name": "records_consumed",
        "timestamp": int(time.time() * 1000),
        "count": 1,
        "partitions": [
            {"topic": msg.get("topic"), "partition": p, "count": 1, "minOffset": o, "maxOffset": o}
        ],
    }


@dataclass
class Command:
    """How to start one client process."""

    argv: list[str]
    env: Mapping[str, str] | None = None
    cwd: Path | None = None
    adapt: Adapter = json_events
    stdin_lines: Callable[[int], str] | None = None  # producers fed through stdin (kcat -P): line i
    stdin_rate: float = PRODUCE_RATE
    # How much later than the real event the timestamps of this client can be (kcat: arrival time).
    timestamp_slack_ms: int = 1000
    # Records a stopped member may have acknowledged (offset stored for auto-commit) without reporting them
    # (kcat stores a record's offset when librdkafka hands it over, before printing it).
    unreported_window: int = 0


class ClientProcess:
    """A client subprocess; its stdout is parsed into events as they arrive, its stderr kept in a file."""

    def __init__(self, name: str, command: Command, log_dir: Path) -> None:
        self.name = name
        self.command = command
        self.events: list[dict[str, Any]] = []
        self.started_at = time.time()
        self.ended_at: float | None = None
        self.signalled_at: float | None = None  # when the harness asked it to stop (SIGTERM) or killed it
        self.stderr_path = log_dir / f"{name}.stderr"
        self.stdout_path = log_dir / f"{name}.stdout"  # kept for post-mortems
        self._lock = threading.Condition()
        self._stderr = self.stderr_path.open("wb")
        env = dict(os.environ if command.env is None else command.env)
        self.proc = subprocess.Popen(
            command.argv,
            stdin=subprocess.PIPE if command.stdin_lines else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            cwd=command.cwd,
            env=env,
            text=True,
            bufsize=1,
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True)
        self._reader.start()
        self._feeder: threading.Thread | None = None
        self._feeding = threading.Event()
        if command.stdin_lines is not None:
            self._feeding.set()
            self._feeder = threading.Thread(target=self._feed, daemon=True)
            self._feeder.start()

    def _read(self, stream: IO[str] | None) -> None:
        assert stream is not None
        with self.stdout_path.open("w") as copy:
            for line in stream:
                copy.write(line)
                self._handle(line)

    def _handle(self, line: str) -> None:
        event = self.command.adapt(line)
        if event is not None:
            with self._lock:
                self.events.append(event)
                self._lock.notify_all()

    def _feed(self) -> None:
        assert self.proc.stdin is not None
        assert self.command.stdin_lines is not None
        i = 0
        interval = 1.0 / self.command.stdin_rate
        try:
            while self._feeding.is_set():
                self.proc.stdin.write(self.command.stdin_lines(i))
                self.proc.stdin.flush()
                i += 1
                time.sleep(interval)
        except (BrokenPipeError, OSError, ValueError):
            pass
        with contextlib.suppress(OSError, ValueError):
            self.proc.stdin.close()

    def wait_event(
        self, predicate: Callable[[dict[str, Any]], bool], timeout: float, what: str
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        with self._lock:
            seen = 0
            while True:
                for event in self.events[seen:]:
                    if predicate(event):
                        return event
                seen = len(self.events)
                remaining = deadline - time.monotonic()
                if remaining <= 0 or (self.proc.poll() is not None and not self._reader.is_alive()):
                    raise AssertionError(f"{self.name}: no {what} within {timeout:g}s\n{self.stderr_tail()}")
                self._lock.wait(min(remaining, 0.2))

    def stderr_tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.stderr_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM (clean shutdown: commit, leave), waiting for the process to exit; SIGKILL after timeout."""
        self._feeding.clear()
        if self._feeder is not None:
            self._feeder.join(5)
        if self.proc.poll() is None:
            self.signalled_at = self.signalled_at or time.time()
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self._finish()
        return code

    def close_stdin_and_wait(self, timeout: float = 30.0) -> int:
        """For stdin-fed producers: stop feeding, close stdin (end of input) and wait for the exit."""
        self._feeding.clear()
        if self._feeder is not None:
            self._feeder.join(5)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return self.terminate()
        self._finish()
        return code

    def kill(self) -> None:
        """SIGKILL: no commit, no LeaveGroup."""
        self._feeding.clear()
        self.signalled_at = self.signalled_at or time.time()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self._finish()

    def _finish(self) -> None:
        if self.ended_at is None:
            self.ended_at = time.time()
        self._reader.join(10)
        self._stderr.close()
        for stream in (self.proc.stdout, self.proc.stdin):
            if stream is not None:
                with contextlib.suppress(OSError, ValueError):
                    stream.close()

    # ----------------------------------------------------------------------------------------- views

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.events)

    def consumed(self) -> list[tuple[int, int, float]]:
        """(partition, offset, timestamp in seconds) of every consumed record."""
        out: list[tuple[int, int, float]] = []
        for e in self.snapshot():
            if e.get("name") != "records_consumed":
                continue
            ts = float(e.get("timestamp", 0)) / 1000.0
            for p in e.get("partitions", []):
                lo, hi, count = int(p["minOffset"]), int(p["maxOffset"]), int(p["count"])
                # No transactions, no compaction: a batch of one partition is contiguous.
                if count != hi - lo + 1:
                    raise AssertionError(f"{self.name}: non-contiguous batch {p}")
                out.extend((int(p["partition"]), o, ts) for o in range(lo, hi + 1))
        return out

    def acked(self) -> list[tuple[int, int]]:
        return [
            (int(e["partition"]), int(e["offset"]))
            for e in self.snapshot()
            if e.get("name") == "producer_send_success"
        ]

    def ownership(self) -> list[tuple[int, float, float]]:
        """(partition, from, to) intervals from the member's own assigned/revoked events. Intervals end at
        the latest when the harness signalled the process: what a closing client does after that (some
        leave the group before running their revocation callback) is not the coordinator's doing."""
        owned: dict[int, float] = {}
        out: list[tuple[int, float, float]] = []
        for e in self.snapshot():
            ts = float(e.get("timestamp", 0)) / 1000.0
            parts = [int(p["partition"]) for p in e.get("partitions", [])]
            if e.get("name") == "partitions_assigned":
                for p in parts:
                    owned.setdefault(p, ts)
            elif e.get("name") == "partitions_revoked":
                for p in parts:
                    if p in owned:
                        out.append((p, owned.pop(p), ts))
        end = self.signalled_at or self.ended_at or time.time()
        out.extend((p, start, end) for p, start in owned.items())
        return [(p, a, min(b, end)) for p, a, b in out if a < end]


def describe_assignment(conn: BlockingConnection, group: str, topic: str) -> tuple[str, dict[str, list[int]]]:
    """The group's state and each member's assigned partitions of ``topic`` (DescribeGroups v5)."""
    response = conn.request(DescribeGroupsRequest(groups=[group]), DescribeGroupsResponse, version=5)
    described = response.groups[0]
    members: dict[str, list[int]] = {}
    for m in described.members:
        parts: list[int] = []
        if m.member_assignment:
            assignment, _ = ConsumerProtocolAssignment.decode_versioned(m.member_assignment, lenient=True)
            for tp in assignment.assigned_partitions:
                if tp.topic == topic:
                    parts.extend(tp.partitions)
        members[m.member_id] = sorted(parts)
    return described.group_state, members


def describe_consumer_assignment(
    conn: BlockingConnection, group: str, topic: str
) -> tuple[str, dict[str, list[int]]]:
    """The KIP-848 group's state and each member's partitions of ``topic`` (ConsumerGroupDescribe v0; a
    member's assignment includes partitions it still has to revoke)."""
    response = conn.request(
        ConsumerGroupDescribeRequest(group_ids=[group]), ConsumerGroupDescribeResponse, version=0
    )
    described = response.groups[0]
    if described.error_code:
        return "", {}
    members = {
        m.member_id: sorted(
            p for tp in m.assignment.topic_partitions if tp.topic_name == topic for p in tp.partitions
        )
        for m in described.members
    }
    return described.group_state, members


def converged(state: str, members: Mapping[str, Sequence[int]], expected_members: int) -> bool:
    everything = [p for parts in members.values() for p in parts]
    return (
        state == "Stable"
        and len(members) == expected_members
        and sorted(everything) == list(range(PARTITIONS))
        and all(members.values())
    )


@dataclass
class GroupScenario:
    """The clients of one matrix row."""

    key: str
    consumer: Callable[[str, str, str, str, str | None], Command]  # (bootstrap, name, group, topic, instance)
    producer: Callable[[str, str], Command]  # (bootstrap, topic)
    static: bool = False
    reports_assignments: bool = True
    session_timeout_ms: int = SESSION_TIMEOUT_MS
    protocol: str = "classic"
    """``consumer``: the KIP-848 protocol (the broker's ``group.consumer.session.timeout.ms`` applies)."""


@dataclass
class MatrixResult:
    checks: dict[str, str] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return not self.failures

    def check(self, name: str, problems: Iterable[str], detail: str = "ok") -> None:
        found = list(problems)
        self.checks[name] = "FAIL" if found else detail
        self.failures += [f"{name}: {p}" for p in found]


class _OffsetSnapshots:
    """Committed offsets of the group, sampled every 250 ms on a thread."""

    def __init__(self, address: Address, group: str, topic: str) -> None:
        self.samples: list[tuple[float, dict[int, int]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(address, group, topic), daemon=True)
        self._thread.start()

    def _run(self, address: Address, group: str, topic: str) -> None:
        with BlockingConnection(address, client_id="matrix-observer") as conn:
            while not self._stop.is_set():
                taken = time.time()
                offsets = committed_offsets(conn, group, [topic])
                self.samples.append((taken, {p: o for (_t, p), o in offsets.items()}))
                self._stop.wait(0.25)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


def _unreported_windows(members: Sequence[ClientProcess]) -> set[tuple[int, int]]:
    """(partition, offset) right after the last record each stopped member reported, for clients whose
    commits may cover records they never reported (``Command.unreported_window``)."""
    out: set[tuple[int, int]] = set()
    for proc in members:
        window = proc.command.unreported_window
        if window and proc.signalled_at is not None:
            last: dict[int, int] = {}
            for p, o, _ts in proc.consumed():
                last[p] = max(last.get(p, -1), o)
            out |= {(p, o + k) for p, o in last.items() for k in range(1, window + 1)}
    return out


def _expected_commits(members: Sequence[ClientProcess], ends: Mapping[int, int]) -> dict[int, int]:
    """What the broker must hold at the end: for clients that report their commits, the highest offset of
    each partition the broker acknowledged to them (a client that consumed records but whose last commit
    was refused — e.g. REBALANCE_IN_PROGRESS — legitimately leaves them uncommitted); for clients that do
    not (kcat: auto-commit, and commit on close), the log end."""
    reported = any(e.get("name") == "offsets_committed" for m in members for e in m.snapshot())
    if not reported:
        return dict(ends)
    out = dict.fromkeys(ends, 0)
    for m in members:
        for e in m.snapshot():
            if e.get("name") == "offsets_committed" and e.get("success"):
                for o in e.get("offsets", []):
                    p = int(o["partition"])
                    out[p] = max(out.get(p, 0), int(o["offset"]))
    return out


def _static_replacements(records: Sequence[Any]) -> list[str]:
    """Static membership: each restart of a static member (same instance id, new member id) is recorded
    in the same generation as the record before it — the coordinator did not rebalance."""
    problems: list[str] = []
    previous: dict[str, Any] | None = None
    replacements = 0
    for r in records:
        if r.key_type != 2 or not r.value or not r.value["members"]:
            continue
        if previous is not None:
            before = {m["group_instance_id"]: m["member_id"] for m in previous["members"]}
            after = {m["group_instance_id"]: m["member_id"] for m in r.value["members"]}
            for instance, member in after.items():
                if instance in before and before[instance] != member:
                    replacements += 1
                    if r.value["generation"] != previous["generation"]:
                        problems.append(
                            f"instance {instance} replaced with generation {previous['generation']} → "
                            f"{r.value['generation']}"
                        )
        previous = r.value
    if not replacements:
        problems.append("no static replacement recorded")
    return problems


def _consumer_group_ownership(records: Sequence[Any]) -> tuple[list[str], int]:
    """KIP-848 groups: replaying the members' current assignments (type 8, tombstones release), no partition
    is ever held — assigned or pending revocation — by two members. Returns the problems and the number of
    distinct member epochs seen."""
    problems: list[str] = []
    held: dict[str, set[tuple[str, int]]] = {}
    epochs: set[int] = set()
    for r in records:
        if r.key_type != 8:
            continue
        member = str(r.key["member_id"])
        if r.value is None:
            held.pop(member, None)
            continue
        epochs.add(r.value["member_epoch"])
        parts = {
            (str(tp["topic_id"]), int(p))
            for name in ("assigned_partitions", "partitions_pending_revocation")
            for tp in r.value[name]
            for p in tp["partitions"]
        }
        for other, theirs in held.items():
            if other != member and parts & theirs:
                both = sorted(p for _t, p in parts & theirs)
                problems.append(f"epoch {r.value['member_epoch']}: {both} held by {other} and {member}")
        held[member] = parts
    return problems, len(epochs)


def _static_consumer_replacements(records: Sequence[Any]) -> list[str]:
    """KIP-848 static membership: a restarted static member leaves with epoch −2 and its successor (same
    instance id, new member id) takes its place without a group epoch bump (no type-3 record between the
    two)."""
    problems: list[str] = []
    epoch = 1
    member_of: dict[str, str] = {}  # instance id -> member id
    instance_of: dict[str, str] = {}  # member id -> instance id
    left_at: dict[str, int] = {}  # instance id -> group epoch when its member left with −2
    awaiting: dict[str, tuple[str, int]] = {}  # new member id -> (instance, group epoch at the −2 leave)
    replacements = 0
    for r in records:
        if r.key_type == 3 and r.value is not None:
            epoch = int(r.value["epoch"])
        elif r.key_type == 5 and r.value is not None and r.value.get("instance_id"):
            instance, member = str(r.value["instance_id"]), str(r.key["member_id"])
            previous = member_of.get(instance)
            if previous is not None and previous != member:
                replacements += 1
                if instance not in left_at:
                    problems.append(f"instance {instance} replaced without a temporary (−2) leave")
                else:
                    awaiting[member] = (instance, left_at.pop(instance))
            member_of[instance] = member
            instance_of[member] = instance
        elif r.key_type == 8 and r.value is not None:
            member = str(r.key["member_id"])
            if r.value["member_epoch"] == -2 and member in instance_of:
                left_at[instance_of[member]] = epoch
            elif member in awaiting:
                instance, before = awaiting.pop(member)
                if epoch != before:
                    problems.append(f"instance {instance} replaced with group epoch {before} → {epoch}")
    if not replacements:
        problems.append("no static replacement recorded")
    return problems


def run_group_scenario(
    scenario: GroupScenario, address: Address, partitions_of_offsets_topic: int, log_dir: Path
) -> MatrixResult:
    """Run the scenario against the broker at ``address``; never raises for a failed check (see
    ``MatrixResult.failures``), only for a broken environment."""
    started = time.monotonic()
    result = MatrixResult()
    nonce = uuid.uuid4().hex[:6]
    topic = group = f"matrix-{scenario.key}-{nonce}"
    log_dir.mkdir(parents=True, exist_ok=True)
    create_topics(address, {topic: PARTITIONS})
    processes: dict[str, ClientProcess] = {}
    observer = BlockingConnection(address, client_id="matrix-observer")
    snapshots = _OffsetSnapshots(address, group, topic)
    phases: list[str] = []
    timeline: list[str] = []

    bootstrap = f"{address[0]}:{address[1]}"

    def start(name: str, member: str | None = None) -> ClientProcess:
        if member is None:
            command = scenario.producer(bootstrap, topic)
        else:
            command = scenario.consumer(bootstrap, member, group, topic, member if scenario.static else None)
        proc = ClientProcess(name, command, log_dir)
        processes[name] = proc
        return proc

    consumer_protocol = scenario.protocol == "consumer"
    describe = describe_consumer_assignment if consumer_protocol else describe_assignment

    def wait_converged(n: int, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        last: tuple[str, dict[str, list[int]]] = ("", {})
        while time.monotonic() < deadline:
            last = describe(observer, group, topic)
            if converged(*last, n):
                phases.append(f"{what}: {time.monotonic() - started:.1f}s")
                timeline.append(phases[-1])
                return
            time.sleep(0.2)
        raise AssertionError(f"group did not converge ({what}) within {timeout:g}s: {last}")

    def wait_progress(proc: ClientProcess, timeout: float = 30.0) -> None:
        proc.wait_event(lambda e: e.get("name") == "records_consumed", timeout, "records")
        timeline.append(f"{proc.name} consuming: {time.monotonic() - started:.1f}s")

    try:
        producer = start("producer")
        for m in MEMBERS:
            start(m, m)
        try:
            wait_converged(3, 60, "3 members")
            for m in MEMBERS:
                wait_progress(processes[m])
            processes["C"].terminate()
            timeline.append(f"C stopped: {time.monotonic() - started:.1f}s")
            restarted = start("C2", "C")
            wait_converged(3, 40, "C restarted")
            wait_progress(restarted)
            processes["A"].terminate()
            wait_converged(2, 40, "A left")
            processes["B"].kill()
            wait_converged(1, 40 + scenario.session_timeout_ms / 1000, "B killed")
            convergence_problems: list[str] = []
        except AssertionError as exc:
            convergence_problems = [str(exc).splitlines()[0]]
        if producer.command.stdin_lines is not None:
            producer.close_stdin_and_wait()
        else:
            producer.terminate()
        ends = end_offsets(address, topic, range(PARTITIONS))
        if not convergence_problems:
            # The survivor drains the topic (every record in the log delivered), and its commits settle.
            log = {(p, o) for p in range(PARTITIONS) for o in range(ends[p])}
            consumers = [p for name, p in processes.items() if name != "producer"]
            deadline = time.monotonic() + 40
            while time.monotonic() < deadline:
                delivered = {(p, o) for c in consumers for p, o, _ts in c.consumed()}
                committed = {p: o for (_t, p), o in committed_offsets(observer, group, [topic]).items()}
                expected = _expected_commits(consumers, ends)
                if log <= delivered | _unreported_windows(consumers) and expected == {
                    p: committed.get(p, 0) for p in range(PARTITIONS)
                }:
                    timeline.append(f"drained: {time.monotonic() - started:.1f}s")
                    break
                time.sleep(0.2)
        for proc in processes.values():
            if proc.proc.poll() is None:
                proc.terminate()
    finally:
        snapshots.stop()
        for proc in processes.values():
            if proc.proc.poll() is None:
                proc.kill()

    final = {p: o for (_t, p), o in committed_offsets(observer, group, [topic]).items()}
    records = group_records(address, group, partitions_of_offsets_topic)
    observer.close()
    result.seconds = time.monotonic() - started
    members = [p for name, p in processes.items() if name != "producer"]
    consumed = [(p, o, ts, proc.name) for proc in members for p, o, ts in proc.consumed()]
    delivered = {(p, o) for p, o, _ts, _n in consumed}
    log = {(p, o) for p in range(PARTITIONS) for o in range(ends[p])}

    # --- no loss
    acked = set(processes["producer"].acked())
    excused = _unreported_windows(members)
    unreported = sorted((log - delivered) & excused)
    lost = sorted(log - delivered - excused)
    loss = [f"{len(lost)} of {len(log)} records never consumed, e.g. {lost[:5]}"] if lost else []
    if acked - log:
        loss.append(f"{len(acked - log)} acknowledged records are not in the log")
    detail = f"{len(log)} records ({len(acked)} acknowledged to the producer), all consumed"
    if unreported:
        detail += f" ({len(unreported)} in a stopped member's unreported window: {unreported[:3]})"
    result.check("no loss", loss, detail)
    duplicates = len(consumed) - len(delivered)
    result.info["duplicates"] = duplicates

    # --- exclusive ownership per generation (coordinator) and per member (client view)
    problems: list[str] = []
    generations: list[int] = []
    for r in records:
        if consumer_protocol or r.key_type != 2 or not r.value or not r.value["members"]:
            continue
        generations.append(r.value["generation"])
        owner: dict[int, str] = {}
        for m in r.value["members"]:
            if not m["assignment"]:
                continue
            assignment, _ = ConsumerProtocolAssignment.decode_versioned(m["assignment"], lenient=True)
            for tp in assignment.assigned_partitions:
                for p in tp.partitions:
                    if tp.topic == topic and p in owner:
                        problems.append(
                            f"generation {r.value['generation']}: partition {p} owned by {owner[p]} "
                            f"and {m['member_id']}"
                        )
                    owner[p] = m["member_id"]
    if consumer_protocol:
        ownership, epochs = _consumer_group_ownership(records)
        problems += ownership
        if not epochs:
            problems.append("no ConsumerGroupCurrentMemberAssignment record in __consumer_offsets")
        generations = list(range(epochs))
    elif not generations:
        problems.append("no GroupMetadata record with members in __consumer_offsets")
    if scenario.reports_assignments:
        intervals = [(p, a, b, proc.name) for proc in members for p, a, b in proc.ownership()]
        for i, (p1, a1, b1, n1) in enumerate(intervals):
            for p2, a2, b2, n2 in intervals[i + 1 :]:
                if p1 == p2 and n1 != n2 and min(b1, b2) - max(a1, a2) > 0.001:
                    problems.append(
                        f"partition {p1} owned by {n1} and {n2} at the same time "
                        f"({max(a1, a2):.3f}-{min(b1, b2):.3f})"
                    )
    result.check(
        "exclusive ownership",
        problems,
        f"{len(generations)} {'member epochs' if consumer_protocol else 'generations'} disjoint"
        + ("; client view disjoint" if scenario.reports_assignments else ""),
    )
    if scenario.static and consumer_protocol:
        result.check(
            "static restart without rebalance", _static_consumer_replacements(records), "same group epoch"
        )
    elif scenario.static:
        result.check("static restart without rebalance", _static_replacements(records), "same generation")

    # --- convergence
    result.check("converges", convergence_problems, "; ".join(phases))

    # --- committed offsets resume
    problems = []
    slack = max(c.command.timestamp_slack_ms for c in members) / 1000.0
    for p, o, ts, name in consumed:
        for taken, committed_then in snapshots.samples:
            if ts > taken + slack and o < committed_then.get(p, 0):
                problems.append(
                    f"{name} consumed {p}@{o} {ts - taken:.1f}s after {committed_then[p]} was committed"
                )
                break
    expected = _expected_commits(members, ends)
    wrong = [p for p in range(PARTITIONS) if final.get(p, 0) != expected[p]]
    if wrong:
        problems.append(
            f"final committed offsets {final} != the last acknowledged commits {expected} "
            f"for partitions {wrong}"
        )
    uncommitted = sum(ends[p] - final.get(p, 0) for p in range(PARTITIONS))
    result.check(
        "resume from committed",
        problems[:10],
        f"final commits = last acknowledged commits ({uncommitted} consumed records left uncommitted by the "
        f"client); {duplicates} re-deliveries",
    )
    result.info["phases"] = phases
    result.info["timeline"] = timeline
    return result
