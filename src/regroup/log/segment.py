"""One log segment: ``<base>.log`` holding record batches byte for byte as the Fetch API returns them, with
Kafka's sparse offset index ``<base>.index`` and time index ``<base>.timeindex``; offset and timestamp
lookups; torn-tail recovery.

File formats are Kafka's (``LogSegment``, ``OffsetIndex``, ``TimeIndex``): an offset index entry is
(relative offset int32, file position int32) naming the *last* offset of the batch starting at that
position, written once more than ``index.interval.bytes`` were appended since the previous entry; a time
index entry is (max timestamp so far int64, relative offset int32 of the batch holding it), appended with
each offset index entry when the timestamp grew, and once more when the segment stops being active.

The in-memory index is authoritative while the segment is open; the index files are written at flush, roll
and close (Kafka leaves them to the page cache through mmap) and are rebuilt from the log whenever they are
missing, fail a sanity check, or belong to a segment recovered after an unclean shutdown.
"""

from __future__ import annotations

import logging
import os
import struct
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from regroup.log._io import O_BINARY, fsync_file, write_all, write_file_atomically
from regroup.protocol.record_batch import (
    LOG_OVERHEAD,
    BatchHeader,
    TruncatedBatchError,
    decode_batch,
    iter_batches,
)

__all__ = [
    "INDEX_SUFFIX",
    "LOG_SUFFIX",
    "TIMEINDEX_SUFFIX",
    "FileScan",
    "Segment",
    "Truncation",
    "segment_name",
]

log = logging.getLogger("regroup.log")

LOG_SUFFIX: Final = ".log"
INDEX_SUFFIX: Final = ".index"
TIMEINDEX_SUFFIX: Final = ".timeindex"

_INT32_MAX: Final = 0x7FFFFFFF
_OFFSET_ENTRY: Final = struct.Struct(">ii")  # relative offset, position
_TIME_ENTRY: Final = struct.Struct(">qi")  # timestamp, relative offset
# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta: enough of a header
# to walk batches and tell which one holds an offset, without requiring the whole batch in the buffer.
_PEEK: Final = struct.Struct(">qiibIhi")
_PEEK_SIZE: Final = _PEEK.size
_LENGTH: Final = struct.Struct(">i")
_I64: Final = struct.Struct(">q")
_MAX_TS_END: Final = 43  # the batch header's maxTimestamp field ends here
_SCAN_CHUNK: Final = 1 << 20
_WALK_SLACK: Final = 16 * 1024


def segment_name(base_offset: int) -> str:
    """Kafka's zero-padded file stem for a segment or snapshot at ``base_offset``."""
    return f"{base_offset:020d}"


class FileScan:
    """``(pos, header)`` of consecutive batches in ``[start, limit)`` of a file, read in chunks. Iteration
    stops at the first batch that is torn, malformed or (with ``check_crc``) corrupt: ``end`` is then the
    position just past the last good batch and ``error`` the reason (``None`` after a clean end). While a
    batch is being handled, its bytes are ``chunk[pos - chunk_pos : pos - chunk_pos + header.size]``."""

    __slots__ = ("_check_crc", "_fd", "_limit", "chunk", "chunk_pos", "end", "error")

    def __init__(self, fd: int, start: int, limit: int, *, check_crc: bool) -> None:
        self._fd = fd
        self._limit = limit
        self._check_crc = check_crc
        self.end = start
        self.error: str | None = None
        self.chunk = b""
        self.chunk_pos = start

    def __iter__(self) -> Iterator[tuple[int, BatchHeader]]:
        pos = self.end
        limit = self._limit
        size = _SCAN_CHUNK
        while pos < limit:
            want = min(size, limit - pos)
            buf = os.pread(self._fd, want, pos)
            if not buf:
                self.error = f"file ends at {pos} before the expected {limit}"
                return
            self.chunk = buf
            self.chunk_pos = pos
            scan = iter_batches(buf, 0, check_crc=self._check_crc)
            for p, h in scan:
                self.end = pos + p + h.batch_length + LOG_OVERHEAD
                yield pos + p, h
            consumed = scan.end
            err = scan.error
            if err is None:
                pos += consumed
                size = _SCAN_CHUNK
                continue
            rest = len(buf) - consumed
            if isinstance(err, TruncatedBatchError) and pos + len(buf) < limit:
                # The batch runs past this chunk: read again from its start, with room for all of it.
                if rest >= LOG_OVERHEAD:
                    (length,) = _LENGTH.unpack_from(buf, consumed + 8)
                    need = LOG_OVERHEAD + length
                    if need > limit - (pos + consumed):
                        self.error = f"batch of {need} bytes runs past the end of the file"
                        return
                    size = max(_SCAN_CHUNK, need)
                pos += consumed
                continue
            self.error = str(err)
            return


@dataclass(frozen=True, slots=True)
class Truncation:
    """What recovery cut off the end of a segment."""

    path: Path
    position: int  # byte position where the invalid tail started
    offset: int  # the offset the next valid batch would have had
    truncated_bytes: int
    reason: str


class Segment:
    """An open segment. Not thread-safe, except that ``read``/lookups and ``flush`` may overlap (both only
    ``pread``/``fsync`` the file)."""

    __slots__ = (
        "_bytes_since_index",
        "_fd",
        "_idx_offsets",
        "_idx_persisted",
        "_idx_positions",
        "_index_interval",
        "_indexes_synced",
        "_max_idx_entries",
        "_max_ti_entries",
        "_ti_offsets",
        "_ti_persisted",
        "_ti_timestamps",
        "_unsynced",
        "base_offset",
        "created_ms",
        "directory",
        "first_batch_timestamp",
        "log_path",
        "max_timestamp",
        "next_offset",
        "offset_of_max_timestamp",
        "size",
    )

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_bytes: int,
        log_path: Path | None = None,
        created_ms: int | None = None,
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.log_path = log_path or directory / (segment_name(base_offset) + LOG_SUFFIX)
        self._index_interval = index_interval_bytes
        self._max_idx_entries = max_index_bytes // _OFFSET_ENTRY.size
        self._max_ti_entries = max_index_bytes // _TIME_ENTRY.size
        self._fd = os.open(self.log_path, os.O_RDWR | os.O_APPEND | os.O_CREAT | O_BINARY, 0o644)
        self.size = os.fstat(self._fd).st_size
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = base_offset
        self.first_batch_timestamp = -1
        self.created_ms = created_ms
        self._bytes_since_index = 0
        self._idx_offsets: list[int] = []  # absolute last offsets
        self._idx_positions: list[int] = []
        self._ti_timestamps: list[int] = []
        self._ti_offsets: list[int] = []  # absolute
        self._idx_persisted = -1  # entries known to be in the index file; -1: rewrite it whole
        self._ti_persisted = -1
        self._unsynced = False
        self._indexes_synced = False

    # ------------------------------------------------------------------------------------------ paths

    @property
    def index_path(self) -> Path:
        return self.directory / (segment_name(self.base_offset) + INDEX_SUFFIX)

    @property
    def timeindex_path(self) -> Path:
        return self.directory / (segment_name(self.base_offset) + TIMEINDEX_SUFFIX)

    @property
    def index_full(self) -> bool:
        """Kafka rolls when either index reaches ``segment.index.bytes``."""
        return (
            len(self._idx_offsets) >= self._max_idx_entries or len(self._ti_offsets) >= self._max_ti_entries
        )

    def largest_timestamp(self) -> int:
        """Kafka's ``LogSegment.largestTimestamp``: the max record timestamp, else the file's mtime."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        return os.stat(self.log_path).st_mtime_ns // 1_000_000

    # ------------------------------------------------------------------------------------------ appends

    def append(self, data: bytes | bytearray, batches: Sequence[tuple[int, int, int, int]]) -> None:
        """Append ``data`` (whole batches, offsets assigned). ``batches`` lists each one's (position in
        ``data``, size, last offset, max timestamp). On a write error the file is cut back and the error
        re-raised, so no torn batch stays behind."""
        start = self.size
        try:
            write_all(self._fd, data)
        except OSError:
            try:
                os.ftruncate(self._fd, start)
            except OSError:
                log.exception("could not cut %s back to %d bytes after a failed write", self.log_path, start)
            raise
        if start == 0:
            self.first_batch_timestamp = batches[0][3]
        interval = self._index_interval
        for rel, size, last_offset, max_ts in batches:
            if max_ts > self.max_timestamp:
                self.max_timestamp = max_ts
                self.offset_of_max_timestamp = last_offset
            if self._bytes_since_index > interval:
                self._add_index_entry(last_offset, start + rel)
            self._bytes_since_index += size
        self.size = start + len(data)
        self.next_offset = batches[-1][2] + 1
        self._unsynced = True

    def _add_index_entry(self, last_offset: int, position: int) -> None:
        self._idx_offsets.append(last_offset)
        self._idx_positions.append(position)
        self._maybe_add_time_entry()
        self._bytes_since_index = 0

    def _maybe_add_time_entry(self) -> None:
        ts = self.max_timestamp
        if ts > (self._ti_timestamps[-1] if self._ti_timestamps else -1):
            self._ti_timestamps.append(ts)
            self._ti_offsets.append(self.offset_of_max_timestamp)

    def _track(self, pos: int, h: BatchHeader) -> None:
        """Index bookkeeping for a batch found in the file (recovery, rebuilds)."""
        last = h.base_offset + h.last_offset_delta
        if h.max_timestamp > self.max_timestamp:
            self.max_timestamp = h.max_timestamp
            self.offset_of_max_timestamp = last
        if pos - (self._idx_positions[-1] if self._idx_positions else 0) > self._index_interval:
            self._add_index_entry(last, pos)
        if pos == 0:
            self.first_batch_timestamp = h.max_timestamp
        self.next_offset = last + 1

    # ------------------------------------------------------------------------------------------ loading

    def load(self) -> bool:
        """Take the index files at their word after sanity checks, then read the batch headers after the last
        index entry to restore the end offset and max timestamp. Returns False when anything is
        inconsistent; the caller then runs :meth:`recover`."""
        offsets = self._read_offset_index()
        times = self._read_time_index() if offsets is not None else None
        if offsets is None or times is None:
            return False
        self._idx_offsets, self._idx_positions = offsets
        self._ti_timestamps, self._ti_offsets = times
        self._idx_persisted = len(self._idx_offsets)
        self._ti_persisted = len(self._ti_offsets)
        self._indexes_synced = True
        if self._ti_timestamps:
            self.max_timestamp = self._ti_timestamps[-1]
            self.offset_of_max_timestamp = self._ti_offsets[-1]
        start = self._idx_positions[-1] if self._idx_positions else 0
        expected = self.base_offset
        scan = FileScan(self._fd, start, self.size, check_crc=False)
        for pos, h in scan:
            if h.base_offset < expected or not self._offsets_fit(h):
                return False
            if pos == start and start and h.base_offset + h.last_offset_delta != self._idx_offsets[-1]:
                return False
            last = h.base_offset + h.last_offset_delta
            if h.max_timestamp > self.max_timestamp:
                self.max_timestamp = h.max_timestamp
                self.offset_of_max_timestamp = last
            expected = last + 1
            if pos == 0:
                self.first_batch_timestamp = h.max_timestamp
        if (
            scan.error is not None
            or (self._idx_offsets and expected <= self._idx_offsets[-1])
            or (self._ti_offsets and expected <= self._ti_offsets[-1])
        ):
            return False
        self.next_offset = expected
        self._bytes_since_index = self.size - start
        if self.size and self.first_batch_timestamp < 0:
            head = os.pread(self._fd, _MAX_TS_END, 0)
            if len(head) == _MAX_TS_END:
                (self.first_batch_timestamp,) = _I64.unpack_from(head, _MAX_TS_END - 8)
        return True

    def _offsets_fit(self, h: BatchHeader) -> bool:
        return (
            h.last_offset_delta >= 0 and h.base_offset + h.last_offset_delta - self.base_offset <= _INT32_MAX
        )

    def _read_offset_index(self) -> tuple[list[int], list[int]] | None:
        try:
            raw = self.index_path.read_bytes()
        except FileNotFoundError:
            return None if self.size else ([], [])
        if len(raw) % _OFFSET_ENTRY.size:
            return None
        offsets: list[int] = []
        positions: list[int] = []
        prev_rel = prev_pos = -1
        for rel, pos in _OFFSET_ENTRY.iter_unpack(raw):
            if rel <= prev_rel or pos <= prev_pos or pos >= self.size:
                return None
            offsets.append(self.base_offset + rel)
            positions.append(pos)
            prev_rel, prev_pos = rel, pos
        return offsets, positions

    def _read_time_index(self) -> tuple[list[int], list[int]] | None:
        try:
            raw = self.timeindex_path.read_bytes()
        except FileNotFoundError:
            return None if self.size else ([], [])
        if len(raw) % _TIME_ENTRY.size:
            return None
        timestamps: list[int] = []
        offsets: list[int] = []
        prev_ts = -1
        prev_rel = -1
        for ts, rel in _TIME_ENTRY.iter_unpack(raw):
            if ts <= prev_ts or rel < prev_rel or rel < 0:
                return None
            timestamps.append(ts)
            offsets.append(self.base_offset + rel)
            prev_ts, prev_rel = ts, rel
        return timestamps, offsets

    def recover(self, min_offset: int | None = None) -> Truncation | None:
        """Rebuild the indexes from the log, checking every batch's CRC and that offsets only grow (from
        ``min_offset``, default the base offset); cut off the first invalid batch and everything after it.
        Kafka's ``LogSegment.recover``."""
        self._reset_indexes()
        expected = self.base_offset if min_offset is None else max(min_offset, self.base_offset)
        scan = FileScan(self._fd, 0, self.size, check_crc=True)
        valid_end = 0
        reason: str | None = None
        for pos, h in scan:
            if h.base_offset < expected:
                reason = f"batch base offset {h.base_offset} is below the expected {expected}"
                break
            if not self._offsets_fit(h):
                reason = f"batch offsets {h.base_offset}+{h.last_offset_delta} do not fit the segment"
                break
            self._track(pos, h)
            expected = h.base_offset + h.last_offset_delta + 1
            valid_end = pos + h.size
        else:
            valid_end = scan.end
            reason = scan.error
        self.next_offset = max(self.next_offset, self.base_offset)
        self._bytes_since_index = valid_end - (self._idx_positions[-1] if self._idx_positions else 0)
        if valid_end >= self.size:
            return None
        truncated = self.size - valid_end
        os.ftruncate(self._fd, valid_end)
        self.size = valid_end
        self._unsynced = True
        if valid_end == 0:
            self.first_batch_timestamp = -1
        return Truncation(self.log_path, valid_end, expected, truncated, reason or "invalid data")

    def truncate_to(self, offset: int) -> int:
        """Remove every batch that holds ``offset`` or a later offset (Kafka's ``LogSegment.truncateTo``: the
        batch containing ``offset`` goes whole) and rebuild the indexes; returns the bytes removed."""
        found = self.locate(offset)
        if found is None:
            return 0
        position = found[0]
        removed = self.size - position
        os.ftruncate(self._fd, position)
        self.size = position
        self._unsynced = True
        self._reset_indexes()
        scan = FileScan(self._fd, 0, self.size, check_crc=False)
        for pos, h in scan:
            self._track(pos, h)
        self._bytes_since_index = self.size - (self._idx_positions[-1] if self._idx_positions else 0)
        if self.size == 0:
            self.first_batch_timestamp = -1
        return removed

    def _reset_indexes(self) -> None:
        self._idx_offsets = []
        self._idx_positions = []
        self._ti_timestamps = []
        self._ti_offsets = []
        self._idx_persisted = -1
        self._ti_persisted = -1
        self.max_timestamp = -1
        self.offset_of_max_timestamp = self.base_offset
        self.next_offset = self.base_offset
        self.first_batch_timestamp = -1
        self._bytes_since_index = 0

    # ------------------------------------------------------------------------------------------ lookups

    def locate(self, offset: int) -> tuple[int, int] | None:
        """(position, size) of the first batch whose last offset is >= ``offset`` (Kafka's
        ``translateOffset``: index floor, then a walk over batch headers), or None."""
        i = bisect_right(self._idx_offsets, offset) - 1
        pos = self._idx_positions[i] if i >= 0 else 0
        end = self.size
        fd = self._fd
        chunk_size = self._index_interval + _WALK_SLACK
        while pos < end:
            buf = os.pread(fd, min(chunk_size, end - pos), pos)
            p = 0
            n = len(buf)
            while p + _PEEK_SIZE <= n:
                base, length, _, _, _, _, delta = _PEEK.unpack_from(buf, p)
                if length <= 0:
                    return None
                if base + delta >= offset:
                    return pos + p, length + LOG_OVERHEAD
                p += length + LOG_OVERHEAD
            if p == 0:
                return None  # fewer bytes left than a batch header: nothing valid here
            pos += p
        return None

    def read(self, offset: int, max_bytes: int) -> bytes:
        """Whole batches starting with the one holding ``offset`` (or the next one), up to ``max_bytes`` but
        at least one batch; empty when no batch of this segment reaches ``offset``."""
        found = self.locate(offset)
        if found is None:
            return b""
        pos, first_size = found
        if first_size >= max_bytes:
            return os.pread(self._fd, first_size, pos)
        buf = os.pread(self._fd, min(max_bytes, self.size - pos), pos)
        n = len(buf)
        p = first_size
        while p + LOG_OVERHEAD <= n:
            (length,) = _LENGTH.unpack_from(buf, p + 8)
            nxt = p + LOG_OVERHEAD + length
            if nxt > n or length <= 0:
                break
            p = nxt
        return buf if p == n else buf[:p]

    def batches(self, start: int = 0, *, check_crc: bool = False) -> FileScan:
        """Scan of the batch headers from byte position ``start``."""
        return FileScan(self._fd, start, self.size, check_crc=check_crc)

    def read_at(self, pos: int, size: int) -> bytes:
        return os.pread(self._fd, size, pos)

    def position_floor(self, offset: int) -> int:
        """Position of the offset index entry at or below ``offset`` (0 if none)."""
        i = bisect_right(self._idx_offsets, offset) - 1
        return self._idx_positions[i] if i >= 0 else 0

    def find_timestamp(self, timestamp: int, starting_offset: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= ``timestamp`` and offset >=
        ``starting_offset`` (Kafka's ``LogSegment.findOffsetByTimestamp``)."""
        j = bisect_right(self._ti_timestamps, timestamp) - 1
        from_offset = self._ti_offsets[j] if j >= 0 else self.base_offset
        scan = self.batches(self.position_floor(max(from_offset, starting_offset)))
        for pos, h in scan:
            if h.max_timestamp < timestamp or h.base_offset + h.last_offset_delta < starting_offset:
                continue
            batch, _ = decode_batch(scan.chunk, pos - scan.chunk_pos, check_crc=False)
            for r in batch.records:
                if r.timestamp >= timestamp and r.offset >= starting_offset:
                    return r.offset, r.timestamp
        return None

    def max_timestamp_record(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record carrying this segment's max timestamp (Kafka 3.8+'s
        ListOffsets MAX_TIMESTAMP, ``RecordBatch.offsetOfMaxTimestamp``)."""
        if self.max_timestamp < 0:
            return None
        scan = self.batches(self.position_floor(self.offset_of_max_timestamp))
        for pos, h in scan:
            if h.max_timestamp != self.max_timestamp:
                continue
            batch, _ = decode_batch(scan.chunk, pos - scan.chunk_pos, check_crc=False)
            for r in batch.records:
                if r.timestamp == h.max_timestamp:
                    return r.offset, r.timestamp
        return None

    def time_waited_for_roll(self, now_ms: int, message_timestamp: int) -> int:
        """Kafka's ``LogSegment.timeWaitedForRoll``: measured from the first batch's timestamp when it has
        one, else from when this segment object was created (or first asked, after a restart)."""
        if self.first_batch_timestamp >= 0:
            return message_timestamp - self.first_batch_timestamp
        if self.created_ms is None:
            self.created_ms = now_ms
        return now_ms - self.created_ms

    # ------------------------------------------------------------------------------------------ durability

    def write_indexes(self, *, sync: bool) -> None:
        """Persist index entries not yet in the index files; with ``sync``, also fsync index files written
        since the last sync."""
        idx = [_OFFSET_ENTRY.pack(o - self.base_offset, p) for o, p in self._pending(self._idx_persisted)]
        ti = [_TIME_ENTRY.pack(t, o - self.base_offset) for t, o in self._pending_time(self._ti_persisted)]
        if idx or ti or self._idx_persisted < 0 or self._ti_persisted < 0:
            self._indexes_synced = False
        sync = sync and not self._indexes_synced
        if idx or sync or self._idx_persisted < 0:
            self._idx_persisted = self._write_index(self.index_path, self._idx_persisted, idx, sync=sync)
        if ti or sync or self._ti_persisted < 0:
            self._ti_persisted = self._write_index(self.timeindex_path, self._ti_persisted, ti, sync=sync)
        if sync:
            self._indexes_synced = True

    def _pending(self, persisted: int) -> list[tuple[int, int]]:
        start = max(persisted, 0)
        return list(zip(self._idx_offsets[start:], self._idx_positions[start:], strict=True))

    def _pending_time(self, persisted: int) -> list[tuple[int, int]]:
        start = max(persisted, 0)
        return list(zip(self._ti_timestamps[start:], self._ti_offsets[start:], strict=True))

    @staticmethod
    def _write_index(path: Path, persisted: int, entries: list[bytes], *, sync: bool) -> int:
        if persisted < 0:
            write_file_atomically(path, b"".join(entries), sync=sync)
            return len(entries)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | O_BINARY, 0o644)
        try:
            if entries:
                write_all(fd, b"".join(entries))
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        return persisted + len(entries)

    def sync_log(self) -> None:
        """fsync the log file only."""
        if self._unsynced:
            self._unsynced = False
            fsync_file(self._fd)

    def flush(self) -> None:
        """fsync the log and the indexes. Safe in a worker thread while no append runs on this segment."""
        self.sync_log()
        self.write_indexes(sync=True)

    def become_inactive(self) -> None:
        """The segment stops taking appends: record its max timestamp in the time index (Kafka's
        ``onBecomeInactiveSegment``) and write the index files."""
        self._maybe_add_time_entry()
        self.write_indexes(sync=False)

    def close(self, *, sync: bool = False) -> None:
        if self._fd < 0:
            return
        self._maybe_add_time_entry()
        try:
            if sync:
                self.flush()
            else:
                self.write_indexes(sync=False)
        finally:
            os.close(self._fd)
            self._fd = -1

    def rename_log(self, path: Path) -> None:
        """Move the log file (the open handle follows it)."""
        os.replace(self.log_path, path)
        self.log_path = path

    def close_handle(self) -> None:
        """Close the file without writing anything (before the files are deleted or replaced)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def delete(self) -> None:
        self.close_handle()
        for path in (self.log_path, self.index_path, self.timeindex_path):
            path.unlink(missing_ok=True)

    def __repr__(self) -> str:
        return f"Segment({self.log_path.name}, size={self.size}, next_offset={self.next_offset})"
