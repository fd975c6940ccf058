"""Metadata, CreateTopics, DeleteTopics, DescribeConfigs, DescribeCluster and InitProducerId, over the wire
with regroup's own codecs."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from broker.support import BrokerThread
from regroup.broker.config import ConfigSource
from regroup.client.blocking import BlockingConnection
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages.create_topics import (
    CreatableReplicaAssignment,
    CreatableTopic,
    CreatableTopicConfig,
    CreateTopicsRequest,
    CreateTopicsResponse,
)
from regroup.protocol.messages.delete_topics import (
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DeleteTopicState,
)
from regroup.protocol.messages.describe_cluster import DescribeClusterRequest, DescribeClusterResponse
from regroup.protocol.messages.describe_configs import (
    DescribeConfigsRequest,
    DescribeConfigsResource,
    DescribeConfigsResponse,
)
from regroup.protocol.messages.init_producer_id import InitProducerIdRequest, InitProducerIdResponse
from regroup.protocol.messages.metadata import MetadataRequest, MetadataRequestTopic, MetadataResponse
from regroup.protocol.primitives import ZERO_UUID

TOPIC = 2
BROKER = 4


def create(
    conn: BlockingConnection, *topics: CreatableTopic, version: int = 7, validate_only: bool = False
) -> CreateTopicsResponse:
    return conn.request(
        CreateTopicsRequest(topics=list(topics), timeout_ms=5000, validate_only=validate_only),
        CreateTopicsResponse,
        version=version,
    )


def metadata(
    conn: BlockingConnection, names: list[str] | None, version: int = 12, auto: bool = True
) -> MetadataResponse:
    topics = None if names is None else [MetadataRequestTopic(name=n) for n in names]
    return conn.request(
        MetadataRequest(topics=topics, allow_auto_topic_creation=auto), MetadataResponse, version=version
    )


# -------------------------------------------------------------------------------------------- Metadata


@pytest.mark.parametrize("version", range(13))
def test_metadata_every_version(broker: BrokerThread, conn: BlockingConnection, version: int) -> None:
    create(conn, CreatableTopic("orders", 3, 1))
    names = [] if version == 0 else None  # v0: an empty list means all topics
    response = metadata(conn, names, version)
    host, port = broker.address
    assert [(b.node_id, b.host, b.port) for b in response.brokers] == [(1, host, port)]
    topic = next(t for t in response.topics if t.name == "orders")
    assert topic.error_code == 0
    assert [p.partition_index for p in topic.partitions] == [0, 1, 2]
    for p in topic.partitions:
        assert (p.leader_id, p.replica_nodes, p.isr_nodes) == (1, [1], [1])
        if version >= 7:
            assert p.leader_epoch == 0
    if version >= 1:
        assert response.controller_id == 1
    if version >= 2:
        assert response.cluster_id == broker.broker.cluster_id
    if version >= 10:
        assert topic.topic_id != ZERO_UUID
    if version >= 8:
        assert topic.topic_authorized_operations == -(2**31)


def test_metadata_auto_creates_with_num_partitions(make_broker: Callable[..., BrokerThread]) -> None:
    broker = make_broker(num_partitions=4)
    with BlockingConnection(broker.address) as conn:
        response = metadata(conn, ["fresh"])
        assert response.topics[0].error_code == 0
        assert len(response.topics[0].partitions) == 4
        assert broker.broker.logs.topic("fresh") is not None


def test_metadata_without_auto_creation(conn: BlockingConnection) -> None:
    response = metadata(conn, ["absent"], auto=False)
    assert response.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    response = metadata(conn, ["bad/name", ""], auto=True)
    assert [t.error_code for t in response.topics] == [ErrorCode.INVALID_TOPIC_EXCEPTION] * 2


def test_auto_create_disabled_by_config(make_broker: Callable[..., BrokerThread]) -> None:
    broker = make_broker(auto_create_topics_enable="false")
    with BlockingConnection(broker.address) as conn:
        assert (
            metadata(conn, ["absent"], version=3).topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        )


def test_metadata_by_topic_id_v12(conn: BlockingConnection) -> None:
    created = create(conn, CreatableTopic("by-id", 1, 1))
    topic_id = created.topics[0].topic_id
    request = MetadataRequest(topics=[MetadataRequestTopic(topic_id=topic_id, name=None)])
    response = conn.request(request, MetadataResponse, version=12)
    assert response.topics[0].name == "by-id"
    unknown = conn.request(
        MetadataRequest(topics=[MetadataRequestTopic(topic_id=uuid.uuid4(), name=None)]),
        MetadataResponse,
        version=12,
    )
    assert unknown.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_ID


def test_offsets_topic_is_internal_and_created_like_kafka(make_broker: Callable[..., BrokerThread]) -> None:
    broker = make_broker(offsets_topic_num_partitions=3)
    with BlockingConnection(broker.address) as conn:
        topic = metadata(conn, ["__consumer_offsets"]).topics[0]
        assert topic.error_code == 0
        assert topic.is_internal is True
        assert len(topic.partitions) == 3
    info = broker.broker.logs.topic("__consumer_offsets")
    assert info is not None
    assert info.config("cleanup.policy") == "compact"


# ---------------------------------------------------------------------------------------- CreateTopics


@pytest.mark.parametrize("version", range(8))
def test_create_topics_every_version(conn: BlockingConnection, version: int) -> None:
    response = create(conn, CreatableTopic(f"t{version}", -1, -1), version=version)
    result = response.topics[0]
    assert result.error_code == 0
    if version >= 5:
        assert result.num_partitions == 1
        assert result.replication_factor == 1
        assert result.configs is not None
        configs = {c.name: c for c in result.configs}
        assert configs["cleanup.policy"].value == "delete"
        assert configs["retention.ms"].config_source == ConfigSource.DEFAULT_CONFIG
    if version >= 7:
        assert result.topic_id != ZERO_UUID


def test_create_topics_errors(conn: BlockingConnection) -> None:
    response = create(
        conn,
        CreatableTopic("ok", 2, 1, configs=[CreatableTopicConfig("retention.ms", "1000")]),
        CreatableTopic("rf3", 1, 3),
        CreatableTopic("rf0", 1, 0),
        CreatableTopic("p0", 0, 1),
        CreatableTopic("assigned", -1, -1, assignments=[CreatableReplicaAssignment(0, [1])]),
        CreatableTopic("badcfg", 1, 1, configs=[CreatableTopicConfig("retention.ms", "soon")]),
        CreatableTopic("unknowncfg", 1, 1, configs=[CreatableTopicConfig("no.such.config", "1")]),
        CreatableTopic("bad name", 1, 1),
        CreatableTopic("dup", 1, 1),
        CreatableTopic("dup", 1, 1),
    )
    codes = {t.name: (t.error_code, t.error_message) for t in response.topics}
    assert codes["ok"][0] == 0
    assert codes["rf3"][0] == ErrorCode.INVALID_REPLICATION_FACTOR
    assert codes["rf0"][0] == ErrorCode.INVALID_REPLICATION_FACTOR
    assert codes["p0"][0] == ErrorCode.INVALID_PARTITIONS
    assert codes["assigned"][0] == ErrorCode.INVALID_REQUEST
    assert codes["badcfg"][0] == ErrorCode.INVALID_CONFIG
    assert "retention.ms" in (codes["badcfg"][1] or "")
    assert codes["unknowncfg"][0] == ErrorCode.INVALID_CONFIG
    assert codes["bad name"][0] == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert codes["dup"] == (ErrorCode.INVALID_REQUEST, "Duplicate topic name.")
    ok = next(t for t in response.topics if t.name == "ok")
    assert ok.configs is not None
    retention = next(c for c in ok.configs if c.name == "retention.ms")
    assert (retention.value, retention.config_source) == ("1000", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    again = create(conn, CreatableTopic("ok", 2, 1))
    assert again.topics[0].error_code == ErrorCode.TOPIC_ALREADY_EXISTS
    collide = create(conn, CreatableTopic("a.b", 1, 1), CreatableTopic("a_b", 1, 1))
    assert [t.error_code for t in collide.topics] == [0, ErrorCode.INVALID_TOPIC_EXCEPTION]


def test_create_topics_validate_only(conn: BlockingConnection, broker: BrokerThread) -> None:
    response = create(conn, CreatableTopic("dry", 5, 1), validate_only=True)
    assert response.topics[0].error_code == 0
    assert response.topics[0].num_partitions == 5
    assert broker.broker.logs.topic("dry") is None


# ---------------------------------------------------------------------------------------- DeleteTopics


@pytest.mark.parametrize("version", range(7))
def test_delete_topics_every_version(conn: BlockingConnection, broker: BrokerThread, version: int) -> None:
    created = create(conn, CreatableTopic("doomed", 2, 1))
    topic_id = created.topics[0].topic_id
    if version >= 6:
        request = DeleteTopicsRequest(
            topics=[DeleteTopicState(name=None, topic_id=topic_id)], timeout_ms=5000
        )
    else:
        request = DeleteTopicsRequest(topic_names=["doomed"], timeout_ms=5000)
    response = conn.request(request, DeleteTopicsResponse, version=version)
    assert [(r.name, r.error_code) for r in response.responses] == [("doomed", 0)]
    assert broker.broker.logs.topic("doomed") is None
    assert metadata(conn, ["doomed"], auto=False).topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_delete_topics_errors(conn: BlockingConnection) -> None:
    metadata(conn, ["__consumer_offsets"])
    response = conn.request(
        DeleteTopicsRequest(
            topics=[
                DeleteTopicState(name="missing"),
                DeleteTopicState(name="__consumer_offsets"),
                DeleteTopicState(name=None, topic_id=uuid.uuid4()),
                DeleteTopicState(name=None, topic_id=ZERO_UUID),
            ],
            timeout_ms=1000,
        ),
        DeleteTopicsResponse,
        version=6,
    )
    codes = sorted(r.error_code for r in response.responses)
    assert codes == sorted(
        [
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            ErrorCode.INVALID_REQUEST,
            ErrorCode.UNKNOWN_TOPIC_ID,
            ErrorCode.INVALID_REQUEST,
        ]
    )


def test_delete_disabled(make_broker: Callable[..., BrokerThread]) -> None:
    broker = make_broker(delete_topic_enable="false")
    with BlockingConnection(broker.address) as conn:
        create(conn, CreatableTopic("kept", 1, 1))
        response = conn.request(
            DeleteTopicsRequest(topic_names=["kept"], timeout_ms=1000), DeleteTopicsResponse, version=5
        )
        assert response.responses[0].error_code == ErrorCode.TOPIC_DELETION_DISABLED


# ------------------------------------------------------------------------------------- DescribeConfigs


@pytest.mark.parametrize("version", range(5))
def test_describe_configs_topic(conn: BlockingConnection, version: int) -> None:
    create(conn, CreatableTopic("cfg", 1, 1, configs=[CreatableTopicConfig("retention.ms", "60000")]))
    request = DescribeConfigsRequest(
        resources=[DescribeConfigsResource(TOPIC, "cfg", None)],
        include_synonyms=version >= 1,
        include_documentation=version >= 3,
    )
    response = conn.request(request, DescribeConfigsResponse, version=version)
    result = response.results[0]
    assert result.error_code == 0
    configs = {c.name: c for c in result.configs}
    assert configs["retention.ms"].value == "60000"
    assert configs["segment.bytes"].value == "1073741824"
    assert configs["retention.ms"].read_only is False
    if version == 0:
        assert configs["retention.ms"].is_default is False
        assert configs["segment.bytes"].is_default is True
    if version >= 1:
        assert configs["retention.ms"].config_source == ConfigSource.DYNAMIC_TOPIC_CONFIG
        assert configs["segment.bytes"].config_source == ConfigSource.DEFAULT_CONFIG
        synonyms = [(s.name, s.source) for s in configs["retention.ms"].synonyms]
        assert synonyms[0] == ("retention.ms", ConfigSource.DYNAMIC_TOPIC_CONFIG)
        assert ("log.retention.hours", ConfigSource.DEFAULT_CONFIG) in synonyms
    if version >= 3:
        assert configs["retention.ms"].config_type == 5  # LONG
        assert configs["retention.ms"].documentation


def test_describe_configs_static_broker_setting_and_keys(make_broker: Callable[..., BrokerThread]) -> None:
    broker = make_broker(log_retention_hours=1, num_partitions=2)
    with BlockingConnection(broker.address) as conn:
        create(conn, CreatableTopic("t", 1, 1))
        request = DescribeConfigsRequest(
            resources=[
                DescribeConfigsResource(TOPIC, "t", ["retention.ms"]),
                DescribeConfigsResource(
                    BROKER, "1", ["num.partitions", "message.max.bytes", "log.retention.hours"]
                ),
                DescribeConfigsResource(TOPIC, "nope", None),
                DescribeConfigsResource(BROKER, "2", None),
            ],
            include_synonyms=True,
        )
        response = conn.request(request, DescribeConfigsResponse, version=4)
        topic, broker_cfg, missing, other = response.results
        (retention,) = topic.configs
        assert retention.value == "3600000"
        assert retention.config_source == ConfigSource.STATIC_BROKER_CONFIG
        entries = {c.name: c for c in broker_cfg.configs}
        assert entries["num.partitions"].value == "2"
        assert entries["num.partitions"].config_source == ConfigSource.STATIC_BROKER_CONFIG
        assert entries["message.max.bytes"].config_source == ConfigSource.DEFAULT_CONFIG
        assert all(c.read_only for c in broker_cfg.configs)
        assert missing.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert other.error_code == ErrorCode.INVALID_REQUEST


# ------------------------------------------------------------------------------------- DescribeCluster


@pytest.mark.parametrize("version", [0, 1])
def test_describe_cluster(broker: BrokerThread, conn: BlockingConnection, version: int) -> None:
    response = conn.request(DescribeClusterRequest(), DescribeClusterResponse, version=version)
    assert response.error_code == 0
    assert response.cluster_id == broker.broker.cluster_id
    assert response.controller_id == 1
    host, port = broker.address
    assert [(b.broker_id, b.host, b.port) for b in response.brokers] == [(1, host, port)]
    assert response.cluster_authorized_operations == -(2**31)
    if version == 1:
        controllers = conn.request(
            DescribeClusterRequest(endpoint_type=2), DescribeClusterResponse, version=1
        )
        assert controllers.error_code == ErrorCode.UNSUPPORTED_ENDPOINT_TYPE


# -------------------------------------------------------------------------------------- InitProducerId


@pytest.mark.parametrize("version", range(6))
def test_init_producer_id(conn: BlockingConnection, version: int) -> None:
    first = conn.request(
        InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000),
        InitProducerIdResponse,
        version=version,
    )
    second = conn.request(
        InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000),
        InitProducerIdResponse,
        version=version,
    )
    assert first.error_code == second.error_code == 0
    assert second.producer_id > first.producer_id
    assert first.producer_epoch == second.producer_epoch == 0


def test_transactional_id_gets_coordinator_not_available(conn: BlockingConnection) -> None:
    response = conn.request(
        InitProducerIdRequest(transactional_id="txn-1", transaction_timeout_ms=60000),
        InitProducerIdResponse,
        version=4,
    )
    assert response.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert response.producer_id == -1


def test_producer_ids_never_repeat_across_restarts(
    make_broker: Callable[..., BrokerThread], tmp_path: Path
) -> None:
    data = tmp_path / "pids"
    seen: set[int] = set()
    for _ in range(3):
        broker = make_broker(data)
        with BlockingConnection(broker.address) as conn:
            for _ in range(3):
                pid = conn.request(
                    InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=1),
                    InitProducerIdResponse,
                    version=4,
                ).producer_id
                assert pid not in seen
                seen.add(pid)
        broker.stop()
