"""Reading ``__consumer_offsets`` through the Fetch API and decoding it with regroup's record codecs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from regroup.protocol.message import Data
from regroup.protocol.primitives import I16
from regroup.protocol.record_batch import RecordBatch
from regroup.protocol.records import RECORD_TYPES
from support.kafka_wire import Address, fetch_partition, partition_for
from support.normalize import plain

__all__ = ["CoordinatorRecord", "group_records", "read_offsets_topic"]

TOPIC = "__consumer_offsets"


def _key_version(key_cls: type[Data], key_type: int) -> int:
    """The key struct's version: the record type for pre-4.0 key specs (``"type": "data"``, the key version
    is the type), 0 for Kafka 4.0+ ``coordinator-key`` specs (e.g. type 16)."""
    return key_type if key_cls.MIN_VERSION <= key_type <= key_cls.MAX_VERSION else 0


def _decode_key(key_cls: type[Data], key_type: int, raw: bytes) -> tuple[Data, int]:
    version = _key_version(key_cls, key_type)
    obj, end = key_cls.read(raw, 2, version)
    if end != len(raw):
        raise ValueError(f"{len(raw) - end} trailing bytes after a type-{key_type} key")
    return obj, version


@dataclass
class CoordinatorRecord:
    """One record of ``__consumer_offsets``: its key and value decoded (value None for a tombstone), the
    raw bytes, and the attributes of the batch that carried it."""

    partition: int
    offset: int
    key_type: int
    key: dict[str, Any]
    value_version: int | None
    value: dict[str, Any] | None
    raw_key: bytes
    raw_value: bytes | None
    batch: dict[str, Any]

    @property
    def group(self) -> str:
        # offset and group metadata keys name it "group", consumer-group keys (KIP-848) "group_id"
        return str(self.key.get("group", self.key.get("group_id", "")))

    def reencodes(self) -> bool:
        """Whether regroup's codecs re-encode the decoded key and value to exactly the stored bytes."""
        key_cls, value_cls = RECORD_TYPES[self.key_type]
        key_obj, key_version = _decode_key(key_cls, self.key_type, self.raw_key)
        key = bytearray(I16.pack(self.key_type))
        key_obj.write(key, key_version)
        if bytes(key) != self.raw_key:
            return False
        if self.raw_value is None:
            return True
        value_obj, version = value_cls.decode_versioned(self.raw_value)
        return value_obj.encode_versioned(version) == self.raw_value


def _batch_attributes(batch: RecordBatch) -> dict[str, Any]:
    return {
        "compression": int(batch.compression),
        "timestamp_type": int(batch.timestamp_type),
        "is_transactional": batch.is_transactional,
        "is_control": batch.is_control,
        "producer_id": batch.producer_id,
        "producer_epoch": batch.producer_epoch,
    }


def read_offsets_topic(address: Address, partition: int) -> list[CoordinatorRecord]:
    """Every data record of one ``__consumer_offsets`` partition, decoded."""
    out: list[CoordinatorRecord] = []
    for batch in fetch_partition(address, TOPIC, partition):
        if batch.is_control:
            continue
        attrs = _batch_attributes(batch)
        for record in batch.records:
            if record.key is None:
                continue
            key_type = I16.unpack_from(record.key, 0)[0]
            key_cls, value_cls = RECORD_TYPES[key_type]
            key_obj, key_version = _decode_key(key_cls, key_type, bytes(record.key))
            value: dict[str, Any] | None = None
            version: int | None = None
            if record.value is not None:
                value_obj, version = value_cls.decode_versioned(record.value)
                value = plain(value_obj, version)
            out.append(
                CoordinatorRecord(
                    partition,
                    record.offset,
                    key_type,
                    plain(key_obj, key_version),
                    version,
                    value,
                    bytes(record.key),
                    None if record.value is None else bytes(record.value),
                    attrs,
                )
            )
    return out


def group_records(address: Address, group: str, partitions: int) -> list[CoordinatorRecord]:
    """The records of ``group``, from the partition the group hashes to."""
    return [r for r in read_offsets_topic(address, partition_for(group, partitions)) if r.group == group]
