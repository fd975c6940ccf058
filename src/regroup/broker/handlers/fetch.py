"""Fetch (key 1) v4-17 with long polling.

A fetch is answered at once when ``max_wait_ms`` is 0, when ``min_bytes`` are available, or when a partition
has an error; otherwise it waits until one of its partitions can give it more (an append for a follower or on
a partition that is not replicated, a high-watermark move for a consumer of a replicated one), the deadline
or shutdown, and reads again (Kafka's ``DelayedFetch``). Size limits follow ``ReplicaManager.readFromLog``:
the response is capped by ``min(max_bytes, fetch.max.bytes)``, each partition by ``partition_max_bytes``,
and until one partition has returned data the limits may be exceeded to return one whole batch, so a batch
larger than the limits still makes progress.

Fetch sessions (KIP-227, :mod:`regroup.broker.fetch_sessions`): a full request with session epoch 0 may
create a session (its id is in the response); requests with epochs 1, 2, … continue it, naming only the
partitions whose fetch state changed and the ones to forget, and are answered with only the session's
partitions that have something new for the fetcher. Epoch -1 closes the session named and fetches
sessionless (session id 0, every partition answered), as does a full request when the cache has no room.
Long polling waits on every partition of the session.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable
from typing import Final

from regroup.broker.context import BrokerPort, RequestContext
from regroup.broker.fetch_sessions import NO_RESPONSE, FetchPartitionState, FetchSession
from regroup.broker.handlers import HandlerRegistry
from regroup.log import PartitionLog, ReadResult
from regroup.protocol.api_keys import ApiKey
from regroup.protocol.errors import ErrorCode, KafkaError
from regroup.protocol.fetch_session import INITIAL_EPOCH, INVALID_SESSION_ID
from regroup.protocol.messages.fetch import (
    DEFAULT_EpochEndOffset,
    DEFAULT_LeaderIdAndEpoch,
    DEFAULT_SnapshotId,
    FetchableTopicResponse,
    FetchRequest,
    FetchResponse,
    PartitionData,
)
from regroup.protocol.primitives import ZERO_UUID

READ_COMMITTED: Final = 1
# How stale a caught-up follower's caught-up clock may get while its fetches do not name a partition at the
# leader's log end: at most what a long-polling follower's own fetches leave it in Kafka (the default
# replica.fetch.wait.max.ms), far inside replica.lag.time.max.ms.
QUIET_FOLLOWER_REFRESH_MS: Final = 500
INT32_MAX: Final = 2**31 - 1


def handle(ctx: RequestContext, request: FetchRequest) -> FetchResponse | Awaitable[FetchResponse]:
    version = ctx.api_version
    broker = ctx.broker
    logs = broker.logs
    topology = broker.topology
    replica_id = request.replica_state.replica_id if version >= 15 else request.replica_id
    follower = replica_id >= 0 and broker.cluster is not None
    committed = request.isolation_level == READ_COMMITTED
    uses_ids = version >= 13
    sessions = broker.fetch_sessions
    session: FetchSession | None = None
    create_session = False
    now_ms = broker.clock.now_ms()
    if version >= 7:
        epoch = request.session_epoch
        if epoch > INITIAL_EPOCH:
            found = sessions.get(request.session_id, epoch, uses_ids, now_ms)
            if isinstance(found, ErrorCode):
                return FetchResponse(
                    throttle_time_ms=0, error_code=found, session_id=INVALID_SESSION_ID, responses=[]
                )
            session = found
        else:
            if request.session_id:
                sessions.remove(request.session_id)  # epoch 0 replaces it, -1 closes it
            create_session = epoch == INITIAL_EPOCH
    if session is None:
        wanted = [
            FetchPartitionState.requested(topic.topic_id if uses_ids else topic.topic, p)
            for topic in request.topics
            for p in topic.partitions
        ]
    else:
        wanted = _continue_session(session, request, uses_ids)
    names: dict[str | uuid.UUID, str | None] = {}
    token = topology.leadership_token() if session is not None else None
    unknown_topic = ErrorCode.UNKNOWN_TOPIC_ID if uses_ids else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    for w in wanted:
        key = w.topic
        if key in names:
            name = names[key]
        else:
            if uses_ids:
                assert isinstance(key, uuid.UUID)
                info = logs.topic_by_id(key)
                name = info.name if info is not None else None
            else:
                name = str(key)
            names[key] = name
        w.name = name
        w.topic_error = unknown_topic
        w.follower = follower
        w.error = ErrorCode.NONE
        if name is None:
            continue
        # A session's partition the fetch does not name, quiet at the last fetch under the same token: its
        # leadership (and the epoch the fetcher gave) is as it was then, and is not checked again.
        if w.named or not w.quiet or token is None or w.checked_under != token:
            w.error = topology.leader_error(name, w.index, w.current_leader_epoch)
            w.checked_under = token if w.error is ErrorCode.NONE else None
        if follower and w.error is ErrorCode.NONE and broker.cluster is not None:
            if (
                not w.named
                and now_ms - w.bookkept_ms < QUIET_FOLLOWER_REFRESH_MS
                and (plog := logs.partition(name, w.index)) is not None
                and w.fetch_offset == plog.log_end_offset
            ):
                # A session's partition the fetch does not name, at the leader's log end: the follower is
                # caught up and its fetch changes nothing but the caught-up clock, refreshed at least every
                # QUIET_FOLLOWER_REFRESH_MS.
                continue
            # The follower's fetch offset is its log end: record its progress (it may join the ISR, the
            # high watermark may advance) before reading (Partition.updateFollowerFetchState). A session's
            # partitions the request does not name are fetched at their cached offsets.
            w.error = broker.cluster.replicas.follower_fetched(
                name,
                w.index,
                replica_id,
                fetch_offset=w.fetch_offset,
                log_start_offset=w.log_start_offset,
                broker_epoch=request.replica_state.replica_epoch if version >= 15 else -1,
            )
            w.bookkept_ms = now_ms

    def respond() -> FetchResponse:
        """The response: every partition of a full fetch (creating the session it asked for), or the
        session's partitions with something new."""
        session_id = INVALID_SESSION_ID
        if session is not None:
            session_id = session.id
            answered = [w for w in wanted if not w.quiet and w.must_respond()]
        else:
            answered = wanted
            if create_session:
                for w in wanted:
                    w.must_respond()  # (remembers what this response tells the fetcher)
                session_id = sessions.create(
                    follower, uses_ids, {(w.topic, w.index): w for w in wanted}, broker.clock.now_ms()
                )
        topics: list[FetchableTopicResponse] = []
        last: str | uuid.UUID | None = None
        entries: list[PartitionData] = []
        for w in answered:
            if w.topic != last or not topics:
                last = w.topic
                entries = []
                topics.append(
                    FetchableTopicResponse(
                        topic="" if uses_ids else str(w.topic),
                        topic_id=w.topic if isinstance(w.topic, uuid.UUID) else ZERO_UUID,
                        partitions=entries,
                    )
                )
            entries.append(w.response)
        if session_id != INVALID_SESSION_ID:
            # The session outlives the response: it must not keep the records sent (a response's worth
            # per session) after they are written.
            for w in wanted:
                w.response = NO_RESPONSE
        return FetchResponse(
            throttle_time_ms=0, error_code=ErrorCode.NONE, session_id=session_id, responses=topics
        )

    limit = broker.fetch_max_bytes if version < 3 else min(request.max_bytes, broker.fetch_max_bytes)

    total, errors = _read(broker, wanted, limit, committed, version)
    if (
        request.max_wait_ms <= 0
        or total >= request.min_bytes
        or errors
        or not wanted
        or broker.stopping.done()
    ):
        return respond()

    async def long_poll() -> FetchResponse:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + request.max_wait_ms / 1000
        while True:
            woken: asyncio.Future[None] = loop.create_future()

            def wake(_: object = None, woken: asyncio.Future[None] = woken) -> None:
                if not woken.done():
                    woken.set_result(None)

            # Each partition is watched for what moves this fetcher's readable end (_readable_end): a
            # follower's, its log end (appends); a consumer's, the high watermark, which appends move on a
            # partition that is not replicated, a replicated one's ISR otherwise — and under
            # read_committed an appended transaction marker may move the last stable offset up to it.
            on_append: list[PartitionLog] = []
            on_high_watermark: list[PartitionLog] = []
            for w in wanted:
                plog = logs.partition(w.name, w.index) if w.name is not None else None
                if plog is None:
                    continue
                if w.follower or not plog.replicated:
                    plog.append_listeners.append(wake)
                    on_append.append(plog)
                else:
                    plog.high_watermark_listeners.append(wake)
                    on_high_watermark.append(plog)
                    if committed:
                        plog.append_listeners.append(wake)
                        on_append.append(plog)
            timer = loop.call_at(deadline, wake)
            broker.stopping.add_done_callback(wake)
            try:
                # Appends made between the last read and now (even before this task first ran) count.
                if not _grown(broker, wanted, committed):
                    await woken
            finally:
                timer.cancel()
                broker.stopping.remove_done_callback(wake)
                # try/except, not contextlib.suppress: this runs for every partition of every poll.
                for plog in on_append:
                    try:  # noqa: SIM105
                        plog.append_listeners.remove(wake)
                    except ValueError:
                        pass
                for plog in on_high_watermark:
                    try:  # noqa: SIM105
                        plog.high_watermark_listeners.remove(wake)
                    except ValueError:
                        pass
            expired = loop.time() >= deadline or broker.stopping.done()
            if not expired and not _grown(broker, wanted, committed):
                continue
            total, errors = _read(broker, wanted, limit, committed, version)
            if total >= request.min_bytes or errors or expired:
                return respond()

    return long_poll()


def _continue_session(
    session: FetchSession, request: FetchRequest, uses_ids: bool
) -> list[FetchPartitionState]:
    """Apply an incremental request to its session: the partitions named are added or updated, the
    forgotten ones removed. Returns the session's partitions, all of which this request fetches."""
    partitions = session.partitions
    for w in partitions.values():
        w.named = False
    for topic in request.topics:
        key = topic.topic_id if uses_ids else topic.topic
        for p in topic.partitions:
            cached = partitions.get((key, p.partition))
            if cached is None:
                partitions[(key, p.partition)] = FetchPartitionState.requested(key, p)
            else:
                cached.update(p)
                cached.named = True
    for forgotten in request.forgotten_topics_data:
        key = forgotten.topic_id if uses_ids else forgotten.topic
        for index in forgotten.partitions:
            partitions.pop((key, index), None)
    return list(partitions.values())


def _grown(broker: BrokerPort, wanted: list[FetchPartitionState], committed: bool) -> bool:
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
    broker: BrokerPort, wanted: list[FetchPartitionState], limit: int, committed: bool, version: int
) -> tuple[int, bool]:
    """Fill the response entries from the logs; returns (record bytes returned, whether any entry failed).
    A session's partition the request does not name is left alone (``quiet``) while the fetcher is at its
    readable end and has been told its high watermark and log start offset: it has nothing to answer."""
    logs = broker.logs
    total = 0
    errors = False
    min_one = True  # until a partition returns data, one whole batch may exceed the limits
    for w in wanted:
        plog = logs.partition(w.name, w.index) if w.name is not None else None
        if (
            not w.named
            and plog is not None
            and w.error is ErrorCode.NONE
            and w.fetch_offset == w.seen_end == _readable_end(plog, w, committed)
            and plog.high_watermark == w.sent_high_watermark
            and plog.log_start_offset == w.sent_log_start_offset
        ):
            w.quiet = True
            continue
        w.quiet = False
        if plog is None:
            w.response = _failed(w, w.topic_error if w.name is None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            errors = True
            continue
        if w.error is not ErrorCode.NONE:
            w.response = _failed(w, w.error)
            errors = True
            continue
        max_bytes = min(w.max_bytes, limit - total)
        try:
            if max_bytes <= 0 and not min_one:
                # The response is full: report the partition's offsets without reading records.
                if not plog.log_start_offset <= w.fetch_offset <= plog.log_end_offset:
                    raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE)
                result = ReadResult(b"", plog.high_watermark, plog.log_start_offset, plog.last_stable_offset)
                data: bytes = b""
            else:
                result = plog.read(
                    w.fetch_offset, max(max_bytes, 1), isolation_committed=committed, to_log_end=w.follower
                )
                data = result.data
                # The log always returns at least one batch; past the first non-empty partition Kafka
                # returns nothing rather than exceed the limits.
                if not min_one and len(data) > max_bytes:
                    data = b""
        except KafkaError as exc:
            w.response = _failed(w, exc.code)
            errors = True
            continue
        w.seen_end = _readable_end(plog, w, committed)
        # The fields regroup never sets (a follower truncates through OffsetForLeaderEpoch; no snapshots)
        # carry the codec's shared defaults: no three new objects per partition answered, and the writers
        # recognise them without comparing their fields. Nothing writes to them.
        w.response = PartitionData(
            w.index,
            ErrorCode.NONE,
            result.high_watermark,
            result.last_stable_offset,
            result.log_start_offset,
            DEFAULT_EpochEndOffset,
            DEFAULT_LeaderIdAndEpoch,
            DEFAULT_SnapshotId,
            [] if committed else None,
            -1,
            data,
        )
        if data:
            total += len(data)
            min_one = False
    return total, errors


def _readable_end(plog: PartitionLog, w: FetchPartitionState, committed: bool) -> int:
    """How far this fetcher may read: a follower to the log end, a consumer to the high watermark (the last
    stable offset under read_committed)."""
    if w.follower:
        return plog.log_end_offset
    return plog.last_stable_offset if committed else plog.high_watermark


def _failed(w: FetchPartitionState, code: ErrorCode) -> PartitionData:
    """The response entry of a partition that cannot be read: its error, no offsets, no records (and the
    shared defaults, as :func:`_read`'s entries)."""
    return PartitionData(
        w.index,
        code,
        -1,
        -1,
        -1,
        DEFAULT_EpochEndOffset,
        DEFAULT_LeaderIdAndEpoch,
        DEFAULT_SnapshotId,
        None,
        -1,
        b"",
    )


def register(registry: HandlerRegistry) -> None:
    registry.register(ApiKey.FETCH, 4, 17, handle)
