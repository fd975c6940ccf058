"""Data directories in regroup's layout, written through regroup's own log (``regroup.log.LogManager``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from regroup.log import LogManager
from regroup.protocol.record_batch import Record, build_batch, end_txn_marker


@dataclass
class Batch:
    topic: str
    partition: int
    records: Sequence[tuple[int, bytes | None, bytes | None]]  # (timestamp, key, value)
    compression: int = 0
    headers: Sequence[tuple[str, bytes | None]] = ()
    transactional: bool = False


@dataclass
class Marker:
    topic: str
    partition: int
    commit: bool
    timestamp: int


@dataclass
class DataDir:
    path: Path
    topics: Mapping[str, int]
    written: list[Batch | Marker] = field(default_factory=list)

    def records(self, topic: str) -> list[tuple[int, int, int, bytes | None, bytes | None]]:
        """(partition, offset, timestamp, key, value) of every non-control record of ``topic``."""
        out = []
        next_offset: dict[tuple[str, int], int] = {}
        for b in self.written:
            key = (b.topic, b.partition)
            base = next_offset.get(key, 0)
            if isinstance(b, Marker):
                next_offset[key] = base + 1
                continue
            for i, (ts, k, v) in enumerate(b.records):
                if b.topic == topic:
                    out.append((b.partition, base + i, ts, k, v))
            next_offset[key] = base + len(b.records)
        return out


def build(
    path: Path,
    topics: Mapping[str, int],
    writes: Sequence[Batch | Marker],
    now_ms: int,
    *,
    topic_configs: Mapping[str, Mapping[str, str]] | None = None,
) -> DataDir:
    logs = LogManager(path)
    logs.load()
    for topic, partitions in topics.items():
        configs = {"cleanup.policy": "compact"} if topic == "__consumer_offsets" else {}
        configs.update((topic_configs or {}).get(topic, {}))
        logs.create_topic(topic, partitions, configs, internal=topic.startswith("__"))
    for w in writes:
        plog = logs.partition(w.topic, w.partition)
        assert plog is not None
        if isinstance(w, Marker):
            data = build_batch(
                [end_txn_marker(w.commit, 0, timestamp=w.timestamp)],
                is_control=True,
                is_transactional=True,
                producer_id=9,
                producer_epoch=0,
            )
        else:
            recs = [Record(i, ts, k, v, list(w.headers)) for i, (ts, k, v) in enumerate(w.records)]
            data = build_batch(
                recs,
                compression=w.compression,
                is_transactional=w.transactional,
                producer_id=9 if w.transactional else -1,
                producer_epoch=0 if w.transactional else -1,
            )
        plog.append(data, now_ms=now_ms, validate=False)
    logs.close()
    return DataDir(path, topics, list(writes))
