"""The Apache Kafka reference broker harness: jar cache, startup, readiness, tools and cleanup."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from regroup import refkafka
from regroup.refkafka import CONSUMER_GROUPS_COMMAND, TEST_BROKER_CONFIG, KafkaReference, RefKafkaError

API_VERSIONS = 18
JOIN_GROUP = 11
CONSUMER_GROUP_HEARTBEAT = 68


def _skip_without_java_or_maven() -> None:
    reason = refkafka.skip_reason()
    if reason is not None:
        pytest.skip(reason)


@pytest.fixture(scope="module")
def kafka() -> Iterator[KafkaReference]:
    _skip_without_java_or_maven()
    with KafkaReference() as ref:
        yield ref


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_test_broker_config_mirrors_regroup_test_settings() -> None:
    assert TEST_BROKER_CONFIG["group.initial.rebalance.delay.ms"] == "0"
    assert TEST_BROKER_CONFIG["offsets.topic.num.partitions"] == "5"
    assert TEST_BROKER_CONFIG["auto.create.topics.enable"] == "true"


def test_skip_reason_is_one_line_or_none() -> None:
    reason = refkafka.skip_reason()
    assert reason is None or (reason and "\n" not in reason)


def test_cache_dir_follows_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("REGROUP_KAFKA_CACHE", str(tmp_path / "jars"))
    assert refkafka.cache_dir() == tmp_path / "jars"
    monkeypatch.delenv("REGROUP_KAFKA_CACHE")
    assert refkafka.cache_dir("4.9.9").parts[-3:] == (".cache", "kafka", "4.9.9")


@pytest.mark.kafka
def test_api_versions_answers(kafka: KafkaReference) -> None:
    versions = refkafka.api_versions("127.0.0.1", kafka.port)
    assert versions[API_VERSIONS][0] == 0
    assert versions[API_VERSIONS][1] >= 3
    assert JOIN_GROUP in versions
    assert CONSUMER_GROUP_HEARTBEAT in versions
    assert kafka.bootstrap_servers == f"127.0.0.1:{kafka.port}"


@pytest.mark.kafka
def test_server_properties_carry_the_test_config(kafka: KafkaReference) -> None:
    props = (kafka.workdir / "server.properties").read_text().splitlines()
    for key, value in TEST_BROKER_CONFIG.items():
        assert f"{key}={value}" in props
    assert "process.roles=broker,controller" in props


@pytest.mark.kafka
def test_consumer_groups_command_lists_groups(kafka: KafkaReference) -> None:
    result = kafka.run_tool(CONSUMER_GROUPS_COMMAND, "--bootstrap-server", kafka.bootstrap_servers, "--list")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Exception" not in result.stdout + result.stderr


@pytest.mark.kafka
def test_overrides_apply_and_stop_leaves_nothing_running(tmp_path: Path) -> None:
    _skip_without_java_or_maven()
    ref = KafkaReference({"num.partitions": "3"}, workdir=tmp_path)
    with ref:
        assert ref.config["num.partitions"] == "3"
        assert "num.partitions=3" in (tmp_path / "server.properties").read_text().splitlines()
        assert ref.running()
        port = ref.port
    assert not ref.running()
    assert not _port_open(port)
    assert (tmp_path / "kafka.log").is_file()


@pytest.mark.kafka
def test_bad_config_fails_with_the_tool_output(tmp_path: Path) -> None:
    _skip_without_java_or_maven()
    ref = KafkaReference({"group.min.session.timeout.ms": "not-a-number"}, workdir=tmp_path)
    with pytest.raises(RefKafkaError, match=r"group\.min\.session\.timeout\.ms"):
        ref.start()
    assert not ref.running()


@pytest.mark.kafka
def test_startup_timeout_kills_the_jvm(tmp_path: Path) -> None:
    _skip_without_java_or_maven()
    ref = KafkaReference(workdir=tmp_path, startup_timeout=0.2)
    with pytest.raises(RefKafkaError, match="did not list itself in Metadata"):
        ref.start()
    assert not ref.running()
    assert ref.pid is None


@pytest.mark.kafka
def test_a_port_taken_before_the_jvm_binds_it_is_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    _skip_without_java_or_maven()
    real_free_ports = refkafka.free_ports
    calls = 0
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()

        def first_broker_port_busy(
            count: int, host: str = "127.0.0.1", *, lasting: bool = False
        ) -> list[int]:
            nonlocal calls
            calls += 1
            ports = real_free_ports(count, host, lasting=lasting)
            return [busy.getsockname()[1], *ports[1:]] if calls == 1 else ports

        monkeypatch.setattr(refkafka, "free_ports", first_broker_port_busy)
        with KafkaReference() as ref:
            assert calls == 2
            assert ref.port != busy.getsockname()[1]
            assert API_VERSIONS in refkafka.api_versions("127.0.0.1", ref.port)


def test_cluster_ids_never_look_like_options() -> None:
    ids = {refkafka._cluster_id() for _ in range(2000)}
    assert len(ids) == 2000
    assert all(len(cid) == 22 and not cid.startswith("-") for cid in ids)
