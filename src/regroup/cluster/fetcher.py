"""Follower fetching (Kafka's ``ReplicaFetcherThread``): one task per leader node, over one connection to
its inter-broker listener, fetching every partition this node follows from that leader.

A partition handed over (a new leader, or a new leader epoch of the same one: KAFKA-7164) is first
**truncated** where this replica diverges from the leader's log: the follower asks the leader
(OffsetForLeaderEpoch) where its latest epoch ends there, truncates, and asks again until the answer is
final (:mod:`regroup.cluster.truncation`, KIP-101/KIP-279); with an empty epoch cache it truncates to its
high watermark. Then it fetches from its log end: Fetch with its replica id and broker epoch, the
partition's current leader epoch, its last fetched epoch and its log start. Each answer's batches are
appended as the leader wrote them, the high watermark becomes min(leader's, own log end), and a log start
the leader moved past ours is followed. Fetches use a fetch session (KIP-227) when the leader grants one:
after a full fetch each request names only the partitions whose fetch state changed (and the ones to
forget), and the answer only the partitions with something new; a session error, a new connection or a
failed request starts over with a full fetch. Errors: FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH /
NOT_LEADER_OR_FOLLOWER wait for newer metadata (back off), OFFSET_OUT_OF_RANGE truncates to the leader's log
start when ours is behind it, anything else backs off ``replica.fetch.backoff.ms``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from regroup.client.connection import Connection, open_connection
from regroup.client.errors import KafkaConnectionError
from regroup.cluster.node import ClusterNode
from regroup.cluster.replica_manager import Following, ReplicationSettings
from regroup.cluster.truncation import offset_truncation_state
from regroup.log import LogManager, PartitionLog
from regroup.protocol.api_keys import ApiKey
from regroup.protocol.errors import ErrorCode, KafkaError
from regroup.protocol.fetch_session import FINAL_EPOCH, INITIAL_EPOCH, INVALID_SESSION_ID, next_epoch
from regroup.protocol.messages.fetch import (
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchTopic,
    ForgottenTopic,
    PartitionData,
    ReplicaState,
)
from regroup.protocol.messages.offset_for_leader_epoch import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    OffsetForLeaderPartition,
    OffsetForLeaderTopic,
)

__all__ = ["ReplicaFetchers"]

log = logging.getLogger("regroup.cluster.fetcher")

TopicPartition = tuple[str, int]
_WAIT_FOR_METADATA = (
    ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.UNKNOWN_LEADER_EPOCH,
    ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.UNKNOWN_TOPIC_ID,
)


_SESSION_ERRORS = (
    ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
    ErrorCode.INVALID_FETCH_SESSION_EPOCH,
    ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR,
)

# What a session's leader holds for a partition: (current leader epoch, fetch offset, last fetched epoch,
# log start offset, max bytes) and the topic's id (to forget it by id).
_Sent = tuple[tuple[int, int, int, int, int], uuid.UUID]


class _Session:
    """This follower's fetch session with one leader (Kafka's ``FetchSessionHandler``)."""

    __slots__ = ("epoch", "id", "sent")

    def __init__(self) -> None:
        self.id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH  # the next request's: the initial epoch asks for a full fetch
        self.sent: dict[TopicPartition, _Sent] = {}

    def reset(self) -> None:
        """Start over with a full fetch (asking the leader for a new session)."""
        self.epoch = INITIAL_EPOCH
        self.sent = {}


@dataclass(slots=True)
class _Partition:
    following: Following
    truncated: bool = False  # the divergent tail is gone: fetch
    backoff_until: float = 0.0
    plog: PartitionLog | None = None  # the local log, once looked up (a recreated topic is a new _Partition)


class ReplicaFetchers:
    """The fetcher tasks of this node, one per leader it follows partitions of."""

    def __init__(
        self,
        node: ClusterNode,
        logs: LogManager,
        settings: ReplicationSettings,
        now_ms: Callable[[], int],
    ) -> None:
        self._node = node
        self._logs = logs
        self._settings = settings
        self._now_ms = now_ms
        self._fetchers: dict[int, _Fetcher] = {}
        self.appended_batches = 0

    def update(self, following: dict[TopicPartition, Following]) -> None:
        """The partitions to follow now (with their leaders and epochs)."""
        by_leader: dict[int, dict[TopicPartition, Following]] = {}
        for key, f in following.items():
            if f.leader >= 0:
                by_leader.setdefault(f.leader, {})[key] = f
        for leader in list(self._fetchers):
            if leader not in by_leader:
                self._fetchers.pop(leader).stop()
        for leader, partitions in by_leader.items():
            fetcher = self._fetchers.get(leader)
            if fetcher is None:
                fetcher = self._fetchers[leader] = _Fetcher(self, leader)
                fetcher.start()
            fetcher.assign(partitions)

    async def stop(self) -> None:
        fetchers, self._fetchers = list(self._fetchers.values()), {}
        for fetcher in fetchers:
            fetcher.stop()
        for fetcher in fetchers:
            await fetcher.stopped()


class _Fetcher:
    def __init__(self, owner: ReplicaFetchers, leader: int) -> None:
        self._owner = owner
        self._leader = leader
        self._partitions: dict[TopicPartition, _Partition] = {}
        self._names: dict[uuid.UUID, str] = {}  # the followed topics by id
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._conn: Connection | None = None
        self._session = _Session()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"regroup replica fetcher for node {self._leader}"
        )

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def stopped(self) -> None:
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._conn is not None:
            await self._conn.close()
            self._conn = None

    def assign(self, partitions: dict[TopicPartition, Following]) -> None:
        for key in list(self._partitions):
            if key not in partitions:
                del self._partitions[key]
        for key, f in partitions.items():
            current = self._partitions.get(key)
            if (
                current is None
                or current.following.leader_epoch != f.leader_epoch
                or current.following.topic.topic_id != f.topic.topic_id
            ):
                # A new leader epoch: truncate again first (KAFKA-7164); a recreated topic starts afresh.
                self._partitions[key] = _Partition(f)
            else:
                current.following = f
        self._names = {f.topic.topic_id: key[0] for key, f in partitions.items()}
        self._changed.set()

    # ------------------------------------------------------------------------------------ the loop

    async def _run(self) -> None:
        backoff = self._owner._settings.replica_fetch_backoff_ms / 1000
        while True:
            if not self._partitions:
                self._changed.clear()
                await self._changed.wait()
                continue
            try:
                conn = await self._connection()
                await self._truncate(conn)
                fetched = await self._fetch(conn)
            except (KafkaConnectionError, OSError, KafkaError) as exc:
                log.info("Fetching from node %d failed (%s); retrying", self._leader, exc)
                await self._close()
                await asyncio.sleep(backoff)
                continue
            except Exception:
                log.exception("Fetching from node %d failed; retrying", self._leader)
                await self._close()
                await asyncio.sleep(backoff)
                continue
            if not fetched:
                # Nothing to fetch now (every partition backs off) or the leader refused the fetch.
                await asyncio.sleep(min(backoff, 0.1))

    async def _connection(self) -> Connection:
        if self._conn is not None and not self._conn.closed:
            return self._conn
        registration = self._owner._node.image.nodes.get(self._leader)
        listener = self._owner._settings.listener
        if registration is None or listener not in registration.listeners:
            raise KafkaConnectionError(f"node {self._leader} has no registered {listener} listener")
        host, port = registration.listeners[listener]
        # A full fetch naming the old session closes it on the leader (Kafka's nextCloseExisting) rather
        # than leaving it to eviction; a restarted leader knows no such id and just creates a new one.
        self._session.reset()
        self._conn = await open_connection(
            host,
            port,
            client_id=f"regroup-replica-fetcher-{self._owner._node.node_id}",
            request_timeout_ms=30_000,
            connect_timeout_ms=5_000,
        )
        return self._conn

    async def _close(self) -> None:
        self._session.reset()  # (the leader may have moved the session on, or dropped it)
        if self._conn is not None:
            await self._conn.close()
            self._conn = None

    def _log(self, key: TopicPartition) -> PartitionLog | None:
        return self._owner._logs.partition(*key)

    # ------------------------------------------------------------------------------------ truncation

    async def _truncate(self, conn: Connection) -> None:
        pending = {k: p for k, p in self._partitions.items() if not p.truncated}
        rounds = 0
        while pending and rounds < 100:
            rounds += 1
            asks: dict[TopicPartition, tuple[_Partition, PartitionLog, int]] = {}
            for key, p in pending.items():
                plog = self._log(key)
                if plog is None:
                    continue
                epoch = plog.epochs.latest_epoch
                if epoch is None:
                    plog.truncate_to(plog.high_watermark)
                    p.truncated = True
                    continue
                asks[key] = (p, plog, epoch)
            if not asks:
                return
            by_topic: dict[str, list[OffsetForLeaderPartition]] = {}
            for (topic, partition), (p, _, epoch) in asks.items():
                by_topic.setdefault(topic, []).append(
                    OffsetForLeaderPartition(
                        partition=partition,
                        current_leader_epoch=p.following.leader_epoch,
                        leader_epoch=epoch,
                    )
                )
            request = OffsetForLeaderEpochRequest(
                replica_id=self._owner._node.node_id,
                topics=[OffsetForLeaderTopic(topic=t, partitions=ps) for t, ps in by_topic.items()],
            )
            response = await conn.request(request, OffsetForLeaderEpochResponse)
            next_round: dict[TopicPartition, _Partition] = {}
            for topic_result in response.topics:
                for r in topic_result.partitions:
                    key = (topic_result.topic, r.partition)
                    entry = asks.get(key)
                    if entry is None:
                        continue
                    p, plog, _ = entry
                    error = ErrorCode.from_code(r.error_code)
                    if error is not ErrorCode.NONE:
                        log.debug("OffsetForLeaderEpoch of %s-%d: %s", key[0], key[1], error.name)
                        continue  # retried with the next round of fetching (or newer metadata)
                    state = offset_truncation_state(
                        leader_epoch=r.leader_epoch,
                        leader_end_offset=r.end_offset,
                        follower_epochs=plog.epochs,
                        follower_log_end_offset=plog.log_end_offset,
                        high_watermark=plog.high_watermark,
                        label=f"{key[0]}-{key[1]}",
                    )
                    if state.offset < plog.log_end_offset:
                        log.info(
                            "%s-%d diverges from leader %d at offset %d: truncating (log end was %d)",
                            key[0],
                            key[1],
                            self._leader,
                            state.offset,
                            plog.log_end_offset,
                        )
                    plog.truncate_to(state.offset)
                    if state.truncation_completed:
                        p.truncated = True
                    else:
                        next_round[key] = p
            pending = next_round

    # ------------------------------------------------------------------------------------ fetching

    async def _fetch(self, conn: Connection) -> bool:
        """One fetch from the leader; False when there was nothing to fetch, or the leader answered with
        nothing before its wait was up (it is stopping, or every partition failed)."""
        settings = self._owner._settings
        node = self._owner._node
        version = conn.version(ApiKey.FETCH)
        session = self._session if version >= 7 else None
        full = session is None or session.epoch == INITIAL_EPOCH
        loop = asyncio.get_running_loop()
        now = loop.time()
        wanted: dict[TopicPartition, tuple[_Partition, PartitionLog]] = {}
        want: dict[TopicPartition, _Sent] = {}
        sent = {} if session is None or full else session.sent
        changed: list[TopicPartition] = []  # what the leader's session does not hold yet
        partition_max_bytes = settings.replica_fetch_max_bytes
        for key, p in self._partitions.items():
            if not p.truncated or p.backoff_until > now:
                continue
            plog = p.plog
            if plog is None:
                plog = p.plog = self._log(key)
                if plog is None:
                    continue
            latest = plog.epochs.latest_epoch
            wish = (
                (
                    p.following.leader_epoch,
                    plog.log_end_offset,
                    -1 if latest is None else latest,
                    plog.log_start_offset,
                    partition_max_bytes,
                ),
                p.following.topic.topic_id,
            )
            want[key] = wish
            wanted[key] = (p, plog)
            if sent.get(key) != wish:
                changed.append(key)
        if not wanted:
            return False
        topics: dict[str, FetchTopic] = {}
        for key in changed:
            state, topic_id = want[key]
            leader_epoch, fetch_offset, last_fetched_epoch, log_start_offset, max_bytes = state
            fetch_topic = topics.get(key[0])
            if fetch_topic is None:
                fetch_topic = topics[key[0]] = (
                    FetchTopic(topic_id=topic_id) if version >= 13 else FetchTopic(topic=key[0])
                )
            fetch_topic.partitions.append(
                FetchPartition(
                    partition=key[1],
                    current_leader_epoch=leader_epoch,
                    fetch_offset=fetch_offset,
                    last_fetched_epoch=last_fetched_epoch,
                    log_start_offset=log_start_offset,
                    partition_max_bytes=max_bytes,
                )
            )
        forgotten: dict[str, ForgottenTopic] = {}
        for key, (_, topic_id) in sent.items():
            if key not in want:
                gone = forgotten.get(key[0])
                if gone is None:
                    gone = forgotten[key[0]] = (
                        ForgottenTopic(topic_id=topic_id) if version >= 13 else ForgottenTopic(topic=key[0])
                    )
                gone.partitions.append(key[1])
        request = FetchRequest(
            # v15+ name the follower (and its broker epoch, KIP-903) in ReplicaState, older ones at the top.
            replica_id=node.node_id if version < 15 else -1,
            replica_state=ReplicaState(replica_id=node.node_id, replica_epoch=node.broker_epoch)
            if version >= 15
            else ReplicaState(),
            max_wait_ms=settings.replica_fetch_wait_max_ms,
            min_bytes=settings.replica_fetch_min_bytes,
            max_bytes=settings.replica_fetch_response_max_bytes,
            isolation_level=0,
            session_id=INVALID_SESSION_ID if session is None else session.id,
            session_epoch=FINAL_EPOCH if session is None else session.epoch,
            topics=list(topics.values()),
            forgotten_topics_data=list(forgotten.values()),
        )
        asked = loop.time()
        response = await conn.request(
            request, FetchResponse, timeout_ms=settings.replica_fetch_wait_max_ms + 30_000
        )
        waited = loop.time() - asked
        error = ErrorCode.from_code(response.error_code)
        if session is not None:
            if error in _SESSION_ERRORS:
                log.info(
                    "Fetch session %d with node %d: %s; fetching in full",
                    session.id,
                    self._leader,
                    error.name,
                )
                session.reset()
                return True
            if error is ErrorCode.NONE:
                if full:
                    session.id = response.session_id
                    session.sent = want if response.session_id != INVALID_SESSION_ID else {}
                    session.epoch = next_epoch(INITIAL_EPOCH) if session.sent else INITIAL_EPOCH
                else:
                    session.sent = want
                    session.epoch = next_epoch(session.epoch)
        if error is not ErrorCode.NONE:
            raise KafkaError(error, "fetch refused")
        records = False
        for topic_response in response.responses:
            name = topic_response.topic if version < 13 else self._names.get(topic_response.topic_id, "")
            for data in topic_response.partitions:
                key = (name, data.partition_index)
                entry = wanted.get(key)
                if entry is None or self._partitions.get(key) is not entry[0]:
                    continue  # reassigned meanwhile
                self._apply(key, entry[0], entry[1], data)
                records = records or bool(data.records)
        return records or waited * 1000 >= settings.replica_fetch_wait_max_ms / 2

    def _apply(self, key: TopicPartition, p: _Partition, plog: PartitionLog, data: PartitionData) -> None:
        error = ErrorCode.from_code(data.error_code)
        loop = asyncio.get_running_loop()
        if error is ErrorCode.OFFSET_OUT_OF_RANGE:
            if 0 <= plog.log_end_offset < data.log_start_offset:
                # Behind the leader's log start (retention there): start over from it
                # (AbstractFetcherThread.fetchOffsetAndTruncate, truncateFullyAndStartAt).
                log.warning("%s-%d fell behind the leader's log start %d", *key, data.log_start_offset)
                plog.reset_to(data.log_start_offset)
            else:
                p.truncated = False  # ahead of the leader's end: find where the logs diverge again
            return
        if error in _WAIT_FOR_METADATA:
            p.backoff_until = loop.time() + self._owner._settings.replica_fetch_backoff_ms / 1000
            return
        if error is not ErrorCode.NONE:
            log.warning("Fetching %s-%d from node %d: %s", key[0], key[1], self._leader, error.name)
            p.backoff_until = loop.time() + self._owner._settings.replica_fetch_backoff_ms / 1000
            return
        records = data.records or b""
        if records:
            try:
                plog.append_as_follower(records, now_ms=self._owner._now_ms())
            except KafkaError as exc:
                log.warning("Appending fetched data of %s-%d failed (%s); truncating again", *key, exc)
                p.truncated = False
                return
            self._owner.appended_batches += 1
        plog.set_high_watermark(min(data.high_watermark, plog.log_end_offset))
        if data.log_start_offset > plog.log_start_offset and data.log_start_offset <= plog.high_watermark:
            plog.delete_records_before(data.log_start_offset)
