"""Support for the consumer-group interop tests: a ``regroup serve`` subprocess whose log is kept, member
subprocesses (Python clients via ``interop_worker.py``, or kcat), a background producer, and the
"every record exactly once, except the killed member's uncommitted window" check."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from broker.support import READY
from regroup.runtime.ports import free_port

WORKER = Path(__file__).with_name("interop_worker.py")
PARTITIONS = 12
GENERATION_LINE = re.compile(r"join phase completed: group (\S+) generation (\d+)")
# Members the coordinator removed without a LeaveGroup, as its generation lines report them.
_EXPIRED = re.compile(r"member (\S+)'s session expired")
_EVICTED = re.compile(r"evicted ([^;(]+)")


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


class Serve:
    """``regroup serve`` on 127.0.0.1 with settings for fast group tests; stderr goes to a file."""

    def __init__(self, tmp: Path, *overrides: str) -> None:
        self.log_path = tmp / "broker.log"
        settings = [
            f"listeners=PLAINTEXT://127.0.0.1:{free_port()}",
            f"log.dirs={tmp / 'data'}",
            "group.initial.rebalance.delay.ms=0",
            "group.min.session.timeout.ms=1000",
            "offsets.topic.num.partitions=10",
            *overrides,
        ]
        cmd = [sys.executable, "-m", "regroup.cli", "serve"]
        for item in settings:
            cmd += ["--override", item]
        env = {k: v for k, v in os.environ.items() if not k.startswith("REGROUP_")}
        self._log = self.log_path.open("w")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self._log, env=env, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        match = READY.search(line)
        assert match, f"broker did not start: {line!r}\n{self.log_path.read_text()}"
        self.bootstrap = f"{match.group(1)}:{match.group(2)}"

    def log(self) -> str:
        return self.log_path.read_text()

    def expelled(self) -> set[str]:
        """Member ids whose session expired or that a rebalance deadline evicted."""
        text = self.log()
        out = set(_EXPIRED.findall(text))
        for ids in _EVICTED.findall(text):
            out.update(i.strip() for i in ids.split(",") if i.strip())
        return out

    def generations(self, group: str) -> list[int]:
        """Generations whose join phase completed, from the coordinator's one INFO line per generation."""
        return [int(m.group(2)) for m in GENERATION_LINE.finditer(self.log()) if m.group(1) == group]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._log.close()


def create_topic(bootstrap: str, name: str, partitions: int = PARTITIONS) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(30)


class Producer:
    """Writes ``r-<i>`` to partition ``i % 12`` in a background thread until stopped; keeps every
    acknowledged (partition, offset, value)."""

    def __init__(self, bootstrap: str, topic: str, rate: float = 250.0) -> None:
        from confluent_kafka import Producer as KafkaProducer

        self.topic = topic
        self.acked: list[tuple[int, int, str]] = []
        self.errors: list[object] = []
        self._producer = KafkaProducer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
        self._rate = rate
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        i = 0
        started = time.monotonic()
        while not self._stop.is_set():
            value = f"r-{i}"

            def delivered(err: object, msg: Any, value: str = value) -> None:
                if err is not None:
                    self.errors.append(err)
                else:
                    self.acked.append((msg.partition(), msg.offset(), value))

            self._producer.produce(
                self.topic, value.encode(), partition=i % PARTITIONS, on_delivery=delivered
            )
            self._producer.poll(0)
            i += 1
            delay = started + i / self._rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        assert self._producer.flush(30) == 0

    def stop(self) -> list[tuple[int, int, str]]:
        self._stop.set()
        self._thread.join(60)
        assert self.errors == [], self.errors
        return sorted(self.acked)


@dataclass
class Record:
    partition: int
    offset: int
    value: str


@dataclass
class Member:
    """A group member subprocess; its stdout events are collected by a reader thread."""

    name: str
    proc: subprocess.Popen[str]
    prefix: str = ""  # what its member ids start with: client.id, or group.instance.id for static members
    records: list[Record] = field(default_factory=list)
    commits: dict[int, int] = field(default_factory=dict)  # partition -> acknowledged next offset
    commit_log: list[tuple[int, int]] = field(default_factory=list)  # every acknowledged (partition, next)
    assignment: set[int] = field(default_factory=set)
    assignments: list[frozenset[int]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    # (partition, first, next) of each batch whose commit failed: consumed, never committed by this member
    uncommitted: list[tuple[int, int, int]] = field(default_factory=list)
    killed: bool = False
    ready: threading.Event = field(default_factory=threading.Event)
    stderr_lines: list[str] = field(default_factory=list)
    readers: list[threading.Thread] = field(default_factory=list)

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None and not self.killed

    def terminate(self, timeout: float = 30) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout)
        self.assignment = set()

    def kill(self) -> None:
        self.killed = True
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def close(self) -> None:
        """Kill the process if it still runs, then close its pipes once everything was read."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        for reader in self.readers:
            reader.join(10)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()

    def left_uncommitted(self, partition: int, offset: int) -> bool:
        """Whether the commit of the batch holding this record failed."""
        return any(p == partition and lo <= offset < hi for p, lo, hi in self.uncommitted)

    def set_assignment(self, parts: Iterable[int]) -> None:
        self.assignment = set(parts)
        self.assignments.append(frozenset(self.assignment))


def _drain(stream: Any, handle: Callable[[str], None]) -> threading.Thread:
    def run() -> None:
        for line in stream:
            handle(line)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def start_member(
    client: str,
    bootstrap: str,
    group: str,
    topic: str,
    name: str,
    *,
    assignor: str = "range",
    instance_id: str | None = None,
    session_ms: int = 6000,
) -> Member:
    cmd = [
        sys.executable,
        str(WORKER),
        client,
        bootstrap,
        group,
        topic,
        "--name",
        name,
        "--assignor",
        assignor,
    ]
    cmd += ["--session-ms", str(session_ms)]
    if instance_id is not None:
        cmd += ["--instance-id", instance_id]
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    member = Member(name, proc, instance_id or f"interop-{name}")

    def on_line(line: str) -> None:
        try:
            event = json.loads(line)
        except ValueError:
            return
        kind = event["ev"]
        if kind == "rec":
            member.records.append(Record(event["p"], event["o"], event["v"]))
        elif kind == "commit":
            member.commits[event["p"]] = event["o"]
            member.commit_log.append((event["p"], event["o"]))
        elif kind == "assignment":
            member.set_assignment(event["parts"])
        elif kind == "ready":
            member.ready.set()
        elif kind == "commit_failed":
            member.failures.append(event["error"])
            member.uncommitted.extend((p, lo, hi) for p, lo, hi in event.get("ranges", ()))

    assert proc.stdout is not None
    assert proc.stderr is not None
    member.readers = [_drain(proc.stdout, on_line), _drain(proc.stderr, member.stderr_lines.append)]
    return member


# kcat -v reports each rebalance on stderr: "% Group g rebalanced (memberid m): assigned: t [0], t [3]".
_KCAT_ASSIGNED = re.compile(r"rebalanced \(memberid [^)]*\): assigned: (.*)$")
_KCAT_REVOKED = re.compile(r"rebalanced \(memberid [^)]*\): revoked")
_KCAT_PARTITION = re.compile(r"\[(\d+)\]")


def start_kcat(
    kcat: str,
    bootstrap: str,
    group: str,
    topic: str,
    name: str,
    *,
    session_ms: int = 6000,
    instance_id: str | None = None,
    assignor: str = "range",
) -> Member:
    extra = ["-X", f"partition.assignment.strategy={assignor}"]
    if instance_id is not None:
        extra += ["-X", f"group.instance.id={instance_id}"]
    cmd = [
        kcat,
        "-b",
        bootstrap,
        "-G",
        group,
        "-E",
        "-u",
        "-J",
        "-v",
        "-X",
        "auto.offset.reset=earliest",
        "-X",
        f"session.timeout.ms={session_ms}",
        "-X",
        "heartbeat.interval.ms=500",
        "-X",
        "auto.commit.interval.ms=100",
        "-X",
        f"client.id=kcat-{name}",
        *extra,
        topic,
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    member = Member(name, proc, instance_id or f"kcat-{name}")
    member.ready.set()

    def on_stdout(line: str) -> None:
        try:
            event = json.loads(line)
        except ValueError:
            return
        member.records.append(Record(event["partition"], event["offset"], event["payload"]))

    def on_stderr(line: str) -> None:
        member.stderr_lines.append(line)
        assigned = _KCAT_ASSIGNED.search(line)
        if assigned:
            member.set_assignment(int(p) for p in _KCAT_PARTITION.findall(assigned.group(1)))
        elif _KCAT_REVOKED.search(line):
            member.set_assignment(())

    assert proc.stdout is not None
    assert proc.stderr is not None
    member.readers = [_drain(proc.stdout, on_stdout), _drain(proc.stderr, on_stderr)]
    return member


def balanced(members: Sequence[Member], partitions: int = PARTITIONS) -> bool:
    """Every partition owned by exactly one live member."""
    owned = [p for m in members if m.alive for p in m.assignment]
    return len(owned) == len(set(owned)) == partitions and set(owned) == set(range(partitions))


def wait_balanced(members: Sequence[Member], what: str, timeout: float = 90) -> None:
    live = [m for m in members if m.alive]
    wait_for(
        lambda: balanced(live) and all(m.assignment for m in live), timeout, f"a balanced group ({what})"
    )


def wait_consumed(
    members: Sequence[Member],
    produced: Sequence[tuple[int, int, str]],
    timeout: float = 120,
    may_miss: frozenset[tuple[int, int]] = frozenset(),
) -> None:
    wanted = {(p, o) for p, o, _ in produced} - may_miss

    def done() -> bool:
        seen = {(r.partition, r.offset) for m in members for r in list(m.records)}
        return wanted <= seen

    try:
        wait_for(done, timeout, f"all {len(wanted)} produced records to be consumed")
    except AssertionError:
        seen = {(r.partition, r.offset) for m in members for r in list(m.records)}
        missing: dict[int, list[int]] = {}
        for p, o in sorted(wanted - seen):
            missing.setdefault(p, []).append(o)
        owners = {m.name: (m.alive, sorted(m.assignment)) for m in members}
        summary = {p: (len(os), os[0]) for p, os in missing.items()}
        raise AssertionError(f"missing (count, first) per partition: {summary}; owners: {owners}") from None


def check_exactly_once(
    produced: Sequence[tuple[int, int, str]],
    members: Sequence[Member],
    *,
    exact_commit_window: bool = True,
    may_miss: frozenset[tuple[int, int]] = frozenset(),
    expelled: Iterable[str] = (),
) -> dict[str, int]:
    """Every produced record consumed with its value; a record consumed twice must have been consumed by a
    member that was SIGKILLed (or that the coordinator expelled: ``expelled`` member ids, e.g. a process
    starved past its session timeout on a loaded machine), at or after that member's last acknowledged
    commit on the partition (its uncommitted window) — or by a member whose commit of that record's batch
    failed (a commit while the group rebalances is refused, REBALANCE_IN_PROGRESS or ILLEGAL_GENERATION,
    on Kafka as on regroup, and the partition's next owner starts from the last commit that succeeded).
    With ``exact_commit_window`` False (auto-committing clients such as kcat, whose commits the test cannot
    observe) only the first condition is checked for duplicates. ``may_miss``: records a client is known to
    drop (see :func:`kcat_dropped_at_exit`)."""
    expected = {(p, o): v for p, o, v in produced}
    expelled_ids = list(expelled)
    lost_session = {m.name for m in members for i in expelled_ids if i.startswith(m.prefix + "-")}
    consumers: dict[tuple[int, int], list[Member]] = {}
    for m in members:
        for r in m.records:
            key = (r.partition, r.offset)
            if key in expected:
                assert r.value == expected[key], (m.name, r, expected[key])
            consumers.setdefault(key, []).append(m)
    missing = sorted(set(expected) - set(consumers) - may_miss)
    assert not missing, f"{len(missing)} records never consumed, e.g. {missing[:10]}"
    duplicates = uncommitted = 0
    for (partition, offset), by in consumers.items():
        if (partition, offset) not in expected or len(by) == 1:
            continue
        duplicates += len(by) - 1
        if any(m.left_uncommitted(partition, offset) for m in by):
            uncommitted += 1
            continue
        killed = [m for m in by if m.killed or m.name in lost_session]
        assert killed, (
            f"record {partition}/{offset} consumed by {[m.name for m in by]}, none of them killed "
            "or refused its commit; "
            + "; ".join(
                f"{m.name}: committed {[o for p, o in m.commit_log if p == partition][-5:]} on {partition}, "
                f"consumed {[r.offset for r in m.records if r.partition == partition][:3]}…, "
                f"assignments {[sorted(a) for a in m.assignments[-4:]]}"
                for m in by
            )
        )
        if exact_commit_window:
            assert any(offset >= m.commits.get(partition, 0) for m in killed), (
                f"record {partition}/{offset} redelivered though {[m.name for m in killed]} had committed it"
            )
    return {
        "records": len(expected),
        "duplicates": duplicates,
        "redelivered_after_failed_commit": uncommitted,
        "expelled_live": len(lost_session - {m.name for m in members if m.killed}),
    }


def kcat_dropped_at_exit(members: Sequence[Member]) -> frozenset[tuple[int, int]]:
    """kcat's ``consume_cb`` returns without printing when the message polled after SIGTERM arrives
    (``if (!conf.run) return;``), although librdkafka has already stored its offset, which the close then
    commits: a cleanly stopped kcat member silently skips at most the next record of each partition it
    owned. Those are the records right after each stopped member's last printed offset per partition."""
    out: set[tuple[int, int]] = set()
    for m in members:
        if m.killed or m.proc.poll() is None:
            continue
        last: dict[int, int] = {}
        for r in m.records:
            last[r.partition] = max(last.get(r.partition, -1), r.offset)
        out.update((p, o + 1) for p, o in last.items())
    return frozenset(out)


def dump_scenario(serve: Serve, members: Sequence[Member]) -> None:
    """What a failed scenario leaves on stderr: each member's state and last stderr lines, then the
    broker's log after its start-up configuration dump."""
    for m in members:
        state = (
            f"ready={m.ready.is_set()} alive={m.alive} killed={m.killed} exit={m.proc.poll()} "
            f"records={len(m.records)} assignments={[sorted(a) for a in m.assignments[-5:]]} "
            f"failures={m.failures[-3:]}"
        )
        sys.stderr.write(f"--- {m.name}: {state}; stderr ---\n{''.join(m.stderr_lines[-30:])}\n")
    lines = serve.log().splitlines()
    after_config = [line for line in lines if not line.startswith("\t")]
    sys.stderr.write("--- broker log ---\n" + "\n".join(after_config[-80:]) + "\n")


def run_scenario(
    tmp: Path,
    start: Callable[[str, str], Member],
    *,
    exact_commit_window: bool = True,
    session_ms: int = 6000,
    may_miss: Callable[[Sequence[Member]], frozenset[tuple[int, int]]] | None = None,
) -> dict[str, int]:
    """A producer writes to a 12-partition topic while a group of 3 consumes it; one member leaves
    cleanly, a new member joins, another is SIGKILLed (the group rebalances after its session timeout).
    Then every record must have been consumed exactly once, except the killed member's uncommitted window.
    ``start(bootstrap, name)`` starts one member."""
    serve = Serve(tmp)
    members: list[Member] = []
    producer: Producer | None = None
    try:
        create_topic(serve.bootstrap, "events")
        producer = Producer(serve.bootstrap, "events")
        members.extend(start(serve.bootstrap, f"m{i}") for i in range(3))
        wait_balanced(members, "three members")
        time.sleep(1.0)
        members[0].terminate()
        wait_balanced(members, "a clean leave")
        members.append(start(serve.bootstrap, "m3"))
        wait_balanced(members, "a new member")
        time.sleep(1.0)
        members[1].kill()
        wait_balanced(members, "a SIGKILLed member", timeout=session_ms / 1000 + 30)
        time.sleep(0.5)
        produced = producer.stop()
        producer = None
        skipped = may_miss(members) if may_miss is not None else frozenset()
        wait_consumed(members, produced, may_miss=skipped)
        for m in members:
            if m.alive:
                m.terminate()
        stats = check_exactly_once(
            produced,
            members,
            exact_commit_window=exact_commit_window,
            may_miss=skipped,
            expelled=serve.expelled(),
        )
        stats["skipped"] = len(skipped - {(r.partition, r.offset) for m in members for r in m.records})
        stats["generations"] = len(serve.generations("g"))
        return stats
    except BaseException:
        dump_scenario(serve, members)
        raise
    finally:
        if producer is not None:
            producer.stop()
        for m in members:
            m.close()
        serve.stop()


# The static members' session timeout: the restarted member (a new process: interpreter, client library,
# first join) must be back before it ends, which took over 6 s on a loaded CI machine.
STATIC_SESSION_MS: Final = 20000


def run_static_scenario(
    tmp: Path, start: Callable[[str, str, str], Member], *, exact_commit_window: bool = True
) -> dict[str, int]:
    """Three static members (``group.instance.id``) consume while a producer writes; one is SIGKILLed and
    restarted within its session timeout: it must get its partitions back with no rebalance (no new
    generation in the coordinator's log, no assignment change seen by the others, the same assignment
    under a new member id in DescribeGroups), and every record is consumed exactly once outside the killed
    incarnation's uncommitted window. ``start(bootstrap, name, instance_id)`` starts one member, with a
    session timeout of :data:`STATIC_SESSION_MS`."""
    from coordinator.wire import GroupClient
    from regroup.protocol.messages.describe_groups import DescribeGroupsRequest

    serve = Serve(tmp)
    members: list[Member] = []
    producer: Producer | None = None
    group = "g"

    try:
        create_topic(serve.bootstrap, "events")
        producer = Producer(serve.bootstrap, "events")
        members.extend(start(serve.bootstrap, f"s{i}", f"inst-{i}") for i in range(3))
        wait_balanced(members, "three static members")
        # Cooperative assignors settle in a follow-up rebalance; wait for the generations to stop moving.
        generations = serve.generations(group)
        deadline = time.monotonic() + 30
        while True:
            time.sleep(1.5)
            now = serve.generations(group)
            if now == generations and balanced(members):
                break
            assert time.monotonic() < deadline, "the group did not settle"
            generations = now
        host, port = serve.bootstrap.rsplit(":", 1)
        with GroupClient((host, int(port))) as admin:
            [before] = admin.call(DescribeGroupsRequest(groups=[group]), 5).groups
        victim = members[1]
        owned = set(victim.assignment)
        seen = [len(m.assignments) for m in members]
        victim.kill()
        time.sleep(1.0)  # well within session.timeout.ms
        back = start(serve.bootstrap, "s1-restarted", "inst-1")
        members.append(back)
        wait_for(
            lambda: back.assignment == owned, 30, "the restarted static member to get its partitions back"
        )
        time.sleep(1.0)
        assert serve.generations(group) == generations, "the restart caused a rebalance"
        assert [len(m.assignments) for m in members[:3]] == seen, "a member saw its assignment change"
        with GroupClient((host, int(port))) as admin:
            [after] = admin.call(DescribeGroupsRequest(groups=[group]), 5).groups
        assert after.group_state == "Stable"
        by_instance = {m.group_instance_id: m for m in after.members}
        old_ids = {m.group_instance_id: m.member_id for m in before.members}
        assert sorted(by_instance) == ["inst-0", "inst-1", "inst-2"]
        assert by_instance["inst-1"].member_id != old_ids["inst-1"]  # a new member id, same assignment
        assert by_instance["inst-0"].member_id == old_ids["inst-0"]
        assert {m.group_instance_id: m.member_assignment for m in before.members} == {
            m.group_instance_id: m.member_assignment for m in after.members
        }
        produced = producer.stop()
        producer = None
        wait_consumed(members, produced)
        for m in members:
            if m.alive:
                m.terminate()
        stats = check_exactly_once(
            produced, members, exact_commit_window=exact_commit_window, expelled=serve.expelled()
        )
        stats["generations"] = len(generations)
        return stats
    except BaseException:
        dump_scenario(serve, members)
        raise
    finally:
        if producer is not None:
            producer.stop()
        for m in members:
            m.close()
        serve.stop()
