"""Idempotent-producer state of one partition: per producer id the epoch and the last five batches' sequence
and offset ranges (Kafka's ``ProducerStateManager`` / ``ProducerStateEntry`` / ``ProducerAppendInfo``), the
sequence and epoch checks applied to client appends, and ``<offset>.snapshot`` files so a restart replays
only the batches after the latest snapshot.
"""

from __future__ import annotations

import logging
import os
import struct
from collections import deque
from pathlib import Path
from typing import Final, NamedTuple
from zlib import crc32

from regroup.log._io import write_file_atomically
from regroup.log.segment import segment_name
from regroup.protocol.errors import ErrorCode, KafkaError

__all__ = [
    "NUM_BATCHES_TO_RETAIN",
    "SNAPSHOT_SUFFIX",
    "BatchMetadata",
    "ProducerEntry",
    "ProducerStateManager",
]

log = logging.getLogger("regroup.log")

NUM_BATCHES_TO_RETAIN: Final = 5  # ProducerStateEntry.NUM_BATCHES_TO_RETAIN
SNAPSHOT_SUFFIX: Final = ".snapshot"
NO_PRODUCER_EPOCH: Final = -1
NO_SEQUENCE: Final = -1
_INT32_MAX: Final = 0x7FFFFFFF

_SNAP_HEADER: Final = struct.Struct(">hIi")  # version, CRC-32 of the rest, entry count
_SNAP_ENTRY: Final = struct.Struct(">qhqb")  # producer id, epoch, last timestamp, batch count
_SNAP_BATCH: Final = struct.Struct(">iiqqq")  # first seq, last seq, first offset, last offset, timestamp
_SNAP_VERSION: Final = 1


class BatchMetadata(NamedTuple):
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


class ProducerEntry:
    """One producer's epoch and its most recent batches (oldest first)."""

    __slots__ = ("batches", "epoch", "last_timestamp", "producer_id")

    def __init__(self, producer_id: int, epoch: int = NO_PRODUCER_EPOCH) -> None:
        self.producer_id = producer_id
        self.epoch = epoch
        self.batches: deque[BatchMetadata] = deque(maxlen=NUM_BATCHES_TO_RETAIN)
        self.last_timestamp = -1

    def copy(self) -> ProducerEntry:
        e = ProducerEntry(self.producer_id, self.epoch)
        e.batches.extend(self.batches)
        e.last_timestamp = self.last_timestamp
        return e

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        """Kafka's ``ProducerStateEntry.findDuplicateBatch``: same epoch and the same sequence range."""
        if epoch != self.epoch:
            return None
        for b in self.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None

    def add_batch(self, epoch: int, batch: BatchMetadata) -> None:
        if epoch != self.epoch:
            self.batches.clear()
            self.epoch = epoch
        self.batches.append(batch)
        self.last_timestamp = batch.timestamp


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == _INT32_MAX)


class ProducerStateManager:
    """Producer entries of one partition, keyed by producer id."""

    __slots__ = ("entries", "partition")

    def __init__(self, partition: str) -> None:
        self.partition = partition
        self.entries: dict[int, ProducerEntry] = {}

    def check(
        self,
        updated: ProducerEntry,
        producer_id: int,
        epoch: int,
        first_seq: int,
        offset: int,
        *,
        check_sequence: bool,
    ) -> None:
        """Kafka's ``ProducerAppendInfo.checkProducerEpoch`` + ``checkSequence`` for a client data batch.
        ``updated`` is the producer's entry including earlier batches of the same append."""
        current = self.entries.get(producer_id)
        current_epoch = NO_PRODUCER_EPOCH if current is None else current.epoch
        if epoch < updated.epoch:
            # Since Kafka 2.7 a stale epoch is INVALID_PRODUCER_EPOCH (KIP-588), no longer PRODUCER_FENCED.
            raise KafkaError(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                f"Epoch of producer {producer_id} at offset {offset} in {self.partition} is {epoch}, "
                f"which is smaller than the last seen epoch {updated.epoch}",
            )
        if not check_sequence:
            return
        if epoch != updated.epoch:
            if first_seq != 0 and updated.epoch != NO_PRODUCER_EPOCH:
                raise KafkaError(
                    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"Invalid sequence number for new epoch of producer {producer_id} at offset {offset} in "
                    f"partition {self.partition}: {epoch} (request epoch), {first_seq} (seq. number), "
                    f"{updated.epoch} (current producer epoch)",
                )
            return
        # An unknown producer (no state: never seen, or its batches were removed by retention or
        # DeleteRecords) may start at any sequence, as Kafka has done since 2.5 (KIP-360); brokers no
        # longer answer UNKNOWN_PRODUCER_ID for produce.
        if current_epoch == NO_PRODUCER_EPOCH:
            return
        last_seq = updated.last_seq
        if not _in_sequence(last_seq, first_seq):
            raise KafkaError(
                ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"Out of order sequence number for producer {producer_id} at offset {offset} in partition "
                f"{self.partition}: {first_seq} (incoming seq. number), {last_seq} (current end sequence "
                "number)",
            )

    def replay(
        self,
        producer_id: int,
        epoch: int,
        first_seq: int,
        last_seq: int,
        first_offset: int,
        last_offset: int,
        ts: int,
    ) -> None:
        """Apply a data batch found in the log (loading; no checks)."""
        entry = self.entries.get(producer_id)
        if entry is None:
            entry = self.entries[producer_id] = ProducerEntry(producer_id)
        if epoch < entry.epoch:
            return
        entry.add_batch(epoch, BatchMetadata(first_seq, last_seq, first_offset, last_offset, ts))

    def replay_marker(self, producer_id: int, epoch: int) -> None:
        """A control batch (transaction marker) moves the producer to its epoch."""
        entry = self.entries.get(producer_id)
        if entry is None:
            entry = self.entries[producer_id] = ProducerEntry(producer_id, epoch)
        elif epoch > entry.epoch:
            entry.epoch = epoch
            entry.batches.clear()

    def last_data_offsets(self) -> dict[int, int]:
        """Producer id -> last offset of its last batch (the batch compaction must keep)."""
        return {pid: e.last_offset for pid, e in self.entries.items() if e.batches}

    def expire(self, now_ms: int, expiration_ms: int) -> int:
        """Drop producers idle for ``producer.id.expiration.ms`` (Kafka's ``removeExpiredProducers``, measured
        from the producer's last batch timestamp)."""
        expired = [pid for pid, e in self.entries.items() if now_ms - e.last_timestamp >= expiration_ms]
        for pid in expired:
            del self.entries[pid]
        return len(expired)

    # ------------------------------------------------------------------------------------------ snapshots

    def encode(self) -> bytes:
        parts: list[bytes] = []
        for e in self.entries.values():
            parts.append(_SNAP_ENTRY.pack(e.producer_id, e.epoch, e.last_timestamp, len(e.batches)))
            parts.extend(
                _SNAP_BATCH.pack(b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp)
                for b in e.batches
            )
        body = b"".join(parts)
        count = struct.pack(">i", len(self.entries))
        return _SNAP_HEADER.pack(_SNAP_VERSION, crc32(body, crc32(count)), len(self.entries)) + body

    @staticmethod
    def decode(data: bytes) -> dict[int, ProducerEntry]:
        """Parse a snapshot; raises ValueError when it is damaged."""
        try:
            version, crc, count = _SNAP_HEADER.unpack_from(data, 0)
            if version != _SNAP_VERSION:
                raise ValueError(f"unknown snapshot version {version}")
            if crc32(data[_SNAP_HEADER.size :], crc32(data[2 + 4 : _SNAP_HEADER.size])) != crc:
                raise ValueError("snapshot CRC mismatch")
            pos = _SNAP_HEADER.size
            entries: dict[int, ProducerEntry] = {}
            for _ in range(count):
                pid, epoch, last_ts, n = _SNAP_ENTRY.unpack_from(data, pos)
                pos += _SNAP_ENTRY.size
                e = ProducerEntry(pid, epoch)
                e.last_timestamp = last_ts
                for _ in range(n):
                    e.batches.append(BatchMetadata(*_SNAP_BATCH.unpack_from(data, pos)))
                    pos += _SNAP_BATCH.size
                entries[pid] = e
            if pos != len(data):
                raise ValueError("trailing bytes in snapshot")
            return entries
        except struct.error as exc:
            raise ValueError(f"truncated snapshot: {exc}") from None

    def write_snapshot(self, directory: Path, offset: int, *, sync: bool) -> None:
        write_file_atomically(directory / (segment_name(offset) + SNAPSHOT_SUFFIX), self.encode(), sync=sync)

    @staticmethod
    def snapshot_offsets(directory: Path) -> list[int]:
        offsets = []
        for name in os.listdir(directory):
            if name.endswith(SNAPSHOT_SUFFIX):
                stem = name[: -len(SNAPSHOT_SUFFIX)]
                if stem.isdigit():
                    offsets.append(int(stem))
        return sorted(offsets)

    def load_latest_snapshot(self, directory: Path, max_offset: int) -> int | None:
        """Load the newest readable snapshot at or below ``max_offset``; delete newer ones (their batches were
        truncated away) and damaged ones. Returns the snapshot's offset, or None (state is then empty)."""
        self.entries = {}
        for offset in reversed(self.snapshot_offsets(directory)):
            path = directory / (segment_name(offset) + SNAPSHOT_SUFFIX)
            if offset > max_offset:
                path.unlink(missing_ok=True)
                continue
            try:
                self.entries = self.decode(path.read_bytes())
            except (OSError, ValueError) as exc:
                log.warning("ignoring producer state snapshot %s: %s", path, exc)
                path.unlink(missing_ok=True)
                continue
            return offset
        return None

    @classmethod
    def delete_snapshots(cls, directory: Path, *, keep: int, below: int | None = None) -> None:
        """Keep the ``keep`` newest snapshots; of the others delete those below ``below`` (all if None)."""
        offsets = cls.snapshot_offsets(directory)
        for offset in offsets[: max(0, len(offsets) - keep)]:
            if below is None or offset < below:
                (directory / (segment_name(offset) + SNAPSHOT_SUFFIX)).unlink(missing_ok=True)
