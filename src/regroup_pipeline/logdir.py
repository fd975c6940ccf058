"""A broker data directory on disk: partitions, segments, split planning and log end offsets.

The layout is Kafka's, which regroup keeps: ``<log.dirs>/<topic>-<partition>/<base_offset:020d>.log`` segment
files of RecordBatch v2 bytes with ``.index``/``.timeindex`` beside them, ``partition.metadata`` holding the
topic id, and ``log-start-offset-checkpoint`` at the top. regroup also keeps a topics file
(``__regroup_topics.json``) with partition counts and each topic's config overrides; Apache Kafka's
directories (KRaft keeps topic metadata and configs elsewhere) are read from the partition directories
alone. Pure Python: used on the driver to plan splits
and in Spark tasks to read them.
"""

from __future__ import annotations

import io
import itertools
import json
import os
import re
import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = [
    "CONSUMER_OFFSETS",
    "PartitionDir",
    "PartitionEnd",
    "SegmentFile",
    "Split",
    "list_partitions",
    "partition_copies",
    "partition_end",
    "partition_size",
    "plan_splits",
    "read_split",
    "topic_configs",
    "topic_ids",
    "topic_partition_counts",
]

CONSUMER_OFFSETS: Final = "__consumer_offsets"
TOPICS_FILE: Final = "__regroup_topics.json"
LOG_START_CHECKPOINT: Final = "log-start-offset-checkpoint"
_PARTITION_DIR: Final = re.compile(r"(.+)-(0|[1-9][0-9]*)")
_SEGMENT: Final = re.compile(r"([0-9]{20})\.log")
_INDEX_ENTRY: Final = struct.Struct(">ii")
_BATCH_PREFIX: Final = struct.Struct(">qi")  # baseOffset, batchLength
_LAST_OFFSET_DELTA: Final = struct.Struct(">i")
_LOG_OVERHEAD: Final = 12
_HEADER_SIZE: Final = 61
_SCAN_CHUNK: Final = 1 << 20


@dataclass(frozen=True, slots=True)
class SegmentFile:
    base_offset: int
    path: str
    size: int


@dataclass(frozen=True, slots=True)
class PartitionDir:
    topic: str
    partition: int
    path: str
    segments: tuple[SegmentFile, ...]
    log_start_offset: int  # from the checkpoint, else the first segment's base offset


@dataclass(frozen=True, slots=True)
class Split:
    """Batches of one segment starting in ``[start, end)`` (byte positions)."""

    topic: str
    partition: int
    path: str
    start: int
    end: int
    min_offset: int  # records below it (under the log start offset) are skipped


@dataclass(frozen=True, slots=True)
class PartitionEnd:
    topic: str
    partition: int
    log_start_offset: int
    log_end_offset: int


def _read_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return {}
    out: dict[tuple[str, int], int] = {}
    try:
        count = int(lines[1])
        for line in lines[2 : 2 + count]:
            topic, partition, offset = line.split()
            out[(topic, int(partition))] = int(offset)
    except (IndexError, ValueError):
        return {}
    return out


def _segments(directory: Path) -> tuple[SegmentFile, ...]:
    found: list[SegmentFile] = []
    with os.scandir(directory) as entries:
        for entry in entries:
            m = _SEGMENT.fullmatch(entry.name)
            if m and entry.is_file():
                found.append(SegmentFile(int(m.group(1)), entry.path, entry.stat().st_size))
    return tuple(sorted(found, key=lambda s: s.base_offset))


def _wanted(topic: str, topics: Sequence[str] | None, pattern: re.Pattern[str] | None) -> bool:
    if topics is not None and topic not in topics:
        return False
    return pattern is None or pattern.fullmatch(topic) is not None


def list_partitions(
    roots: Iterable[str | Path], topics: Sequence[str] | None = None, pattern: str | None = None
) -> list[PartitionDir]:
    """Every partition under the ``log.dirs`` roots, optionally limited to ``topics`` and to topic names
    fully matching the regular expression ``pattern``. Directories being deleted (``…-delete``) or set
    aside (``…-stray``) do not match the ``<topic>-<n>`` form and are ignored.

    A partition found under several roots — the replicas kept by the nodes of a cluster, when their
    ``log.dirs`` are read together — is listed once, as its copy with the highest log end offset (the
    leader's or an in-sync follower's; a lagging follower holds a prefix of it), the first such root on a
    tie: every record is then read once, as a consumer of the cluster would."""
    copies: dict[tuple[str, int], list[PartitionDir]] = {}
    for p in partition_copies(roots, topics, pattern):
        copies.setdefault((p.topic, p.partition), []).append(p)
    # max() keeps the first of equal ends; a partition held once is not read for its end.
    return [
        same[0] if len(same) == 1 else max(same, key=lambda c: partition_end(c).log_end_offset)
        for same in copies.values()
    ]


def partition_copies(
    roots: Iterable[str | Path], topics: Sequence[str] | None = None, pattern: str | None = None
) -> list[PartitionDir]:
    """Like :func:`list_partitions`, with every copy of a partition: one per root that holds it."""
    compiled = re.compile(pattern) if pattern else None
    out: list[PartitionDir] = []
    for root in roots:
        root_path = Path(root)
        if not root_path.is_dir():
            raise FileNotFoundError(f"not a data directory: {root_path}")
        starts = _read_checkpoint(root_path / LOG_START_CHECKPOINT)
        for entry in sorted(os.listdir(root_path)):
            m = _PARTITION_DIR.fullmatch(entry)
            path = root_path / entry
            if m is None or not path.is_dir():
                continue
            topic, partition = m.group(1), int(m.group(2))
            if not _wanted(topic, topics, compiled):
                continue
            segments = _segments(path)
            first = segments[0].base_offset if segments else 0
            start = max(first, starts.get((topic, partition), 0))
            out.append(PartitionDir(topic, partition, str(path), segments, start))
    return out


def topic_partition_counts(roots: Iterable[str | Path]) -> dict[str, int]:
    """Partition count per topic: regroup's topics file when present, else the partition directories."""
    counts: dict[str, int] = {}
    for root in roots:
        registry = Path(root) / TOPICS_FILE
        try:
            doc = json.loads(registry.read_bytes())
            for t in doc["topics"]:
                counts[str(t["name"])] = max(counts.get(str(t["name"]), 0), int(t["partitions"]))
        except (OSError, ValueError, KeyError, TypeError):
            pass
        for p in list_partitions([root]):
            counts[p.topic] = max(counts.get(p.topic, 0), p.partition + 1)
    return counts


def topic_configs(roots: Iterable[str | Path]) -> dict[str, dict[str, str]] | None:
    """Each topic's config overrides from regroup's topics file (topics without overrides map to ``{}``);
    None when no root has a topics file (Apache Kafka's directories), so the configs are unknown."""
    found: dict[str, dict[str, str]] | None = None
    for root in roots:
        try:
            doc = json.loads((Path(root) / TOPICS_FILE).read_bytes())
            topics = [(str(t["name"]), t.get("configs") or {}) for t in doc["topics"]]
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
        found = {} if found is None else found
        for name, configs in topics:
            if isinstance(configs, dict):
                found.setdefault(name, {}).update({str(k): str(v) for k, v in configs.items()})
    return found


def topic_ids(roots: Iterable[str | Path]) -> dict[str, str]:
    """Topic id (Kafka's string form) → topic name, from the partitions' ``partition.metadata`` files
    (``version: 0`` / ``topic_id: <id>``); partitions without one are left out."""
    out: dict[str, str] = {}
    named: set[str] = set()
    for p in list_partitions(roots):
        if p.topic in named:
            continue
        try:
            text = (Path(p.path) / "partition.metadata").read_text()
        except (OSError, UnicodeDecodeError):
            continue
        for line in text.splitlines():
            name, _, value = line.partition(":")
            if name.strip() == "topic_id" and value.strip():
                out[value.strip()] = p.topic
                named.add(p.topic)
    return out


def partition_size(p: PartitionDir) -> int:
    """Bytes in the partition's segment files (what ``retention.bytes`` is compared with)."""
    return sum(seg.size for seg in p.segments)


def _index_positions(segment: SegmentFile) -> list[int]:
    """Batch start positions from the segment's sparse offset index, in increasing order. Kafka
    preallocates index files with zeros, so entries stop at the first one that does not advance."""
    index = segment.path[: -len(".log")] + ".index"
    try:
        raw = Path(index).read_bytes()
    except OSError:
        return []
    positions: list[int] = []
    last = -1
    for _rel, pos in _INDEX_ENTRY.iter_unpack(raw[: len(raw) - len(raw) % 8]):
        if pos <= last or pos >= segment.size:
            break
        positions.append(pos)
        last = pos
    return positions


def plan_splits(partitions: Iterable[PartitionDir], max_split_bytes: int) -> list[Split]:
    """One split per segment, and big segments cut at offset-index positions (which are batch starts)
    into pieces of about ``max_split_bytes``."""
    splits: list[Split] = []
    for p in partitions:
        for seg in p.segments:
            if seg.size == 0:
                continue
            cuts = [0]
            if seg.size > max_split_bytes:
                for pos in _index_positions(seg):
                    if pos - cuts[-1] >= max_split_bytes:
                        cuts.append(pos)
            cuts.append(seg.size)
            splits.extend(
                Split(p.topic, p.partition, seg.path, a, b, p.log_start_offset)
                for a, b in itertools.pairwise(cuts)
            )
    return splits


def read_split(
    split: Split, chunk_bytes: int, reuse: bool = False
) -> Iterator[tuple[bytes | bytearray | memoryview, int]]:
    """The split's bytes in pieces of whole batches (about ``chunk_bytes`` each, more for a bigger batch):
    ``(data, limit)`` where batches start before ``limit``. Stops at a torn tail.

    With ``reuse``, every piece is read into the same buffer: a piece is valid only until the next one is
    asked for, and a reader that keeps anything of it copies it. Small pieces read that way are still in
    the CPU's cache when they are decoded, and cost no fresh pages."""
    # Imported here: the driver plans splits without numba; only the tasks that read need it.
    from regroup_pipeline.commitscan import whole_batches_end

    buffer = bytearray(chunk_bytes) if reuse else None
    with open(split.path, "rb", buffering=0) as f:
        size = os.fstat(f.fileno()).st_size
        pos = split.start
        end = min(split.end, size)
        while pos < end:
            f.seek(pos)
            want = min(chunk_bytes, size - pos)
            data: bytes | memoryview = (
                f.read(want) if buffer is None else memoryview(buffer)[: _read_into(f, buffer, want)]
            )
            cut = whole_batches_end(data, end - pos)
            if cut == 0:
                # A batch bigger than the chunk: read it whole.
                if len(data) < _LOG_OVERHEAD:
                    return
                (_base, length) = _BATCH_PREFIX.unpack_from(data, 0)
                need = _LOG_OVERHEAD + length
                if length <= 0 or pos + need > size:
                    return  # torn tail
                f.seek(pos)
                data = f.read(need)
                cut = need
            # A view, not a slice: slicing bytes copies them.
            yield (data if cut == len(data) else memoryview(data)[:cut]), cut
            pos += cut


def _read_into(f: io.FileIO, buffer: bytearray, want: int) -> int:
    """Read up to ``want`` bytes into the start of ``buffer``, as many as the file holds; how many."""
    view = memoryview(buffer)
    got = 0
    while got < want:
        n = f.readinto(view[got:want])
        if not n:
            break
        got += n
    return got


def partition_end(p: PartitionDir) -> PartitionEnd:
    """Log start and log end offsets of a partition, the end being the offset after the last complete
    batch (control batches included) of the last non-empty segment."""
    end = p.segments[-1].base_offset if p.segments else 0
    for seg in reversed(p.segments):
        last = _last_batch_end(seg)
        if last is not None:
            end = last
            break
    return PartitionEnd(p.topic, p.partition, min(p.log_start_offset, end), end)


def _last_batch_end(segment: SegmentFile) -> int | None:
    positions = _index_positions(segment)
    pos = positions[-1] if positions else 0
    result: int | None = None
    with open(segment.path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        while pos + _HEADER_SIZE <= size:
            f.seek(pos)
            chunk = f.read(_SCAN_CHUNK)
            at = 0
            while at + _HEADER_SIZE <= len(chunk):
                base, length = _BATCH_PREFIX.unpack_from(chunk, at)
                nxt = at + _LOG_OVERHEAD + length
                if length <= 0 or pos + nxt > size:
                    return result
                (delta,) = _LAST_OFFSET_DELTA.unpack_from(chunk, at + 23)
                result = base + delta + 1
                at = nxt
            if at == 0:
                return result
            pos += at
    return result
