"""Fetch (key 1) v4-17 with long polling.

A fetch is answered at once when ``max_wait_ms`` is 0, when ``min_bytes`` are available, or when a partition
has an error; otherwise it waits for an append to one of its partitions (``append_listeners``), the deadline
or shutdown, and reads again (Kafka's ``DelayedFetch``). Size limits follow ``ReplicaManager.readFromLog``:
the response is capped by ``min(max_bytes, fetch.max.bytes)``, each partition by ``partition_max_bytes``,
and until one partition has returned data the limits may be exceeded to return one whole batch, so a batch
larger than the limits still makes progress.

Fetch sessions (KIP-227): a full request (session epoch 0 or -1) is answered as a sessionless full fetch
with session id 0, which is what Kafka does when its session cache is full; Java clients then keep sending
full requests. An incremental request (epoch > 0) names a session regroup never created, so it gets
FETCH_SESSION_ID_NOT_FOUND and the client falls back to a full fetch.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import Final

from regroup.broker.context import BrokerPort, RequestContext
from regroup.broker.handlers import HandlerRegistry
from regroup.log import PartitionLog, ReadResult
from regroup.protocol.api_keys import ApiKey
from regroup.protocol.errors import ErrorCode, KafkaError
from regroup.protocol.messages.fetch import (
    FetchableTopicResponse,
    FetchRequest,
    FetchResponse,
    PartitionData,
)
from regroup.protocol.primitives import ZERO_UUID

READ_COMMITTED: Final = 1
INT32_MAX: Final = 2**31 - 1


class _Wanted:
    """One requested partition and its response entry (reused across reads of a long poll)."""

    __slots__ = (
        "error",
        "fetch_offset",
        "follower",
        "index",
        "max_bytes",
        "name",
        "response",
        "seen_end",
        "topic_error",
    )

    def __init__(
        self,
        name: str | None,
        topic_error: ErrorCode,
        index: int,
        offset: int,
        max_bytes: int,
        follower: bool,
    ) -> None:
        self.name = name
        self.topic_error = topic_error
        self.index = index
        self.fetch_offset = offset
        self.max_bytes = max_bytes
        self.follower = follower  # a replica's fetch: read to the log end
        self.error = ErrorCode.NONE  # leadership or epoch refusal, decided once per request
        self.response = PartitionData(partition_index=index)
        self.seen_end = -1  # the partition's readable end at the last read


def handle(ctx: RequestContext, request: FetchRequest) -> FetchResponse | Awaitable[FetchResponse]:
    version = ctx.api_version
    if version >= 7 and request.session_epoch not in (0, -1):
        return FetchResponse(
            throttle_time_ms=0, error_code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND, session_id=0, responses=[]
        )
    broker = ctx.broker
    logs = broker.logs
    topology = broker.topology
    replica_id = request.replica_state.replica_id if version >= 15 else request.replica_id
    follower = replica_id >= 0 and broker.cluster is not None
    committed = request.isolation_level == READ_COMMITTED
    topics: list[FetchableTopicResponse] = []
    wanted: list[_Wanted] = []
    for topic in request.topics:
        if version >= 13:
            info = logs.topic_by_id(topic.topic_id)
            name = info.name if info is not None else None
            topic_error = ErrorCode.UNKNOWN_TOPIC_ID
        else:
            name = topic.topic
            topic_error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        entries: list[PartitionData] = []
        topics.append(
            FetchableTopicResponse(
                topic=topic.topic if version < 13 else "",
                topic_id=topic.topic_id if version >= 13 else ZERO_UUID,
                partitions=entries,
            )
        )
        for p in topic.partitions:
            w = _Wanted(name, topic_error, p.partition, p.fetch_offset, p.partition_max_bytes, follower)
            wanted.append(w)
            entries.append(w.response)
            if name is None:
                continue
            w.error = topology.leader_error(name, p.partition, p.current_leader_epoch)
            if follower and w.error is ErrorCode.NONE and broker.cluster is not None:
                # The follower's fetch offset is its log end: record its progress (it may join the ISR, the
                # high watermark may advance) before reading (Partition.updateFollowerFetchState).
                w.error = broker.cluster.replicas.follower_fetched(
                    name,
                    p.partition,
                    replica_id,
                    fetch_offset=p.fetch_offset,
                    log_start_offset=p.log_start_offset,
                    broker_epoch=request.replica_state.replica_epoch if version >= 15 else -1,
                )
    response = FetchResponse(throttle_time_ms=0, error_code=ErrorCode.NONE, session_id=0, responses=topics)
    limit = broker.fetch_max_bytes if version < 3 else min(request.max_bytes, broker.fetch_max_bytes)

    total, errors = _read(broker, wanted, limit, committed, version)
    if (
        request.max_wait_ms <= 0
        or total >= request.min_bytes
        or errors
        or not wanted
        or broker.stopping.done()
    ):
        return response

    async def long_poll() -> FetchResponse:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + request.max_wait_ms / 1000
        while True:
            woken: asyncio.Future[None] = loop.create_future()

            def wake(_: object = None, woken: asyncio.Future[None] = woken) -> None:
                if not woken.done():
                    woken.set_result(None)

            watched: list[PartitionLog] = []
            for w in wanted:
                plog = logs.partition(w.name, w.index) if w.name is not None else None
                if plog is not None:
                    plog.append_listeners.append(wake)
                    plog.high_watermark_listeners.append(wake)
                    watched.append(plog)
            timer = loop.call_at(deadline, wake)
            broker.stopping.add_done_callback(wake)
            try:
                # Appends made between the last read and now (even before this task first ran) count.
                if not _grown(broker, wanted, committed):
                    await woken
            finally:
                timer.cancel()
                broker.stopping.remove_done_callback(wake)
                for plog in watched:
                    with contextlib.suppress(ValueError):
                        plog.append_listeners.remove(wake)
                    with contextlib.suppress(ValueError):
                        plog.high_watermark_listeners.remove(wake)
            expired = loop.time() >= deadline or broker.stopping.done()
            if not expired and not _grown(broker, wanted, committed):
                continue
            total, errors = _read(broker, wanted, limit, committed, version)
            if total >= request.min_bytes or errors or expired:
                return response

    return long_poll()


def _grown(broker: BrokerPort, wanted: list[_Wanted], committed: bool) -> bool:
    """Has any partition grown (or vanished) since it was last read?"""
    logs = broker.logs
    for w in wanted:
        plog = logs.partition(w.name, w.index) if w.name is not None else None
        if plog is None:
            return True
        end = _readable_end(plog, w, committed)
        if end != w.seen_end:
            return True
    return False


def _read(
    broker: BrokerPort, wanted: list[_Wanted], limit: int, committed: bool, version: int
) -> tuple[int, bool]:
    """Fill every response entry from the logs; returns (record bytes returned, whether any entry failed)."""
    logs = broker.logs
    total = 0
    errors = False
    min_one = True  # until a partition returns data, one whole batch may exceed the limits
    for w in wanted:
        r = w.response
        plog = logs.partition(w.name, w.index) if w.name is not None else None
        if plog is None:
            _fail(r, w.topic_error if w.name is None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            errors = True
            continue
        if w.error is not ErrorCode.NONE:
            _fail(r, w.error)
            errors = True
            continue
        max_bytes = min(w.max_bytes, limit - total)
        try:
            if max_bytes <= 0 and not min_one:
                # The response is full: report the partition's offsets without reading records.
                if not plog.log_start_offset <= w.fetch_offset <= plog.log_end_offset:
                    raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE)
                result = ReadResult(b"", plog.high_watermark, plog.log_start_offset, plog.last_stable_offset)
                result_data: bytes = b""
            else:
                result = plog.read(
                    w.fetch_offset, max(max_bytes, 1), isolation_committed=committed, to_log_end=w.follower
                )
                result_data = result.data
                # The log always returns at least one batch; past the first non-empty partition Kafka
                # returns nothing rather than exceed the limits.
                if not min_one and len(result_data) > max_bytes:
                    result_data = b""
        except KafkaError as exc:
            _fail(r, exc.code)
            errors = True
            continue
        data = result_data
        size = len(data)
        w.seen_end = _readable_end(plog, w, committed)
        r.error_code = ErrorCode.NONE
        r.high_watermark = result.high_watermark
        r.last_stable_offset = result.last_stable_offset
        r.log_start_offset = result.log_start_offset
        r.aborted_transactions = [] if committed else None
        r.preferred_read_replica = -1
        r.records = data
        total += size
        if size:
            min_one = False
    return total, errors


def _readable_end(plog: PartitionLog, w: _Wanted, committed: bool) -> int:
    """How far this fetcher may read: a follower to the log end, a consumer to the high watermark (the last
    stable offset under read_committed)."""
    if w.follower:
        return plog.log_end_offset
    return plog.last_stable_offset if committed else plog.high_watermark


def _fail(r: PartitionData, code: ErrorCode) -> None:
    r.error_code = code
    r.high_watermark = -1
    r.last_stable_offset = -1
    r.log_start_offset = -1
    r.aborted_transactions = None
    r.records = b""


def register(registry: HandlerRegistry) -> None:
    registry.register(ApiKey.FETCH, 4, 17, handle)
