"""Log compaction for ``cleanup.policy=compact`` (Kafka's ``LogCleaner``), with its crash-safe segment swap.

A pass maps every key of the dirty section (offsets from the cleaner checkpoint up to the first uncleanable
offset) to its latest offset, then rewrites the closed segments, grouped up to ``segment.bytes``, keeping a
record when it is the latest for its key or has no key. Tombstones follow KIP-534: a retained tombstone's
batch is stamped with a delete horizon (now + ``delete.retention.ms``) and the tombstone is dropped by the
first pass after that horizon. Batches are copied verbatim unless a record is dropped or a horizon is
stamped; rewritten batches keep their base offset, last offset delta, producer fields and timestamps, and
the last batch of each live producer survives even when empty, so sequence numbers stay valid.

Swap protocol for a group whose first segment has base offset B:

1. write ``B.log.cleaned`` and fsync it;
2. commit: atomically create the manifest ``B.swap`` listing the replaced segments' base offsets;
3. delete the replaced segments' indexes and logs (all but ``B.log``);
4. rename ``B.log.cleaned`` over ``B.log``; write fresh indexes; remove the manifest.

:func:`complete_swaps` runs at open: with a manifest it finishes steps 3-4; without one it deletes any
``.cleaned`` file (the pass was abandoned before committing).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from regroup.log._io import fsync_dir, write_file_atomically
from regroup.log.config import LogConfig
from regroup.log.segment import INDEX_SUFFIX, LOG_SUFFIX, TIMEINDEX_SUFFIX, Segment, segment_name
from regroup.protocol.primitives import DecodeError
from regroup.protocol.record_batch import LOG_APPEND_TIME, Record, build_batch, decode_batch

__all__ = [
    "CLEANED_SUFFIX",
    "SWAP_SUFFIX",
    "CompactionStats",
    "PreparedClean",
    "clean",
    "commit_clean",
    "complete_swaps",
    "prepare_clean",
]

log = logging.getLogger("regroup.log")

SWAP_SUFFIX: Final = ".swap"
CLEANED_SUFFIX: Final = ".cleaned"
_INT32_MAX: Final = 0x7FFFFFFF
_WRITE_BUFFER: Final = 1 << 20

# Called with the name of each swap step; tests use it to simulate a crash between steps.
_fault_hook: Callable[[str], None] | None = None


def _step(name: str) -> None:
    if _fault_hook is not None:
        _fault_hook(name)


@dataclass(frozen=True, slots=True)
class CompactionStats:
    segments_before: int
    segments_after: int
    bytes_before: int
    bytes_after: int
    records_removed: int
    batches_rewritten: int
    earliest_delete_horizon: int | None  # when the next pass could drop a retained tombstone


class _CleaningAborted(Exception):
    pass


@dataclass(slots=True)
class PreparedClean:
    """A compaction pass's output before it is swapped in: for each group of segments, the cleaned segment
    (written and fsynced) or None when the group stays as it is."""

    segments: list[Segment]
    groups: list[tuple[list[Segment], Segment | None]]
    bytes_before: int
    records_removed: int
    batches_rewritten: int
    earliest_delete_horizon: int | None

    def discard(self) -> None:
        """Drop the cleaned files without swapping them in (the log changed meanwhile, or it closed)."""
        for _, new in self.groups:
            if new is not None:
                new.close_handle()
                new.log_path.unlink(missing_ok=True)


def prepare_clean(
    directory: Path,
    segments: list[Segment],
    *,
    dirty_from: int,
    end_offset: int,
    now_ms: int,
    config: LogConfig,
    producer_last_offsets: Mapping[int, int],
) -> PreparedClean:
    """The expensive part of a pass — mapping the dirty keys, rewriting each group of ``segments``
    (consecutive closed segments, oldest first, ending before ``end_offset``) into a ``.cleaned`` file and
    fsyncing it — touching nothing the log's other users see: it only ``pread``s closed segments, so it may
    run in a worker thread while the partition takes appends (Kafka's cleaner threads do the same).
    :func:`commit_clean` swaps the result in."""
    bytes_before = sum(s.size for s in segments)
    prepared = PreparedClean(segments, [], bytes_before, 0, 0, None)
    try:
        offset_map = _build_offset_map(segments, dirty_from, end_offset)
    except _CleaningAborted as exc:
        log.warning("compaction of %s abandoned: %s", directory.name, exc)
        prepared.groups = [(segments, None)]
        return prepared
    try:
        for group in _group_by_size(segments, config.segment_bytes):
            try:
                cleaned = _GroupCleaner(directory, group, offset_map, now_ms, config, producer_last_offsets)
                new = cleaned.run()
            except _CleaningAborted as exc:
                log.warning(
                    "compaction of %s stopped at segment %d: %s", directory.name, group[0].base_offset, exc
                )
                prepared.groups.append((group, None))
                continue
            prepared.records_removed += cleaned.removed
            prepared.batches_rewritten += cleaned.rewritten
            if cleaned.horizon is not None:
                horizon = prepared.earliest_delete_horizon
                prepared.earliest_delete_horizon = (
                    cleaned.horizon if horizon is None else min(horizon, cleaned.horizon)
                )
            if new is not None:
                new.sync_log()
            prepared.groups.append((group, new))
    except BaseException:
        prepared.discard()
        raise
    return prepared


def commit_clean(
    directory: Path, prepared: PreparedClean, on_swap: Callable[[list[Segment], Segment], None]
) -> CompactionStats:
    """Swap the cleaned segments of :func:`prepare_clean` in, group by group, each crash-safely;
    ``on_swap(old_group, new_segment)`` is called right after each group is swapped in."""
    result: list[Segment] = []
    for i, (group, new) in enumerate(prepared.groups):
        if new is None:
            result.extend(group)
            continue
        try:
            _swap(directory, group, new)
        except BaseException:
            PreparedClean([], prepared.groups[i + 1 :], 0, 0, 0, None).discard()
            raise
        on_swap(group, new)
        result.append(new)
    return CompactionStats(
        len(prepared.segments),
        len(result),
        prepared.bytes_before,
        sum(s.size for s in result),
        prepared.records_removed,
        prepared.batches_rewritten,
        prepared.earliest_delete_horizon,
    )


def clean(
    directory: Path,
    segments: list[Segment],
    *,
    dirty_from: int,
    end_offset: int,
    now_ms: int,
    config: LogConfig,
    producer_last_offsets: Mapping[int, int],
    on_swap: Callable[[list[Segment], Segment], None],
) -> CompactionStats:
    """Compact ``segments`` in one go: :func:`prepare_clean`, then :func:`commit_clean`."""
    prepared = prepare_clean(
        directory,
        segments,
        dirty_from=dirty_from,
        end_offset=end_offset,
        now_ms=now_ms,
        config=config,
        producer_last_offsets=producer_last_offsets,
    )
    return commit_clean(directory, prepared, on_swap)


def _build_offset_map(segments: list[Segment], dirty_from: int, end_offset: int) -> dict[bytes, int]:
    offset_map: dict[bytes, int] = {}
    for seg in segments:
        if seg.next_offset <= dirty_from:
            continue
        scan = seg.batches(seg.position_floor(dirty_from))
        for pos, h in scan:
            if (
                h.is_control
                or h.base_offset + h.last_offset_delta < dirty_from
                or h.base_offset >= end_offset
            ):
                continue
            try:
                batch, _ = decode_batch(scan.chunk, pos - scan.chunk_pos, check_crc=False)
            except DecodeError as exc:
                raise _CleaningAborted(f"undecodable batch at {seg.log_path}:{pos}: {exc}") from None
            for r in batch.records:
                if r.key is not None and r.offset >= dirty_from:
                    offset_map[r.key] = r.offset
        if scan.error is not None:
            raise _CleaningAborted(f"{seg.log_path}: {scan.error}")
    return offset_map


def _group_by_size(segments: list[Segment], max_bytes: int) -> list[list[Segment]]:
    """Kafka's ``groupSegmentsBySize``: merge neighbours while the sum stays within ``segment.bytes`` and
    offsets stay within int32 of the group's base offset."""
    groups: list[list[Segment]] = []
    i = 0
    while i < len(segments):
        group = [segments[i]]
        size = segments[i].size
        i += 1
        while (
            i < len(segments)
            and size + segments[i].size <= max_bytes
            and segments[i].next_offset - 1 - group[0].base_offset <= _INT32_MAX
        ):
            group.append(segments[i])
            size += segments[i].size
            i += 1
        groups.append(group)
    return groups


class _GroupCleaner:
    def __init__(
        self,
        directory: Path,
        group: list[Segment],
        offset_map: Mapping[bytes, int],
        now_ms: int,
        config: LogConfig,
        producer_last_offsets: Mapping[int, int],
    ) -> None:
        self.directory = directory
        self.group = group
        self.offset_map = offset_map
        self.now_ms = now_ms
        self.config = config
        self.producer_last_offsets = producer_last_offsets
        self.removed = 0
        self.rewritten = 0
        self.horizon: int | None = None
        self._pending: list[bytes] = []
        self._infos: list[tuple[int, int, int, int]] = []
        self._buffered = 0
        self._out: Segment | None = None

    def run(self) -> Segment | None:
        """The cleaned segment (not yet swapped in), or None when the group would not change."""
        base = self.group[0].base_offset
        path = self.directory / (segment_name(base) + LOG_SUFFIX + CLEANED_SUFFIX)
        path.unlink(missing_ok=True)
        self._out = Segment(
            self.directory,
            base,
            index_interval_bytes=self.config.index_interval_bytes,
            max_index_bytes=self.config.segment_index_bytes,
            log_path=path,
        )
        try:
            changed = len(self.group) > 1
            for seg in self.group:
                changed |= self._clean_segment(seg)
            if not changed:
                self._discard()
                return None
            self._write()
            return self._out
        except BaseException:
            self._discard()
            raise

    def _discard(self) -> None:
        # Only the .cleaned file: the index paths of the output are still the original segment's.
        assert self._out is not None
        self._out.close_handle()
        self._out.log_path.unlink(missing_ok=True)

    def _clean_segment(self, seg: Segment) -> bool:
        changed = False
        now = self.now_ms
        offset_map = self.offset_map
        scan = seg.batches()
        for pos, h in scan:
            start = pos - scan.chunk_pos
            raw = scan.chunk[start : start + h.size]
            last = h.base_offset + h.last_offset_delta
            if h.is_control:
                self._emit(raw, last, h.max_timestamp)
                continue
            try:
                batch, _ = decode_batch(scan.chunk, start, check_crc=False)
            except DecodeError as exc:
                raise _CleaningAborted(f"undecodable batch at {seg.log_path}:{pos}: {exc}") from None
            horizon = h.base_timestamp if h.has_delete_horizon else None
            kept: list[Record] = []
            tombstones = False
            for r in batch.records:
                key = r.key
                if key is not None:
                    latest = offset_map.get(key)
                    if latest is not None and r.offset < latest:
                        continue
                    if r.value is None:
                        if horizon is not None and horizon <= now:
                            continue
                        tombstones = True
                kept.append(r)
            self.removed += len(batch.records) - len(kept)
            stamp = horizon is None and tombstones
            if len(kept) == len(batch.records) and not stamp:
                self._emit(raw, last, h.max_timestamp)
                if tombstones and horizon is not None:
                    self._note_horizon(horizon)
                continue
            changed = True
            producer_last = h.producer_id >= 0 and self.producer_last_offsets.get(h.producer_id) == last
            if not kept and not producer_last:
                continue
            new_horizon = now + self.config.delete_retention_ms if stamp else horizon
            lat = h.timestamp_type == LOG_APPEND_TIME
            max_ts = h.max_timestamp if lat or not kept else max(r.timestamp for r in kept)
            data = build_batch(
                kept,
                base_offset=h.base_offset,
                compression=h.compression,
                producer_id=h.producer_id,
                producer_epoch=h.producer_epoch,
                base_sequence=h.base_sequence,
                is_transactional=h.is_transactional,
                timestamp_type=h.timestamp_type,
                partition_leader_epoch=h.partition_leader_epoch,
                max_timestamp=max_ts,
                last_offset_delta=h.last_offset_delta,
                delete_horizon_ms=new_horizon,
            )
            self.rewritten += 1
            if tombstones and new_horizon is not None:
                self._note_horizon(new_horizon)
            self._emit(data, last, max_ts)
        if scan.error is not None:
            raise _CleaningAborted(f"{seg.log_path}: {scan.error}")
        return changed

    def _note_horizon(self, horizon: int) -> None:
        self.horizon = horizon if self.horizon is None else min(self.horizon, horizon)

    def _emit(self, data: bytes, last_offset: int, max_timestamp: int) -> None:
        self._infos.append((self._buffered, len(data), last_offset, max_timestamp))
        self._pending.append(data)
        self._buffered += len(data)
        if self._buffered >= _WRITE_BUFFER:
            self._write()

    def _write(self) -> None:
        if self._pending and self._out is not None:
            self._out.append(b"".join(self._pending), self._infos)
        self._pending = []
        self._infos = []
        self._buffered = 0


def _swap(directory: Path, group: list[Segment], new: Segment) -> None:
    base = group[0].base_offset
    manifest = directory / (segment_name(base) + SWAP_SUFFIX)
    new.sync_log()
    _step("cleaned")
    write_file_atomically(
        manifest, json.dumps({"replaces": [s.base_offset for s in group]}).encode(), sync=True
    )
    _step("committed")
    for seg in group:
        seg.close_handle()
        seg.index_path.unlink(missing_ok=True)
        seg.timeindex_path.unlink(missing_ok=True)
        if seg.base_offset != base:
            seg.log_path.unlink(missing_ok=True)
    _step("replaced-deleted")
    new.rename_log(directory / (segment_name(base) + LOG_SUFFIX))
    _step("renamed")
    new.become_inactive()
    new.write_indexes(sync=True)
    fsync_dir(directory)
    manifest.unlink()
    fsync_dir(directory)


def complete_swaps(directory: Path) -> None:
    """Finish swaps that committed before a crash; discard cleaning output that never committed."""
    names = os.listdir(directory)
    for name in sorted(names):
        stem = name[: -len(SWAP_SUFFIX)]
        if not (name.endswith(SWAP_SUFFIX) and stem.isdigit()):
            continue
        manifest = directory / name
        base = int(stem)
        try:
            replaced = json.loads(manifest.read_bytes())["replaces"]
            if not isinstance(replaced, list) or not all(isinstance(b, int) for b in replaced):
                raise ValueError("bad manifest")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("ignoring unreadable swap manifest %s: %s", manifest, exc)
            manifest.unlink(missing_ok=True)
            continue
        for b in replaced:
            stem_b = segment_name(b)
            (directory / (stem_b + INDEX_SUFFIX)).unlink(missing_ok=True)
            (directory / (stem_b + TIMEINDEX_SUFFIX)).unlink(missing_ok=True)
            if b != base:
                (directory / (stem_b + LOG_SUFFIX)).unlink(missing_ok=True)
        cleaned = directory / (segment_name(base) + LOG_SUFFIX + CLEANED_SUFFIX)
        if cleaned.exists():
            os.replace(cleaned, directory / (segment_name(base) + LOG_SUFFIX))
        fsync_dir(directory)
        manifest.unlink()
        log.info("completed an interrupted compaction swap in %s at offset %d", directory, base)
    for name in os.listdir(directory):
        if name.endswith(CLEANED_SUFFIX):
            log.info("discarding unfinished compaction output %s", directory / name)
            (directory / name).unlink(missing_ok=True)
