"""Produce, Fetch and ListOffsets over the wire with regroup's own codecs."""

from __future__ import annotations

import struct
import threading
import time
import uuid
from collections.abc import Callable

import pytest

from broker.support import BrokerThread
from regroup.client.blocking import BlockingConnection
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages.create_topics import (
    CreatableTopic,
    CreatableTopicConfig,
    CreateTopicsRequest,
    CreateTopicsResponse,
)
from regroup.protocol.messages.fetch import (
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchTopic,
    PartitionData,
)
from regroup.protocol.messages.list_offsets import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopic,
)
from regroup.protocol.messages.produce import (
    PartitionProduceData,
    PartitionProduceResponse,
    ProduceRequest,
    ProduceResponse,
    TopicProduceData,
)
from regroup.protocol.record_batch import Compression, Record, build_batch, decode_batches

NOW = int(time.time() * 1000)


def create(conn: BlockingConnection, name: str, partitions: int = 1, **configs: str) -> uuid.UUID:
    topic = CreatableTopic(
        name,
        partitions,
        1,
        configs=[CreatableTopicConfig(k.replace("_", "."), v) for k, v in configs.items()],
    )
    response = conn.request(
        CreateTopicsRequest(topics=[topic], timeout_ms=5000), CreateTopicsResponse, version=7
    )
    assert response.topics[0].error_code == 0, response.topics[0]
    return response.topics[0].topic_id


def batch(*values: bytes, ts: int = NOW, **kwargs: object) -> bytes:
    return build_batch([Record(i, ts + i, b"key-%d" % i, v) for i, v in enumerate(values)], **kwargs)  # type: ignore[arg-type]


def produce(
    conn: BlockingConnection,
    topic: str,
    data: bytes | None,
    *,
    partition: int = 0,
    version: int = 11,
    acks: int = -1,
) -> PartitionProduceResponse:
    request = ProduceRequest(
        acks=acks,
        timeout_ms=5000,
        topic_data=[TopicProduceData(topic, [PartitionProduceData(partition, data)])],
    )
    response = conn.request(request, ProduceResponse, version=version)
    return response.responses[0].partition_responses[0]


def fetch(
    conn: BlockingConnection,
    topic: str,
    offset: int,
    *,
    topic_id: uuid.UUID | None = None,
    version: int = 12,
    partition: int = 0,
    max_wait_ms: int = 0,
    min_bytes: int = 1,
    max_bytes: int = 1 << 20,
    partition_max_bytes: int = 1 << 20,
    isolation_level: int = 0,
    session_epoch: int = -1,
) -> tuple[FetchResponse, PartitionData]:
    ftopic = FetchTopic(
        topic=topic if version < 13 else "",
        topic_id=topic_id if (version >= 13 and topic_id is not None) else uuid.UUID(int=0),
        partitions=[
            FetchPartition(partition=partition, fetch_offset=offset, partition_max_bytes=partition_max_bytes)
        ],
    )
    request = FetchRequest(
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=isolation_level,
        session_id=0,
        session_epoch=session_epoch if version >= 7 else -1,
        topics=[ftopic],
    )
    response = conn.request(request, FetchResponse, version=version)
    parts = response.responses[0].partitions if response.responses else []
    return response, (parts[0] if parts else PartitionData())


def values(data: bytes | None) -> list[bytes | None]:
    return [r.value for b in decode_batches(data or b"") for r in b.records]


# ---------------------------------------------------------------------------------------------- Produce


@pytest.mark.parametrize("version", range(3, 12))
def test_produce_every_version(conn: BlockingConnection, version: int) -> None:
    create(conn, "p")
    first = produce(conn, "p", batch(b"a", b"b"), version=version)
    second = produce(conn, "p", batch(b"c"), version=version)
    assert (first.error_code, first.base_offset) == (0, 0)
    assert (second.error_code, second.base_offset) == (0, 2)
    assert second.log_append_time_ms == -1
    if version >= 5:
        assert second.log_start_offset == 0


@pytest.mark.parametrize("codec", list(Compression))
def test_produce_then_fetch_each_codec(conn: BlockingConnection, codec: Compression) -> None:
    create(conn, "c")
    payload = [b"value-%d" % i * 10 for i in range(50)]
    assert produce(conn, "c", batch(*payload, compression=codec)).error_code == 0
    _, part = fetch(conn, "c", 0, version=11)
    assert values(part.records) == payload


def test_produce_errors(make_broker: Callable[..., BrokerThread]) -> None:
    broker = make_broker(message_max_bytes=2000)
    with BlockingConnection(broker.address) as conn:
        create(conn, "e", 2)
        assert produce(conn, "missing", batch(b"x")).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert produce(conn, "e", batch(b"x"), partition=5).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert broker.broker.logs.topic("missing") is None  # produce never auto-creates (Kafka 4)
        corrupt = bytearray(batch(b"x"))
        corrupt[-1] ^= 0xFF
        assert produce(conn, "e", bytes(corrupt)).error_code == ErrorCode.CORRUPT_MESSAGE
        assert produce(conn, "e", batch(b"x" * 3000)).error_code == ErrorCode.MESSAGE_TOO_LARGE
        two = batch(b"x") + batch(b"y")
        assert produce(conn, "e", two).error_code == ErrorCode.INVALID_RECORD
        assert produce(conn, "e", b"").error_code == ErrorCode.INVALID_RECORD
        assert produce(conn, "e", batch(b"x")[:30]).error_code == ErrorCode.CORRUPT_MESSAGE
        zstd = batch(b"x", compression=Compression.ZSTD)
        assert produce(conn, "e", zstd, version=6).error_code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
        txn = batch(b"x", producer_id=1, producer_epoch=0, base_sequence=0, is_transactional=True)
        assert produce(conn, "e", txn).error_code == ErrorCode.INVALID_TXN_STATE
        bad_acks = produce(conn, "e", batch(b"x"), acks=2)
        assert bad_acks.error_code == ErrorCode.INVALID_REQUIRED_ACKS
        too_large = produce(conn, "e", batch(b"x" * 3000), version=8)
        assert too_large.error_message
        assert "exceeds" in too_large.error_message
        metadata_topic = produce(conn, "__consumer_offsets", batch(b"x"))
        assert metadata_topic.error_code in (
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            ErrorCode.INVALID_TOPIC_EXCEPTION,
        )


def test_idempotent_producer_sequences_and_duplicates(conn: BlockingConnection) -> None:
    create(conn, "idem")
    pid = 4242

    def seq_batch(seq: int, *vals: bytes, epoch: int = 0) -> bytes:
        return batch(*vals, producer_id=pid, producer_epoch=epoch, base_sequence=seq)

    assert produce(conn, "idem", seq_batch(0, b"a", b"b")).base_offset == 0
    assert produce(conn, "idem", seq_batch(2, b"c")).base_offset == 2
    duplicate = produce(conn, "idem", seq_batch(2, b"c"))
    assert (duplicate.error_code, duplicate.base_offset) == (0, 2)
    gap = produce(conn, "idem", seq_batch(7, b"z"))
    assert gap.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    stale = produce(conn, "idem", seq_batch(0, b"old", epoch=-0))
    assert stale.error_code in (
        0,
        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
        ErrorCode.DUPLICATE_SEQUENCE_NUMBER,
    )
    _, part = fetch(conn, "idem", 0)
    assert values(part.records) == [b"a", b"b", b"c"]


def test_log_append_time_topic(conn: BlockingConnection) -> None:
    create(conn, "lat", message_timestamp_type="LogAppendTime")
    before = int(time.time() * 1000)
    response = produce(conn, "lat", batch(b"x", ts=1000))
    assert response.log_append_time_ms >= before


def test_pipelined_idempotent_batches_keep_their_order(make_broker: Callable[..., BrokerThread]) -> None:
    # With an fsync per write, later batches queue behind running flushes and must still land in order.
    broker = make_broker(log_flush_interval_messages=1)
    with BlockingConnection(broker.address) as conn:
        create(conn, "ordered")
        for seq in range(50):
            data = batch(b"v%d" % seq, producer_id=77, producer_epoch=0, base_sequence=seq)
            request = ProduceRequest(
                acks=-1,
                timeout_ms=5000,
                topic_data=[TopicProduceData("ordered", [PartitionProduceData(0, data)])],
            )
            conn.send(request, 11)
        offsets = []
        for _ in range(50):
            # receive() checks each answer's correlation id against the oldest request in flight.
            response = conn.receive()
            assert isinstance(response, ProduceResponse)
            p = response.responses[0].partition_responses[0]
            assert p.error_code == 0
            offsets.append(p.base_offset)
        assert offsets == list(range(50))
        plog = broker.broker.logs.partition("ordered", 0)
        assert plog is not None
        assert plog.recovery_point == 50  # every acknowledged write was fsynced


# ---------------------------------------------------------------------------------------------- Fetch


@pytest.mark.parametrize("version", range(4, 18))
def test_fetch_every_version(conn: BlockingConnection, version: int) -> None:
    topic_id = create(conn, "f")
    produce(conn, "f", batch(b"one", b"two"))
    produce(conn, "f", batch(b"three"))
    response, part = fetch(conn, "f", 0, topic_id=topic_id, version=version)
    assert part.error_code == 0
    assert values(part.records) == [b"one", b"two", b"three"]
    assert part.high_watermark == 3
    assert part.last_stable_offset == 3
    if version >= 5:
        assert part.log_start_offset == 0
    assert part.aborted_transactions is None
    if version >= 7:
        assert response.error_code == 0
        assert response.session_id == 0
    if version >= 11:
        assert part.preferred_read_replica == -1
    _, middle = fetch(conn, "f", 2, topic_id=topic_id, version=version)
    assert values(middle.records)[-1] == b"three"


def test_fetch_errors(conn: BlockingConnection) -> None:
    create(conn, "fe")
    produce(conn, "fe", batch(b"x"))
    _, part = fetch(conn, "fe", 5)
    assert part.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    _, part = fetch(conn, "fe", 1)  # the log end: no data, no error
    assert (part.error_code, part.records) == (0, b"")
    _, part = fetch(conn, "missing", 0, version=12)
    assert part.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    _, part = fetch(conn, "", 0, topic_id=uuid.uuid4(), version=13)
    assert part.error_code == ErrorCode.UNKNOWN_TOPIC_ID
    response, _ = fetch(conn, "fe", 0, version=12, session_epoch=3)
    assert response.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    response, part = fetch(conn, "fe", 0, version=12, session_epoch=0)  # a new session: every partition
    assert (response.error_code, part.error_code) == (0, 0)
    assert response.session_id != 0
    _, part = fetch(conn, "fe", 0, isolation_level=1)
    assert part.aborted_transactions == []
    assert values(part.records) == [b"x"]


def test_fetch_long_poll_times_out_empty(conn: BlockingConnection) -> None:
    create(conn, "lp")
    started = time.monotonic()
    _, part = fetch(conn, "lp", 0, max_wait_ms=300)
    elapsed = time.monotonic() - started
    assert part.error_code == 0
    assert part.records == b""
    assert 0.25 <= elapsed < 10  # (a generous bound: the machine may be loaded)


def test_fetch_long_poll_wakes_on_append(broker: BrokerThread, conn: BlockingConnection) -> None:
    create(conn, "wake")

    def later() -> None:
        time.sleep(0.2)
        with BlockingConnection(broker.address) as other:
            produce(other, "wake", batch(b"late"))

    thread = threading.Thread(target=later)
    thread.start()
    started = time.monotonic()
    _, part = fetch(conn, "wake", 0, max_wait_ms=10_000)
    elapsed = time.monotonic() - started
    thread.join()
    assert values(part.records) == [b"late"]
    assert elapsed < 5


def test_fetch_min_bytes_waits_for_enough_data(broker: BrokerThread, conn: BlockingConnection) -> None:
    create(conn, "mb")
    produce(conn, "mb", batch(b"small"))
    started = time.monotonic()
    _, part = fetch(conn, "mb", 0, max_wait_ms=300, min_bytes=10_000)
    assert time.monotonic() - started >= 0.25
    assert values(part.records) == [b"small"]


def test_fetch_size_limits(conn: BlockingConnection) -> None:
    create(conn, "big", 2)
    for _ in range(5):
        produce(conn, "big", batch(b"x" * 1000), partition=0)
        produce(conn, "big", batch(b"y" * 1000), partition=1)
    # A batch larger than every limit still comes back whole when it is the first data.
    _, part = fetch(conn, "big", 0, max_bytes=10, partition_max_bytes=10)
    assert values(part.records) == [b"x" * 1000]
    # The response limit is shared across partitions; the second partition gets what is left.
    ftopic = FetchTopic(
        topic="big",
        partitions=[
            FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20),
            FetchPartition(partition=1, fetch_offset=0, partition_max_bytes=1 << 20),
        ],
    )
    request = FetchRequest(
        replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=3000, session_epoch=-1, topics=[ftopic]
    )
    response = conn.request(request, FetchResponse, version=12)
    first, second = response.responses[0].partitions
    assert len(values(first.records)) == 2
    assert values(second.records) == []
    assert second.high_watermark == 5


# ---------------------------------------------------------------------------------------------- ListOffsets


def list_offsets(
    conn: BlockingConnection, topic: str, timestamp: int, version: int = 10, max_num: int = 1
) -> tuple[int, int, list[int]]:
    request = ListOffsetsRequest(
        replica_id=-1,
        topics=[
            ListOffsetsTopic(topic, [ListOffsetsPartition(0, -1, timestamp, max_num if version == 0 else 1)])
        ],
    )
    if version == 0:
        request.topics[0].partitions[0].current_leader_epoch = -1
    response = conn.request(request, ListOffsetsResponse, version=version)
    p = response.topics[0].partitions[0]
    assert p.error_code == 0, p
    return p.offset, p.timestamp, list(p.old_style_offsets)


@pytest.mark.parametrize("version", range(11))
def test_list_offsets_every_version(conn: BlockingConnection, version: int) -> None:
    create(conn, "lo")
    produce(conn, "lo", batch(b"a", b"b", ts=1_000_000))
    produce(conn, "lo", batch(b"c", ts=3_000_000))
    if version == 0:
        assert list_offsets(conn, "lo", -1, 0, max_num=1)[2] == [3]
        assert list_offsets(conn, "lo", -1, 0, max_num=5)[2] == [3, 0]
        assert list_offsets(conn, "lo", -2, 0)[2] == [0]
        return
    assert list_offsets(conn, "lo", -1, version)[:2] == (3, -1)
    assert list_offsets(conn, "lo", -2, version)[:2] == (0, -1)
    assert list_offsets(conn, "lo", 1_000_001, version)[:2] == (1, 1_000_001)
    assert list_offsets(conn, "lo", 2_000_000, version)[:2] == (2, 3_000_000)
    assert list_offsets(conn, "lo", 9_000_000, version)[:2] == (-1, -1)
    if version >= 7:
        assert list_offsets(conn, "lo", -3, version)[:2] == (2, 3_000_000)
    if version >= 8:
        assert list_offsets(conn, "lo", -4, version)[:2] == (0, -1)
    if version >= 9:
        assert list_offsets(conn, "lo", -5, version)[:2] == (-1, -1)


def test_list_offsets_unknown_partition(conn: BlockingConnection) -> None:
    request = ListOffsetsRequest(
        replica_id=-1, topics=[ListOffsetsTopic("nope", [ListOffsetsPartition(0, -1, -1)])]
    )
    response = conn.request(request, ListOffsetsResponse, version=7)
    assert response.topics[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_flush_before_ack_with_flush_interval_messages(make_broker: Callable[..., BrokerThread]) -> None:
    broker = make_broker(log_flush_interval_messages=1)
    with BlockingConnection(broker.address) as conn:
        create(conn, "durable")
        response = produce(conn, "durable", batch(b"x"))
        assert response.error_code == 0
        plog = broker.broker.logs.partition("durable", 0)
        assert plog is not None
        assert plog.recovery_point == 1
        assert plog.unflushed_messages == 0


def test_raw_batch_offsets_are_assigned_by_the_broker(conn: BlockingConnection) -> None:
    create(conn, "assign")
    data = bytearray(batch(b"x"))
    struct.pack_into(">q", data, 0, 12345)  # clients may send any base offset
    assert produce(conn, "assign", bytes(data)).base_offset == 0


@pytest.mark.parametrize("version", range(4, 18))
def test_large_fetch_responses_are_spliced_byte_for_byte(version: int) -> None:
    from regroup.broker.wire import encode_response_chunks
    from regroup.protocol.framing import encode_response
    from regroup.protocol.messages.fetch import FetchableTopicResponse

    big = [batch(bytes([i]) * 40_000) for i in range(3)]
    response = FetchResponse(
        responses=[
            FetchableTopicResponse(
                topic="t" if version < 13 else "",
                topic_id=uuid.uuid4() if version >= 13 else uuid.UUID(int=0),
                partitions=[
                    PartitionData(partition_index=i, high_watermark=9, records=records)
                    for i, records in enumerate([big[0], b"small", big[1], None, big[2]])
                ],
            )
        ]
    )
    chunks = encode_response_chunks(response, version, 42)
    assert len(chunks) > 1
    assert b"".join(chunks) == encode_response(response, version, 42)
    assert response.responses[0].partitions[0].records == big[0]  # the message is left unchanged


def _wait_until(predicate: Callable[[], bool], timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_periodic_retention(make_broker: Callable[..., BrokerThread]) -> None:
    broker = make_broker(log_retention_check_interval_ms=100)
    with BlockingConnection(broker.address) as conn:
        create(conn, "old", retention_ms="200", internal_segment_bytes="2048")
        for _ in range(10):
            produce(conn, "old", batch(b"x" * 1000, ts=int(time.time() * 1000)))
        plog = broker.broker.logs.partition("old", 0)
        assert plog is not None
        assert plog.segment_count > 2
        assert _wait_until(lambda: broker.call(lambda: plog.log_start_offset) > 0)
        _, part = fetch(conn, "old", 0)
        assert part.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
        assert list_offsets(conn, "old", -2)[0] > 0


def test_periodic_compaction(make_broker: Callable[..., BrokerThread]) -> None:
    broker = make_broker(log_cleaner_backoff_ms=100)
    with BlockingConnection(broker.address) as conn:
        create(
            conn,
            "compacted",
            cleanup_policy="compact",
            internal_segment_bytes="2048",
            min_cleanable_dirty_ratio="0.01",
        )
        for round_ in range(6):
            records = [
                Record(i, NOW, b"key-%d" % (i % 4), b"round-%d" % round_ + b"." * 300) for i in range(4)
            ]
            assert produce(conn, "compacted", build_batch(records)).error_code == 0

        def compacted() -> bool:
            _, part = fetch(conn, "compacted", 0, partition_max_bytes=1 << 20)
            return part.error_code == 0 and len(values(part.records)) < 24

        assert _wait_until(compacted)


def test_periodic_time_based_flush(make_broker: Callable[..., BrokerThread]) -> None:
    broker = make_broker(log_flush_interval_ms=50)
    with BlockingConnection(broker.address) as conn:
        create(conn, "timed")
        produce(conn, "timed", batch(b"x"), acks=1)
        plog = broker.broker.logs.partition("timed", 0)
        assert plog is not None
        assert _wait_until(lambda: broker.call(lambda: plog.recovery_point) == 1)
