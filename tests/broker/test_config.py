"""Broker settings: registry, properties files, precedence, env mapping, validation."""

from __future__ import annotations

import pytest

from regroup.broker.config import (
    BROKER_CONFIGS,
    TOPIC_CONFIGS,
    BrokerConfig,
    ConfigError,
    ConfigType,
    env_to_key,
    key_to_env,
)
from regroup.log.config import TOPIC_CONFIG_NAMES


def test_kafka_defaults() -> None:
    c = BrokerConfig.load()
    assert c.get("listeners") == ["PLAINTEXT://127.0.0.1:9092"]
    assert c.log_dir == "./regroup-data"
    assert c.node_id == 1
    assert c.get("num.partitions") == 1
    assert c.get("auto.create.topics.enable") is True
    assert c.get("socket.request.max.bytes") == 104857600
    assert c.get("connections.max.idle.ms") == 600000
    assert c.get("message.max.bytes") == 1048588
    assert c.get("offsets.topic.num.partitions") == 50
    assert c.get("offsets.retention.minutes") == 10080
    assert c.get("group.min.session.timeout.ms") == 6000
    assert c.get("group.max.session.timeout.ms") == 1800000
    assert c.get("group.initial.rebalance.delay.ms") == 3000
    assert c.get("group.max.size") == 2**31 - 1
    assert c.get("offset.metadata.max.bytes") == 4096
    assert c.retention_ms == 168 * 3_600_000
    assert c.get("cluster.id") is None


def test_group_and_offsets_settings_are_known_and_typed() -> None:
    expected = {
        "group.min.session.timeout.ms": ConfigType.INT,
        "group.max.session.timeout.ms": ConfigType.INT,
        "group.initial.rebalance.delay.ms": ConfigType.INT,
        "group.max.size": ConfigType.INT,
        "offsets.topic.num.partitions": ConfigType.INT,
        "offsets.topic.replication.factor": ConfigType.SHORT,
        "offsets.topic.segment.bytes": ConfigType.INT,
        "offsets.retention.minutes": ConfigType.INT,
        "offsets.retention.check.interval.ms": ConfigType.LONG,
        "offset.metadata.max.bytes": ConfigType.INT,
        "offsets.commit.timeout.ms": ConfigType.INT,
    }
    for name, typ in expected.items():
        assert BROKER_CONFIGS[name].type is typ, name


def test_topic_config_metadata_covers_the_log_layer() -> None:
    assert set(TOPIC_CONFIGS) == set(TOPIC_CONFIG_NAMES)
    for info in TOPIC_CONFIGS.values():
        for synonym in info.broker_synonyms:
            assert synonym in BROKER_CONFIGS, (info.name, synonym)


def test_precedence_defaults_file_env_override() -> None:
    file_entries = [
        ("num.partitions", "2", "f:1"),
        ("log.dirs", "/from-file", "f:2"),
        ("node.id", "7", "f:3"),
    ]
    env = {"REGROUP_NUM_PARTITIONS": "3", "REGROUP_LOG_DIRS": "/from-env"}
    c = BrokerConfig.load(file_entries, env, [("num.partitions", "4")])
    assert c.get("num.partitions") == 4
    assert c.log_dir == "/from-env"
    assert c.node_id == 7
    assert c.is_default("auto.create.topics.enable")
    assert not c.is_default("node.id")


def test_env_mapping_follows_kafkas_docker_convention() -> None:
    assert env_to_key("REGROUP_LOG_DIRS") == "log.dirs"
    assert env_to_key("REGROUP_OFFSETS_TOPIC_NUM_PARTITIONS") == "offsets.topic.num.partitions"
    assert env_to_key("REGROUP_SOME__UNDERSCORE") == "some_underscore"
    assert env_to_key("REGROUP_A___B") == "a-b"
    for key in BROKER_CONFIGS:
        assert env_to_key(key_to_env(key)) == key


def test_tooling_variables_are_not_settings() -> None:
    c = BrokerConfig.load([], {"REGROUP_KAFKA_CACHE": "/x", "PATH": "/bin"})
    assert c.unknown == {}


def test_unknown_keys_are_collected_with_their_origin() -> None:
    c = BrokerConfig.load([("no.such.key", "1", "server.properties:3")], {"REGROUP_ALSO_UNKNOWN": "x"})
    assert c.unknown["no.such.key"] == ("1", "server.properties:3")
    assert "also.unknown" in c.unknown
    warnings = c.warnings()
    assert any("no.such.key" in w and "server.properties:3" in w for w in warnings)


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("num.partitions", "abc", "Not a number of type INT"),
        ("num.partitions", "0", "Value must be at least 1"),
        ("auto.create.topics.enable", "yes", "either true or false"),
        ("log.cleanup.policy", "delete,bogus", "String must be one of"),
        ("listeners", "127.0.0.1:9092", "expected NAME://host:port"),
        ("offsets.topic.replication.factor", "40000", "Not a number of type SHORT"),
        ("log.segment.bytes", "100", "Value must be at least 1048576"),
    ],
)
def test_invalid_value_names_the_key(key: str, value: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        BrokerConfig.load([], {}, [(key, value)])
    message = str(info.value)
    assert key in message
    assert fragment in message
    assert "--override" in message


def test_ssl_listener_is_refused() -> None:
    with pytest.raises(ConfigError, match="PLAINTEXT only"):
        BrokerConfig.load([], {}, [("listeners", "SSL://127.0.0.1:9093")])


def test_controller_listener_is_skipped() -> None:
    c = BrokerConfig.load(
        [],
        {},
        [
            ("listeners", "PLAINTEXT://:9092,CONTROLLER://:9093"),
            ("controller.listener.names", "CONTROLLER"),
            ("process.roles", "broker,controller"),
        ],
    )
    assert [listener.name for listener in c.listeners()] == ["PLAINTEXT"]
    assert "process.roles" in c.inert()


def test_advertised_listeners_by_name() -> None:
    c = BrokerConfig.load(
        [],
        {},
        [
            ("listeners", "PLAINTEXT://0.0.0.0:9092,INTERNAL://127.0.0.1:9093"),
            ("listener.security.protocol.map", "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT"),
            ("advertised.listeners", "PLAINTEXT://kafka.example:19092"),
        ],
    )
    adv = c.advertised_listeners()
    assert (adv["PLAINTEXT"].host, adv["PLAINTEXT"].port) == ("kafka.example", 19092)
    assert (adv["INTERNAL"].host, adv["INTERNAL"].port) == ("127.0.0.1", 9093)


def test_single_log_dir_only() -> None:
    with pytest.raises(ConfigError, match="single log directory"):
        BrokerConfig.load([], {}, [("log.dirs", "/a,/b")])


def test_retention_units() -> None:
    assert BrokerConfig.load([], {}, [("log.retention.minutes", "5")]).retention_ms == 300_000
    c = BrokerConfig.load([], {}, [("log.retention.minutes", "5"), ("log.retention.ms", "1234")])
    assert c.retention_ms == 1234
    assert BrokerConfig.load([], {}, [("log.retention.hours", "-1")]).retention_ms == -1


def test_replication_factor_warning() -> None:
    c = BrokerConfig.load([], {}, [("default.replication.factor", "3")])
    assert any("default.replication.factor" in w for w in c.warnings())
    assert not BrokerConfig.load().warnings()


def test_dump_lists_every_setting() -> None:
    lines = BrokerConfig.load().dump()
    assert len(lines) == len(BROKER_CONFIGS)
    assert "\tnum.partitions = 1" in lines
