"""One serial lane per coordinator shard: the only code that calls a :class:`GroupShard`.

A runner owns one ``__consumer_offsets`` partition. :meth:`ShardRunner.start` replays the partition's log
into a fresh shard (``replay`` per record in log order, then ``on_loaded``), then an asyncio task takes events
off a queue one at a time — requests, reads, timer fires, unload — and for each:

1. calls the shard with ``now_ms`` from the injected clock;
2. applies the effects in order (``Schedule``/``Cancel`` on a keyed :class:`TimerService` whose fires come
   back as events; ``Reply`` answers a parked ticket; ``Notify`` is logged and handed to observers);
3. appends ``Result.records`` to the partition as one record batch (CreateTime = now) and calls
   ``on_append`` with ``None`` or the mapped error before taking the next event (its Result is applied the
   same way);
4. releases the event's replies once what they depend on is durable under the partition's flush policy
   (fsynced, and in a cluster held by every in-sync replica).

Nothing in the lane waits for the disk. When the partition's gate is free the batch is appended at once;
while a thread fsync runs (the log forbids overlapping an append with it) the batch joins a backlog that is
appended, in order, as soon as the fsync ends, and the lane goes on with the next event meanwhile. When
writes wait for a flush anyway (an fsync policy; in a cluster, the in-sync replicas), events that write in
the same loop step as one already appended linger: their records join one batch appended when the step
ends, so a busy step costs two appends and one replication round, not one per event (Kafka's coordinator
runtime lingers the same way, keeping its batch open while events keep coming). A deferred append that
fails fails the partition (its state got ahead of its log; reloading rebuilds it), as an fsync failure
does; an event appended at once still gets its own append error through ``on_append``.

What a reply waits for depends on its event's *scope* — the groups it reads or writes (``None``: every
group). An event that wrote records waits for the fsync covering them, coalesced with its neighbours' into
one; an event that wrote nothing waits only for the newest write of its own groups that is not durable yet,
as Kafka's ``CoordinatorRuntime`` makes a write without records wait for the pending writes before it — but
per group, so a heartbeat never waits for another group's commit. Reads travel the lane too, so they never
observe a half-applied event and are never answered ahead of a write they saw.

A reply still waiting after ``offsets.commit.timeout.ms`` is answered COORDINATOR_NOT_AVAILABLE (Kafka's
timed-out write; the write itself may still land). A failed fsync fails the partition: unreleased replies
become NOT_COORDINATOR (the state that produced them may not survive) and ``on_failure`` asks for an unload.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final, Protocol, TypeVar, TypeVarTuple

from regroup.group.consumer_group_events import ConsumerGroupEpochBumped, Trigger
from regroup.group.effects import Cancel, CoordinatorRecord, Effect, Notify, Reply, Result, Schedule, TimerKey
from regroup.group.records import RecordError
from regroup.group.shard import CoordinatorShard
from regroup.log import LogConfig, PartitionLog, ReadResult
from regroup.log.config import LONG_MAX
from regroup.protocol.errors import ErrorCode, KafkaError
from regroup.protocol.primitives import DecodeError
from regroup.protocol.record_batch import build_keyed_batch, decode_batches
from regroup.runtime.clock import Clock
from regroup.runtime.durability import WriteGate
from regroup.runtime.timers import Fired, TimerService

__all__ = [
    "ErrorReply",
    "LoadSummary",
    "OffsetsLog",
    "ReplicatedOffsetsLog",
    "RunnerState",
    "RunnerStats",
    "ShardRunner",
    "WriteBehind",
    "append_error",
]

log = logging.getLogger("regroup.coordinator")

T = TypeVar("T")
Ts = TypeVarTuple("Ts")
ErrorReply = Callable[[ErrorCode], Any]
"""Builds the response of a request answered with a coordinator-level error."""
NotifyObserver = Callable[[int, object], None]
Scope = tuple[str, ...] | None
"""The groups an event reads or writes; ``None`` for an event that may touch every group of the shard."""


class OffsetsLog(Protocol):
    """The part of :class:`~regroup.log.PartitionLog` the runner uses (a wrapper can inject faults)."""

    @property
    def config(self) -> LogConfig: ...

    @property
    def log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    def append(self, data: bytes, *, now_ms: int, validate: bool = True) -> object: ...

    def read(self, offset: int, max_bytes: int) -> ReadResult: ...

    def needs_flush(self, now_ms: int) -> bool: ...


class ReplicatedOffsetsLog:
    """A cluster node's ``__consumer_offsets`` partition as the runner sees it: a write needs a "flush" —
    waiting through the partition's :class:`~regroup.runtime.durability.ReplicatedGate` — until every
    in-sync replica has it, besides any fsync the flush policy asks for."""

    def __init__(self, plog: PartitionLog) -> None:
        self._plog = plog

    @property
    def config(self) -> LogConfig:
        return self._plog.config

    @property
    def log_start_offset(self) -> int:
        return self._plog.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._plog.log_end_offset

    def append(self, data: bytes, *, now_ms: int, validate: bool = True) -> object:
        return self._plog.append(data, now_ms=now_ms, validate=validate)

    def read(self, offset: int, max_bytes: int) -> ReadResult:
        # The leader loads everything it has (Kafka loads to the log end), once its ISR has it.
        return self._plog.read(offset, max_bytes, to_log_end=True)

    def needs_flush(self, now_ms: int) -> bool:
        plog = self._plog
        return plog.high_watermark < plog.log_end_offset or plog.needs_flush(now_ms)


class RunnerState(enum.Enum):
    LOADING = "loading"
    ACTIVE = "active"
    UNLOADING = "unloading"
    UNLOADED = "unloaded"
    FAILED = "failed"


_LOAD_SLICE_S: Final = 0.01
"""How long a partition's load runs before other events get the loop."""

# Kafka's CoordinatorOperationExceptionHelper: how a failed write surfaces to clients.
_APPEND_ERRORS: Final = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.INVALID_FETCH_SIZE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.NETWORK_EXCEPTION: ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
}


def append_error(exc: BaseException) -> ErrorCode:
    """The error a client sees when the append behind its write failed with ``exc``."""
    if isinstance(exc, KafkaError):
        return _APPEND_ERRORS.get(exc.code, exc.code)
    if isinstance(exc, OSError):
        return ErrorCode.NOT_COORDINATOR  # a storage error, as KAFKA_STORAGE_ERROR
    return ErrorCode.UNKNOWN_SERVER_ERROR


@dataclass(frozen=True, slots=True)
class LoadSummary:
    partition: int
    records: int
    skipped: int
    end_offset: int
    seconds: float


@dataclass(slots=True)
class RunnerStats:
    events: int = 0
    appends: int = 0
    lingered: int = 0
    """Writes whose records joined the loop step's shared batch instead of an append of their own."""
    written_behind: int = 0
    """Writes whose records joined a connection read's shared batch (:class:`WriteBehind`)."""
    append_failures: int = 0
    flushes: int = 0
    flush_timeouts: int = 0
    stale_timer_fires: int = 0


# ---------------------------------------------------------------------------------------------- events


@dataclass(slots=True)
class _Call:
    """A write: ``handler(*args, now_ms)`` on the shard, returning a :class:`Result`."""

    handler: Callable[..., Result[Any]]
    args: tuple[Any, ...]
    future: asyncio.Future[Any]
    error_reply: ErrorReply
    ticket: int | None = None
    scope: Scope = None


@dataclass(slots=True)
class _Read:
    """A read: ``reader(shard)``, a plain value."""

    reader: Callable[[CoordinatorShard], Any]
    future: asyncio.Future[Any]
    error_reply: ErrorReply
    scope: Scope = None


@dataclass(slots=True)
class _Timer:
    fired: Fired[TimerKey]


@dataclass(slots=True)
class _Unload:
    pass


_Request = _Call | _Read
_Event = _Call | _Read | _Timer | _Unload


@dataclass(slots=True)
class _Parked:
    future: asyncio.Future[Any]
    error_reply: ErrorReply


@dataclass(slots=True)
class _Item:
    future: asyncio.Future[Any]
    value: Any
    error_reply: ErrorReply


class _NextFlush:
    __slots__ = ()


_NEXT_FLUSH: Final = _NextFlush()


class _Backlog:
    """Record batches that wait for the partition's gate (a thread fsync is running), and the replies that
    wait for them to be appended; appended in order by one task as soon as the gate is free."""

    __slots__ = ("batches", "entries", "turn")

    def __init__(self, turn: asyncio.Future[None]) -> None:
        self.turn = turn
        self.batches: list[tuple[bytes, int]] = []
        self.entries: list[_Release] = []


class _Pending:
    """Records of several events appended together as one batch (stamped with the first one's time): those
    that wrote after the loop step's first append, appended when the step ends, with the replies that wait
    for it; or (``behind``) those written behind the connection reads of a loop step, appended when it
    ends, before those connections answer."""

    __slots__ = ("behind", "entries", "now", "records", "size")

    def __init__(self, now: int, behind: bool) -> None:
        self.now = now
        self.behind = behind
        self.records: list[CoordinatorRecord] = []
        self.size = _BATCH_OVERHEAD
        self.entries: list[_Release] = []


class WriteBehind:
    """Appends deferred to the end of the loop step, behind the connection reads that brought them.

    While a connection dispatches the requests of one read (between :meth:`begin` and :meth:`end`), a runner
    whose writes need no flush puts the records of its events in one batch and answers them at once. The
    batch stays open for the reads of other connections in the same loop step (a busy step carries several:
    every connection the poll found readable), and is appended when the step ends — before any reply that
    could have seen its records leaves: a connection whose read ends while a batch is open holds its output
    until then (:meth:`hold`). So pipelined commits cost one append per partition and loop step, not one per
    read or per commit, as Kafka's coordinator runtime lingers its batches (``group.coordinator.append.linger
    .ms``). Anything else that writes to, or reads from, a runner between those reads appends its open batch
    first. If one of the step's appends fails (or must wait for the partition's gate), the held connections
    are closed without their replies (their clients retry, and find the partition failed)."""

    __slots__ = ("_held", "_runners", "_step_end", "depth", "failed")

    def __init__(self) -> None:
        self.depth = 0
        self.failed = False
        self._runners: list[ShardRunner] = []
        self._held: list[Callable[[bool], None]] = []
        self._step_end: asyncio.Handle | None = None

    def begin(self) -> None:
        self.depth += 1

    def end(self) -> None:
        self.depth -= 1

    def defer(self, runner: ShardRunner) -> None:
        """``runner`` holds a batch to append when the step ends."""
        self._runners.append(runner)
        if self._step_end is None:
            self._step_end = runner._loop.call_soon(self.flush)

    @property
    def holding(self) -> bool:
        """A batch of this step is (or was) open: replies given now must wait for :meth:`flush`."""
        return bool(self._runners)

    def hold(self, release: Callable[[bool], None]) -> None:
        """Call ``release(ok)`` once this step's batches are appended (``ok``) or one of them failed."""
        self._held.append(release)

    def flush(self) -> bool:
        """Append every open batch now, then release the held output; False if an append failed."""
        if self._step_end is not None:
            self._step_end.cancel()
            self._step_end = None
        runners, self._runners = self._runners, []
        for runner in runners:
            runner.write_behind_now()
        ok = not self.failed
        self.failed = False
        held, self._held = self._held, []
        for release in held:
            release(ok)
        return ok


_BATCH_OVERHEAD: Final = 61
_RECORD_OVERHEAD: Final = 23
"""A v2 record's bytes besides its key and value, at most: length, attributes, timestamp and offset deltas,
key and value lengths, header count."""

_Waiting = asyncio.Future[None] | _NextFlush | _Backlog | _Pending | None


@dataclass(slots=True, eq=False)
class _Release:
    """Replies of one event, released once ``waiting`` is satisfied: its backlog appended, then the flush
    covering it (``_NEXT_FLUSH`` until that flush is requested) completed."""

    items: list[_Item]
    waiting: _Waiting
    scope: Scope
    seq: int
    done: bool = False


# ---------------------------------------------------------------------------------------------- runner


class ShardRunner:
    """Drives one coordinator shard over one partition log."""

    def __init__(
        self,
        partition: int,
        shard: CoordinatorShard,
        offsets_log: OffsetsLog,
        gate: WriteGate,
        clock: Clock,
        *,
        compression: int = 0,
        load_buffer_size: int = 5 * 1024 * 1024,
        max_flush_batch: int = 256,
        commit_timeout_ms: int | None = 5000,
        on_notify: NotifyObserver | None = None,
        on_failure: Callable[[int], None] | None = None,
        write_behind: WriteBehind | None = None,
    ) -> None:
        self.partition = partition
        self.shard = shard
        self.stats = RunnerStats()
        self._log = offsets_log
        self._gate = gate
        self._clock = clock
        self._compression = compression
        self._load_buffer_size = load_buffer_size
        self._max_flush_batch = max_flush_batch
        self._on_notify = on_notify
        self._on_failure = on_failure
        self._state = RunnerState.LOADING
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[_Event] = asyncio.Queue()
        self._timers: TimerService[TimerKey] = TimerService(clock, self._on_fire)
        self._parked: dict[int, _Parked] = {}
        self._unreleased: deque[_Release] = deque()
        self._awaiting_flush: list[_Release] = []
        self._backlog: _Backlog | None = None
        self._backlog_task: asyncio.Task[None] | None = None
        self._pending: _Pending | None = None
        self._write_behind = write_behind  # only for a log whose appends need no replication
        self._step_open = False  # a batch was appended in this loop step; the step's end is scheduled
        self._step_end: asyncio.Handle | None = None
        self._event_waits: _Waiting = None
        self._writes = 0
        self._newest_write: _Release | None = None
        self._newest_shard_write: _Release | None = None
        self._newest_group_write: dict[str, _Release] = {}
        self._flush_needed = False
        self._events_since_flush = 0
        self._processing = False
        self._failed = False
        self._abort_load = False
        self._ready: asyncio.Future[object] | None = None
        self._task: asyncio.Task[None] | None = None
        self._loaded: asyncio.Future[LoadSummary | None] = asyncio.get_running_loop().create_future()
        self._stopped: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._commit_timeout_ms = commit_timeout_ms
        self._flush_deadlines: dict[asyncio.Future[None], asyncio.TimerHandle] = {}
        self._timed_out: set[asyncio.Future[None]] = set()
        self._drained_callbacks: list[Callable[[], None]] = []
        # What the event being applied is (attributes epoch bumps): a Trigger, or the shard operation a
        # request called, made a Trigger only when a bump needs one; None: nothing more than the time.
        self._cause: Trigger | Callable[..., object] | None = None
        self._cause_ms: int | None = None  # set while an event is applied

    # ------------------------------------------------------------------------------------ lifecycle

    @property
    def state(self) -> RunnerState:
        return self._state

    @property
    def timers(self) -> TimerService[TimerKey]:
        return self._timers

    def start(self, ready: Awaitable[object] | None = None) -> asyncio.Future[LoadSummary | None]:
        """Load the partition and start the lane; the future gives the load stats (None if aborted).
        ``ready``: load only once it completes (in a cluster, once every in-sync replica has the log this
        node leads, so no answer reflects a record a later failover could erase); requests get
        COORDINATOR_LOAD_IN_PROGRESS meanwhile."""
        if self._task is None:
            self._task = asyncio.create_task(
                self._run(ready), name=f"regroup coordinator shard {self.partition}"
            )
        return self._loaded

    async def unload(self) -> None:
        """Resign: events already queued are handled, then ``on_unloaded`` answers the parked requests;
        later requests get NOT_COORDINATOR. Returns once every reply has been released."""
        if self._state is RunnerState.LOADING:
            self._abort_load = True
            self._state = RunnerState.UNLOADING
            if self._ready is not None:
                self._ready.cancel()
        elif self._state in (RunnerState.ACTIVE, RunnerState.FAILED):
            self._state = RunnerState.UNLOADING
            self._queue.put_nowait(_Unload())
        elif self._task is None:
            self._finish_unload()
        await asyncio.shield(self._stopped)

    async def idle(self) -> None:
        """Wait until no event is queued or running and every reply has been released (a test aid)."""
        while self._processing or not self._queue.empty() or self._unreleased:
            await asyncio.sleep(0.001)

    def cancel(self) -> None:
        """Stop the lane at once (the event loop is shutting down); pending requests are dropped."""
        if self._task is not None:
            self._task.cancel()
        if self._backlog_task is not None:
            self._backlog_task.cancel()
        if self._step_end is not None:
            self._step_end.cancel()
        self._timers.close()

    # ------------------------------------------------------------------------------------ submitting

    def call(
        self,
        error_reply: Callable[[ErrorCode], T],
        handler: Callable[[*Ts, int], Result[T]],
        *args: *Ts,
        ticket: int | None = None,
        scope: Scope = None,
    ) -> asyncio.Future[T]:
        """Queue a write: ``handler(*args, now_ms)``, a method of :attr:`shard` (``runner.shard.join_group``).
        The future gives its reply (released once durable) or ``error_reply(code)`` for a coordinator-level
        error (loading, unloaded, failed). ``ticket`` is set for requests the shard may park (JoinGroup,
        SyncGroup); ``scope`` names the groups the call touches (None: any group of the shard).

        When the lane is idle — nothing queued, no event running — a call that cannot park (no ticket:
        Heartbeat, OffsetCommit, LeaveGroup, …) is handled right here, in the caller's loop step, and the
        future is done on return unless its reply waits for a write: the lane would take it next anyway, so
        order is kept, and the request costs no queue hop, task wake-up or extra loop iteration. JoinGroup
        and SyncGroup keep the queue: requests that arrive together then meet a join phase together, before
        the timers the first one arms come due (a group's initial delay of 0 ms, say)."""
        if (
            ticket is None
            and self._state is RunnerState.ACTIVE
            and not self._processing
            and not self._failed
            and self._queue.empty()
        ):
            future: asyncio.Future[T] = self._loop.create_future()
            self._processing = True
            try:
                self._call_now(handler, args, future, error_reply, scope)
            finally:
                self._processing = False
            self.stats.events += 1
            return future
        return self._submit(_Call(handler, args, self._loop.create_future(), error_reply, ticket, scope))

    def read(
        self,
        error_reply: Callable[[ErrorCode], T],
        reader: Callable[[CoordinatorShard], T],
        *,
        scope: Scope = None,
    ) -> asyncio.Future[T]:
        """Queue a read of the shard (of the groups in ``scope``; None: any); answered in lane order, after
        the writes it may have observed are durable."""
        return self._submit(_Read(reader, self._loop.create_future(), error_reply, scope))

    def _submit(self, request: _Request) -> asyncio.Future[Any]:
        state = self._state
        if state is RunnerState.ACTIVE:
            self._queue.put_nowait(request)
        else:
            code = (
                ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
                if state is RunnerState.LOADING
                else ErrorCode.NOT_COORDINATOR
            )
            request.future.set_result(request.error_reply(code))
        return request.future

    def _on_fire(self, fired: Fired[TimerKey]) -> None:
        if self._state in (RunnerState.ACTIVE, RunnerState.LOADING, RunnerState.UNLOADING):
            self._queue.put_nowait(_Timer(fired))

    # ------------------------------------------------------------------------------------ the lane

    async def _run(self, ready: Awaitable[object] | None = None) -> None:
        try:
            if ready is not None:
                self._ready = asyncio.ensure_future(ready)
                try:
                    await self._ready
                except asyncio.CancelledError:
                    if not self._abort_load:
                        raise
            stats = await self._replay()
            if stats is None:
                self._finish_unload()
                self._loaded.set_result(None)
                return
            self._processing = True
            now = self._clock.now_ms()
            items: list[_Item] = []
            self._apply(self.shard.on_loaded(now), now, items)
            self._push(items, None)
            self._processing = False
            if self._state is RunnerState.LOADING:
                self._state = RunnerState.ACTIVE
            elif self._state is RunnerState.UNLOADING:
                self._queue.put_nowait(_Unload())
            self._loaded.set_result(stats)
            log.debug(
                "Loaded __consumer_offsets-%d: %d records (%d skipped) in %.3f s",
                self.partition,
                stats.records,
                stats.skipped,
                stats.seconds,
            )
            while True:
                event = await self._queue.get()
                self._processing = True
                if self._pending is not None and self._pending.behind:
                    # Written behind reads of this loop step: what the lane does next may observe it.
                    self._write_pending()
                try:
                    if isinstance(event, _Unload):
                        await self._handle_unload()
                        return
                    if self._failed:
                        # After a failed write nothing more is written; the unload is on its way.
                        if isinstance(event, _Call | _Read):
                            error = event.error_reply(ErrorCode.NOT_COORDINATOR)
                            self._push([_Item(event.future, error, event.error_reply)], event.scope)
                    elif isinstance(event, _Call):
                        self._handle_call(event)
                    elif isinstance(event, _Read):
                        self._handle_read(event)
                    else:
                        self._handle_timer(event)
                finally:
                    self._processing = False
                self.stats.events += 1
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("The lane of __consumer_offsets-%d failed", self.partition)
            if not self._loaded.done():
                self._loaded.set_exception(exc)
            self._fail()
            self._finish_unload()

    async def _replay(self) -> LoadSummary | None:
        started = asyncio.get_running_loop().time()
        offsets_log = self._log
        offset = offsets_log.log_start_offset
        end = offsets_log.log_end_offset
        records = skipped = 0
        shard = self.shard
        clock = asyncio.get_running_loop().time
        pause_at = clock() + _LOAD_SLICE_S
        while offset < end:
            if self._abort_load:
                return None
            try:
                data = offsets_log.read(offset, self._load_buffer_size).data
            except KafkaError as exc:
                if exc.code is not ErrorCode.OFFSET_OUT_OF_RANGE:
                    raise
                offset = offsets_log.log_start_offset  # retention/compaction moved the start meanwhile
                continue
            if not data:
                break
            for batch in decode_batches(data, check_crc=False):
                if batch.next_offset <= offset:
                    continue
                if batch.is_control or batch.is_transactional:
                    # regroup writes no transactional offsets; Kafka's would need their markers.
                    skipped += len(batch.records)
                else:
                    for rec in batch.records:
                        if rec.offset < offset:
                            continue
                        if rec.key is None:
                            skipped += 1
                            continue
                        try:
                            shard.replay(CoordinatorRecord(rec.key, rec.value))
                        except (RecordError, DecodeError) as exc:
                            skipped += 1
                            log.warning(
                                "Skipping record at offset %d of __consumer_offsets-%d: %s",
                                rec.offset,
                                self.partition,
                                exc,
                            )
                        else:
                            records += 1
                offset = batch.next_offset
                if clock() >= pause_at:
                    # Kafka loads in its coordinator threads; here the loop is shared, so a large partition
                    # loads in slices and every other request (COORDINATOR_LOAD_IN_PROGRESS for this one's
                    # groups) is answered in between.
                    await asyncio.sleep(0)
                    pause_at = clock() + _LOAD_SLICE_S
            await asyncio.sleep(0)
        if self._abort_load:
            return None
        seconds = asyncio.get_running_loop().time() - started
        return LoadSummary(self.partition, records, skipped, offset, seconds)

    def _call_now(
        self,
        handler: Callable[..., Result[Any]],
        args: tuple[Any, ...],
        future: asyncio.Future[Any],
        error_reply: ErrorReply,
        scope: Scope,
    ) -> None:
        """Handle a call that cannot park (no ticket), in the caller's loop step or as the lane's next event:
        the reply is set on ``future`` at once when the event wrote nothing, released no parked reply, and
        its groups have no write still waiting to become durable — else it goes through :meth:`_push`."""
        now = self._clock.now_ms()
        items: list[_Item] = []
        try:
            reply = self._apply(handler(*args, now), now, items, handler)
        except Exception:
            log.exception("Error handling a request on __consumer_offsets-%d", self.partition)
            reply = error_reply(ErrorCode.UNKNOWN_SERVER_ERROR)
        else:
            if reply is None:
                log.error(
                    "The shard answered a request of __consumer_offsets-%d with no reply", self.partition
                )
                reply = error_reply(ErrorCode.UNKNOWN_SERVER_ERROR)
        if items and self._pending is not None and self._pending.behind:
            # The event released replies of other connections (a leave that completes a join phase): they
            # must not leave before its records are in the log, which the read's end does not ensure.
            self._write_pending()
        if (
            not items
            and self._event_waits is None
            and not self._flush_needed
            and not self._failed
            # (a write not yet durable has its entry in _unreleased until it is)
            and (not self._unreleased or self._newest_write_seen(scope) is None)
        ):
            if not future.done():  # (a queued call's client may have gone away)
                future.set_result(reply)
            return
        items.append(_Item(future, reply, error_reply))
        self._push(items, scope)

    def _handle_call(self, event: _Call) -> None:
        ticket = event.ticket
        if ticket is None:
            self._call_now(event.handler, event.args, event.future, event.error_reply, event.scope)
            return
        # A call that may park: its reply comes now, or later through a Reply effect for its ticket.
        now = self._clock.now_ms()
        items: list[_Item] = []
        self._parked[ticket] = _Parked(event.future, event.error_reply)
        try:
            result = event.handler(*event.args, now)
            reply = self._apply(result, now, items, event.handler)
        except Exception:
            log.exception("Error handling a request on __consumer_offsets-%d", self.partition)
            self._parked.pop(ticket, None)
            items.append(
                _Item(event.future, event.error_reply(ErrorCode.UNKNOWN_SERVER_ERROR), event.error_reply)
            )
        else:
            if reply is not None:
                self._parked.pop(ticket, None)
                items.append(_Item(event.future, reply, event.error_reply))
        self._push(items, event.scope)

    def _handle_read(self, event: _Read) -> None:
        try:
            value = event.reader(self.shard)
        except Exception:
            log.exception("Error reading __consumer_offsets-%d", self.partition)
            value = event.error_reply(ErrorCode.UNKNOWN_SERVER_ERROR)
        self._push([_Item(event.future, value, event.error_reply)], event.scope)

    def _handle_timer(self, event: _Timer) -> None:
        fired = event.fired
        if not self._timers.claim(fired):
            self.stats.stale_timer_fires += 1
            return
        # An event-loop timer may wake a hair before the wall clock reaches the deadline.
        now = max(self._clock.now_ms(), fired.deadline_ms)
        items: list[_Item] = []
        try:
            self._apply(
                self.shard.on_timer(fired.key, now), now, items, Trigger(timer=fired.key, time_ms=now)
            )
        except Exception:
            log.exception("Error handling timer %s on __consumer_offsets-%d", fired.key, self.partition)
        self._push(items, (fired.key.group_id,) if fired.key.group_id else None)

    async def _handle_unload(self) -> None:
        now = self._clock.now_ms()
        items: list[_Item] = []
        try:
            self._apply(self.shard.on_unloaded(), now, items)
        except Exception:
            log.exception("Error unloading __consumer_offsets-%d", self.partition)
        self._push(items, None)
        self._finish_unload()
        log.debug("Unloaded __consumer_offsets-%d", self.partition)

    def _finish_unload(self) -> None:
        """Answer whatever is left with NOT_COORDINATOR and stop taking events."""
        if self._state is not RunnerState.FAILED:
            self._state = RunnerState.UNLOADED
        self._timers.close()
        leftovers: list[_Item] = []
        for parked in self._parked.values():
            leftovers.append(
                _Item(parked.future, parked.error_reply(ErrorCode.NOT_COORDINATOR), parked.error_reply)
            )
        self._parked.clear()
        while not self._queue.empty():
            event = self._queue.get_nowait()
            if isinstance(event, _Call | _Read):
                leftovers.append(
                    _Item(event.future, event.error_reply(ErrorCode.NOT_COORDINATOR), event.error_reply)
                )
        if leftovers:
            self._push(leftovers, None)
        if self._flush_needed:
            self._request_flush()
        if self._unreleased:
            self._whenever_drained(self._stop)
        else:
            self._stop()

    def _stop(self) -> None:
        if not self._stopped.done():
            self._stopped.set_result(None)

    # ------------------------------------------------------------------------------------ results

    def _apply(
        self,
        result: Result[Any],
        now: int,
        items: list[_Item],
        cause: Trigger | Callable[..., object] | None = None,
    ) -> Any:
        """Effects, then append and ``on_append`` until no continuation is left; returns the final reply."""
        self._cause, self._cause_ms = cause, now
        try:
            return self._apply_effects(result, now, items)
        finally:
            self._cause = self._cause_ms = None

    def _trigger(self, now: int) -> Trigger:
        cause = self._cause
        if isinstance(cause, Trigger):
            return cause
        if cause is None:
            return Trigger(time_ms=now)
        operation = getattr(cause, "func", cause)  # (a functools.partial's function)
        return Trigger(operation=getattr(operation, "__name__", None), time_ms=now)

    def _apply_effects(self, result: Result[Any], now: int, items: list[_Item]) -> Any:
        self._effects(result.effects, items)
        reply = result.reply
        current = result
        while True:
            error: ErrorCode | None = None
            if current.records:
                error = self._append(current.records, now)
            if current.on_append is None:
                return reply
            current = current.on_append(error)
            self._effects(current.effects, items)
            reply = current.reply

    def _effects(self, effects: tuple[Effect, ...], items: list[_Item]) -> None:
        for effect in effects:
            if isinstance(effect, Schedule):
                self._timers.schedule(effect.key, effect.deadline_ms)
            elif isinstance(effect, Cancel):
                self._timers.cancel(effect.key)
            elif isinstance(effect, Reply):
                parked = self._parked.pop(effect.ticket, None)
                if parked is None:
                    log.debug("Reply to ticket %d, which is not parked", effect.ticket)
                else:
                    items.append(_Item(parked.future, effect.response, parked.error_reply))
            elif isinstance(effect, Notify):
                self._notify(effect.event)

    def _notify(self, event: object) -> None:
        if isinstance(event, ConsumerGroupEpochBumped) and self._cause_ms is not None:
            event = event.attributed(self._trigger(self._cause_ms))
        message = getattr(event, "message", None)
        if callable(message):
            # GenerationCompleted marks a new generation (one INFO line each); the rest is detail.
            level = logging.INFO if type(event).__name__ == "GenerationCompleted" else logging.DEBUG
            if log.isEnabledFor(level):
                log.log(level, "%s", message())
        if self._on_notify is not None:
            try:
                self._on_notify(self.partition, event)
            except Exception:
                log.exception("A coordinator observer failed")

    def _append(self, records: tuple[CoordinatorRecord, ...], now: int) -> ErrorCode | None:
        """Append one event's records: at once when the partition's gate is free (an error comes back for
        ``on_append``); into the step's shared batch when one was already appended in this loop step; else
        through the backlog (a failure of either of the last two fails the partition)."""
        self.stats.appends += 1
        lingering = self._step_open
        behind = self._write_behind
        if (
            lingering or (behind is not None and behind.depth and not self._flush_needed)
        ) and self._backlog is None:
            size = 0
            for record in records:
                value = record.value
                size += len(record.key) + (0 if value is None else len(value))
            size += _RECORD_OVERHEAD * len(records)
            limit = self._log.config.max_message_bytes
            if self._compression:
                limit = limit * 6 // 7 - 64  # room for a codec's worst-case growth (snappy's n/6 + 32)
            pending = self._pending
            if size + _BATCH_OVERHEAD <= limit:
                if pending is not None and pending.size + size > limit:
                    self._write_pending()
                    pending = None
                    if self._failed:
                        return ErrorCode.NOT_COORDINATOR
                if pending is None and (
                    lingering
                    # Behind a read only when no fsync is due now or by count (flush.messages: Kafka
                    # answers such appends after their fsync); flush.ms never delays an answer in Kafka.
                    or (self._log.config.flush_messages == LONG_MAX and not self._log.needs_flush(now))
                ):
                    pending = self._pending = _Pending(now, not lingering)
                    if not lingering:
                        assert behind is not None
                        behind.defer(self)
                if pending is not None:
                    pending.records.extend(records)
                    pending.size += size
                    if pending.behind:
                        self.stats.written_behind += 1
                    else:
                        self.stats.lingered += 1
                        self._event_wrote(pending)
                    return None
        if self._pending is not None:
            self._write_pending()  # (keeps the log in event order) this one goes alone
            if self._failed:
                return ErrorCode.NOT_COORDINATOR
        try:
            data = build_keyed_batch(records, now, compression=self._compression)
            if len(data) > self._log.config.max_message_bytes:
                raise KafkaError(
                    ErrorCode.MESSAGE_TOO_LARGE,
                    f"A coordinator batch of {len(data)} bytes exceeds max.message.bytes",
                )
        except Exception as exc:
            return self._append_failed(exc)
        backlog = self._backlog
        if backlog is None:
            if self._gate.try_acquire():
                try:
                    self._log.append(data, now_ms=now, validate=False)
                except Exception as exc:
                    return self._append_failed(exc)
                finally:
                    self._gate.release()
                if self._log.needs_flush(now):
                    self._flush_needed = True
                    self._event_wrote(_NEXT_FLUSH)
                    if not self._step_open:
                        # Replies wait for a flush (an fsync, the in-sync replicas) whatever happens, so
                        # later writers of this step may as well wait for one shared append.
                        self._step_open = True
                        self._step_end = self._loop.call_soon(self._end_step)
                return None
            backlog = self._start_backlog()
        backlog.batches.append((data, now))
        self._event_wrote(backlog)
        return None

    def _start_backlog(self) -> _Backlog:
        self._backlog = backlog = _Backlog(self._gate.reserve())
        self._backlog_task = asyncio.create_task(
            self._append_backlog(backlog), name=f"regroup coordinator backlog {self.partition}"
        )
        return backlog

    def _end_step(self) -> None:
        self._step_open = False
        self._step_end = None
        if self._pending is not None:
            self._write_pending()

    def write_behind_now(self) -> None:
        """Append the batch written behind this step's reads (:class:`WriteBehind`), if still open."""
        if self._pending is not None and self._pending.behind:
            self._write_pending()

    def _write_pending(self) -> None:
        """Append the shared batch (or hand it to the backlog while the gate is busy); its replies then wait
        for the flush the policy asks for, if any. A batch written behind a read whose append fails or
        must wait tells its :class:`WriteBehind`: the replies already given must not leave."""
        pending, self._pending = self._pending, None
        assert pending is not None
        now = pending.now
        entries = pending.entries
        data = None
        if not self._failed:
            try:
                data = build_keyed_batch(pending.records, now, compression=self._compression)
            except Exception as exc:
                self._deferred_append_failed(exc)
        if data is not None:
            backlog = self._backlog
            if backlog is not None or not self._gate.try_acquire():
                if backlog is None:
                    backlog = self._start_backlog()
                backlog.batches.append((data, now))
                for entry in entries:
                    entry.waiting = backlog
                backlog.entries.extend(entries)
                if self._event_waits is pending:
                    self._event_waits = backlog
                if pending.behind and self._write_behind is not None:
                    self._write_behind.failed = True
                return
            try:
                self._log.append(data, now_ms=now, validate=False)
            except Exception as exc:
                self._deferred_append_failed(exc)
            finally:
                self._gate.release()
        if pending.behind and self._failed and self._write_behind is not None:
            self._write_behind.failed = True
        # (behind a read, a flush due now is a segment just rolled, which Kafka flushes once rolled)
        waits = self._appended(entries, not self._failed and self._log.needs_flush(now))
        if self._event_waits is pending:
            # The event being applied lingered here, and a later write of its own sent the batch ahead
            # (too large to join it): its reply waits for what the batch's replies now wait for.
            self._event_waits = waits
        if entries or self._failed:
            self._drain()

    def _appended(self, entries: list[_Release], flush: bool) -> asyncio.Future[None] | None:
        """The replies of an appended batch now wait for the flush that covers it (returned), or for
        nothing."""
        for entry in entries:
            if flush:
                entry.waiting = _NEXT_FLUSH
                self._awaiting_flush.append(entry)
            else:
                entry.waiting = None
        return self._request_flush() if flush else None

    def _event_wrote(self, waits: _NextFlush | _Backlog | _Pending) -> None:
        if not isinstance(self._event_waits, _Backlog):
            self._event_waits = waits

    async def _append_backlog(self, backlog: _Backlog) -> None:
        try:
            await self._gate.wait(backlog.turn)
        except asyncio.CancelledError:
            self._backlog = None
            raise
        # The batches go in one turn, with no await: no event can add to this backlog meanwhile.
        self._backlog = None
        self._backlog_task = None
        failed = self._failed
        now = 0
        try:
            for data, now in backlog.batches:
                if failed:
                    break
                try:
                    self._log.append(data, now_ms=now, validate=False)
                except Exception as exc:
                    self._deferred_append_failed(exc)
                    failed = True
        finally:
            self._gate.release()
        self._appended(backlog.entries, not failed and self._log.needs_flush(now))
        self._drain()

    def _deferred_append_failed(self, exc: Exception) -> None:
        self._append_failed(exc)
        log.error(
            "A deferred append to __consumer_offsets-%d failed; unreleased replies become NOT_COORDINATOR",
            self.partition,
        )
        self._fail()

    def _append_failed(self, exc: Exception) -> ErrorCode:
        self.stats.append_failures += 1
        error = append_error(exc)
        log.warning(
            "Append to __consumer_offsets-%d failed (%s); answering %s", self.partition, exc, error.name
        )
        return error

    # ------------------------------------------------------------------------------------ durability

    def _push(self, items: list[_Item], scope: Scope) -> None:
        """Release the event's replies now, or queue them behind what they wait for (module docstring)."""
        waits, self._event_waits = self._event_waits, None
        if self._flush_needed:
            self._events_since_flush += 1
        wrote = waits is not None
        if not wrote:
            before = self._newest_write_seen(scope)
            if before is not None:
                waits = before.waiting
        if waits is None:
            if items:
                self._release(items, ErrorCode.NOT_COORDINATOR if self._failed else None)
        else:
            self._writes += 1
            entry = _Release(items, waits, scope, self._writes)
            if isinstance(waits, _NextFlush):
                self._awaiting_flush.append(entry)
            elif isinstance(waits, _Backlog | _Pending):
                waits.entries.append(entry)
            self._unreleased.append(entry)
            if wrote:
                self._newest_write = entry
                if scope is None:
                    self._newest_shard_write = entry
                else:
                    for group_id in scope:
                        self._newest_group_write[group_id] = entry
        if self._flush_needed and (self._queue.empty() or self._events_since_flush >= self._max_flush_batch):
            self._request_flush()
        if isinstance(waits, asyncio.Future) and (waits.done() or waits in self._timed_out):
            self._drain()  # what it waits for is already over (its flush's callback may still be due)

    def _newest_write_seen(self, scope: Scope) -> _Release | None:
        """The newest write not yet durable that an event of ``scope`` may have observed."""
        if scope is None:
            newest = self._newest_write
            return None if newest is None or newest.done else newest
        newest = self._newest_shard_write
        if newest is not None and newest.done:
            newest = self._newest_shard_write = None
        writes = self._newest_group_write
        for group_id in scope:
            entry = writes.get(group_id)
            if entry is not None and not entry.done and (newest is None or entry.seq > newest.seq):
                newest = entry
        return newest

    def _request_flush(self) -> asyncio.Future[None]:
        self._flush_needed = False
        self._events_since_flush = 0
        self.stats.flushes += 1
        fut = self._gate.request_flush()
        awaiting, self._awaiting_flush = self._awaiting_flush, []
        for entry in awaiting:
            entry.waiting = fut
        if self._commit_timeout_ms is not None:
            self._flush_deadlines[fut] = asyncio.get_running_loop().call_later(
                self._commit_timeout_ms / 1000, self._flush_timed_out, fut
            )
        fut.add_done_callback(self._flushed)
        return fut

    def _flush_timed_out(self, fut: asyncio.Future[None]) -> None:
        # offsets.commit.timeout.ms: Kafka answers a write whose records are not committed in time with
        # REQUEST_TIMED_OUT, which clients see as COORDINATOR_NOT_AVAILABLE (the write may still land).
        self._flush_deadlines.pop(fut, None)
        if not fut.done():
            self.stats.flush_timeouts += 1
            self._timed_out.add(fut)
            log.warning(
                "fsync of __consumer_offsets-%d is taking more than offsets.commit.timeout.ms", self.partition
            )
            self._drain()

    def _flushed(self, fut: asyncio.Future[None]) -> None:
        handle = self._flush_deadlines.pop(fut, None)
        if handle is not None:
            handle.cancel()
        self._timed_out.discard(fut)
        if (fut.cancelled() or fut.exception() is not None) and not self._failed:
            log.error(
                "fsync of __consumer_offsets-%d failed; its unreleased replies become NOT_COORDINATOR",
                self.partition,
            )
            self._fail()
        self._drain()

    def _fail(self) -> None:
        self._failed = True
        if self._state in (RunnerState.ACTIVE, RunnerState.LOADING):
            self._state = RunnerState.FAILED
            if self._on_failure is not None:
                self._on_failure(self.partition)

    def _drain(self) -> None:
        """Release every queued entry whose wait is over, in queue order; the rest stay queued."""
        waiting_still: deque[_Release] = deque()
        for entry in self._unreleased:
            waiting = entry.waiting
            if isinstance(waiting, _NextFlush | _Backlog | _Pending):
                waiting_still.append(entry)
                continue
            error: ErrorCode | None = ErrorCode.NOT_COORDINATOR if self._failed else None
            if waiting is not None:
                if not waiting.done():
                    if waiting not in self._timed_out:
                        waiting_still.append(entry)
                        continue
                    error = error or ErrorCode.COORDINATOR_NOT_AVAILABLE
                elif waiting.cancelled() or waiting.exception() is not None:
                    error = ErrorCode.NOT_COORDINATOR
            entry.done = True
            if entry.scope is not None:
                for group_id in entry.scope:
                    if self._newest_group_write.get(group_id) is entry:
                        del self._newest_group_write[group_id]
            self._release(entry.items, error)
        self._unreleased = waiting_still
        if not waiting_still:
            callbacks, self._drained_callbacks = self._drained_callbacks, []
            for callback in callbacks:
                callback()

    @staticmethod
    def _release(items: list[_Item], error: ErrorCode | None) -> None:
        for item in items:
            if item.future.done():
                continue  # the client went away
            item.future.set_result(item.value if error is None else item.error_reply(error))

    def _whenever_drained(self, callback: Callable[[], None]) -> None:
        self._drained_callbacks.append(callback)
