"""Connection handling: ApiVersions negotiation, bad input closes only the offending connection, request
size limits, pipelining with in-order responses, idle timeout."""

from __future__ import annotations

import resource
import struct
import time
from collections.abc import Callable

import pytest

from broker.support import BrokerThread
from regroup.broker.handlers import DuplicateHandlerError, HandlerRegistry, default_registry
from regroup.client.blocking import BlockingConnection
from regroup.client.errors import ConnectionClosedError
from regroup.log import PartitionLog
from regroup.protocol.api_keys import ApiKey
from regroup.protocol.errors import ErrorCode
from regroup.protocol.framing import decode_response, encode_request
from regroup.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from regroup.protocol.messages.create_topics import CreatableTopic, CreateTopicsRequest, CreateTopicsResponse
from regroup.protocol.messages.fetch import FetchPartition, FetchRequest, FetchResponse, FetchTopic
from regroup.protocol.messages.metadata import MetadataRequest, MetadataResponse
from regroup.protocol.messages.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
)
from regroup.protocol.messages.offset_fetch import (
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchResponse,
)
from regroup.protocol.messages.produce import (
    PartitionProduceData,
    ProduceRequest,
    ProduceResponse,
    TopicProduceData,
)
from regroup.protocol.record_batch import Record, build_batch
from regroup.runtime.shard_runner import ShardRunner

AV = ApiVersionsRequest(client_software_name="regroup-tests", client_software_version="1.0")

EXPECTED_RANGES = {
    ApiKey.PRODUCE: (3, 11),
    ApiKey.FETCH: (4, 17),
    ApiKey.LIST_OFFSETS: (0, 10),
    ApiKey.METADATA: (0, 12),
    ApiKey.API_VERSIONS: (0, 4),
    ApiKey.CREATE_TOPICS: (0, 7),
    ApiKey.DELETE_TOPICS: (0, 6),
    ApiKey.INIT_PRODUCER_ID: (0, 5),
    ApiKey.DESCRIBE_CONFIGS: (0, 4),
    ApiKey.DESCRIBE_CLUSTER: (0, 1),
}


def ranges(response: ApiVersionsResponse) -> dict[int, tuple[int, int]]:
    return {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_api_versions_every_version(conn: BlockingConnection, version: int) -> None:
    request = ApiVersionsRequest(client_software_name="regroup-tests", client_software_version="1.0")
    response = conn.request(request, ApiVersionsResponse, version=version)
    assert response.error_code == ErrorCode.NONE
    advertised = ranges(response)
    for key, expected in EXPECTED_RANGES.items():
        assert advertised[key] == expected
    if version >= 3:
        assert response.finalized_features_epoch == -1
        assert response.supported_features == []
        assert response.zk_migration_ready is False


def test_api_versions_ranges_come_from_the_registry(conn: BlockingConnection) -> None:
    registry = default_registry()
    response = conn.request(AV, ApiVersionsResponse, version=3)
    assert ranges(response) == {k: (lo, hi) for k, lo, hi in registry.ranges()}
    for key, expected in EXPECTED_RANGES.items():
        assert ranges(response)[key] == expected


def test_duplicate_registration_is_a_startup_error() -> None:
    registry = HandlerRegistry()

    def handler(ctx: object, request: object) -> None:
        return None

    registry.register(ApiKey.HEARTBEAT, 0, 4, handler)
    with pytest.raises(DuplicateHandlerError, match="Heartbeat"):
        registry.register(ApiKey.HEARTBEAT, 0, 4, handler)


def test_unsupported_api_versions_version_gets_a_v0_answer(conn: BlockingConnection) -> None:
    # ApiVersions v127, as a future client would send it: header v2 (flexible), unknown body.
    header = struct.pack(">hhi", 18, 127, 77) + struct.pack(">h", 4) + b"test" + b"\x00"
    body = b"\x05hello\x02x\x00"
    frame = header + body
    conn.send_raw(struct.pack(">i", len(frame)) + frame)
    correlation, response = decode_response(conn.read_frame(), 18, 0)
    assert correlation == 77
    assert isinstance(response, ApiVersionsResponse)
    assert response.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert ranges(response)[ApiKey.API_VERSIONS] == (0, 4)
    # The connection stays usable: the client retries with a version the broker listed.
    again = conn.request(AV, ApiVersionsResponse, version=3)
    assert again.error_code == ErrorCode.NONE


def test_api_versions_v3_with_invalid_software_name(conn: BlockingConnection) -> None:
    request = ApiVersionsRequest(client_software_name="bad name!", client_software_version="1")
    response = conn.request(request, ApiVersionsResponse, version=3)
    assert response.error_code == ErrorCode.INVALID_REQUEST


def metadata_ok(broker: BrokerThread) -> None:
    with BlockingConnection(broker.address) as other:
        response = other.request(MetadataRequest(topics=[]), MetadataResponse, version=12)
        assert response.brokers[0].port == broker.address[1]


def test_unknown_api_key_closes_only_that_connection(broker: BrokerThread) -> None:
    with BlockingConnection(broker.address) as bystander, BlockingConnection(broker.address) as bad:
        bystander.request(AV, ApiVersionsResponse, version=3)
        frame = struct.pack(">hhih", 9999, 0, 1, -1)
        bad.send_raw(struct.pack(">i", len(frame)) + frame)
        assert bad.is_closed()
        assert bystander.request(AV, ApiVersionsResponse, version=3).error_code == 0
        metadata_ok(broker)


def test_unsupported_version_of_a_known_api_closes(broker: BrokerThread) -> None:
    with BlockingConnection(broker.address) as c:
        # Produce v2 is below the supported range (Kafka 4 removed v0-v2).
        c.send(ProduceRequest(acks=1, timeout_ms=1000, topic_data=[]), 2)
        assert c.is_closed()
    with BlockingConnection(broker.address) as c:
        # An API the codecs know but no handler serves (DescribeAcls).
        frame = struct.pack(">hhih", int(ApiKey.DESCRIBE_ACLS), 1, 1, -1)
        c.send_raw(struct.pack(">i", len(frame)) + frame)
        assert c.is_closed()
    metadata_ok(broker)


def test_malformed_body_closes_only_that_connection(broker: BrokerThread) -> None:
    with BlockingConnection(broker.address) as bystander, BlockingConnection(broker.address) as bad:
        good = encode_request(MetadataRequest(topics=[]), 12, 5)
        broken = good[:-3]  # truncated body, with a size prefix that matches
        broken = struct.pack(">i", len(broken) - 4) + broken[4:]
        bad.send_raw(broken)
        assert bad.is_closed()
        assert bystander.request(MetadataRequest(topics=None), MetadataResponse, version=12).cluster_id
    with BlockingConnection(broker.address) as bad:
        bad.send_raw(struct.pack(">i", 3) + b"abc")  # shorter than any header
        assert bad.is_closed()
    with BlockingConnection(broker.address) as bad:
        # An array count far larger than the bytes that follow (KAFKA-14063's pattern).
        frame = struct.pack(">hhih", 3, 4, 1, -1) + struct.pack(">i", 2**31 - 1)
        bad.send_raw(struct.pack(">i", len(frame)) + frame)
        assert bad.is_closed()
    for header in (
        struct.pack(">hhih", 12, 4, 1, 50) + b"short",  # client id overrunning the frame
        struct.pack(">hhih", 12, 4, 1, 2) + b"\xff\xfe",  # client id not UTF-8
        struct.pack(">hhih", 12, 4, 1, -1),  # a flexible header without its tagged fields
    ):
        with BlockingConnection(broker.address) as bad:
            bad.send_raw(struct.pack(">i", len(header)) + header)
            assert bad.is_closed()
    metadata_ok(broker)


def test_oversized_frame_closes_without_allocating(broker: BrokerThread) -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    with BlockingConnection(broker.address) as bad:
        started = time.monotonic()
        bad.send_raw(struct.pack(">i", 2**31 - 1) + b"\x00" * 64)  # claims 2 GiB
        assert bad.is_closed(timeout=2)
        assert time.monotonic() - started < 2
    with BlockingConnection(broker.address) as bad:
        bad.send_raw(struct.pack(">i", -5))
        assert bad.is_closed(timeout=2)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert after - before < 64 * 1024, "the broker allocated memory for an oversized frame"
    metadata_ok(broker)


def test_frame_limit_follows_socket_request_max_bytes(make_broker: Callable[..., BrokerThread]) -> None:
    broker = make_broker(socket_request_max_bytes=1024)
    with BlockingConnection(broker.address) as c:
        c.send_raw(struct.pack(">i", 1025))
        assert c.is_closed(timeout=2)
    with BlockingConnection(broker.address) as c:
        assert c.request(ApiVersionsRequest(), ApiVersionsResponse, version=0).error_code == 0


def _record_batch(value: bytes) -> bytes:
    return build_batch([Record(0, int(time.time() * 1000), b"k", value)])


def test_pipelined_responses_come_back_in_request_order(conn: BlockingConnection) -> None:
    created = conn.request(
        CreateTopicsRequest(topics=[CreatableTopic("pipe", 1, 1)], timeout_ms=1000),
        CreateTopicsResponse,
        version=7,
    )
    assert created.topics[0].error_code == 0
    topic_id = created.topics[0].topic_id
    # A long-poll fetch on the empty partition, then a produce to it, then cheap requests, back to back.
    fetch = FetchRequest(
        max_wait_ms=5000,
        min_bytes=1,
        max_bytes=1 << 20,
        topics=[FetchTopic(topic_id=topic_id, partitions=[FetchPartition(partition=0, fetch_offset=0)])],
    )
    produce = ProduceRequest(
        acks=1,
        timeout_ms=1000,
        topic_data=[TopicProduceData("pipe", [PartitionProduceData(0, _record_batch(b"hello"))])],
    )
    started = time.monotonic()
    for request, version in ((fetch, 17), (produce, 11), (AV, 3), (MetadataRequest(topics=None), 12)):
        conn.send(request, version)
    # receive() checks each answer's correlation id against the oldest request in flight.
    fetched, produced, versions, metadata = (conn.receive() for _ in range(4))
    elapsed = time.monotonic() - started
    assert isinstance(fetched, FetchResponse)
    assert isinstance(produced, ProduceResponse)
    assert isinstance(versions, ApiVersionsResponse)
    assert isinstance(metadata, MetadataResponse)
    # The produce behind the waiting fetch was decoded and handled, which woke the fetch early.
    assert elapsed < 4
    assert produced.responses[0].partition_responses[0].error_code == 0
    records = fetched.responses[0].partitions[0].records
    assert records is not None
    assert b"hello" in records


def test_acks_zero_produce_gets_no_response(conn: BlockingConnection) -> None:
    conn.request(
        CreateTopicsRequest(topics=[CreatableTopic("fire", 1, 1)], timeout_ms=1000),
        CreateTopicsResponse,
        version=7,
    )
    produce = ProduceRequest(
        acks=0,
        timeout_ms=1000,
        topic_data=[TopicProduceData("fire", [PartitionProduceData(0, _record_batch(b"x"))])],
    )
    assert conn.send(produce, 9) is None  # acks=0: nothing is awaited
    pending = conn.send(AV, 3)
    assert pending is not None
    (correlation,) = struct.unpack_from(">i", conn.read_frame())
    assert correlation == pending.correlation_id


def test_acks_zero_produce_error_closes_the_connection(conn: BlockingConnection) -> None:
    produce = ProduceRequest(
        acks=0,
        timeout_ms=1000,
        topic_data=[TopicProduceData("no-such-topic", [PartitionProduceData(0, _record_batch(b"x"))])],
    )
    conn.send(produce, 9)
    assert conn.is_closed()


def test_idle_connections_are_closed(make_broker: Callable[..., BrokerThread]) -> None:
    broker = make_broker(connections_max_idle_ms=300)
    with BlockingConnection(broker.address) as idle, BlockingConnection(broker.address) as busy:
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            busy.request(AV, ApiVersionsResponse, version=3)
            time.sleep(0.05)
        assert idle.is_closed(timeout=2)
        assert busy.request(AV, ApiVersionsResponse, version=3).error_code == 0


def test_many_clients_at_once(broker: BrokerThread) -> None:
    conns = [BlockingConnection(broker.address) for _ in range(50)]
    try:
        for c in conns:
            c.send(MetadataRequest(topics=None), 12)
        for c in conns:
            response = c.receive()
            assert isinstance(response, MetadataResponse)
            assert response.controller_id == 1
    finally:
        for c in conns:
            c.close()


def test_max_connections(make_broker: Callable[..., BrokerThread]) -> None:
    broker = make_broker(max_connections=2)
    with BlockingConnection(broker.address) as a, BlockingConnection(broker.address) as b:
        a.request(AV, ApiVersionsResponse, version=3)
        b.request(AV, ApiVersionsResponse, version=3)
        with BlockingConnection(broker.address) as c:
            assert c.is_closed()


def _commit(group_id: str, offset: int) -> OffsetCommitRequest:
    return OffsetCommitRequest(
        group_id=group_id,
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[
            OffsetCommitRequestTopic(
                name="t",
                partitions=[OffsetCommitRequestPartition(partition_index=0, committed_offset=offset)],
            )
        ],
    )


def _create_topic_t(conn: BlockingConnection) -> None:
    conn.request(
        CreateTopicsRequest(topics=[CreatableTopic("t", 1, 1)], timeout_ms=1000), CreateTopicsResponse
    )


def _offsets_runner(broker: BrokerThread) -> ShardRunner:
    runner = broker.broker.group_coordinator.runner(0)
    assert runner is not None
    return runner


def test_pipelined_commits_are_written_behind_the_read_that_brought_them(
    broker: BrokerThread, conn: BlockingConnection
) -> None:
    conn.request(
        CreateTopicsRequest(topics=[CreatableTopic("t", 1, 1)], timeout_ms=1000), CreateTopicsResponse
    )
    for i in range(5):
        conn.send(_commit(f"g{i}", 100 + i), 9)
    for _ in range(5):
        response = conn.receive()
        assert isinstance(response, OffsetCommitResponse)
        assert response.topics[0].partitions[0].error_code == ErrorCode.NONE
    fetched = conn.request(
        OffsetFetchRequest(groups=[OffsetFetchRequestGroup(group_id=f"g{i}", topics=None) for i in range(5)]),
        OffsetFetchResponse,
        version=9,
    )
    offsets = {g.group_id: g.topics[0].partitions[0].committed_offset for g in fetched.groups}
    assert offsets == {f"g{i}": 100 + i for i in range(5)}
    # Each was answered at once and appended with the others of its read before any reply left.
    assert _offsets_runner(broker).stats.written_behind == 5


def test_a_client_that_half_closes_after_pipelined_commits_gets_every_reply(
    broker: BrokerThread, conn: BlockingConnection
) -> None:
    # The replies are held until the loop step's appends behind them; the end of stream that comes in the
    # same step as the requests closes the connection only after they have left.
    _create_topic_t(conn)
    frames = b"".join(encode_request(_commit(f"g{i}", 10 + i), 9, 100 + i, "c") for i in range(5))
    port = conn.local_address[1]

    def read_then_eof() -> None:
        (server_side,) = [c for c in broker.broker.server.connections if c.peer[1] == port]
        server_side.data_received(frames)
        server_side.eof_received()

    broker.call(read_then_eof)
    replies = [decode_response(conn.read_frame(timeout=10), ApiKey.OFFSET_COMMIT, 9) for _ in range(5)]
    assert [correlation for correlation, _ in replies] == [100, 101, 102, 103, 104]
    for _, reply in replies:
        assert isinstance(reply, OffsetCommitResponse)
        assert reply.topics[0].partitions[0].error_code == ErrorCode.NONE
    assert conn.is_closed()


def test_a_connection_is_closed_without_replies_when_the_append_behind_them_fails(
    broker: BrokerThread, conn: BlockingConnection
) -> None:
    conn.request(
        CreateTopicsRequest(topics=[CreatableTopic("t", 1, 1)], timeout_ms=1000), CreateTopicsResponse
    )
    assert (
        conn.request(_commit("g", 1), OffsetCommitResponse, version=9).topics[0].partitions[0].error_code == 0
    )
    runner = _offsets_runner(broker)
    assert runner.stats.written_behind == 1
    plog = broker.broker.logs.partition("__consumer_offsets", 0)
    assert plog is not None

    class FailingAppends:
        """The partition as the runner sees it, whose disk is gone (a wrapper: the build may be compiled,
        and a compiled object's methods cannot be replaced)."""

        def __init__(self, log: PartitionLog) -> None:
            self.config = log.config
            self.log_start_offset = log.log_start_offset
            self.log_end_offset = log.log_end_offset
            self.read = log.read
            self.needs_flush = log.needs_flush

        def append(self, data: bytes, *, now_ms: int, validate: bool = True) -> object:
            raise OSError("injected: disk gone")

    runner._log = FailingAppends(plog)
    conn.send(_commit("g", 2), 9)
    with pytest.raises(ConnectionClosedError):
        conn.receive()
    # The partition failed with it: a new connection's commit is told to find its coordinator again.
    with BlockingConnection(broker.address) as again:
        answer = again.request(_commit("g", 3), OffsetCommitResponse, version=9)
        assert answer.topics[0].partitions[0].error_code == ErrorCode.NOT_COORDINATOR
