"""Fetch sessions (KIP-227): a full fetch creates a session, incremental fetches name only what changed and
are answered only with what is new, and the session cache's limits and errors behave as Kafka's."""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Sequence

import pytest

from broker.support import BrokerThread
from broker.test_data_apis import batch, create, produce, values
from regroup.broker.fetch_sessions import EVICTION_MS, FetchPartitionState, FetchSessionCache
from regroup.client.blocking import BlockingConnection
from regroup.cluster.topology import Topology
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages.fetch import (
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchTopic,
    ForgottenTopic,
    PartitionData,
)


def request(
    topic: str | uuid.UUID,
    offsets: dict[int, int],
    *,
    session_id: int,
    epoch: int,
    version: int = 13,
    forget: Sequence[int] = (),
    max_wait_ms: int = 0,
) -> tuple[FetchRequest, int]:
    fetch_topic = FetchTopic(topic_id=topic) if isinstance(topic, uuid.UUID) else FetchTopic(topic=topic)
    fetch_topic.partitions = [FetchPartition(partition=p, fetch_offset=o) for p, o in offsets.items()]
    forgotten: list[ForgottenTopic] = []
    if forget:
        gone = ForgottenTopic(topic_id=topic) if isinstance(topic, uuid.UUID) else ForgottenTopic(topic=topic)
        gone.partitions = list(forget)
        forgotten.append(gone)
    return (
        FetchRequest(
            replica_id=-1,
            max_wait_ms=max_wait_ms,
            min_bytes=1,
            max_bytes=1 << 20,
            session_id=session_id,
            session_epoch=epoch,
            topics=[fetch_topic] if offsets else [],
            forgotten_topics_data=forgotten,
        ),
        version,
    )


def fetch(
    conn: BlockingConnection, topic: str | uuid.UUID, offsets: dict[int, int], **kw: object
) -> FetchResponse:
    message, version = request(topic, offsets, **kw)  # type: ignore[arg-type]
    return conn.request(message, FetchResponse, version=version)


def answered(response: FetchResponse) -> dict[int, PartitionData]:
    assert response.error_code == ErrorCode.NONE, response
    return {p.partition_index: p for t in response.responses for p in t.partitions}


def test_a_full_fetch_creates_a_session_and_incremental_fetches_answer_only_what_changed(
    conn: BlockingConnection,
) -> None:
    tid = create(conn, "s", 3)
    produce(conn, "s", batch(b"a"), partition=0)
    full = fetch(conn, tid, {0: 0, 1: 0, 2: 0}, session_id=0, epoch=0)
    session = full.session_id
    assert session != 0
    first = answered(full)
    assert sorted(first) == [0, 1, 2]
    assert values(first[0].records) == [b"a"]

    # The consumer moved on in partition 0; nothing is new anywhere: nothing is answered.
    assert answered(fetch(conn, tid, {0: 1}, session_id=session, epoch=1)) == {}
    # Data in a partition the request does not name: only that partition is answered, with its new
    # high watermark.
    produce(conn, "s", batch(b"b", b"c"), partition=2)
    new = answered(fetch(conn, tid, {}, session_id=session, epoch=2))
    assert sorted(new) == [2]
    assert (values(new[2].records), new[2].high_watermark) == ([b"b", b"c"], 2)
    # Partition 2 stays at offset 0 in the session: its records come again, its high watermark is known.
    again = answered(fetch(conn, tid, {}, session_id=session, epoch=3))
    assert sorted(again) == [2]
    assert answered(fetch(conn, tid, {2: 2}, session_id=session, epoch=4)) == {}


def test_session_errors(conn: BlockingConnection) -> None:
    tid = create(conn, "e", 1)
    session = fetch(conn, tid, {0: 0}, session_id=0, epoch=0).session_id
    assert fetch(conn, tid, {}, session_id=session, epoch=1).error_code == ErrorCode.NONE
    # An epoch other than the next one, a session never created, a session created with topic ids
    # continued with names: refused, and the session keeps its epoch.
    stale = fetch(conn, tid, {}, session_id=session, epoch=1)
    assert (stale.error_code, stale.session_id, stale.responses) == (
        ErrorCode.INVALID_FETCH_SESSION_EPOCH,
        0,
        [],
    )
    unknown = fetch(conn, tid, {}, session_id=session ^ 1, epoch=2)
    assert unknown.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    by_name = fetch(conn, "e", {}, session_id=session, epoch=2, version=12)
    assert by_name.error_code == ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR
    assert fetch(conn, tid, {}, session_id=session, epoch=2).error_code == ErrorCode.NONE


def test_partitions_are_added_and_forgotten(conn: BlockingConnection) -> None:
    create(conn, "f", 3)
    session = fetch(conn, "f", {0: 0, 1: 0}, session_id=0, epoch=0, version=12).session_id
    # Forget partition 1 and add partition 2: the new partition is answered (its state is new to the
    # fetcher), the forgotten one no longer is, even with new data.
    added = answered(fetch(conn, "f", {2: 0}, session_id=session, epoch=1, version=12, forget=[1]))
    assert sorted(added) == [2]
    produce(conn, "f", batch(b"x"), partition=1)
    assert answered(fetch(conn, "f", {}, session_id=session, epoch=2, version=12)) == {}
    produce(conn, "f", batch(b"y"), partition=2)
    assert sorted(answered(fetch(conn, "f", {}, session_id=session, epoch=3, version=12))) == [2]


def test_a_partition_with_an_error_is_always_answered(conn: BlockingConnection) -> None:
    tid = create(conn, "err", 1)
    session = fetch(conn, tid, {0: 5}, session_id=0, epoch=0).session_id
    for epoch in (1, 2):
        part = answered(fetch(conn, tid, {}, session_id=session, epoch=epoch))[0]
        assert part.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    # Once the error is gone the partition's high watermark is sent again.
    part = answered(fetch(conn, tid, {0: 0}, session_id=session, epoch=3))[0]
    assert (part.error_code, part.high_watermark) == (0, 0)


def test_the_final_epoch_closes_the_session_and_fetches_in_full(conn: BlockingConnection) -> None:
    tid = create(conn, "fin", 2)
    session = fetch(conn, tid, {0: 0, 1: 0}, session_id=0, epoch=0).session_id
    closing = fetch(conn, tid, {0: 0, 1: 0}, session_id=session, epoch=-1)
    assert closing.session_id == 0
    assert sorted(answered(closing)) == [0, 1]
    assert (
        fetch(conn, tid, {}, session_id=session, epoch=1).error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    )
    # Epoch 0 naming a session replaces it with a new one.
    first = fetch(conn, tid, {0: 0}, session_id=0, epoch=0).session_id
    second = fetch(conn, tid, {0: 0}, session_id=first, epoch=0).session_id
    assert second not in (0, first)
    assert fetch(conn, tid, {}, session_id=first, epoch=1).error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def test_a_long_poll_wakes_for_a_partition_of_the_session_the_request_does_not_name(
    broker: BrokerThread, conn: BlockingConnection
) -> None:
    tid = create(conn, "lp", 2)
    session = fetch(conn, tid, {0: 0, 1: 0}, session_id=0, epoch=0).session_id
    message, version = request(tid, {}, session_id=session, epoch=1, max_wait_ms=60_000)
    conn.send(message, version)
    with BlockingConnection(broker.address) as producer:
        produce(producer, "lp", batch(b"late"), partition=1)
    response = conn.receive(timeout=60)
    assert isinstance(response, FetchResponse)
    parts = answered(response)
    assert sorted(parts) == [1]
    assert values(parts[1].records) == [b"late"]


def test_a_consumer_long_poll_on_a_replicated_partition_waits_for_its_high_watermark(
    broker: BrokerThread, conn: BlockingConnection
) -> None:
    """Appends beyond a replicated partition's high watermark cannot give a consumer anything: its long
    poll listens for the high watermark alone, and is answered once the ISR has the records."""
    tid = create(conn, "hw", 1)

    def replicated() -> None:
        plog = broker.broker.logs.partition("hw", 0)
        assert plog is not None
        plog.replicated = True

    broker.call(replicated)
    plog = broker.broker.logs.partition("hw", 0)
    assert plog is not None
    message, version = request(tid, {0: 0}, session_id=0, epoch=-1, max_wait_ms=60_000)
    conn.send(message, version)

    def listeners() -> tuple[int, int]:
        assert plog is not None
        return len(plog.append_listeners), len(plog.high_watermark_listeners)

    deadline = time.monotonic() + 30
    while broker.call(listeners) != (0, 1):
        assert time.monotonic() < deadline, broker.call(listeners)
        time.sleep(0.01)
    with BlockingConnection(broker.address) as producer:
        produce(producer, "hw", batch(b"replicated"), partition=0)
    assert broker.call(listeners) == (0, 1)  # the append did not wake it
    broker.call(lambda: plog.set_high_watermark(plog.log_end_offset))
    response = conn.receive(timeout=60)
    assert isinstance(response, FetchResponse)
    assert values(answered(response)[0].records) == [b"replicated"]


def test_the_cache_keeps_at_most_its_slots(make_broker: Callable[..., BrokerThread]) -> None:
    broker = make_broker(max_incremental_fetch_session_cache_slots=1)
    with BlockingConnection(broker.address) as conn:
        tid = create(conn, "c", 2)
        one = fetch(conn, tid, {0: 0}, session_id=0, epoch=0).session_id
        assert one != 0
        # No room, and a session of as many partitions is worth no more: answered sessionless.
        full = fetch(conn, tid, {1: 0}, session_id=0, epoch=0)
        assert (full.session_id, sorted(answered(full))) == (0, [1])
        # More partitions are worth more: the first session makes way.
        two = fetch(conn, tid, {0: 0, 1: 0}, session_id=0, epoch=0).session_id
        assert two not in (0, one)
        assert (
            fetch(conn, tid, {}, session_id=one, epoch=1).error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
        )
        assert fetch(conn, tid, {}, session_id=two, epoch=1).error_code == ErrorCode.NONE


def partitions(n: int) -> dict[tuple[str | uuid.UUID, int], FetchPartitionState]:
    return {("t", i): FetchPartitionState("t", i, 0, 0, 1 << 20, -1) for i in range(n)}


def test_eviction_prefers_stale_sessions_then_followers_then_more_partitions() -> None:
    cache = FetchSessionCache(2, random.Random(7))
    consumer = cache.create(False, True, partitions(5), now_ms=0)
    follower = cache.create(True, True, partitions(1), now_ms=0)
    assert 0 not in (consumer, follower)
    assert len(cache) == 2
    # Full, nothing stale: a consumer session of 5 partitions cannot displace either.
    assert cache.create(False, True, partitions(5), now_ms=1000) == 0
    # A follower's session displaces the least valuable, the consumer's.
    second_follower = cache.create(True, True, partitions(1), now_ms=1000)
    assert second_follower != 0
    assert {s.id for s in cache} == {follower, second_follower}
    # A consumer cannot displace followers, however many partitions it fetches…
    assert cache.create(False, True, partitions(500), now_ms=2000) == 0
    # …unless a session has not been used for the eviction time.
    assert not isinstance(cache.get(second_follower, 1, True, now_ms=EVICTION_MS), ErrorCode)
    late = cache.create(False, True, partitions(1), now_ms=EVICTION_MS + 1)
    assert late != 0
    assert {s.id for s in cache} == {second_follower, late}
    assert cache.evictions == 2


def test_no_slots_means_no_sessions() -> None:
    assert FetchSessionCache(0).create(True, True, partitions(1), now_ms=0) == 0


@pytest.mark.parametrize("epoch", [1, 2**31 - 1])
def test_epochs_advance_and_wrap(epoch: int) -> None:
    cache = FetchSessionCache(1, random.Random(1))
    sid = cache.create(False, False, partitions(1), now_ms=0)
    session = next(iter(cache))
    session.epoch = epoch
    assert cache.get(sid, epoch, False, now_ms=0) is session
    assert session.epoch == (1 if epoch == 2**31 - 1 else epoch + 1)


def test_a_session_keeps_no_records_once_answered(broker: BrokerThread, conn: BlockingConnection) -> None:
    tid = create(conn, "mem", 2)
    produce(conn, "mem", batch(b"x" * 10_000), partition=0)
    session = fetch(conn, tid, {0: 0, 1: 0}, session_id=0, epoch=0).session_id
    produce(conn, "mem", batch(b"y" * 10_000), partition=1)
    assert values(answered(fetch(conn, tid, {0: 1}, session_id=session, epoch=1))[1].records) == [
        b"y" * 10_000
    ]

    def kept() -> list[bytes | None]:
        (cached,) = [s for s in broker.broker.fetch_sessions if s.id == session]
        return [w.response.records for w in cached.partitions.values()]

    assert not any(broker.call(kept))


class _Moving:
    """The broker's topology, until ``move`` says a partition is led elsewhere now (a new token)."""

    def __init__(self, inner: Topology) -> None:
        self.inner = inner
        self.moved: set[tuple[str, int]] = set()
        self.asked: list[tuple[str, int]] = []

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def leader_error(self, topic: str, partition: int, current_leader_epoch: int = -1) -> ErrorCode:
        self.asked.append((topic, partition))
        if (topic, partition) in self.moved:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return self.inner.leader_error(topic, partition, current_leader_epoch)

    def leadership_token(self) -> object:
        return len(self.moved)


def test_a_quiet_partition_is_checked_again_once_leadership_changed(
    broker: BrokerThread, conn: BlockingConnection
) -> None:
    tid = create(conn, "moving", 2)
    produce(conn, "moving", batch(b"a"), partition=0)
    moving = _Moving(broker.broker.topology)

    def install() -> None:
        broker.broker.topology = moving  # type: ignore[assignment]

    def uninstall() -> None:
        broker.broker.topology = moving.inner

    broker.call(install)
    try:
        session = fetch(conn, tid, {0: 0, 1: 0}, session_id=0, epoch=0).session_id
        assert answered(fetch(conn, tid, {0: 1}, session_id=session, epoch=1)) == {}
        assert answered(fetch(conn, tid, {}, session_id=session, epoch=2)) == {}
        moving.asked.clear()
        # Nothing named, both quiet at the last fetch, leadership as it was: nothing to check or answer.
        assert answered(fetch(conn, tid, {}, session_id=session, epoch=3)) == {}
        assert moving.asked == []
        moving.moved.add(("moving", 1))
        moved = answered(fetch(conn, tid, {}, session_id=session, epoch=4))
        assert {p: d.error_code for p, d in moved.items()} == {1: ErrorCode.NOT_LEADER_OR_FOLLOWER}
        assert sorted(moving.asked) == [("moving", 0), ("moving", 1)]
    finally:
        broker.call(uninstall)
