"""Kafka's own ``kafka-consumer-groups.sh`` (``ConsumerGroupCommand``) against regroup, side by side with the
reference broker: the same group history on both, the same commands (list, describe offsets/members/state,
reset offsets while Stable (refused) and Empty, delete offsets, delete the group), and the outputs compared
line by line after normalising member-id UUIDs, ports and column padding."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from differential.dsl import Context, E, commit, form_group, heartbeat, leave, topic_name
from differential.harness import start_pair
from regroup.client.blocking import BlockingConnection
from regroup.refkafka import CONSUMER_GROUPS_COMMAND, kafka_version, run_tool, skip_reason
from support import compat_report
from support.kafka_wire import Address, committed_offsets, create_topics, produce
from support.normalize import UUID_SUFFIX
from support.tools import missing

TOPIC = "t"  # the differential topic names: diff-t has 3 partitions
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


def _script(address: Address, group: str, bootstrap: str) -> Transcript:
    """The same history and commands on one broker."""
    out = Transcript()
    ctx = Context(address, group)
    stop = threading.Event()
    topic = topic_name(TOPIC)

    def tool(name: str, *args: str) -> Run:
        done = run_tool(CONSUMER_GROUPS_COMMAND, "--bootstrap-server", bootstrap, *args, timeout=120)
        run = Run(name, list(args), done.stdout, done.stderr, done.returncode)
        out.runs.append(run)
        return run

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


# Tool outputs that legitimately differ, with the reason.
ACCEPTED = {
    "describe deleted": (
        "the 4.x Admin client describes groups with ConsumerGroupDescribe (KIP-848) when the broker "
        'advertises it: Kafka answers GROUP_ID_NOT_FOUND ("Group g not found."); regroup implements the '
        "classic protocol only, so the client falls back to DescribeGroups, where an unknown group is Dead, "
        "and the tool prints its classic \"Consumer group 'g' does not exist.\""
    ),
}
compat_report.add_section(
    "Documented kafka-consumer-groups.sh output differences",
    lambda: "\n".join(f"- **{name}**: {reason}" for name, reason in ACCEPTED.items()),
)


@pytest.mark.interop
@pytest.mark.kafka
def test_consumer_groups_command_matches_kafka() -> None:
    reason = skip_reason()
    if reason:
        missing(reason)
    started = time.monotonic()
    pair = start_pair()
    group = f"cgc-{int(time.time() * 1000) % 10**8}"
    results: dict[str, Transcript | BaseException] = {}

    def run(name: str, address: Address, bootstrap: str) -> None:
        try:
            results[name] = _script(address, group, bootstrap)
        except BaseException as exc:  # re-raised below
            results[name] = exc

    for address in pair.addresses.values():
        create_topics(address, {topic_name(TOPIC): 3})
        produce(address, topic_name(TOPIC), {0: 10, 1: 20, 2: 30})
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

    problems: list[str] = []
    checks: dict[str, str] = {}
    for k, r in zip(kafka.runs, regroup.runs, strict=True):
        k_lines = _relevant(_normalise(k.stdout) + ["stderr: " + x for x in _normalise(k.stderr)], group)
        r_lines = _relevant(_normalise(r.stdout) + ["stderr: " + x for x in _normalise(r.stderr)], group)
        if (k_lines != r_lines or k.code != r.code) and k.name in ACCEPTED:
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
        problems.append(
            f"committed offsets after the resets differ: kafka={kafka.offsets} regroup={regroup.offsets}"
        )
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


def _relevant(lines: list[str], group: str) -> list[str]:
    """``--list`` prints every group of the (shared) broker: keep this test's group only."""
    return [line for line in lines if not _is_other_group(line, group)]


def _is_other_group(line: str, group: str) -> bool:
    first = line.split(" ", 1)[0]
    return bool(first) and " " not in line and first != group


def _check_semantics(t: Transcript, group: str, problems: list[str]) -> None:
    """What the outputs must say on regroup, independently of Kafka."""
    by_name: dict[str, Run] = {r.name: r for r in t.runs}
    expect: list[tuple[str, Callable[[Run], bool], str]] = [
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
        ("describe deleted", lambda r: "does not exist" in r.stdout + r.stderr, "gone"),
    ]
    for name, ok, what in expect:
        if name in by_name and not ok(by_name[name]):
            problems.append(
                f"regroup, {name}: expected {what}:\n{by_name[name].stdout}\n{by_name[name].stderr[-2000:]}"
            )
    got = t.offsets.get("after reset and delete-offsets", {})
    want = {(topic_name(TOPIC), 0): 0, (topic_name(TOPIC), 1): 0}
    if got != want:
        problems.append(f"regroup: offsets after reset/delete-offsets {got}, expected {want}")
