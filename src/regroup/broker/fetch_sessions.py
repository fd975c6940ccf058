"""Fetch sessions (KIP-227): the broker's cache of incremental fetch sessions and the state it keeps per
partition of a session.

A full fetch (session epoch 0) may create a session; the response names it and the fetcher's next requests
(epochs 1, 2, …) list only the partitions whose fetch state changed and the ones to forget, and are answered
with only the partitions that have something new for the fetcher: records, a changed high watermark or log
start offset, or an error (Kafka's ``CachedPartition.maybeUpdateResponseData``). Followers fetching dozens
of partitions and consumers of many partitions then send and receive a few partitions per fetch instead
of all of them.

The cache holds at most ``max.incremental.fetch.session.cache.slots`` sessions (Kafka's default 1,000).
When it is full a new session takes the place of one unused for two minutes
(``MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS``), else of the least valuable session if that is worth less
than the new one — a follower's (privileged) session is worth more than a consumer's, then more partitions
more than fewer — else no session is created and the fetch is answered sessionless (session id 0), as
Kafka's ``FetchSessionCache.tryEvict`` does.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from typing import Final

from regroup.protocol.errors import ErrorCode
from regroup.protocol.fetch_session import INITIAL_EPOCH, INVALID_SESSION_ID, next_epoch
from regroup.protocol.messages.fetch import FetchPartition, PartitionData

__all__ = ["NO_RESPONSE", "FetchPartitionState", "FetchSession", "FetchSessionCache"]

EVICTION_MS: Final = 120_000  # Kafka's MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS
_INT32_MAX: Final = 2**31 - 1

# A partition's response entry between requests (never written to: each read builds a new entry).
NO_RESPONSE: Final = PartitionData()

SessionKey = tuple[str | uuid.UUID, int]  # (topic name before Fetch v13, topic id from v13; partition)


class FetchPartitionState:
    """One partition of a fetch: what the fetcher asked for, its response entry for the current request,
    and — in a session — what the fetcher was last told (to answer only what changed)."""

    __slots__ = (
        "bookkept_ms",
        "checked_under",
        "current_leader_epoch",
        "error",
        "fetch_offset",
        "follower",
        "index",
        "log_start_offset",
        "max_bytes",
        "name",
        "named",
        "quiet",
        "response",
        "seen_end",
        "sent_high_watermark",
        "sent_log_start_offset",
        "topic",
        "topic_error",
    )

    def __init__(
        self,
        topic: str | uuid.UUID,
        index: int,
        fetch_offset: int,
        log_start_offset: int,
        max_bytes: int,
        current_leader_epoch: int,
    ) -> None:
        self.topic = topic  # as the request names it: a name before v13, an id from v13
        self.index = index
        self.fetch_offset = fetch_offset
        self.log_start_offset = log_start_offset  # the fetcher's (a follower's log start)
        self.max_bytes = max_bytes
        self.current_leader_epoch = current_leader_epoch
        # Set for each request that reads the partition:
        self.name: str | None = None
        self.topic_error = ErrorCode.NONE
        self.follower = False  # a replica's fetch: read to the log end
        self.error = ErrorCode.NONE  # leadership or epoch refusal, decided once per request
        self.response = NO_RESPONSE
        self.named = True  # by the current request (a session's other partitions are fetched too)
        self.quiet = False  # not named, and nothing new since the fetcher was last told: not read
        self.seen_end = -1  # the partition's readable end at the last read
        self.bookkept_ms = -(2**62)  # when a follower's fetch of it last reached the leader's bookkeeping
        self.checked_under: object = None  # the leadership token its leadership was last found good under
        self.sent_high_watermark = -1
        self.sent_log_start_offset = -1

    @classmethod
    def requested(cls, topic: str | uuid.UUID, p: FetchPartition) -> FetchPartitionState:
        """The partition as a request names it (``topic``: its name before v13, its id from v13)."""
        return cls(
            topic,
            p.partition,
            p.fetch_offset,
            p.log_start_offset,
            p.partition_max_bytes,
            p.current_leader_epoch,
        )

    def update(self, p: FetchPartition) -> None:
        """What an incremental request says of the partition now."""
        self.fetch_offset = p.fetch_offset
        self.log_start_offset = p.log_start_offset
        self.max_bytes = p.partition_max_bytes
        self.current_leader_epoch = p.current_leader_epoch

    def must_respond(self) -> bool:
        """Whether the response must name this partition, and remember what it tells the fetcher: records,
        a high watermark or log start offset other than last sent, or an error (after which the high
        watermark is sent again once the error is gone)."""
        r = self.response
        respond = bool(r.records)
        if r.error_code:
            self.sent_high_watermark = -1
            return True
        if r.high_watermark != self.sent_high_watermark:
            self.sent_high_watermark = r.high_watermark
            respond = True
        if r.log_start_offset != self.sent_log_start_offset:
            self.sent_log_start_offset = r.log_start_offset
            respond = True
        return respond


class FetchSession:
    """An incremental fetch session: its partitions in fetch order and the epoch its next request must
    carry."""

    __slots__ = ("epoch", "id", "last_used_ms", "partitions", "privileged", "uses_topic_ids")

    def __init__(
        self,
        session_id: int,
        privileged: bool,
        uses_topic_ids: bool,
        partitions: dict[SessionKey, FetchPartitionState],
        now_ms: int,
    ) -> None:
        self.id = session_id
        self.privileged = privileged  # created by a follower
        self.uses_topic_ids = uses_topic_ids
        self.partitions = partitions
        self.epoch = next_epoch(INITIAL_EPOCH)  # the epoch of the first incremental request
        self.last_used_ms = now_ms

    def worth(self) -> tuple[bool, int]:
        return self.privileged, len(self.partitions)


class FetchSessionCache:
    """The node's fetch sessions by id."""

    def __init__(self, max_sessions: int, rng: random.Random | None = None) -> None:
        self.max_sessions = max_sessions
        self._rng = rng or random.Random()
        self._sessions: dict[int, FetchSession] = {}  # least recently used first
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._sessions)

    def __iter__(self) -> Iterator[FetchSession]:
        return iter(list(self._sessions.values()))

    @property
    def partitions(self) -> int:
        """Partitions cached across all sessions."""
        return sum(len(s.partitions) for s in self._sessions.values())

    def get(self, session_id: int, epoch: int, uses_topic_ids: bool, now_ms: int) -> FetchSession | ErrorCode:
        """The session an incremental request (``epoch`` > 0) continues, its epoch moved on; or the error
        to answer: FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH, FETCH_SESSION_TOPIC_ID_ERROR
        (a session created with topic ids continued without, or the reverse)."""
        session = self._sessions.get(session_id)
        if session is None:
            return ErrorCode.FETCH_SESSION_ID_NOT_FOUND
        if session.epoch != epoch:
            return ErrorCode.INVALID_FETCH_SESSION_EPOCH
        if session.uses_topic_ids != uses_topic_ids:
            return ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR
        session.epoch = next_epoch(epoch)
        self._touch(session, now_ms)
        return session

    def remove(self, session_id: int) -> None:
        self._sessions.pop(session_id, None)

    def create(
        self,
        privileged: bool,
        uses_topic_ids: bool,
        partitions: dict[SessionKey, FetchPartitionState],
        now_ms: int,
    ) -> int:
        """A new session over ``partitions`` (their last sent values already set); its id, or 0 when the
        cache has no room for it."""
        if self.max_sessions <= 0:
            return INVALID_SESSION_ID
        session = FetchSession(0, privileged, uses_topic_ids, partitions, now_ms)
        if len(self._sessions) >= self.max_sessions and not self._evict_for(session, now_ms):
            return INVALID_SESSION_ID
        session_id = INVALID_SESSION_ID
        while session_id == INVALID_SESSION_ID or session_id in self._sessions:
            session_id = self._rng.randint(1, _INT32_MAX)
        session.id = session_id
        self._sessions[session_id] = session
        return session_id

    def _touch(self, session: FetchSession, now_ms: int) -> None:
        session.last_used_ms = now_ms
        sessions = self._sessions
        del sessions[session.id]
        sessions[session.id] = session

    def _evict_for(self, new: FetchSession, now_ms: int) -> bool:
        oldest = next(iter(self._sessions.values()))
        if now_ms - oldest.last_used_ms > EVICTION_MS:
            victim = oldest
        else:
            victim = min(self._sessions.values(), key=FetchSession.worth)
            if victim.worth() >= new.worth():
                return False
        del self._sessions[victim.id]
        self.evictions += 1
        return True
