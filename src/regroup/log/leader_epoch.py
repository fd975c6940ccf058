"""The leader-epoch cache of one partition (Kafka's ``LeaderEpochFileCache``): for each leader epoch whose
leader wrote to this log, the offset where the epoch starts, kept in the partition directory's
``leader-epoch-checkpoint`` file in Kafka's format. It answers OffsetForLeaderEpoch (where an epoch ends
in this log: KIP-101, KIP-279, KIP-320) and follows the log when either end is truncated.

Entries have strictly increasing epochs and strictly increasing start offsets. A new leader adds
(its epoch, its LEO); a follower adds an entry when a fetched batch carries a new epoch. Every change is
written to the checkpoint at once, atomically (temporary file, fsync, rename, directory fsync), so the
file never lacks an entry the log relies on.

The file: a version line ``0``, a line with the entry count, then one ``<epoch> <start offset>`` line per
entry, oldest first (``LeaderEpochCheckpointFile``).
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Final, NamedTuple

from regroup.log._io import write_file_atomically

__all__ = [
    "CHECKPOINT_FILE",
    "UNDEFINED_EPOCH",
    "UNDEFINED_EPOCH_OFFSET",
    "CheckpointCorruptError",
    "EpochEntry",
    "LeaderEpochCache",
    "decode_checkpoint",
    "encode_checkpoint",
    "read_checkpoint",
    "write_checkpoint",
]

log = logging.getLogger("regroup.log")

CHECKPOINT_FILE: Final = "leader-epoch-checkpoint"
UNDEFINED_EPOCH: Final = -1
"""OffsetsForLeaderEpochResponse.UNDEFINED_EPOCH: no epoch known / requested."""
UNDEFINED_EPOCH_OFFSET: Final = -1
"""OffsetsForLeaderEpochResponse.UNDEFINED_EPOCH_OFFSET."""
_VERSION: Final = 0


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


class CheckpointCorruptError(ValueError):
    """A ``leader-epoch-checkpoint`` file that is not in Kafka's format (Kafka fails the log directory; the
    caller may instead rebuild the cache from the batches' partition leader epochs)."""


# ------------------------------------------------------------------------------------- the checkpoint file


def encode_checkpoint(entries: Iterable[EpochEntry]) -> bytes:
    items = list(entries)
    lines = [str(_VERSION), str(len(items)), *(f"{e.epoch} {e.start_offset}" for e in items)]
    return ("\n".join(lines) + "\n").encode()


def decode_checkpoint(data: bytes, *, source: str = "leader-epoch-checkpoint") -> list[EpochEntry]:
    """The entries of a checkpoint file's content, as Kafka's ``CheckpointFile`` reads it: an empty content
    (or one that stops after the version line) holds no entries; anything else must be the version, the
    count and exactly that many ``epoch offset`` lines. Raises :class:`CheckpointCorruptError`."""
    try:
        lines = data.decode().splitlines()
    except UnicodeDecodeError as exc:
        raise CheckpointCorruptError(f"{source}: not text: {exc}") from None
    if not lines:
        return []
    version = _parse_int(lines[0], source)
    if version != _VERSION:
        raise CheckpointCorruptError(f"{source}: unrecognised version {version}, expected {_VERSION}")
    if len(lines) == 1:
        return []
    expected = _parse_int(lines[1], source)
    entries = []
    for line in lines[2:]:
        parts = line.split()
        if len(parts) != 2:
            raise CheckpointCorruptError(f"{source}: malformed line {line!r}")
        entries.append(EpochEntry(_parse_int(parts[0], source), _parse_int(parts[1], source)))
    if len(entries) != expected:
        raise CheckpointCorruptError(f"{source}: expected {expected} entries but found {len(entries)}")
    return entries


def _parse_int(text: str, source: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise CheckpointCorruptError(f"{source}: malformed line {text!r}") from None


def read_checkpoint(path: Path) -> list[EpochEntry]:
    """The entries of the checkpoint at ``path``; none when the file does not exist (a new partition, or a
    log written before regroup kept epochs). I/O errors other than a missing file propagate."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    return decode_checkpoint(data, source=str(path))


def write_checkpoint(path: Path, entries: Iterable[EpochEntry], *, sync: bool = True) -> None:
    write_file_atomically(path, encode_checkpoint(entries), sync=sync)


# ------------------------------------------------------------------------------------------------ the cache


class LeaderEpochCache:
    """The epochs of one partition's log, optionally backed by its checkpoint file.

    ``path`` None keeps the cache in memory only (tests, pure callers). With a path, the constructor loads
    the file (tolerating its absence) through :meth:`assign`'s rules, as Kafka's constructor does.
    ``label`` names the partition in log lines.
    """

    def __init__(self, path: Path | None = None, *, label: str = "", sync: bool = True) -> None:
        self.path = path
        self.label = label
        self.sync = sync
        self._entries: list[EpochEntry] = []
        if path is not None:
            for entry in read_checkpoint(path):
                try:
                    self._assign(entry)
                except ValueError as exc:
                    raise CheckpointCorruptError(f"{path}: {exc}") from None

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"LeaderEpochCache({self.label or self.path}, {self._entries})"

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        """Oldest first."""
        return tuple(self._entries)

    @property
    def latest_entry(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    @property
    def latest_epoch(self) -> int | None:
        """The latest epoch with an entry: for a leader, the epoch it writes in."""
        return self._entries[-1].epoch if self._entries else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        return self._entries[0] if self._entries else None

    def previous_epoch(self, epoch: int) -> int | None:
        """The largest epoch with an entry below ``epoch`` (``previousEpoch(int)``)."""
        i = bisect.bisect_left(self._epochs(), epoch)
        return self._entries[i - 1].epoch if i > 0 else None

    # ---------------------------------------------------------------------------------------- changes

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset`` (``LeaderEpochFileCache.assign``); whether the
        cache changed (and the checkpoint was written).

        An epoch keeps the start offset it was first given: the same epoch at the same or a later offset is
        ignored. Otherwise the new entry wins over the entries it contradicts — every latest entry whose
        epoch is not below ``epoch`` or whose start offset is not below ``start_offset`` is dropped (with a
        warning unless only an entry at the same start offset goes, which lost no data). Raises ValueError
        for a negative epoch or offset.
        """
        if self._assign(EpochEntry(epoch, start_offset)):
            log.debug("%sappended epoch %d at offset %d", self._prefix(), epoch, start_offset)
            self._write()
            return True
        return False

    def _assign(self, entry: EpochEntry) -> bool:
        if entry.epoch < 0 or entry.start_offset < 0:
            raise ValueError(f"Received invalid partition leader epoch entry {tuple(entry)}")
        latest = self.latest_entry
        if latest is not None and entry.epoch == latest.epoch and entry.start_offset >= latest.start_offset:
            return False
        # LeaderEpochFileCache.maybeTruncateNonMonotonicEntries
        removed: list[EpochEntry] = []
        while self._entries and (
            self._entries[-1].epoch >= entry.epoch or self._entries[-1].start_offset >= entry.start_offset
        ):
            removed.append(self._entries.pop())
        if len(removed) > 1 or (removed and removed[0].start_offset != entry.start_offset):
            log.warning(
                "%snew epoch entry %s caused truncation of conflicting entries %s; the cache now holds %d",
                self._prefix(),
                tuple(entry),
                [tuple(e) for e in reversed(removed)],
                len(self._entries),
            )
        self._entries.append(entry)
        return True

    def truncate_from_end(self, end_offset: int) -> list[EpochEntry]:
        """Drop the entries starting at or after ``end_offset`` (the log was truncated to end there:
        ``truncateFromEndAsyncFlush``); a negative offset (UNDEFINED) drops nothing. Returns the dropped
        entries."""
        if end_offset < 0 or not self._entries or self._entries[-1].start_offset < end_offset:
            return []
        removed: list[EpochEntry] = []
        while self._entries and self._entries[-1].start_offset >= end_offset:
            removed.append(self._entries.pop())
        removed.reverse()
        log.debug("%struncated to end offset %d: dropped %s", self._prefix(), end_offset, removed)
        self._write_if_dir_exists()
        return removed

    def truncate_from_start(self, start_offset: int) -> list[EpochEntry]:
        """The log now starts at ``start_offset`` (retention, DeleteRecords: ``truncateFromStartAsyncFlush``):
        the entries starting at or before it go, and the last of them comes back starting at
        ``start_offset``, so the epoch of the first remaining offset stays known. Returns the entries
        dropped (before the re-added one)."""
        removed: list[EpochEntry] = []
        while self._entries and self._entries[0].start_offset <= start_offset:
            removed.append(self._entries.pop(0))
        if not removed:
            return []
        self._entries.insert(0, EpochEntry(removed[-1].epoch, start_offset))
        log.debug("%struncated to start offset %d: dropped %s", self._prefix(), start_offset, removed)
        self._write_if_dir_exists()
        return removed

    def clear(self) -> None:
        """Drop every entry (``clearAndFlush``: the log was emptied)."""
        self._entries.clear()
        self._write()

    # ---------------------------------------------------------------------------------------- queries

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) for an OffsetForLeaderEpoch request (``LeaderEpochFileCache.endOffsetFor``):
        the largest epoch ≤ ``requested_epoch`` known here, and where it ends — the start of the next
        larger epoch, or ``log_end_offset`` when the latest epoch is requested.

        - UNDEFINED requested, an empty cache, or an epoch above every known one → (-1, -1);
        - an epoch below every known one → (requested, start offset of the first epoch): its data is gone
          from this log, and a follower should start where this log's epochs do.
        """
        if requested_epoch == UNDEFINED_EPOCH:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if self._entries and self._entries[-1].epoch == requested_epoch:
            return requested_epoch, log_end_offset
        higher = bisect.bisect_right(self._epochs(), requested_epoch)
        if higher == len(self._entries):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            return requested_epoch, self._entries[0].start_offset
        return self._entries[higher - 1].epoch, self._entries[higher].start_offset

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch ``offset`` was written in (the latest entry starting at or before it), None before the
        first entry (``epochForOffset``)."""
        i = bisect.bisect_right([e.start_offset for e in self._entries], offset)
        return self._entries[i - 1].epoch if i > 0 else None

    # -------------------------------------------------------------------------------------- internals

    def _epochs(self) -> list[int]:
        return [e.epoch for e in self._entries]

    def _prefix(self) -> str:
        return f"[LeaderEpochCache {self.label}] " if self.label else ""

    def _write(self) -> None:
        if self.path is not None:
            write_checkpoint(self.path, self._entries, sync=self.sync)

    def _write_if_dir_exists(self) -> None:
        # Kafka flushes truncations asynchronously with writeIfDirExists: the partition directory may have
        # been deleted meanwhile. Here the write is immediate, and skipped the same way.
        if self.path is not None and self.path.parent.is_dir():
            self._write()
