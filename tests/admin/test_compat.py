"""``regroup groups`` against Kafka's own kafka-consumer-groups.sh (Kafka 4.3 tools jars), on the same
broker and the same groups (classic ones and a KIP-848 consumer-protocol group): Apache Kafka, and
regroup's broker once its group coordinator serves DescribeGroups. Outputs must be identical (stdout byte
for byte, stderr after dropping Kafka's log prefixes and stack traces), as must exit codes.

Kafka's tool runs through ``KafkaToolBatch.java``, which executes many commands in one JVM (one JVM per
command where no ``javac`` is available).
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from regroup import refkafka
from regroup.admin.cli import main
from regroup.protocol.api_keys import ApiKey

pytestmark = pytest.mark.kafka

TOPICS = {"orders": 3, "audit": 1, "empty": 2}
RECORDS = {("orders", 0): 30, ("orders", 1): 20, ("orders", 2): 10, ("audit", 0): 5}
IDLE = {"idle": [("orders", 0, 3), ("orders", 1, 20), ("audit", 0, 2)], "other idle": [("audit", 0, 1)]}

# The tools' log4j2 setup, except that the appender follows System.setErr (KafkaToolBatch captures it).
LOG4J2 = """<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="WARN">
  <Appenders>
    <Console name="err" target="SYSTEM_ERR" follow="true">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
    </Console>
  </Appenders>
  <Loggers><Root level="WARN"><AppenderRef ref="err"/></Root></Loggers>
</Configuration>
"""


def regroup_serves_groups() -> bool:
    try:
        from regroup.broker.handlers import default_registry
    except ImportError:
        return False
    return any(key == ApiKey.DESCRIBE_GROUPS for key, *_ in default_registry().ranges())


@dataclass
class Run:
    code: int
    out: str
    err: str


@dataclass
class KafkaTool:
    """kafka-consumer-groups.sh from the cached Kafka jars."""

    java: str
    jars: Path
    classes: Path | None
    log_config: Path

    def run(self, bootstrap: str, commands: Sequence[Sequence[str]]) -> list[Run]:
        if self.classes is None:
            runs = []
            for args in commands:
                done = refkafka.run_tool(
                    refkafka.CONSUMER_GROUPS_COMMAND, "--bootstrap-server", bootstrap, *args
                )
                runs.append(Run(done.returncode, done.stdout, _kafka_stderr(done.stderr)))
            return runs
        lines = "".join("\t".join(["--bootstrap-server", bootstrap, *args]) + "\n" for args in commands)
        done = subprocess.run(
            [
                self.java, "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                "-Djava.awt.headless=true", f"-Dlog4j2.configurationFile={self.log_config}",
                "-cp", f"{self.jars / '*'}{os.pathsep}{self.classes}", "KafkaToolBatch",
            ],
            input=lines, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        results = done.stdout.splitlines()
        assert len(results) == len(commands), done.stderr
        runs = []
        for result in results:
            code, out, err = result.split("\t")
            runs.append(Run(int(code), _decode(out), _kafka_stderr(_decode(err))))
        return runs


def _decode(text: str) -> str:
    return base64.b64decode(text).decode()


def _jdk_tool(name: str) -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / name).exists():
        return str(Path(home) / "bin" / name)
    return shutil.which(name)


@pytest.fixture(scope="session")
def kafka_tool(tmp_path_factory: pytest.TempPathFactory) -> KafkaTool:
    reason = refkafka.skip_reason()
    if reason is not None:
        pytest.skip(reason)
    jars = refkafka.resolve_jars()
    work = tmp_path_factory.mktemp("kafka-tool")
    log_config = work / "log4j2.xml"
    log_config.write_text(LOG4J2)
    javac = _jdk_tool("javac")
    classes = None
    if javac is not None:
        classes = work / "classes"
        source = Path(__file__).with_name("KafkaToolBatch.java")
        compiled = subprocess.run(
            [javac, "-cp", str(jars / "*"), "-d", str(classes), str(source)],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert compiled.returncode == 0, compiled.stderr
    return KafkaTool(_jdk_tool("java") or "java", jars, classes, log_config)


@dataclass
class Cluster:
    kind: str
    bootstrap: str
    produced_at: int
    tool: KafkaTool

    def kafka(self, *args: str) -> Run:
        return self.tool.run(self.bootstrap, [args])[0]

    def kafka_batch(self, commands: Sequence[Sequence[str]]) -> list[Run]:
        return self.tool.run(self.bootstrap, commands)

    def regroup(self, *args: str) -> Run:
        out, err = io.StringIO(), io.StringIO()
        code = main(["--bootstrap-server", self.bootstrap, *args], out=out, err=err)
        return Run(code, out.getvalue(), err.getvalue())


_LOG_LINE = re.compile(r"^\[\d{4}-\d\d-\d\d [\d:,]+\] (\w+) (.*?)(?: \([\w.$]+\))?$")
_TRACE = re.compile(r"^(\s+at |\s*\.\.\. \d+ more|Caused by: |[\w.$]+(Exception|Error)(: |$))")


def _kafka_stderr(text: str) -> str:
    """Kafka's stderr as regroup prints it: log lines without timestamp and logger, no stack traces."""
    lines = []
    for line in text.splitlines():
        if _TRACE.match(line):
            continue
        m = _LOG_LINE.match(line)
        lines.append(f"{m.group(1)} {m.group(2)}" if m else line)
    return "".join(f"{line}\n" for line in lines)


# ------------------------------------------------------------------------------------ setup


def _create_and_fill(bootstrap: str) -> int:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(t, n, 1) for t, n in TOPICS.items()]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    # Recent timestamps (retention keeps them), one second apart: offset o of a partition with n records
    # is stamped base - (n - o) seconds.
    base = int(time.time() * 1000) // 1000 * 1000
    for (topic, partition), count in RECORDS.items():
        for offset in range(count):
            producer.produce(topic, b"x", partition=partition, timestamp=base - (count - offset) * 1000)
    assert producer.flush(30) == 0
    return base


# COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR
_COORDINATOR_NOT_READY = {14, 15, 16}


def commit(bootstrap: str, group: str, offsets: Sequence[tuple[str, int, int]]) -> None:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    deadline = time.monotonic() + 60
    try:
        while True:
            try:
                consumer.commit(offsets=[TopicPartition(t, p, o) for t, p, o in offsets], asynchronous=False)
                return
            except KafkaException as exc:
                # A broker that has just started may still be creating or loading __consumer_offsets:
                # NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS are retriable, as for any client.
                if exc.args[0].code() not in _COORDINATOR_NOT_READY or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    finally:
        consumer.close()


def _start_active_group(bootstrap: str) -> Callable[[], None]:
    """Two members of group 'active' (one static) polling in a thread; member 0 commits offset 1."""
    from confluent_kafka import Consumer, TopicPartition

    consumers: list[Any] = []
    for i in range(2):
        conf = {
            "bootstrap.servers": bootstrap,
            "group.id": "active",
            "client.id": f"client-{i}",
            "enable.auto.commit": False,
            "auto.offset.reset": "latest",
            "session.timeout.ms": 10000,
            "partition.assignment.strategy": "range",
        }
        if i == 0:
            conf["group.instance.id"] = "static-0"
        consumer = Consumer(conf)
        consumer.subscribe(["orders", "audit"])
        consumers.append(consumer)
    stop = threading.Event()
    ready = threading.Event()
    failure: list[BaseException] = []

    def poll() -> None:
        try:
            committed = False
            while not stop.is_set():
                for c in consumers:
                    c.poll(0.05)
                if not committed and all(c.assignment() for c in consumers):
                    first = consumers[0]
                    first.commit(
                        offsets=[TopicPartition(p.topic, p.partition, 1) for p in first.assignment()],
                        asynchronous=False,
                    )
                    committed = True
                    ready.set()
        except BaseException as exc:
            failure.append(exc)
            ready.set()
        finally:
            for c in consumers:
                c.close()

    thread = threading.Thread(target=poll, name="active-group", daemon=True)
    thread.start()
    if not ready.wait(60) or failure:
        stop.set()
        thread.join(30)
        raise RuntimeError(f"group 'active' did not stabilise: {failure}")

    def stop_consumers() -> None:
        stop.set()
        thread.join(30)

    return stop_consumers


def _start_consumer_protocol_group(bootstrap: str) -> Callable[[], None]:
    """Two KIP-848 members (``group.protocol=consumer``) of group 'modern' polling in a thread; once
    both have partitions, each commits offset 2 for every partition it was given."""
    from confluent_kafka import Consumer, TopicPartition

    consumers: list[Any] = []
    for i in range(2):
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "modern",
                "group.protocol": "consumer",
                "client.id": f"modern-{i}",
                "enable.auto.commit": False,
                "auto.offset.reset": "latest",
            }
        )
        consumer.subscribe(["orders", "audit"])
        consumers.append(consumer)
    stop = threading.Event()
    ready = threading.Event()
    failure: list[BaseException] = []

    def poll() -> None:
        try:
            committed = False
            while not stop.is_set():
                for c in consumers:
                    c.poll(0.05)
                if not committed and all(c.assignment() for c in consumers):
                    for c in consumers:
                        offsets = [TopicPartition(p.topic, p.partition, 2) for p in c.assignment()]
                        c.commit(offsets=offsets, asynchronous=False)
                    committed = True
                    ready.set()
        except BaseException as exc:
            failure.append(exc)
            ready.set()
        finally:
            for c in consumers:
                c.close()

    thread = threading.Thread(target=poll, name="modern-group", daemon=True)
    thread.start()
    if not ready.wait(60) or failure:
        stop.set()
        thread.join(30)
        raise RuntimeError(f"group 'modern' did not get its assignment: {failure}")

    def stop_consumers() -> None:
        stop.set()
        thread.join(30)

    return stop_consumers


def _wait_reconciled(cluster: Cluster) -> None:
    """Group 'modern' Stable, each member owning its whole target assignment at the target epoch (a
    reconciling member would change the outputs between Kafka's tool and regroup's)."""
    deadline = time.monotonic() + 60
    doc: dict[str, Any] = {}
    while time.monotonic() < deadline:
        out = cluster.regroup("--describe", "--group", "modern", "--members", "--output", "json").out
        doc = json.loads(out)["groups"][0]
        members = doc.get("members") or []
        if (
            doc["state"] == "Stable"
            and len(members) == 2
            and all(m["assignment"] and m["assignment"] == m["target_assignment"] for m in members)
            and all(m["current_epoch"] == m["target_epoch"] for m in members)
        ):
            return
        time.sleep(0.2)
    raise AssertionError(f"group 'modern' is not reconciled on {cluster.kind}: {doc}")


def _wait_stable(cluster: Cluster) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        out = cluster.regroup("--describe", "--group", "active", "--state").out
        if " Stable " in out and out.rstrip().endswith(" 2"):
            return
        time.sleep(0.2)
    raise AssertionError(f"group 'active' is not Stable with 2 members on {cluster.kind}")


@pytest.fixture(scope="module", params=["kafka", "regroup"])
def broker(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, kafka_tool: KafkaTool
) -> Iterator[Cluster]:
    with contextlib.ExitStack() as stack:
        if request.param == "kafka":
            ref = refkafka.KafkaReference()
            ref.start()
            stack.callback(ref.stop)
            bootstrap = ref.bootstrap_servers
        else:
            if not regroup_serves_groups():
                pytest.skip("regroup's broker does not serve DescribeGroups yet")
            from broker.support import BrokerThread

            thread = BrokerThread(
                tmp_path_factory.mktemp("regroup") / "data",
                group_initial_rebalance_delay_ms=0,
                group_min_session_timeout_ms=1000,
                offsets_topic_num_partitions=5,
            ).start()
            stack.callback(thread.stop)
            bootstrap = thread.bootstrap
        produced_at = _create_and_fill(bootstrap)
        for group, offsets in IDLE.items():
            commit(bootstrap, group, offsets)
        stack.callback(_start_active_group(bootstrap))
        stack.callback(_start_consumer_protocol_group(bootstrap))
        cluster = Cluster(request.param, bootstrap, produced_at, kafka_tool)
        _wait_stable(cluster)
        _wait_reconciled(cluster)
        yield cluster


# ------------------------------------------------------------------------------------ read-only comparisons


def _datetime(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}"


def read_only_commands(produced_at: int) -> dict[str, list[str]]:
    # Records 5 seconds before the last one: orders-0 offset 25, orders-1 offset 15, orders-2 offset 5.
    five_seconds_earlier = _datetime(produced_at - 5000)
    reset = ["--reset-offsets", "--group", "idle"]
    return {
        "list": ["--list"],
        "list-state-type": ["--list", "--state", "--type"],
        "list-stable": ["--list", "--state", "Stable"],
        "describe-offsets": ["--describe", "--group", "active", "--group", "idle", "--group", "other idle"],
        "describe-members": ["--describe", "--group", "active", "--group", "idle", "--members"],
        "describe-members-verbose": ["--describe", "--group", "active", "--members", "--verbose"],
        "describe-state": ["--describe", "--all-groups", "--state"],
        "describe-state-verbose": ["--describe", "--group", "active", "--state", "--verbose"],
        "reset-earliest-export": [*reset, "--all-topics", "--to-earliest", "--dry-run", "--export"],
        "reset-refused-and-clamped": [
            *reset, "--group", "active", "--group", "other idle", "--topic", "orders", "--to-offset", "25",
            "--dry-run",
        ],
        "reset-datetime": [
            *reset, "--topic", "orders:0,1", "--topic", "audit", "--topic", "empty", "--to-datetime",
            five_seconds_earlier, "--dry-run",
        ],
        "reset-shift-export": [
            *reset, "--group", "other idle", "--all-topics", "--shift-by", "-1", "--dry-run", "--export",
        ],
        "reset-current": [
            "--reset-offsets", "--group", "fresh", "--topic", "orders", "--to-current", "--dry-run",
        ],
        # the KIP-848 group 'modern' (ConsumerGroupDescribe), alone and next to the classic 'active'
        "list-consumer": ["--list", "--type", "consumer"],
        "list-classic-state": ["--list", "--type", "classic", "--state"],
        "list-stable-consumer": ["--list", "--state", "Stable", "--type", "Consumer"],
        "describe-modern-offsets": ["--describe", "--group", "modern", "--group", "active"],
        "describe-modern-offsets-verbose": ["--describe", "--group", "modern", "--offsets", "--verbose"],
        "describe-modern-members": ["--describe", "--group", "modern", "--members"],
        "describe-modern-members-verbose": [
            "--describe", "--group", "modern", "--group", "active", "--members", "--verbose",
        ],
        "describe-modern-state": ["--describe", "--group", "modern", "--state"],
        "describe-modern-state-verbose": [
            "--describe", "--group", "modern", "--group", "active", "--state", "--verbose",
        ],
        "reset-refused-modern": [*reset, "--group", "modern", "--all-topics", "--to-earliest", "--dry-run"],
        "delete-offsets-subscribed": [
            "--delete-offsets", "--group", "active", "--topic", "orders:0", "--topic", "nowhere",
        ],
        "usage-shift-without-offset": [*reset, "--topic", "orders", "--shift-by", "1"],
    }  # fmt: skip


@pytest.fixture(scope="module")
def kafka_runs(broker: Cluster) -> dict[str, Run]:
    """Kafka's tool for every read-only command, in one batch."""
    commands = read_only_commands(broker.produced_at)
    return dict(zip(commands, broker.kafka_batch(list(commands.values())), strict=True))


@pytest.mark.parametrize("name", list(read_only_commands(0)))
def test_same_output_as_kafka(broker: Cluster, kafka_runs: dict[str, Run], name: str) -> None:
    theirs = kafka_runs[name]
    ours = broker.regroup(*read_only_commands(broker.produced_at)[name])
    assert ours.code == theirs.code
    assert ours.out == theirs.out
    if name.startswith("usage-"):
        # The messages match; the option table after them is laid out differently.
        assert _before(ours.err, "usage: ") == _before(theirs.err, "Option  ")
    else:
        assert ours.err == theirs.err


def test_describe_shows_the_groups_as_set_up(broker: Cluster) -> None:
    out = broker.regroup("--describe", "--group", "active", "--group", "idle").out
    rows = {tuple(line.split()[:6]) for line in out.splitlines() if line.startswith(("active ", "idle "))}
    assert ("idle", "orders", "0", "3", "30", "27") in rows
    assert ("idle", "audit", "0", "2", "5", "3") in rows
    active = [r for r in rows if r[0] == "active"]
    assert len(active) == 4
    assert sum(r[3] == "1" for r in active) >= 1


def test_unknown_group_message(broker: Cluster) -> None:
    # Both brokers serve DescribeGroups v6 (KIP-1043): the unknown group is GROUP_ID_NOT_FOUND, which both
    # tools report through their generic failure path (stdout, exit code 0).
    theirs = broker.kafka("--describe", "--group", "missing")
    ours = broker.regroup("--describe", "--group", "missing")
    assert (ours.code, theirs.code) == (0, 0)
    assert (
        ours.out
        == theirs.out
        == (
            "\nError: Executing consumer group command failed due to "
            "org.apache.kafka.common.errors.GroupIdNotFoundException: Group missing not found.\n"
        )
    )
    assert ours.err == theirs.err


def test_consumer_protocol_group_json(broker: Cluster) -> None:
    """regroup's own ``--output json`` for the KIP-848 group says what the tables say."""
    listed = json.loads(broker.regroup("--list", "--type", "--output", "json").out)["groups"]
    modern = next(g for g in listed if g["group"] == "modern")
    assert (modern["type"], modern["protocol_type"]) == ("Consumer", "consumer")
    members = json.loads(
        broker.regroup("--describe", "--group", "modern", "--members", "--output", "json").out
    )
    (group,) = members["groups"]
    assert (group["group"], group["state"], group["error"]) == ("modern", "Stable", None)
    table = broker.regroup("--describe", "--group", "modern", "--members", "--verbose").out
    rows = {line.split()[1]: line.split()[2:] for line in table.splitlines()[2:] if line.strip()}
    assert len(group["members"]) == len(rows) == 2
    owned = []
    for m in group["members"]:
        parts = ";".join(f"{a['topic']}:{','.join(map(str, a['partitions']))}" for a in m["assignment"])
        host, client, count, current_epoch, current, target_epoch, target = rows[m["consumer_id"]]
        assert (m["host"], m["client_id"], m["partitions"]) == (host, client, int(count))
        assert (m["current_epoch"], m["target_epoch"]) == (int(current_epoch), int(target_epoch))
        assert parts == current == target
        assert m["group_instance_id"] is None
        owned += [(a["topic"], p) for a in m["assignment"] for p in a["partitions"]]
    assert sorted(owned) == [("audit", 0), ("orders", 0), ("orders", 1), ("orders", 2)]
    state = json.loads(broker.regroup("--describe", "--group", "modern", "--state", "--output", "json").out)
    (info,) = state["groups"]
    assert (info["state"], info["assignment_strategy"], info["members"]) == ("Stable", "uniform", 2)
    assert info["group_epoch"] == info["target_assignment_epoch"] == group["members"][0]["target_epoch"]
    offsets = json.loads(broker.regroup("--describe", "--group", "modern", "--output", "json").out)
    committed = {
        (p["topic"], p["partition"]): p["current_offset"] for p in offsets["groups"][0]["partitions"]
    }
    assert committed == dict.fromkeys(owned, 2)


def _before(text: str, marker: str) -> str:
    return text[: text.index(marker)]


# ------------------------------------------------------------------------------------ changing comparisons


def _compare_after_setup(broker: Cluster, setup: Callable[[], None], *args: str) -> tuple[Run, Run]:
    setup()
    theirs = broker.kafka(*args)
    setup()
    ours = broker.regroup(*args)
    assert ours.code == theirs.code
    assert ours.out == theirs.out
    assert ours.err == theirs.err
    return ours, theirs


def test_delete_groups(broker: Cluster) -> None:
    def setup() -> None:
        commit(broker.bootstrap, "doomed-1", [("audit", 0, 1)])
        commit(broker.bootstrap, "doomed-2", [("orders", 2, 4)])

    ours, _ = _compare_after_setup(
        broker,
        setup,
        "--delete",
        "--group",
        "doomed-1",
        "--group",
        "active",
        "--group",
        "missing",
        "--group",
        "doomed-2",
    )
    assert "These consumer groups were deleted successfully: " in ours.out
    assert "GroupNotEmptyException" in ours.out
    assert "doomed-1" not in broker.regroup("--list").out.split()


def test_delete_offsets(broker: Cluster) -> None:
    def setup() -> None:
        commit(broker.bootstrap, "trimmed", [("audit", 0, 1), ("orders", 1, 2), ("orders", 2, 3)])

    ours, _ = _compare_after_setup(
        broker, setup, "--delete-offsets", "--group", "trimmed", "--topic", "audit", "--topic", "orders:1,9",
        "--topic", "missing-topic",
    )  # fmt: skip
    assert ours.out.startswith("\nError: Encountered some partition-level error")
    remaining = broker.regroup("--describe", "--group", "trimmed").out
    assert [line.split()[1:3] for line in remaining.splitlines()[2:]] == [["orders", "2"]]


def test_reset_execute_commits_the_same_offsets(broker: Cluster, tmp_path: Path) -> None:
    plan = tmp_path / "plan.csv"
    plan.write_text("orders,0,7\norders,1,99\naudit,0,0\n")
    args = ("--reset-offsets", "--group", "rewound", "--from-file", str(plan), "--execute")

    def reset_with(tool: Callable[..., Run]) -> tuple[Run, str]:
        commit(broker.bootstrap, "rewound", [("orders", 0, 29), ("audit", 0, 4)])
        return tool(*args), broker.regroup("--describe", "--group", "rewound").out

    theirs, after_theirs = reset_with(broker.kafka)
    ours, after_ours = reset_with(broker.regroup)
    assert (ours.code, ours.out, ours.err) == (theirs.code, theirs.out, theirs.err)
    assert after_ours == after_theirs
    rows = {tuple(line.split()[1:4]) for line in after_ours.splitlines()[2:]}
    assert rows == {("orders", "0", "7"), ("orders", "1", "20"), ("audit", "0", "0")}
