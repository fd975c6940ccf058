"""Shared builders for the log tests."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from regroup.log.config import LogConfig
from regroup.log.partition import PartitionLog
from regroup.protocol.record_batch import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    Record,
    build_batch,
    decode_batches,
)

__all__ = ["batch", "kv_batch", "open_log", "read_all", "small_config"]


def batch(
    count: int = 1,
    *,
    ts: int = 1_000,
    value_size: int = 16,
    key: bytes | None = None,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    tag: int = 0,
) -> bytes:
    """A client batch of ``count`` records (offsets 0..count-1, timestamps ``ts``..``ts+count-1``)."""
    records = [Record(i, ts + i, key, bytes([(tag + i) % 256]) * value_size, []) for i in range(count)]
    return build_batch(
        records, producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence
    )


def kv_batch(pairs: Sequence[tuple[bytes | None, bytes | None]], *, ts: int = 1_000) -> bytes:
    return build_batch([Record(i, ts + i, k, v, []) for i, (k, v) in enumerate(pairs)])


def small_config(**changes: object) -> LogConfig:
    """Tiny segments and a dense index so tests exercise rolls and index lookups."""
    base: dict[str, object] = {"segment_bytes": 2_000, "index_interval_bytes": 100, "retention_ms": -1}
    base.update(changes)
    return LogConfig(**base)  # type: ignore[arg-type]


def open_log(directory: Path, config: LogConfig | None = None, **kwargs: object) -> PartitionLog:
    return PartitionLog.open(directory, config or small_config(), **kwargs)  # type: ignore[arg-type]


def read_all(plog: PartitionLog, start: int | None = None, max_bytes: int = 1 << 20) -> list[Record]:
    """Every record from ``start`` (default: log start) to the log end, reading batch by batch."""
    offset = plog.log_start_offset if start is None else start
    out: list[Record] = []
    while offset < plog.log_end_offset:
        res = plog.read(offset, max_bytes)
        batches = decode_batches(res.data)
        assert batches, f"no data at {offset} below the log end {plog.log_end_offset}"
        for b in batches:
            out.extend(r for r in b.records if r.offset >= offset)
        offset = batches[-1].next_offset
    return out
