"""Consumer-group members for the cluster's fault tests, each recording the commits its broker acknowledged:
librdkafka (confluent-kafka) in a thread, kafka-python and Kafka's Java ``VerifiableConsumer`` as processes.
Every member consumes, commits synchronously after each batch, and keeps ``(partition, offset)`` of every
commit the coordinator answered with success."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from regroup import refkafka
from regroup.testing import Cluster


@dataclass
class CommitHistory:
    name: str
    acked: list[tuple[int, int]] = field(default_factory=list)  # (partition, next offset), in ack order
    consumed: int = 0
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def commit_acked(self, partition: int, offset: int) -> None:
        with self.lock:
            self.acked.append((partition, offset))

    def commits(self) -> int:
        with self.lock:
            return len(self.acked)


class ConfluentMember:
    def __init__(
        self, bootstrap: str, topic: str, group: str, name: str, *, instance_id: str | None = None
    ) -> None:
        import confluent_kafka

        self.history = CommitHistory(name)
        config: dict[str, Any] = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": name,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 10_000,
            "heartbeat.interval.ms": 1000,
        }
        if instance_id is not None:
            config["group.instance.id"] = instance_id
            config["session.timeout.ms"] = 30_000
        self._topic = topic
        self._consumer = confluent_kafka.Consumer(config)
        self._consumer.subscribe([topic])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> ConfluentMember:
        self._thread.start()
        return self

    def _run(self) -> None:
        import confluent_kafka

        while not self._stop.is_set():
            msgs = self._consumer.consume(50, 0.2)
            batch = [m for m in msgs if not m.error()]
            if not batch:
                continue
            self.history.consumed += len(batch)
            ends: dict[int, int] = {}
            for m in batch:
                ends[m.partition()] = m.offset() + 1
            offsets = [confluent_kafka.TopicPartition(self._topic, p, o) for p, o in ends.items()]
            try:
                answered = self._consumer.commit(offsets=offsets, asynchronous=False)
            except confluent_kafka.KafkaException as exc:
                self.history.errors.append(str(exc))
                continue
            for tp in answered or []:
                if tp.error is None:
                    self.history.commit_acked(tp.partition, tp.offset)

    def stop(self) -> CommitHistory:
        self._stop.set()
        self._thread.join(60)
        # Closing a librdkafka consumer while another thread is inside commit() can block for good.
        assert not self._thread.is_alive(), (
            f"{self.history.name}: still inside poll or commit 60 s after being told to stop"
        )
        self._consumer.close()
        return self.history


class _ProcessMember:
    """A member running as its own process, reporting JSON events on its stdout."""

    def __init__(self, name: str, command: list[str]) -> None:
        self.history = CommitHistory(name)
        self._process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        self._reader = threading.Thread(target=self._read, name=name, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            self.on_event(event)

    def on_event(self, event: dict[str, Any]) -> None:
        raise NotImplementedError

    def stop(self) -> CommitHistory:
        self._process.terminate()
        try:
            self._process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(timeout=30)
        self._reader.join(30)
        if self._process.stdout is not None:
            self._process.stdout.close()
        return self.history


class KafkaPythonMember(_ProcessMember):
    """kafka-python (``kafka_python_member.py``), committing after each poll."""

    def __init__(self, bootstrap: str, topic: str, group: str, name: str) -> None:
        script = Path(__file__).with_name("kafka_python_member.py")
        super().__init__(name, [sys.executable, str(script), bootstrap, topic, group, name])

    def on_event(self, event: dict[str, Any]) -> None:
        if "consumed" in event:
            self.history.consumed += int(event["consumed"])
        elif "committed" in event:
            for partition, offset in event["committed"]:
                self.history.commit_acked(int(partition), int(offset))
        elif "error" in event:
            self.history.errors.append(str(event["error"]))


class JavaMember(_ProcessMember):
    """Kafka's ``VerifiableConsumer``: commits after each poll (``offsets_committed`` events)."""

    def __init__(self, bootstrap: str, topic: str, group: str, name: str) -> None:
        super().__init__(
            name,
            refkafka.tool_command(
                "org.apache.kafka.tools.VerifiableConsumer",
                "--topic",
                topic,
                "--group-id",
                group,
                "--bootstrap-server",
                bootstrap,
                "--session-timeout",
                "10000",
                "--reset-policy",
                "earliest",
            ),
        )

    def on_event(self, event: dict[str, Any]) -> None:
        name = event.get("name")
        if name == "records_consumed":
            self.history.consumed += int(event.get("count", 0))
        elif name == "offsets_committed":
            if event.get("success"):
                for entry in event.get("offsets", []):
                    self.history.commit_acked(int(entry["partition"]), int(entry["offset"]))
            else:
                self.history.errors.append(str(event.get("error")))


def check_commits(cluster: Cluster, group: str, topic: str, histories: list[CommitHistory]) -> None:
    """Every acknowledged commit is there: the group's committed offset of each partition is the latest
    acknowledged one or a later attempt (offsets of a partition only grow here), never less."""
    committed = cluster.committed(group)
    latest: dict[int, int] = {}
    for history in histories:
        for partition, offset in history.acked:
            latest[partition] = max(latest.get(partition, 0), offset)
    assert latest, "no commit was acknowledged"
    for partition, offset in latest.items():
        assert committed.get((topic, partition), -1) >= offset, (partition, offset, committed)


def wait_for(check: Any, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what} within {timeout} s"
        time.sleep(0.1)
