"""Real clients on the KIP-848 consumer protocol against a real ``regroup serve`` — and, as the reference
for what the scenarios expect, against the Apache Kafka broker (marker ``kafka``).

* **Rolling migration**: a classic group of three Java KafkaConsumers (``support/clients/java/
  GroupConsumer.java``; cooperative-sticky or eager range; synchronous commit after every batch and of what is
  left in ``onPartitionsRevoked``) is migrated to ``group.protocol=consumer`` one member at a time — stop a
  classic member cleanly, start a consumer-protocol one, wait until the broker shows the group converged
  (ListGroups for the type, DescribeGroups or ConsumerGroupDescribe for the members and their assignments) —
  and then back to classic the same way, while records are produced to a 12-partition topic the whole time.
  As in Apache Kafka, the first consumer-protocol member upgrades the classic group (policy
  ``bidirectional``), the remaining classic members are served through JoinGroup/SyncGroup inside the
  consumer group, and the group is downgraded when its last consumer-protocol member leaves. Every produced
  record must be processed exactly once, and the broker must report the group type classic → consumer →
  classic.
* **Regex subscription**: consumers subscribed to a regular expression — Java's
  ``subscribe(SubscriptionPattern)`` (resolved by the broker from ``SubscribedTopicRegex``), Java's
  ``subscribe(java.util.regex.Pattern)`` (resolved by the client, which sends topic names) and
  confluent-kafka's ``^regex`` (sent as ``SubscribedTopicRegex``) — form their groups, then a matching topic
  is created and produced to: they must receive its records, and none of a topic that does not match.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from regroup.client.blocking import BlockingConnection
from regroup.protocol.messages.consumer_group_describe import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
)
from regroup.protocol.messages.list_groups import ListGroupsRequest, ListGroupsResponse
from regroup.refkafka import java_available, resolve_jars, skip_reason
from support.brokers import RegroupServer, shared_kafka
from support.client_matrix import PARTITIONS, ClientProcess, Command, describe_assignment
from support.clients import CACHE
from support.kafka_wire import Address, create_topics, end_offsets, produce
from support.tools import missing

pytestmark = pytest.mark.interop

CLIENTS = Path(__file__).resolve().parents[1] / "support" / "clients"
MEMBER_TYPE = {0: "classic", 1: "consumer"}


# ------------------------------------------------------------------------------------------- brokers


@pytest.fixture(params=["regroup", pytest.param("kafka", marks=pytest.mark.kafka)])
def broker(request: pytest.FixtureRequest) -> tuple[Address, str]:
    """(address, bootstrap) of the shared regroup broker, or of the Apache Kafka reference broker (same
    coordinator settings): the scenarios hold for both."""
    if request.param == "regroup":
        server: RegroupServer = request.getfixturevalue("regroup_server")
        return server.address, server.bootstrap
    reason = skip_reason()
    if reason:
        missing(reason)
    kafka = shared_kafka().result()
    return ("127.0.0.1", kafka.port), f"127.0.0.1:{kafka.port}"


# ------------------------------------------------------------------------------------------- observing


def group_type(conn: BlockingConnection, group: str) -> str:
    """The group's type as ListGroups v5 reports it ("classic", "consumer"), "" when there is none."""
    response = conn.request(ListGroupsRequest(), ListGroupsResponse, version=5)
    return next((g.group_type for g in response.groups if g.group_id == group), "")


def consumer_group_view(conn: BlockingConnection, group: str, topic: str) -> dict[str, Any]:
    """ConsumerGroupDescribe v1: state, and per member its type, partitions of ``topic`` and whether its
    assignment equals its target assignment."""
    response = conn.request(
        ConsumerGroupDescribeRequest(group_ids=[group]), ConsumerGroupDescribeResponse, version=1
    )
    described = response.groups[0]
    if described.error_code:
        return {"state": "", "members": {}}

    def parts(assignment: Any) -> list[int]:
        return sorted(
            p for tp in assignment.topic_partitions if tp.topic_name == topic for p in tp.partitions
        )

    return {
        "state": described.group_state,
        "epoch": described.group_epoch,
        "members": {
            m.member_id: {
                "type": MEMBER_TYPE.get(m.member_type, str(m.member_type)),
                "partitions": parts(m.assignment),
                "reconciled": parts(m.assignment) == parts(m.target_assignment),
                "epoch": m.member_epoch,
                "regex": m.subscribed_topic_regex,
            }
            for m in described.members
        },
    }


def full_disjoint(assignments: list[list[int]]) -> bool:
    everything = [p for parts in assignments for p in parts]
    return sorted(everything) == list(range(PARTITIONS)) and all(assignments)


class GroupWatch:
    """Waits for group states observed through the broker, and records every group type it saw."""

    def __init__(self, address: Address, group: str, topic: str) -> None:
        self.conn = BlockingConnection(address, client_id="migration-observer")
        self.group = group
        self.topic = topic
        self.types: list[str] = []
        self.timeline: list[str] = []
        self.started = time.monotonic()

    def close(self) -> None:
        self.conn.close()

    def _type(self) -> str:
        kind = group_type(self.conn, self.group)
        if kind and (not self.types or self.types[-1] != kind):
            self.types.append(kind)
        return kind

    def snapshot(self) -> tuple[str, Any]:
        kind = self._type()
        if kind == "consumer":
            return kind, consumer_group_view(self.conn, self.group, self.topic)
        if kind == "classic":
            return kind, describe_assignment(self.conn, self.group, self.topic)
        return kind, None

    def wait(self, kind: str, classic: int, consumer: int, what: str, timeout: float = 90.0) -> None:
        """Until the group is of type ``kind``, Stable, with ``classic`` classic-protocol and ``consumer``
        consumer-protocol members, every member reconciled and the 12 partitions assigned disjointly."""
        deadline = time.monotonic() + timeout
        last: tuple[str, Any] = ("", None)
        while time.monotonic() < deadline:
            last = self.snapshot()
            if last[0] == kind and self._converged(kind, last[1], classic, consumer):
                self.timeline.append(f"{what}: {time.monotonic() - self.started:.1f}s")
                return
            time.sleep(0.2)
        raise AssertionError(f"{what}: group not converged within {timeout:g}s: {last}; {self.timeline}")

    @staticmethod
    def _converged(kind: str, view: Any, classic: int, consumer: int) -> bool:
        if kind == "classic":
            state, members = view
            return (
                consumer == 0
                and state == "Stable"
                and len(members) == classic
                and full_disjoint(list(members.values()))
            )
        members = view["members"]
        types = Counter(m["type"] for m in members.values())
        return (
            view["state"] == "Stable"
            and types == Counter({"classic": classic, "consumer": consumer}) - Counter()
            and all(m["reconciled"] for m in members.values())
            and full_disjoint([m["partitions"] for m in members.values()])
        )


def stopped_cleanly(proc: ClientProcess) -> None:
    """SIGTERM, then the client must have closed its consumer (a JVM exits with 143 after its shutdown
    hooks ran)."""
    code = proc.terminate()
    assert code in (0, 143), f"{proc.name} exited with {code}\n{proc.stderr_tail()}"
    proc.wait_event(lambda e: e.get("name") == "shutdown_complete", 5, "shutdown_complete")


def produce_retrying(
    address: Address, topic: str, records: dict[int, int], timeout: float = 30.0
) -> dict[int, int]:
    """``produce``, again while a partition has no leader yet (a just-created topic on Kafka answers
    NOT_LEADER_OR_FOLLOWER for a moment). A partial failure may leave some records appended twice: the
    checks read the log, not what was sent."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return produce(address, topic, records)
        except (AssertionError, OSError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


class Producer:
    """One record to every partition every 100 ms (acks=all) on a thread, until stopped."""

    def __init__(self, address: Address, topic: str) -> None:
        self.produced: set[tuple[int, int]] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(address, topic), daemon=True)
        self.error: BaseException | None = None
        self._thread.start()

    def _run(self, address: Address, topic: str) -> None:
        try:
            while not self._stop.is_set():
                bases = produce_retrying(address, topic, dict.fromkeys(range(PARTITIONS), 1))
                self.produced |= set(bases.items())
                self._stop.wait(0.1)
        except BaseException as exc:
            self.error = exc

    def stop(self) -> set[tuple[int, int]]:
        self._stop.set()
        self._thread.join(30)
        if self.error is not None:
            raise self.error
        return self.produced


# ------------------------------------------------------------------------------------------ Java client


@functools.cache
def group_consumer_classes() -> Path:
    """GroupConsumer.java compiled against the cached Kafka client jars (cached by source hash)."""
    javac = shutil.which("javac")
    if javac is None:
        missing("javac (a JDK 17+) not found")
    source = CLIENTS / "java" / "GroupConsumer.java"
    jars = resolve_jars()
    out = CACHE / f"groupconsumer-{hashlib.sha256(source.read_bytes()).hexdigest()[:16]}"
    if (out / "GroupConsumer.class").is_file():
        return out
    staging = out.with_name(f"{out.name}.tmp{os.getpid()}")
    staging.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [javac, "-d", str(staging), "-cp", str(jars / "*"), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"javac GroupConsumer.java failed:\n{done.stderr}"
    with contextlib.suppress(OSError):
        staging.rename(out)
    shutil.rmtree(staging, ignore_errors=True)
    return out


def java_consumer(**options: str) -> Command:
    """A GroupConsumer JVM (``bootstrap=``, ``group=``, ``protocol=``, ``topic=``/``regex=``/``pattern=``,
    ``assignor=``: see GroupConsumer.java)."""
    reason = skip_reason()
    if reason or not java_available():
        missing(reason or "Java 17+ not found")
    jars = resolve_jars()
    argv = [
        "java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
        f"-Dlog4j2.configurationFile={jars / 'log4j2-tools.xml'}",
        "-cp", f"{jars / '*'}:{group_consumer_classes()}", "GroupConsumer",
        *(f"{key}={value}" for key, value in options.items()),
    ]  # fmt: skip
    return Command(argv)


# ----------------------------------------------------------------------------------- rolling migration


@pytest.mark.parametrize("classic_assignor", ["cooperative-sticky", "range"])
def test_rolling_migration_of_java_consumers_classic_to_consumer_and_back(
    broker: tuple[Address, str], tmp_path: Path, classic_assignor: str
) -> None:
    address, bootstrap = broker
    topic = group = f"migrate-{uuid.uuid4().hex[:6]}"
    create_topics(address, {topic: PARTITIONS})
    members: list[ClientProcess] = []
    watch = GroupWatch(address, group, topic)

    def start(name: str, protocol: str) -> ClientProcess:
        assignor = "uniform" if protocol == "consumer" else classic_assignor
        command = java_consumer(
            bootstrap=bootstrap, group=group, protocol=protocol, topic=topic, assignor=assignor, client=name
        )
        proc = ClientProcess(name, command, tmp_path)
        members.append(proc)
        return proc

    def consuming(proc: ClientProcess) -> None:
        proc.wait_event(lambda e: e.get("name") == "records_consumed", 60, "records")

    producer = Producer(address, topic)
    try:
        classic = [start(f"classic-{i}", "classic") for i in range(3)]
        watch.wait("classic", 3, 0, "3 classic members")
        for proc in classic:
            consuming(proc)
        # Upgrade one member at a time: the first consumer-protocol member converts the group.
        upgraded: list[ClientProcess] = []
        for i, old in enumerate(classic):
            stopped_cleanly(old)
            watch.wait("classic" if i == 0 else "consumer", 2 - i, i, f"{old.name} left")
            upgraded.append(start(f"consumer-{i}", "consumer"))
            watch.wait("consumer", 2 - i, i + 1, f"consumer-{i} joined")
            consuming(upgraded[-1])
        # And back: the group downgrades when its last consumer-protocol member leaves.
        for i, old in enumerate(upgraded):
            stopped_cleanly(old)
            watch.wait("consumer" if i < 2 else "classic", i, 2 - i, f"{old.name} left")
            new = start(f"classic-again-{i}", "classic")
            watch.wait("consumer" if i < 2 else "classic", i + 1, 2 - i, f"{new.name} joined")
            consuming(new)
        produced = producer.stop()
        ends = end_offsets(address, topic, range(PARTITIONS))
        log = {(p, o) for p in range(PARTITIONS) for o in range(ends[p])}

        def drained() -> bool:
            return log <= {(p, o) for m in members for p, o, _ts in m.consumed()}

        deadline = time.monotonic() + 60
        while not drained() and time.monotonic() < deadline:
            time.sleep(0.2)
        for proc in members:
            if proc.proc.poll() is None:
                stopped_cleanly(proc)
    finally:
        with contextlib.suppress(BaseException):
            producer.stop()
        for proc in members:
            if proc.proc.poll() is None:
                proc.kill()
        watch.close()

    consumed = Counter((p, o) for m in members for p, o, _ts in m.consumed())
    owners: dict[tuple[int, int], list[str]] = {}
    for m in members:
        for p, o, _ts in m.consumed():
            owners.setdefault((p, o), []).append(m.name)
    twice = sorted(k for k, n in consumed.items() if n > 1)
    missed = sorted(log - set(consumed))
    assert produced <= log, f"acknowledged records missing from the log: {sorted(produced - log)[:5]}"
    assert len(log) >= 12 * PARTITIONS, f"too few records produced ({len(log)})"
    assert not missed, f"{len(missed)} of {len(log)} never processed, e.g. {missed[:5]}; {watch.timeline}"
    assert not twice, (
        f"{len(twice)} processed twice, e.g. {[(k, owners[k]) for k in twice[:5]]}; {watch.timeline}"
    )
    assert watch.types == ["classic", "consumer", "classic"], watch.timeline


# -------------------------------------------------------------------------------- regex subscriptions


def confluent_regex_command(bootstrap: str, group: str, regex: str) -> Command:
    probe = subprocess.run(
        [sys.executable, "-c", "import confluent_kafka; print(confluent_kafka.libversion()[0])"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    version = probe.stdout.strip()
    if probe.returncode != 0:
        missing("confluent-kafka is not installed (pip install -e '.[test]')")
    numbers = tuple(int(n) for n in version.split(".")[:2])
    if numbers < (2, 12):
        missing(f"librdkafka {version} predates the KIP-848 consumer protocol (GA in 2.12)")
    return Command([sys.executable, str(CLIENTS / "confluent_regex.py"), bootstrap, group, regex])


def records_of(proc: ClientProcess, topic: str) -> Counter[tuple[int, int]]:
    """How often the client processed each (partition, offset) of ``topic``."""
    return Counter(
        (int(p["partition"]), o)
        for e in proc.snapshot()
        if e.get("name") == "records_consumed"
        for p in e["partitions"]
        if p["topic"] == topic
        for o in range(int(p["minOffset"]), int(p["maxOffset"]) + 1)
    )


def topics_seen(proc: ClientProcess) -> set[str]:
    return {
        str(p["topic"])
        for e in proc.snapshot()
        if e.get("name") == "records_consumed"
        for p in e["partitions"]
    }


REGEX_CLIENTS: dict[str, Callable[[str, str, str], Command]] = {
    "java-subscription-pattern": lambda b, g, prefix: java_consumer(
        bootstrap=b, group=g, regex=f"{prefix}-.*"
    ),
    "java-pattern": lambda b, g, prefix: java_consumer(bootstrap=b, group=g, pattern=f"{prefix}-.*"),
    "confluent-kafka": lambda b, g, prefix: confluent_regex_command(b, g, f"^{prefix}-.*"),
}


@pytest.fixture
def regex_prefix() -> str:
    return f"rx{uuid.uuid4().hex[:6]}"


@pytest.mark.parametrize("client", list(REGEX_CLIENTS))
def test_regex_subscription_picks_up_a_topic_created_later(
    broker: tuple[Address, str], tmp_path: Path, client: str, regex_prefix: str
) -> None:
    address, bootstrap = broker
    first, later, other = f"{regex_prefix}-first", f"{regex_prefix}-later", f"x{regex_prefix}-other"
    group = f"{regex_prefix}-group"
    create_topics(address, {first: 3, other: 1})
    produce_retrying(address, first, {0: 5, 1: 5, 2: 5})
    produce_retrying(address, other, {0: 5})
    command = REGEX_CLIENTS[client](bootstrap, group, regex_prefix)
    proc = ClientProcess(client, command, tmp_path)
    conn = BlockingConnection(address, client_id="regex-observer")

    def wait_records(topic: str, partitions: int, what: str) -> None:
        """Until the client processed every record in the log of ``topic``."""
        ends = end_offsets(address, topic, range(partitions))
        expected = {(p, o) for p in range(partitions) for o in range(ends[p])}
        deadline = time.monotonic() + 90
        while set(records_of(proc, topic)) != expected:
            if time.monotonic() > deadline or proc.proc.poll() is not None:
                raise AssertionError(
                    f"{what}: got {sorted(records_of(proc, topic))} of {topic}\n{proc.stderr_tail()}\n"
                    f"{consumer_group_view(conn, group, topic)}"
                )
            time.sleep(0.2)

    try:
        wait_records(first, 3, "the group formed on the first matching topic")
        view = consumer_group_view(conn, group, first)
        assert view["state"] == "Stable", view
        [member] = view["members"].values()
        assert member["type"] == "consumer", view
        if client != "java-pattern":  # subscribe(Pattern) resolves the pattern in the client
            assert member["regex"] is not None, view
            assert regex_prefix in member["regex"], view

        create_topics(address, {later: 2})
        produce_retrying(address, later, {0: 4, 1: 4})
        wait_records(later, 2, "the topic created later")
        produce_retrying(address, later, {0: 1})
        wait_records(later, 2, "a record produced later")
        later_view = consumer_group_view(conn, group, later)
        [member] = later_view["members"].values()
        assert member["partitions"] == [0, 1], later_view
        stopped_cleanly(proc)
    finally:
        if proc.proc.poll() is None:
            proc.kill()
        conn.close()
    assert topics_seen(proc) == {first, later}, topics_seen(proc)
    assert max(records_of(proc, first).values()) == 1, "records of the first topic delivered twice"
    assert max(records_of(proc, later).values()) == 1, "records of the later topic delivered twice"
