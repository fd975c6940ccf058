"""Reading ``__consumer_offsets`` through the Fetch API and decoding it with regroup's record codecs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from regroup.protocol.primitives import I16
from regroup.protocol.record_batch import RecordBatch
from regroup.protocol.records import RECORD_TYPES
from support.kafka_wire import Address, fetch_partition, partition_for
from support.normalize import plain

__all__ = ["CoordinatorRecord", "group_records", "read_offsets_topic"]

TOPIC = "__consumer_offsets"


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
        key_obj, _ = key_cls.decode_versioned(self.raw_key)
        if key_obj.encode_versioned(self.key_type) != self.raw_key:
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
            key_obj, _ = key_cls.decode_versioned(record.key)
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
                    plain(key_obj, key_type),
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
