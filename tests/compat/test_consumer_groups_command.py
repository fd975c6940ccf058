"""Kafka's own ``kafka-consumer-groups.sh`` (``ConsumerGroupCommand``) against regroup, side by side with the
reference broker: the same group history on both, the same commands (list, describe offsets/members/state,
reset offsets while Stable (refused) and Empty, delete offsets, delete the group), and the outputs compared
line by line after normalising member-id UUIDs, ports and column padding. Once for a classic group and
once for a KIP-848 consumer-protocol group (members driving ConsumerGroupHeartbeat over the wire)."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from differential.dsl import (
    Context,
    E,
    Offsets,
    cgh,
    commit,
    consumer_coordinator_sees,
    form_group,
    heartbeat,
    leave,
    topic_name,
)
from differential.harness import start_pair
from regroup.client.blocking import BlockingConnection
from regroup.protocol.messages.consumer_group_describe import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    DescribedGroup,
)
from regroup.refkafka import CONSUMER_GROUPS_COMMAND, kafka_version, run_tool, skip_reason
from support import compat_report
from support.kafka_wire import Address, committed_offsets, create_topics, end_offsets, produce
from support.normalize import UUID_SUFFIX
from support.tools import missing

TOPIC = "t"  # the differential topic names: diff-t has 3 partitions
RECORDS = {0: 10, 1: 20, 2: 30}  # diff-t's records per partition
LOG_NOISE = re.compile(r"^\[\d{4}-\d\d-\d\d |^\s+at |^WARN |^SLF4J")


@dataclass
class Run:
    name: str
    args: list[str]
    stdout: str = ""
    stderr: str = ""
    code: int = 0


@dataclass
class Transcript:
    runs: list[Run] = field(default_factory=list)
    offsets: dict[str, dict[tuple[str, int], int]] = field(default_factory=dict)


def _heartbeats(ctx: Context, actors: list[str], stop: threading.Event) -> None:
    while not stop.wait(1.0):
        for a in actors:
            heartbeat(a).execute(ctx)


def _tool_runner(out: Transcript, bootstrap: str) -> Callable[..., Run]:
    def tool(name: str, *args: str) -> Run:
        done = run_tool(CONSUMER_GROUPS_COMMAND, "--bootstrap-server", bootstrap, *args, timeout=120)
        run = Run(name, list(args), done.stdout, done.stderr, done.returncode)
        out.runs.append(run)
        return run

    return tool


def _script(address: Address, group: str, bootstrap: str) -> Transcript:
    """The same history and commands on one broker."""
    out = Transcript()
    ctx = Context(address, group)
    stop = threading.Event()
    topic = topic_name(TOPIC)
    tool = _tool_runner(out, bootstrap)

    try:
        for step in [
            *form_group("a", "b", session=20000, assign={"a": {TOPIC: [0, 1]}, "b": {TOPIC: [2]}}),
            commit("a", offsets={(TOPIC, 0): (4, "a"), (TOPIC, 1): 9}),
            commit("b", offsets={(TOPIC, 2): 7}),
        ]:
            step.execute(ctx)
        beats = threading.Thread(target=_heartbeats, args=(ctx, ["a", "b"], stop), daemon=True)
        beats.start()
        tool("list", "--list")
        tool("describe offsets", "--describe", "--group", group)
        tool("describe members", "--describe", "--group", group, "--members", "--verbose")
        tool("describe state", "--describe", "--group", group, "--state")
        reset = ["--reset-offsets", "--to-earliest", "--execute", "--group", group]
        tool("reset while Stable", *reset, "--all-topics")
        stop.set()
        beats.join()
        leave("a", expect=E.NONE).execute(ctx)
        leave("b", expect=E.NONE).execute(ctx)
        tool("describe Empty", "--describe", "--group", group)
        tool("reset to earliest", *reset, "--topic", topic)
        tool("delete offsets", "--delete-offsets", "--group", group, "--topic", f"{topic}:2")
        with BlockingConnection(address) as conn:
            out.offsets["after reset and delete-offsets"] = committed_offsets(conn, group)
        tool("delete", "--delete", "--group", group)
        tool("describe deleted", "--describe", "--group", group)
    finally:
        stop.set()
        ctx.close()
    return out


# ------------------------------------------------------------------------ a consumer-protocol group

MEMBERS = ("a", "b")


def _consumer_heartbeats(ctx: Context, stop: threading.Event) -> None:
    while not stop.wait(1.0):
        for a in MEMBERS:
            cgh(a).execute(ctx)


def _consumer_describe(ctx: Context) -> DescribedGroup:
    response = ctx.admin.request(
        ConsumerGroupDescribeRequest(group_ids=[ctx.group]),
        ConsumerGroupDescribeResponse,
        version=0,
        timeout=20,
    )
    return response.groups[0]


def _reconcile(ctx: Context, timeout: float = 60.0) -> None:
    """Heartbeat every member (each acknowledging what it was given) until the group is Stable: every
    member reconciled to the target assignment."""
    deadline = time.monotonic() + timeout
    while True:
        for a in MEMBERS:
            cgh(a).execute(ctx)
        g = _consumer_describe(ctx)
        if (
            g.error_code == 0
            and g.group_state == "Stable"
            and len(g.members) == len(MEMBERS)
            and all(m.member_epoch == g.assignment_epoch for m in g.members)
        ):
            return
        assert time.monotonic() < deadline, f"{ctx.group} is not Stable on {ctx.address}: {g}"
        time.sleep(0.1)


def _consumer_script(address: Address, group: str, bootstrap: str) -> Transcript:
    """A KIP-848 group of two members (the broker's default assignor spreads diff-t over them) that
    commit with their member epochs; the tool's views while Stable, then Empty, then deleted."""
    out = Transcript()
    ctx = Context(address, group)
    stop = threading.Event()
    tool = _tool_runner(out, bootstrap)
    describe = ["--describe", "--group", group]
    try:
        consumer_coordinator_sees(TOPIC).execute(ctx)
        for a in MEMBERS:
            cgh(a, epoch=0, names=[TOPIC]).execute(ctx)
        _reconcile(ctx)
        commits: dict[str, Offsets] = {"a": {(TOPIC, 0): (4, "a"), (TOPIC, 1): 9}, "b": {(TOPIC, 2): 7}}
        for a, offsets in commits.items():
            # Kafka takes commits of consumer-protocol members from OffsetCommit v9 on, with the member epoch.
            epoch = ctx.actor(a).member_epoch
            commit(a, 9, offsets=offsets, gen=epoch, member=f"{a}-member").execute(ctx)
        with BlockingConnection(address) as conn:
            out.offsets["committed by the members"] = committed_offsets(conn, group)
        beats = threading.Thread(target=_consumer_heartbeats, args=(ctx, stop), daemon=True)
        beats.start()
        tool("list", "--list")
        tool("list with types", "--list", "--type")
        tool("list consumer", "--list", "--type", "consumer")
        tool("list classic", "--list", "--type", "classic")
        tool("list with state and type", "--list", "--state", "--type")
        tool("list Stable consumer", "--list", "--state", "Stable", "--type", "consumer")
        tool("describe offsets", *describe)
        tool("describe offsets verbose", *describe, "--offsets", "--verbose")
        tool("describe members", *describe, "--members")
        tool("describe members verbose", *describe, "--members", "--verbose")
        tool("describe state", *describe, "--state")
        tool("describe state verbose", *describe, "--state", "--verbose")
        reset = ["--reset-offsets", "--to-earliest", "--dry-run", "--group", group, "--all-topics"]
        tool("reset while Stable", *reset)
        stop.set()
        beats.join()
        for a in MEMBERS:
            cgh(a, epoch=-1).execute(ctx)
        tool("describe Empty", *describe)
        tool("describe members Empty", *describe, "--members", "--verbose")
        tool("describe state Empty", *describe, "--state", "--verbose")
        tool("delete", "--delete", "--group", group)
        tool("describe deleted", *describe)
    finally:
        stop.set()
        ctx.close()
    return out


def _normalise(text: str) -> list[str]:
    """Member-id UUIDs (the client id prefix stays), ports and column padding normalised; lines sorted,
    because table rows follow the order in which the broker lists members (a hash map in Kafka)."""
    lines = []
    for raw in text.splitlines():
        if not raw.strip() or LOG_NOISE.search(raw):
            continue
        line = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:<port>", UUID_SUFFIX.sub("<uuid>", raw))
        lines.append(" ".join(line.split()))
    return sorted(lines)


# Tool outputs that legitimately differ (in both tests), with the reason.
ACCEPTED: dict[str, str] = {}
compat_report.add_section(
    "Documented kafka-consumer-groups.sh output differences",
    lambda: (
        "\n".join(f"- **{name}**: {reason}" for name, reason in ACCEPTED.items())
        or "None: every run prints what Kafka's tool prints against Kafka."
    ),
)


def _fill(address: Address, timeout: float = 60.0) -> None:
    """Bring diff-t to RECORDS on one broker. Both tests share the broker pair, hence the topic: only
    what is missing is produced. Partitions of a topic created a moment ago may have no leader yet."""
    topic = topic_name(TOPIC)
    create_topics(address, {topic: len(RECORDS)})
    deadline = time.monotonic() + timeout
    while True:
        try:
            ends = end_offsets(address, topic, RECORDS)
            todo = {p: n - ends[p] for p, n in RECORDS.items() if ends[p] < n}
            if not todo:
                return
            produce(address, topic, todo)
        except AssertionError:  # NOT_LEADER_OR_FOLLOWER / LEADER_NOT_AVAILABLE while the leader is elected
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _run_pair(script: Callable[[Address, str, str], Transcript], group: str) -> tuple[Transcript, Transcript]:
    """``script`` on both brokers at the same time: (Kafka's transcript, regroup's)."""
    reason = skip_reason()
    if reason:
        missing(reason)
    pair = start_pair()
    results: dict[str, Transcript | BaseException] = {}

    def run(name: str, address: Address, bootstrap: str) -> None:
        try:
            results[name] = script(address, group, bootstrap)
        except BaseException as exc:  # re-raised below
            results[name] = exc

    for address in pair.addresses.values():
        _fill(address)
    threads = [
        threading.Thread(target=run, args=("kafka", pair.kafka_address, pair.kafka.bootstrap_servers)),
        threading.Thread(target=run, args=("regroup", pair.regroup.address, pair.regroup.bootstrap)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for value in results.values():
        if isinstance(value, BaseException):
            raise value
    kafka, regroup = results["kafka"], results["regroup"]
    assert isinstance(kafka, Transcript)
    assert isinstance(regroup, Transcript)
    return kafka, regroup


def _compare(
    kafka: Transcript, regroup: Transcript, group: str, accepted: dict[str, str]
) -> tuple[list[str], dict[str, str]]:
    """Run by run: (problems, check name → verdict)."""
    problems: list[str] = []
    checks: dict[str, str] = {}
    for k, r in zip(kafka.runs, regroup.runs, strict=True):
        k_lines, r_lines = _lines(k, group), _lines(r, group)
        if (k_lines != r_lines or k.code != r.code) and k.name in accepted:
            checks[k.name] = "differs as documented"
        elif k_lines != r_lines or k.code != r.code:
            problems.append(
                f"{k.name} ({' '.join(k.args)}): exit {k.code} vs {r.code}\n  kafka:\n    "
                + "\n    ".join(k_lines)
                + "\n  regroup:\n    "
                + "\n    ".join(r_lines)
            )
            checks[k.name] = "DIFFERS"
        else:
            checks[k.name] = "same as Kafka"
    if kafka.offsets != regroup.offsets:
        problems.append(f"committed offsets differ: kafka={kafka.offsets} regroup={regroup.offsets}")
    return problems, checks


@pytest.mark.interop
@pytest.mark.kafka
def test_consumer_groups_command_matches_kafka() -> None:
    started = time.monotonic()
    group = f"cgc-{int(time.time() * 1000) % 10**8}"
    kafka, regroup = _run_pair(_script, group)
    problems, checks = _compare(kafka, regroup, group, ACCEPTED)
    _check_semantics(regroup, group, problems)
    compat_report.record_client(
        compat_report.ClientResult(
            "kafka-consumer-groups.sh (ConsumerGroupCommand)",
            f"Apache Kafka tools {kafka_version()}",
            "list, describe (offsets/members/state), reset-offsets (Stable: refused; Empty: to earliest), "
            "delete-offsets, delete",
            "pass" if not problems else "FAIL",
            checks=checks,
            seconds=time.monotonic() - started,
        )
    )
    assert not problems, "\n".join(problems)


@pytest.mark.interop
@pytest.mark.kafka
def test_consumer_groups_command_consumer_protocol_matches_kafka() -> None:
    started = time.monotonic()
    group = f"cgc848-{int(time.time() * 1000) % 10**8}"
    kafka, regroup = _run_pair(_consumer_script, group)
    problems, checks = _compare(kafka, regroup, group, ACCEPTED)
    _check_consumer_semantics(regroup, group, problems)
    compat_report.record_client(
        compat_report.ClientResult(
            "kafka-consumer-groups.sh (ConsumerGroupCommand), consumer-protocol group (KIP-848)",
            f"Apache Kafka tools {kafka_version()}",
            "list (--type, --state), describe (offsets/members/state, --verbose) while Stable and Empty, "
            "reset-offsets refused while Stable, delete, describe deleted",
            "pass" if not problems else "FAIL",
            checks=checks,
            seconds=time.monotonic() - started,
        )
    )
    assert not problems, "\n".join(problems)


def _lines(run: Run, group: str) -> list[str]:
    lines = _normalise(run.stdout) + ["stderr: " + x for x in _normalise(run.stderr)]
    if run.args[:1] == ["--list"]:
        # --list prints every group of the (shared) broker: keep this test's group and the header only.
        return [line for line in lines if line.split(" ", 1)[0] in (group, "GROUP", "stderr:")]
    return lines


Expectations = list[tuple[str, Callable[[Run], bool], str]]


def _expect(t: Transcript, expect: Expectations, problems: list[str]) -> None:
    by_name: dict[str, Run] = {r.name: r for r in t.runs}
    for name, ok, what in expect:
        if name in by_name and not ok(by_name[name]):
            problems.append(
                f"regroup, {name}: expected {what}:\n{by_name[name].stdout}\n{by_name[name].stderr[-2000:]}"
            )


def _check_semantics(t: Transcript, group: str, problems: list[str]) -> None:
    """What the outputs must say on regroup, independently of Kafka."""
    expect: Expectations = [
        ("list", lambda r: group in r.stdout.split(), "the group is listed"),
        (
            "describe offsets",
            lambda r: re.search(rf"{group}\s+diff-t\s+0\s+4\s+10\s+6\s+a-", r.stdout) is not None,
            "partition 0: committed 4, end 10, lag 6, owner a",
        ),
        (
            "describe state",
            lambda r: (
                re.search(rf"{group}\s+127\.0\.0\.1:\d+\s+\(1\)\s+range\s+Stable\s+2", r.stdout) is not None
            ),
            "Stable, 2 members, range",
        ),
        (
            "reset while Stable",
            lambda r: "inactive" in r.stdout + r.stderr and "Stable" in r.stdout + r.stderr,
            "refused while Stable",
        ),
        ("describe Empty", lambda r: "has no active members" in r.stdout + r.stderr, "Empty group reported"),
        ("delete", lambda r: "was successful" in r.stdout, "deleted"),
        (
            "describe deleted",
            lambda r: f"GroupIdNotFoundException: Group {group} not found." in r.stdout,
            "gone (DescribeGroups v6: GROUP_ID_NOT_FOUND)",
        ),
    ]
    _expect(t, expect, problems)
    got = t.offsets.get("after reset and delete-offsets", {})
    want = {(topic_name(TOPIC), 0): 0, (topic_name(TOPIC), 1): 0}
    if got != want:
        problems.append(f"regroup: offsets after reset/delete-offsets {got}, expected {want}")


def _check_consumer_semantics(t: Transcript, group: str, problems: list[str]) -> None:
    """What the outputs must say on regroup for the consumer-protocol group, independently of Kafka."""

    def has(pattern: str) -> Callable[[Run], bool]:
        return lambda r: re.search(pattern, r.stdout, re.MULTILINE) is not None

    expect: Expectations = [
        ("list with state and type", has(rf"^{group}\s+Consumer\s+Stable\s*$"), "listed as Consumer, Stable"),
        ("list classic", lambda r: group not in r.stdout.split(), "not listed as classic"),
        (
            "describe offsets",
            has(rf"{group}\s+diff-t\s+0\s+4\s+10\s+6\s+a-member\s+/127\.0\.0\.1\s+a$"),
            "partition 0: committed 4, end 10, lag 6, owner a-member",
        ),
        (
            "describe members verbose",
            has(rf"{group}\s+b-member\s+/127\.0\.0\.1\s+b\s+1\s+(\d+)\s+diff-t:2\s+\1\s+diff-t:2\s*$"),
            "b-member owns its target assignment diff-t:2 at the target epoch",
        ),
        (
            "describe state verbose",
            has(rf"{group}\s+127\.0\.0\.1:\d+\s+\(1\)\s+uniform\s+Stable\s+(\d+)\s+\1\s+2$"),
            "Stable, uniform, target assignment at the group epoch, 2 members",
        ),
        ("reset while Stable", lambda r: "current state is Stable" in r.stdout, "refused while Stable"),
        ("describe Empty", lambda r: "has no active members" in r.stderr, "Empty group reported"),
        ("delete", lambda r: "was successful" in r.stdout, "deleted"),
        (
            "describe deleted",
            lambda r: f"GroupIdNotFoundException: Group {group} not found." in r.stdout,
            "gone (DescribeGroups v6: GROUP_ID_NOT_FOUND)",
        ),
    ]
    _expect(t, expect, problems)
    want = {(topic_name(TOPIC), 0): 4, (topic_name(TOPIC), 1): 9, (topic_name(TOPIC), 2): 7}
    if t.offsets.get("committed by the members") != want:
        problems.append(f"regroup: committed offsets {t.offsets}, expected {want}")
