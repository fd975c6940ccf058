"""``PartitionLog``: one topic-partition directory of segments. Owns offset assignment and append validation,
idempotent-producer checks, reads for Fetch, timestamp lookups for ListOffsets, retention, compaction
(delegated to :mod:`regroup.log.cleaner`), flushing and recovery at open.

On a single node the high watermark and the last stable offset are the log end offset. A replicated
partition (:attr:`PartitionLog.replicated`, cluster mode) keeps its high watermark apart — what every
in-sync replica has, set by the replication layer — and consumers read only below it. Replication also
uses the leader-epoch cache (``leader-epoch-checkpoint``), appends of batches as the leader wrote them
(:meth:`PartitionLog.append_as_follower`) and truncation of a divergent tail
(:meth:`PartitionLog.truncate_to`).

Threading: every method runs on the owner's thread (the event loop), except :meth:`flush`, which may run in
a worker thread provided no append, roll, retention, compaction, ``delete_records_before`` or close of this
partition runs meanwhile; reads may overlap it.
"""

from __future__ import annotations

import logging
import os
import struct
from bisect import bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal, NamedTuple, NoReturn

from regroup.log import cleaner
from regroup.log._io import fsync_dir
from regroup.log.config import LOG_APPEND_TIME, LONG_MAX, LogConfig
from regroup.log.leader_epoch import CHECKPOINT_FILE, LeaderEpochCache
from regroup.log.producer_state import BatchMetadata, ProducerEntry, ProducerStateManager
from regroup.log.segment import INDEX_SUFFIX, LOG_SUFFIX, TIMEINDEX_SUFFIX, Segment, Truncation
from regroup.protocol.errors import ErrorCode, KafkaError
from regroup.protocol.primitives import DecodeError
from regroup.protocol.record_batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    BatchHeader,
    CorruptRecordError,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
    verify_crc,
)

__all__ = ["AppendInfo", "CompactionPlan", "CompactionStats", "PartitionLog", "ReadResult"]

log = logging.getLogger("regroup.log")

TimestampTypeName = Literal["CreateTime", "LogAppendTime"]

_INT32_MAX: Final = 0x7FFFFFFF
_MAGIC_OFFSET: Final = 16
_CONTROL_BIT: Final = 0x20
# A batch header's batch length, last offset delta, max timestamp, producer id and record count.
_OWN_BATCH: Final = struct.Struct(">8xi11xi8xqq6xi")
_SNAPSHOTS_KEPT: Final = 2
_STALE_SUFFIXES: Final = (".deleted", ".tmp")

CompactionStats = cleaner.CompactionStats


@dataclass(frozen=True, slots=True)
class CompactionPlan:
    """A compaction pass decided on the event loop (:meth:`PartitionLog.plan_compaction`): the closed
    segments to clean and their sizes then, the dirty section and everything the cleaner reads."""

    directory: Path
    segments: list[Segment]
    sizes: list[int]
    dirty_from: int
    end_offset: int
    now_ms: int
    config: LogConfig
    producer_last_offsets: dict[int, int]

    def prepare(self) -> cleaner.PreparedClean:
        """The pass's work (:func:`regroup.log.cleaner.prepare_clean`); safe in a worker thread."""
        return cleaner.prepare_clean(
            self.directory,
            self.segments,
            dirty_from=self.dirty_from,
            end_offset=self.end_offset,
            now_ms=self.now_ms,
            config=self.config,
            producer_last_offsets=self.producer_last_offsets,
        )


class AppendInfo(NamedTuple):
    """Result of an append: the offsets given to the data (or, for a duplicate, to the original batch)."""

    base_offset: int
    last_offset: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int
    record_count: int
    duplicate: bool = False


class ReadResult(NamedTuple):
    data: bytes  # whole record batches, as stored
    high_watermark: int
    log_start_offset: int
    last_stable_offset: int


class PartitionLog:
    """A partition's log. Open with :meth:`open`."""

    def __init__(
        self, directory: Path, config: LogConfig, segments: list[Segment], log_start_offset: int
    ) -> None:
        self.directory = directory
        self.name = directory.name
        self.config = config
        self._flush_policy = config.flush_policy  # built once: asked on every append
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self._active = segments[-1]
        self._leo = self._active.next_offset
        self._log_start = min(max(log_start_offset, segments[0].base_offset), self._leo)
        self._producers = ProducerStateManager(self.name)
        self.append_listeners: list[Callable[[], None]] = []
        self.replicated = False
        """True in a cluster: the high watermark is set by replication, not the log end offset."""
        self._hw = self._leo
        self.high_watermark_listeners: list[Callable[[], None]] = []
        self.epochs = LeaderEpochCache(directory / CHECKPOINT_FILE, label=self.name)
        # Kafka stamps every appended batch with the partition leader epoch; a single broker leads every
        # partition at epoch 0. None leaves the producer's value.
        self.leader_epoch: int | None = 0
        self._unflushed_messages = 0
        self._last_flush_ms: int | None = None
        self._unflushed_segments: list[Segment] = []
        self._dir_dirty = False
        self._recovery_point = self._leo
        self._cleaner_checkpoint = self._log_start
        self._delete_horizon: int | None = None
        self._closed = False
        self.recovered_segments = 0
        self.truncations: list[Truncation] = []

    # ------------------------------------------------------------------------------------------ opening

    @classmethod
    def open(
        cls,
        directory: Path,
        config: LogConfig | None = None,
        *,
        clean_shutdown: bool = False,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        cleaner_checkpoint: int | None = None,
        now_ms: int | None = None,
    ) -> PartitionLog:
        """Open (creating if needed) the log in ``directory``. Unless ``clean_shutdown``, every segment
        holding offsets at or above ``recovery_point`` is recovered: CRCs checked, indexes rebuilt, a torn
        or invalid tail truncated (with a WARNING) together with any later segment. Never fails on bad
        data: the log opens with the valid prefix."""
        config = config or LogConfig()
        directory.mkdir(parents=True, exist_ok=True)
        cleaner.complete_swaps(directory)
        bases: list[int] = []
        for name in os.listdir(directory):
            if name.endswith(_STALE_SUFFIXES):
                (directory / name).unlink(missing_ok=True)
            elif name.endswith(LOG_SUFFIX) and name[: -len(LOG_SUFFIX)].isdigit():
                bases.append(int(name[: -len(LOG_SUFFIX)]))
        bases.sort()
        present = set(bases)
        for name in os.listdir(directory):
            for suffix in (INDEX_SUFFIX, TIMEINDEX_SUFFIX):
                stem = name[: -len(suffix)]
                if name.endswith(suffix) and stem.isdigit() and int(stem) not in present:
                    (directory / name).unlink(missing_ok=True)

        def new_segment(base: int) -> Segment:
            return Segment(
                directory,
                base,
                index_interval_bytes=config.index_interval_bytes,
                max_index_bytes=config.segment_index_bytes,
                created_ms=now_ms,
            )

        segments: list[Segment] = []
        truncations: list[Truncation] = []
        recovered: list[Segment] = []
        for i, base in enumerate(bases):
            seg = new_segment(base)
            if truncations:
                log.warning("deleting %s: it follows a truncated segment", seg.log_path)
                seg.delete()
                continue
            prev_next = segments[-1].next_offset if segments else None
            if prev_next is not None and base < prev_next:
                log.warning(
                    "deleting %s: its base offset %d overlaps the previous segment ending at %d",
                    seg.log_path,
                    base,
                    prev_next,
                )
                seg.delete()
                truncations.append(Truncation(seg.log_path, 0, base, seg.size, "overlapping segment"))
                continue
            trusted = clean_shutdown or (i + 1 < len(bases) and bases[i + 1] <= recovery_point)
            if not (trusted and seg.load()):
                recovered.append(seg)
                truncation = seg.recover(prev_next)
                if truncation is not None:
                    log.warning(
                        "truncated %d invalid bytes from %s at byte position %d (next offset %d): %s",
                        truncation.truncated_bytes,
                        truncation.path,
                        truncation.position,
                        truncation.offset,
                        truncation.reason,
                    )
                    truncations.append(truncation)
            segments.append(seg)
        created = not segments
        if created:
            segments.append(new_segment(log_start_offset))
        plog = cls(directory, config, segments, log_start_offset)
        plog.recovered_segments = len(recovered)
        plog.truncations = truncations
        for seg in recovered:
            if seg is not plog._active:
                seg.become_inactive()
            seg.flush()
        if recovered or created:
            fsync_dir(directory)
        plog._recovery_point = plog._leo
        plog._cleaner_checkpoint = max(plog._log_start, cleaner_checkpoint or 0)
        plog._load_producer_state()
        plog._last_flush_ms = now_ms
        if config.compact:
            # Delete horizons of tombstones in closed segments are unknown until the cleaner reads them.
            plog._delete_horizon = 0
        return plog

    def _load_producer_state(self) -> None:
        snapshot = self._producers.load_latest_snapshot(self.directory, self._leo)
        start = max(snapshot if snapshot is not None else 0, self._log_start)
        for h in self._headers_from(start):
            self._replay_producer(h)

    def _headers_from(self, offset: int) -> Iterator[BatchHeader]:
        """Headers of the batches ending at or after ``offset``."""
        i = max(0, bisect_right(self._bases, offset) - 1)
        for seg in self._segments[i:]:
            if seg.next_offset <= offset:
                continue
            for _, h in seg.batches(seg.position_floor(offset)):
                if h.base_offset + h.last_offset_delta >= offset:
                    yield h

    # ------------------------------------------------------------------------------------------ offsets

    @property
    def log_start_offset(self) -> int:
        return self._log_start

    @property
    def log_end_offset(self) -> int:
        return self._leo

    @property
    def high_watermark(self) -> int:
        return self._hw if self.replicated else self._leo

    @property
    def last_stable_offset(self) -> int:
        return self._hw if self.replicated else self._leo

    @property
    def recovery_point(self) -> int:
        """Offsets below this are known to be on disk (fsynced)."""
        return self._recovery_point

    @property
    def cleaner_checkpoint(self) -> int:
        """Offsets below this were compacted (Kafka's cleaner-offset-checkpoint)."""
        return self._cleaner_checkpoint

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    def segment_bases(self) -> list[int]:
        return list(self._bases)

    def producer_entries(self) -> dict[int, ProducerEntry]:
        """Producer id -> state (read-only view for DescribeProducers and tests)."""
        return dict(self._producers.entries)

    def update_config(self, config: LogConfig) -> None:
        """Apply a changed topic config; index settings take effect from the next segment."""
        self.config = config
        self._flush_policy = config.flush_policy

    def earliest(self) -> int:
        return self._log_start

    def latest(self) -> int:
        return self._leo

    # ------------------------------------------------------------------------------------------ append

    def append(
        self,
        data: bytes | bytearray | memoryview,
        *,
        now_ms: int,
        timestamp_type_config: TimestampTypeName | None = None,
        max_message_bytes: int | None = None,
        validate: bool = True,
    ) -> AppendInfo:
        """Validate ``data`` (one or more client batches, magic 2), assign offsets by rewriting each batch's
        base offset in place, apply LogAppendTime when configured, and append it. ``validate=False`` (the
        broker's own writes, e.g. the group coordinator's) skips the CRC, size and sequence checks.
        Raises ``KafkaError`` with the code Kafka would return; nothing is written then."""
        if self._closed:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"The log of {self.name} is closed")
        config = self.config
        lat = (timestamp_type_config or config.message_timestamp_type) == LOG_APPEND_TIME
        max_bytes = config.max_message_bytes if max_message_bytes is None else max_message_bytes
        buf = bytearray(data)
        n = len(buf)
        if n == 0:
            raise KafkaError(ErrorCode.INVALID_RECORD, "The produce data holds no record batch")
        pending: dict[int, ProducerEntry] | None = None
        leader_epoch = self.leader_epoch
        ts_limit = LONG_MAX if lat else now_ms + config.message_timestamp_after_max_ms
        next_offset = self._leo
        batches: list[tuple[int, int, int, int]]
        own = not validate and not lat and n >= HEADER_SIZE and buf[_MAGIC_OFFSET] == MAGIC
        if own:
            batch_length, last_delta, max_ts, producer_id, records = _OWN_BATCH.unpack_from(buf, 0)
            own = producer_id < 0 and batch_length + LOG_OVERHEAD == n
        if own:
            # One batch of the broker's own without a producer (each group coordinator write): what the
            # loop below does for it, without parsing the rest of its header.
            set_base_offset(buf, 0, next_offset)
            if leader_epoch is not None:
                set_partition_leader_epoch(buf, 0, leader_epoch)
            next_offset += last_delta + 1
            batches = [(0, n, next_offset - 1, max_ts)]
            pos = n
        else:
            batches = []
            max_ts = -1
            records = 0
            pos = 0
        while pos < n:
            h = self._parse_batch(buf, pos, validate)
            size = h.batch_length + LOG_OVERHEAD
            if validate and (
                size > max_bytes
                or h.record_count != h.last_offset_delta + 1
                or h.record_count <= 0
                or h.attributes & _CONTROL_BIT
                or (h.producer_id >= 0 and h.base_sequence < 0)
                or h.max_timestamp > ts_limit
            ):
                self._reject_batch(h, size, max_bytes, ts_limit)
            batch_ts = now_ms if lat else h.max_timestamp
            if h.producer_id >= 0:
                if pending is None:
                    pending = {}
                duplicate = self._stage_producer_batch(pending, h, next_offset, batch_ts, validate)
                if duplicate is not None:
                    return self._duplicate(duplicate, lat)
            set_base_offset(buf, pos, next_offset)
            if leader_epoch is not None:
                set_partition_leader_epoch(buf, pos, leader_epoch)
            if lat:
                set_log_append_time(buf, pos, now_ms)
            last = next_offset + h.last_offset_delta
            max_ts = max(max_ts, batch_ts)
            batches.append((pos, size, last, batch_ts))
            records += h.record_count
            next_offset = last + 1
            pos += size
        self._check_fits_segment(n)
        base_offset = self._leo
        self._write(buf, batches, next_offset, max_ts, records, now_ms)
        if pending:
            self._producers.entries.update(pending)
        self._appended()
        return AppendInfo(base_offset, next_offset - 1, now_ms if lat else -1, self._log_start, records)

    def _check_fits_segment(self, size: int) -> None:
        if size > self.config.segment_bytes:
            raise KafkaError(
                ErrorCode.RECORD_LIST_TOO_LARGE,
                f"Message batch size is {size} bytes in append to partition {self.name} which exceeds the "
                f"maximum configured segment size of {self.config.segment_bytes}.",
            )

    def _stage_producer_batch(
        self,
        pending: dict[int, ProducerEntry],
        h: BatchHeader,
        base_offset: int,
        timestamp: int,
        validate: bool,
    ) -> BatchMetadata | None:
        """An idempotent producer's batch: check its epoch and sequence against the producer's state (as
        changed by earlier batches of this append, kept in ``pending`` until the append succeeds) and
        record it. Returns the original of a duplicate batch instead (Kafka acknowledges it again)."""
        entry = pending.get(h.producer_id)
        if entry is None:
            current = self._producers.entries.get(h.producer_id)
            if validate and current is not None:
                dup = current.find_duplicate(h.producer_epoch, h.base_sequence, h.last_sequence)
                if dup is not None:
                    return dup
            entry = ProducerEntry(h.producer_id) if current is None else current.copy()
        self._producers.check(
            entry, h.producer_id, h.producer_epoch, h.base_sequence, base_offset, check_sequence=validate
        )
        entry.add_batch(
            h.producer_epoch,
            BatchMetadata(
                h.base_sequence, h.last_sequence, base_offset, base_offset + h.last_offset_delta, timestamp
            ),
        )
        pending[h.producer_id] = entry
        return None

    def _write(
        self,
        buf: bytearray,
        batches: list[tuple[int, int, int, int]],
        next_offset: int,
        max_ts: int,
        records: int,
        now_ms: int,
    ) -> None:
        """Write validated batches at the log end (rolling the segment first when it is full or old) and
        move the log end to ``next_offset``."""
        config = self.config
        active = self._active
        if active.size and (
            active.size + len(buf) > config.segment_bytes
            or active.time_waited_for_roll(now_ms, max_ts) > config.segment_ms
            or active.index_full
            or next_offset - 1 - active.base_offset > _INT32_MAX
        ):
            active = self._roll(now_ms)
        try:
            active.append(buf, batches)
        except OSError as exc:
            raise KafkaError(
                ErrorCode.KAFKA_STORAGE_ERROR, f"Failed to append to {active.log_path}: {exc}"
            ) from exc
        self._leo = next_offset
        self._unflushed_messages += records
        if self._last_flush_ms is None:
            self._last_flush_ms = now_ms

    def _appended(self) -> None:
        # A snapshot: a listener may remove itself (or another) while they are told.
        for listener in tuple(self.append_listeners):
            try:
                listener()
            except Exception:
                log.exception("append listener of %s failed", self.name)

    @staticmethod
    def _parse_batch(buf: bytearray, pos: int, validate: bool) -> BatchHeader:
        if len(buf) - pos <= _MAGIC_OFFSET:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"Truncated record batch at byte {pos}")
        magic = buf[pos + _MAGIC_OFFSET]
        if magic != MAGIC:
            if magic in (0, 1):
                # Message formats v0/v1 were removed in Kafka 4.0.
                raise KafkaError(
                    ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
                    f"Record batch magic {magic} is not supported; only magic 2 can be appended",
                )
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, f"Invalid magic found in record: {magic}")
        try:
            return verify_crc(buf, pos) if validate else BatchHeader.parse(buf, pos)
        except CorruptRecordError as corrupt:
            raise KafkaError(
                ErrorCode.CORRUPT_MESSAGE, f"Record batch at byte {pos} is corrupt: {corrupt}"
            ) from None
        except DecodeError as exc:
            raise KafkaError(
                ErrorCode.CORRUPT_MESSAGE, f"Invalid record batch at byte {pos}: {exc}"
            ) from None

    def _reject_batch(self, h: BatchHeader, size: int, max_bytes: int, ts_limit: int) -> NoReturn:
        """Raise the error for a batch failing Kafka's ``UnifiedLog.analyzeAndValidateRecords`` /
        ``LogValidator.validateBatch`` checks (done on the header only)."""
        if size > max_bytes:
            raise KafkaError(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"The record batch size in the append to {self.name} is {size} bytes which exceeds the "
                f"maximum configured value of {max_bytes}.",
            )
        if h.last_offset_delta < 0:
            raise KafkaError(ErrorCode.INVALID_RECORD, "Batch has an invalid offset range")
        if h.record_count <= 0:
            raise KafkaError(
                ErrorCode.INVALID_RECORD, f"Invalid reported count for record batch: {h.record_count}"
            )
        if h.record_count != h.last_offset_delta + 1:
            raise KafkaError(
                ErrorCode.INVALID_RECORD,
                f"Inconsistent batch offset range [0, {h.last_offset_delta}] and record count "
                f"{h.record_count}",
            )
        if h.attributes & _CONTROL_BIT:
            raise KafkaError(ErrorCode.INVALID_RECORD, "Clients are not allowed to write control records")
        if h.producer_id >= 0 and h.base_sequence < 0:
            raise KafkaError(
                ErrorCode.INVALID_RECORD,
                f"Invalid sequence number {h.base_sequence} in record batch with producerId {h.producer_id}",
            )
        raise KafkaError(
            ErrorCode.INVALID_TIMESTAMP,
            f"Timestamp {h.max_timestamp} of a record batch in {self.name} is out of range. The "
            f"timestamp should be within [-inf, {ts_limit}] (message.timestamp.after.max.ms)",
        )

    def _duplicate(self, dup: BatchMetadata, lat: bool) -> AppendInfo:
        return AppendInfo(
            dup.first_offset,
            dup.last_offset,
            dup.timestamp if lat else -1,
            self._log_start,
            dup.last_offset - dup.first_offset + 1,
            duplicate=True,
        )

    def _roll(self, now_ms: int) -> Segment:
        old = self._active
        old.become_inactive()
        new = Segment(
            self.directory,
            self._leo,
            index_interval_bytes=self.config.index_interval_bytes,
            max_index_bytes=self.config.segment_index_bytes,
            created_ms=now_ms,
        )
        self._segments.append(new)
        self._bases.append(new.base_offset)
        self._active = new
        self._unflushed_segments.append(old)
        self._dir_dirty = True
        # Kafka snapshots producer state at every roll, so a restart replays at most the active segment.
        self._producers.write_snapshot(self.directory, new.base_offset, sync=False)
        ProducerStateManager.delete_snapshots(self.directory, keep=_SNAPSHOTS_KEPT)
        return new

    def roll(self, now_ms: int) -> None:
        """Start a new segment now (no-op when the active segment is empty)."""
        if self._active.size:
            self._roll(now_ms)

    # ------------------------------------------------------------------------------------------ reads

    def read(
        self,
        offset: int,
        max_bytes: int,
        *,
        isolation_committed: bool = False,
        to_log_end: bool = False,
    ) -> ReadResult:
        """Whole batches from the one holding ``offset``, up to ``max_bytes`` but at least one batch (Kafka's
        ``minOneMessage``), from a single segment, never past the high watermark (``to_log_end``: up to the
        log end, for a follower's fetch). ``isolation_committed`` reads up to the last stable offset, which
        equals the high watermark without transactions."""
        leo = self._leo
        start = self._log_start
        hw = self.high_watermark
        end = leo if to_log_end else hw
        if offset == leo:
            return ReadResult(b"", hw, start, hw)
        if offset < start or offset > leo:
            raise KafkaError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"Received request for offset {offset} for partition {self.name}, but we only have log "
                f"segments in the range {start} to {leo}.",
            )
        if offset >= end:
            return ReadResult(b"", hw, start, hw)  # between the high watermark and the log end
        segments = self._segments
        i = bisect_right(self._bases, offset) - 1
        while i < len(segments):
            data = segments[i].read(offset, max_bytes)
            if data:
                if end < leo:
                    data = _batches_below(data, end)
                return ReadResult(data, hw, start, hw)
            i += 1
        return ReadResult(b"", hw, start, hw)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after ``timestamp`` (ListOffsets with a timestamp),
        or None when every record is older."""
        start = self._log_start
        for seg in self._segments:
            if seg.max_timestamp >= timestamp and seg.next_offset > start:
                return seg.find_timestamp(timestamp, start)
        return None

    def max_timestamp(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the record with the largest timestamp (ListOffsets -3), or None if empty."""
        best: Segment | None = None
        for seg in self._segments:
            if best is None or seg.max_timestamp > best.max_timestamp:
                best = seg
        return None if best is None else best.max_timestamp_record()

    # ------------------------------------------------------------------------------------------ retention

    def apply_retention(self, now_ms: int) -> int:
        """Delete whole old segments past ``retention.ms`` / ``retention.bytes`` (``cleanup.policy`` delete),
        and any segment wholly below the log start offset; never the active segment. Advances the log start
        offset; expires idle producers. Returns the number of segments deleted."""
        config = self.config
        deleted = 0
        if config.delete:
            if config.retention_ms >= 0:
                deleted += self._delete_oldest(
                    lambda seg, _next: now_ms - seg.largest_timestamp() > config.retention_ms
                )
            if config.retention_bytes >= 0:
                excess = self.size_bytes - config.retention_bytes

                def over_size(seg: Segment, _next: int) -> bool:
                    nonlocal excess
                    if excess - seg.size >= 0:
                        excess -= seg.size
                        return True
                    return False

                deleted += self._delete_oldest(over_size)
        deleted += self._delete_oldest(lambda _seg, next_base: next_base <= self._log_start)
        self._producers.expire(now_ms, config.producer_id_expiration_ms)
        return deleted

    def _delete_oldest(self, predicate: Callable[[Segment, int], bool]) -> int:
        count = 0
        segments = self._segments
        # Kafka's UnifiedLog.deleteOldSegments: only segments wholly below the high watermark (replicated).
        hw = self.high_watermark
        while (
            len(segments) > 1
            and segments[1].base_offset <= hw
            and predicate(segments[0], segments[1].base_offset)
        ):
            seg = segments.pop(0)
            self._bases.pop(0)
            if seg in self._unflushed_segments:
                self._unflushed_segments.remove(seg)
            seg.delete()
            count += 1
        if count:
            self._log_start = max(self._log_start, segments[0].base_offset)
            self._cleaner_checkpoint = max(self._cleaner_checkpoint, self._log_start)
            self._dir_dirty = True
            ProducerStateManager.delete_snapshots(self.directory, keep=_SNAPSHOTS_KEPT, below=self._log_start)
            if len(self.epochs):
                self.epochs.truncate_from_start(self._log_start)
        return count

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: move the log start offset up to ``offset`` (-1: the high watermark) and delete the
        segments wholly below it. Returns the new log start offset (the partition's low watermark)."""
        hw = self.high_watermark
        if offset == -1:
            offset = hw
        if offset < 0 or offset > hw:
            raise KafkaError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"Cannot increment the log start offset to {offset} of partition {self.name} since it is "
                f"larger than the high watermark {hw}",
            )
        if offset > self._log_start:
            self._log_start = offset
            self._delete_oldest(lambda _seg, next_base: next_base <= self._log_start)
            if len(self.epochs):
                self.epochs.truncate_from_start(self._log_start)
        return self._log_start

    # ------------------------------------------------------------------------------------------ compaction

    def compact(self, now_ms: int, *, force: bool = False) -> CompactionStats | None:
        """Compact the closed segments of a ``cleanup.policy=compact`` log (see :mod:`regroup.log.cleaner`):
        keep the latest record per key, drop tombstones once their delete horizon passed. Runs when the dirty
        ratio reaches ``min.cleanable.dirty.ratio``, a tombstone horizon has passed, or ``force``. Returns
        None when nothing was cleanable. The same as :meth:`plan_compaction`, ``prepare()`` and
        :meth:`finish_compaction` in one go."""
        plan = self.plan_compaction(now_ms, force=force)
        if plan is None:
            return None
        return self.finish_compaction(plan, plan.prepare())

    def plan_compaction(self, now_ms: int, *, force: bool = False) -> CompactionPlan | None:
        """What a compaction pass would clean now (None: nothing is due). The plan's ``prepare()`` does the
        work and may run in a worker thread while the log goes on taking appends; nothing else may remove or
        truncate segments meanwhile, or :meth:`finish_compaction` drops the pass."""
        config = self.config
        if self._closed or not config.compact:
            return None
        segments = self._segments
        dirty_from = self._cleaner_checkpoint
        limit = len(segments) - 1  # the active segment is never cleaned
        if config.min_compaction_lag_ms > 0:
            for i in range(len(segments) - 1):
                if segments[i + 1].base_offset <= dirty_from:
                    continue
                if segments[i].largest_timestamp() > now_ms - config.min_compaction_lag_ms:
                    limit = i
                    break
        if limit <= 0:
            return None
        cleanable = segments[:limit]
        end_offset = segments[limit].base_offset
        total = sum(s.size for s in cleanable)
        dirty = sum(s.size for i, s in enumerate(cleanable) if segments[i + 1].base_offset > dirty_from)
        horizon_due = self._delete_horizon is not None and self._delete_horizon <= now_ms
        if (
            not force
            and not horizon_due
            and (total == 0 or dirty / total <= config.min_cleanable_dirty_ratio)
        ):
            return None
        return CompactionPlan(
            self.directory,
            cleanable,
            [s.size for s in cleanable],
            dirty_from,
            end_offset,
            now_ms,
            config,
            self._producers.last_data_offsets(),
        )

    def finish_compaction(
        self, plan: CompactionPlan, prepared: cleaner.PreparedClean
    ) -> CompactionStats | None:
        """Swap in what ``plan.prepare()`` produced, unless the planned segments changed meanwhile (deleted
        by retention or DeleteRecords, truncated, or the log closed): then the pass is dropped (None) and
        the next one starts over."""
        segments = self._segments
        unchanged = not self._closed and all(
            seg in segments and seg.size == size for seg, size in zip(plan.segments, plan.sizes, strict=True)
        )
        if not unchanged:
            prepared.discard()
            return None

        def swapped(old: list[Segment], new: Segment) -> None:
            i = self._segments.index(old[0])
            self._segments[i : i + len(old)] = [new]
            self._bases[i : i + len(old)] = [new.base_offset]
            for seg in old:
                if seg in self._unflushed_segments:
                    self._unflushed_segments.remove(seg)

        stats = cleaner.commit_clean(self.directory, prepared, swapped)
        self._cleaner_checkpoint = max(self._cleaner_checkpoint, plan.end_offset)
        self._delete_horizon = stats.earliest_delete_horizon
        return stats

    # ------------------------------------------------------------------------------------------ replication

    def set_high_watermark(self, offset: int) -> bool:
        """Move the high watermark (a replicated partition's leader after its ISR fetched, a follower from
        the leader's answer); it never passes the log end. Returns whether it moved; listeners hear of a
        move (parked acks=all produces, consumer long polls, coordinator replies)."""
        offset = min(offset, self._leo)
        if offset == self._hw:
            return False
        self._hw = offset
        # A snapshot: a listener that removes itself must not make the next one miss this move.
        for listener in tuple(self.high_watermark_listeners):
            try:
                listener()
            except Exception:
                log.exception("high watermark listener of %s failed", self.name)
        return True

    def become_leader(self, leader_epoch: int) -> None:
        """This replica leads from now on at ``leader_epoch``: batches appended from here are stamped with it,
        and the epoch starts at the log end (Kafka's ``Partition.makeLeader``)."""
        self.leader_epoch = leader_epoch
        self.epochs.assign(leader_epoch, self._leo)

    def append_as_follower(self, data: bytes | bytearray | memoryview, *, now_ms: int) -> AppendInfo:
        """Append batches as the leader wrote them (offsets and partition leader epochs kept): the first must
        start at the log end. Producer state follows without sequence checks; a batch with a newer epoch
        adds an epoch entry (Kafka's ``UnifiedLog.appendAsFollower``). Raises KafkaError on data that does
        not continue this log."""
        if self._closed:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"The log of {self.name} is closed")
        buf = bytearray(data)
        n = len(buf)
        batches: list[tuple[int, int, int, int]] = []
        headers: list[BatchHeader] = []
        next_offset = self._leo
        max_ts = -1
        records = 0
        pos = 0
        while pos < n:
            h = self._parse_batch(buf, pos, True)
            if h.base_offset != next_offset:
                raise KafkaError(
                    ErrorCode.UNKNOWN_SERVER_ERROR,
                    f"Replicated batch of {self.name} starts at offset {h.base_offset}, "
                    f"not at the log end {next_offset}",
                )
            size = h.batch_length + LOG_OVERHEAD
            last = h.base_offset + h.last_offset_delta
            batches.append((pos, size, last, h.max_timestamp))
            headers.append(h)
            max_ts = max(max_ts, h.max_timestamp)
            records += h.record_count
            next_offset = last + 1
            pos += size
        if not batches:
            return AppendInfo(self._leo, self._leo - 1, -1, self._log_start, 0)
        base_offset = self._leo
        self._write(buf, batches, next_offset, max_ts, records, now_ms)
        for h in headers:
            latest = self.epochs.latest_epoch
            if h.partition_leader_epoch >= 0 and (latest is None or h.partition_leader_epoch > latest):
                self.epochs.assign(h.partition_leader_epoch, h.base_offset)
            self._replay_producer(h)
        self._appended()
        return AppendInfo(base_offset, next_offset - 1, -1, self._log_start, records)

    def truncate_to(self, offset: int) -> int:
        """Remove everything at and after ``offset`` (the whole batch holding it): segments past it go,
        producer state is rebuilt from the latest snapshot at or below the new end, the epoch cache and the
        high watermark follow (Kafka's ``UnifiedLog.truncateTo``). Returns the new log end offset."""
        if offset >= self._leo:
            # A leader elected without writing leaves an epoch entry at its log end: drop entries from here on
            # all the same, or the follower's OffsetForLeaderEpoch exchange would not converge.
            self.epochs.truncate_from_end(self._leo)
            return self._leo
        offset = max(offset, self._log_start)
        log.info("Truncating %s from log end %d to offset %d", self.name, self._leo, offset)
        while len(self._segments) > 1 and self._segments[-1].base_offset >= offset:
            seg = self._segments.pop()
            self._bases.pop()
            if seg in self._unflushed_segments:
                self._unflushed_segments.remove(seg)
            seg.delete()
            self._dir_dirty = True
        self._active = self._segments[-1]
        self._active.truncate_to(offset)
        self._leo = self._active.next_offset
        self._hw = min(self._hw, self._leo)
        self._recovery_point = min(self._recovery_point, self._leo)
        self._unflushed_messages = 0
        self._producers = ProducerStateManager(self.name)
        self._load_producer_state()
        self.epochs.truncate_from_end(self._leo)
        return self._leo

    def reset_to(self, offset: int) -> None:
        """Empty the log and start it at ``offset`` (a follower behind its leader's log start: Kafka's
        ``UnifiedLog.truncateFullyAndStartAt``)."""
        log.warning("Emptying %s to restart it at offset %d", self.name, offset)
        for seg in self._segments:
            seg.delete()
        self._unflushed_segments.clear()
        active = Segment(
            self.directory,
            offset,
            index_interval_bytes=self.config.index_interval_bytes,
            max_index_bytes=self.config.segment_index_bytes,
        )
        self._segments = [active]
        self._bases = [offset]
        self._active = active
        self._dir_dirty = True
        self._leo = self._log_start = self._hw = self._recovery_point = offset
        self._cleaner_checkpoint = offset
        self._unflushed_messages = 0
        self._producers = ProducerStateManager(self.name)
        ProducerStateManager.delete_snapshots(self.directory, keep=0)
        self.epochs.clear()

    def _replay_producer(self, h: BatchHeader) -> None:
        if h.producer_id < 0:
            return
        if h.attributes & _CONTROL_BIT:
            self._producers.replay_marker(h.producer_id, h.producer_epoch)
        else:
            self._producers.replay(
                h.producer_id,
                h.producer_epoch,
                h.base_sequence,
                h.last_sequence,
                h.base_offset,
                h.base_offset + h.last_offset_delta,
                h.max_timestamp,
            )

    # ------------------------------------------------------------------------------------------ durability

    def needs_flush(self, now_ms: int) -> bool:
        """True when ``flush.messages``/``flush.ms`` call for an fsync, or a rolled segment (or new/deleted
        files) are not yet on disk; Kafka flushes a segment once it is rolled."""
        if self._unflushed_segments or self._dir_dirty:
            return True
        last = self._last_flush_ms if self._last_flush_ms is not None else now_ms
        return self._flush_policy.due(self._unflushed_messages, last, now_ms)

    @property
    def unflushed_messages(self) -> int:
        return self._unflushed_messages

    def flush(self, now_ms: int | None = None) -> None:
        """fsync the rolled-but-unflushed segments, the active segment and their indexes, and the directory
        when segments were created or deleted; then advance the recovery point. May run in a worker thread
        while no append (or other mutation) of this partition runs; reads may continue."""
        leo = self._leo
        messages = self._unflushed_messages
        pending = list(self._unflushed_segments)
        for seg in [*pending, self._active]:
            seg.flush()
        if self._dir_dirty:
            self._dir_dirty = False
            fsync_dir(self.directory)
        del self._unflushed_segments[: len(pending)]
        self._unflushed_messages -= messages
        self._recovery_point = leo
        if now_ms is not None:
            self._last_flush_ms = now_ms

    def close(self) -> None:
        """Flush everything, write a producer-state snapshot at the log end, and close the files."""
        if self._closed:
            return
        self._closed = True
        for seg in self._segments:
            seg.close(sync=seg is self._active or seg in self._unflushed_segments)
        self._unflushed_segments.clear()
        self._producers.write_snapshot(self.directory, self._leo, sync=True)
        ProducerStateManager.delete_snapshots(self.directory, keep=_SNAPSHOTS_KEPT)
        fsync_dir(self.directory)
        self._recovery_point = self._leo
        self._unflushed_messages = 0

    def close_handles(self) -> None:
        """Close the files without writing anything (the directory is about to be deleted)."""
        self._closed = True
        for seg in self._segments:
            seg.close_handle()

    @property
    def closed(self) -> bool:
        return self._closed

    def __repr__(self) -> str:
        return f"PartitionLog({self.name}, start={self._log_start}, end={self._leo})"


def _batches_below(data: bytes, end: int) -> bytes:
    """``data`` (whole batches) cut before the first batch whose base offset is ``end`` or beyond."""
    pos = 0
    n = len(data)
    while pos + LOG_OVERHEAD <= n:
        base = int.from_bytes(data[pos : pos + 8], "big", signed=True)
        if base >= end:
            break
        pos += LOG_OVERHEAD + int.from_bytes(data[pos + 8 : pos + 12], "big", signed=True)
    return data if pos >= n else data[:pos]
