"""Apache Kafka's own Java tools (the Java clients of Kafka 4.x) against ``regroup serve``: kafka-topics,
kafka-producer-perf-test (idempotent producer, acks=all), kafka-get-offsets, kafka-console-consumer in
assign mode and kafka-configs."""

from __future__ import annotations

import pytest

from broker.support import ServeProcess
from regroup import refkafka

pytestmark = [pytest.mark.interop, pytest.mark.kafka]

TOPICS = "org.apache.kafka.tools.TopicCommand"
PERF = "org.apache.kafka.tools.ProducerPerformance"
OFFSETS = "org.apache.kafka.tools.GetOffsetShell"
CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
CONFIGS = "kafka.admin.ConfigCommand"


@pytest.fixture(scope="module")
def java_tools() -> None:
    reason = refkafka.skip_reason()
    if reason is not None:
        pytest.skip(reason)


def tool(main_class: str, *args: str) -> str:
    result = refkafka.run_tool(main_class, *args, timeout=180)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def test_java_tools_round_trip(serve: ServeProcess, java_tools: None) -> None:
    bs = serve.bootstrap
    assert "Created topic java-tools." in tool(
        TOPICS, "--bootstrap-server", bs, "--create", "--topic", "java-tools", "--partitions", "3",
        "--config", "retention.ms=3600000",
    )  # fmt: skip
    described = tool(TOPICS, "--bootstrap-server", bs, "--describe", "--topic", "java-tools")
    assert "PartitionCount: 3" in described
    assert "ReplicationFactor: 1" in described
    assert "retention.ms=3600000" in described

    perf = tool(
        PERF, "--topic", "java-tools", "--num-records", "6000", "--record-size", "100", "--throughput", "-1",
        "--command-property", f"bootstrap.servers={bs}", "acks=all",
    )  # fmt: skip
    assert "6000 records sent" in perf

    listed = tool(OFFSETS, "--bootstrap-server", bs, "--topic", "java-tools").split()
    offsets = dict(line.rsplit(":", 1) for line in listed)
    assert sum(int(v) for v in offsets.values()) == 6000

    consumed = tool(
        CONSUMER, "--bootstrap-server", bs, "--topic", "java-tools", "--partition", "1",
        "--offset", "earliest", "--max-messages", "10", "--timeout-ms", "20000",
    )  # fmt: skip
    assert len(consumed.splitlines()) == 10

    configs = tool(
        CONFIGS, "--bootstrap-server", bs, "--describe", "--entity-type", "topics",
        "--entity-name", "java-tools", "--all",
    )  # fmt: skip
    expected = "retention.ms=3600000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=3600000"
    assert expected in configs

    tool(TOPICS, "--bootstrap-server", bs, "--delete", "--topic", "java-tools")
    assert "java-tools" not in tool(TOPICS, "--bootstrap-server", bs, "--list").split()
