"""Decoding ``__consumer_offsets`` records into Arrow, one Arrow batch at a time.

Offset commits (key types 0/1, values v0–v4, tombstones) are the bulk of the topic and are decoded by one
compiled pass over the batch's keys and values (:mod:`regroup_pipeline.commitscan`; v4's tagged fields,
such as Kafka 4.3's topic id, are skipped). A batch holding anything unusual — an unknown value version, a
malformed key or value — is decoded instead by regroup's generated codecs, which accept every valid
encoding and raise :class:`DecodeError` on invalid ones. Group metadata (key type 2) is rare, nested and
variable-length; it is decoded with the generated codecs, including each member's consumer-protocol
subscription and assignment. Of KIP-848 ``consumer`` groups only the ConsumerGroupMetadata records (key
type 3: group id and epoch) are decoded, enough to tell which groups use that protocol. All are meant for
``DataFrame.mapInArrow``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Final

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]  # pyarrow ships no type information

from regroup.protocol.primitives import DecodeError
from regroup.protocol.records.consumer_group_metadata import (
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
)
from regroup.protocol.records.consumer_protocol import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
)
from regroup.protocol.records.group_metadata import GroupMetadataKey, GroupMetadataValue
from regroup.protocol.records.offset_commit import OffsetCommitKey, OffsetCommitValue
from regroup_pipeline.commitscan import scan_commit_pairs
from regroup_pipeline.logformat import COMMIT_ARROW_SCHEMA, I64, TIMESTAMP, U8, be_int, binary_parts

__all__ = [
    "CONSUMER_GROUP_ARROW_SCHEMA",
    "GROUP_ARROW_SCHEMA",
    "HISTORY_ARROW_SCHEMA",
    "CommitHistory",
    "consumer_group_batches",
    "decode_consumer_group_metadata",
    "decode_group_metadata",
    "decode_offset_commits",
    "group_metadata_batches",
    "offset_commit_batches",
    "record_types",
]

_TOPIC_PARTITIONS: Final = pa.list_(
    pa.struct([pa.field("topic", pa.string()), pa.field("partitions", pa.list_(pa.int32()))])
)

# Offset commits with the interval each was in force: until the next record for the same group, topic and
# partition (``valid_until``, null for the last one, which ``is_current``).
# (The columns and order of the ``offsets`` table.)
_HISTORY_ORDER: Final = (
    "group",
    "topic",
    "partition",
    "committed_offset",
    "leader_epoch",
    "metadata",
    "commit_timestamp",
    "expire_timestamp",
    "deleted",
    "record_timestamp",
    "valid_until",
    "is_current",
    "record_partition",
    "record_offset",
    "key_version",
    "value_version",
)
_INTERVAL: Final = {
    "valid_until": pa.field("valid_until", TIMESTAMP),
    "is_current": pa.field("is_current", pa.bool_()),
}
HISTORY_ARROW_SCHEMA: Final = pa.schema(
    [_INTERVAL[n] if n in _INTERVAL else COMMIT_ARROW_SCHEMA.field(n) for n in _HISTORY_ORDER]
)

MEMBER_TYPE: Final = pa.struct(
    [
        pa.field("member_id", pa.string()),
        pa.field("group_instance_id", pa.string()),
        pa.field("client_id", pa.string()),
        pa.field("client_host", pa.string()),
        pa.field("rebalance_timeout_ms", pa.int32()),
        pa.field("session_timeout_ms", pa.int32()),
        pa.field("subscription_valid", pa.bool_()),
        pa.field("subscription_version", pa.int32()),
        pa.field("subscribed_topics", pa.list_(pa.string())),
        pa.field("owned_partitions", _TOPIC_PARTITIONS),
        pa.field("subscription_generation", pa.int32()),
        pa.field("rack_id", pa.string()),
        pa.field("assignment_version", pa.int32()),
        pa.field("assignment", _TOPIC_PARTITIONS),
    ]
)

GROUP_ARROW_SCHEMA: Final = pa.schema(
    [
        pa.field("group", pa.string()),
        pa.field("deleted", pa.bool_()),
        pa.field("value_version", pa.int32()),
        pa.field("protocol_type", pa.string()),
        pa.field("generation", pa.int32()),
        pa.field("protocol", pa.string()),
        pa.field("leader", pa.string()),
        pa.field("current_state_timestamp", TIMESTAMP),
        pa.field("members", pa.list_(MEMBER_TYPE)),
        pa.field("record_partition", pa.int32()),
        pa.field("record_offset", pa.int64()),
        pa.field("record_timestamp", TIMESTAMP),
    ]
)

# KIP-848 ConsumerGroupMetadata records: the group's epoch; a tombstone when the group is deleted (or
# converted back to the classic protocol).
CONSUMER_GROUP_ARROW_SCHEMA: Final = pa.schema(
    [
        pa.field("group", pa.string()),
        pa.field("deleted", pa.bool_()),
        pa.field("epoch", pa.int32()),
        pa.field("record_partition", pa.int32()),
        pa.field("record_offset", pa.int64()),
        pa.field("record_timestamp", TIMESTAMP),
    ]
)

_OFFSET_COMMIT_TYPES: Final = (0, 1)
_GROUP_METADATA_TYPE: Final = 2
CONSUMER_GROUP_METADATA_TYPE: Final = 3


def _safe_be(buf: U8, pos: I64, width: int) -> I64:
    """``be_int`` tolerating positions past the end, for rows that validation rejects afterwards."""
    if buf.size < width:
        return np.zeros(pos.size, np.int64)
    return be_int(buf, np.clip(pos, 0, buf.size - width), width)


def record_types(keys: Any) -> I64:
    """The int16 record type of each key (−1 for a null or too short key)."""
    data, starts, lengths = binary_parts(keys)
    return np.where(lengths >= 2, _safe_be(data, starts, 2), -1)


def _column(batch: Any, name: str) -> Any:
    col = batch.column(name)
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


def _ts(ms: I64, null: Any) -> Any:
    return pa.array(ms * 1000, TIMESTAMP, mask=null)


# ------------------------------------------------------------------------------------------ offset commits


def decode_offset_commits(batch: Any) -> Any:
    """Offset-commit records (and their tombstones) of a batch of raw ``__consumer_offsets`` records, as a
    ``pyarrow.RecordBatch`` with :data:`COMMIT_ARROW_SCHEMA`; other record types are dropped."""
    fast = scan_commit_pairs(batch)
    if fast is not None:
        return fast
    rtype = record_types(_column(batch, "key"))
    rows = np.flatnonzero((rtype == _OFFSET_COMMIT_TYPES[0]) | (rtype == _OFFSET_COMMIT_TYPES[1]))
    if rows.size == 0:
        return _empty(COMMIT_ARROW_SCHEMA)
    if rows.size != batch.num_rows:
        batch = batch.take(pa.array(rows))
    return _offset_commits_codec(batch)


def _empty(schema: Any) -> Any:
    return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in schema], schema=schema)


def _offset_commits_codec(batch: Any) -> Any:
    keys = _column(batch, "key").to_pylist()
    values = _column(batch, "value").to_pylist()
    parts = _column(batch, "partition").to_pylist()
    offs = _column(batch, "offset").to_pylist()
    cols: dict[str, list[Any]] = {f.name: [] for f in COMMIT_ARROW_SCHEMA}
    for key, value, part, off in zip(keys, values, parts, offs, strict=True):
        try:
            key_version = int.from_bytes(key[:2], "big", signed=True)
            k = OffsetCommitKey.decode(key[2:], key_version)
            v = None if value is None else OffsetCommitValue.decode_versioned(value)
        except DecodeError as exc:
            raise DecodeError(f"__consumer_offsets-{part} offset {off}: {exc}") from exc
        cols["group"].append(k.group)
        cols["topic"].append(k.topic)
        cols["partition"].append(k.partition)
        cols["key_version"].append(key_version)
        cols["deleted"].append(v is None)
        if v is None:
            for name in (
                "committed_offset",
                "leader_epoch",
                "metadata",
                "commit_timestamp",
                "expire_timestamp",
                "value_version",
            ):
                cols[name].append(None)
            continue
        value_obj, version = v
        cols["committed_offset"].append(value_obj.offset)
        cols["leader_epoch"].append(value_obj.leader_epoch)
        cols["metadata"].append(value_obj.metadata)
        cols["commit_timestamp"].append(value_obj.commit_timestamp * 1000)
        cols["expire_timestamp"].append(
            value_obj.expire_timestamp * 1000 if value_obj.expire_timestamp >= 0 else None
        )
        cols["value_version"].append(version)
    arrays = [
        pa.array(cols[f.name], pa.int64() if f.type == TIMESTAMP else f.type)
        for f in list(COMMIT_ARROW_SCHEMA)[:11]
    ]
    arrays = [a.cast(f.type) for a, f in zip(arrays, list(COMMIT_ARROW_SCHEMA)[:11], strict=True)]
    arrays += [
        _column(batch, "partition").cast(pa.int32()),
        _column(batch, "offset").cast(pa.int64()),
        _column(batch, "timestamp").cast(TIMESTAMP),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=COMMIT_ARROW_SCHEMA)


# ------------------------------------------------------------------------------------------ group metadata


def _topic_partitions(items: Any) -> list[dict[str, Any]]:
    return [{"topic": tp.topic, "partitions": list(tp.partitions)} for tp in items]


def _member(m: Any, consumer: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "member_id": m.member_id,
        "group_instance_id": m.group_instance_id,
        "client_id": m.client_id,
        "client_host": m.client_host,
        "rebalance_timeout_ms": m.rebalance_timeout,
        "session_timeout_ms": m.session_timeout,
        "subscription_valid": None,
        "subscription_version": None,
        "subscribed_topics": None,
        "owned_partitions": None,
        "subscription_generation": None,
        "rack_id": None,
        "assignment_version": None,
        "assignment": None,
    }
    if not consumer:
        return out
    try:
        sub, sub_version = ConsumerProtocolSubscription.decode_versioned(m.subscription, lenient=True)
    except DecodeError:
        out["subscription_valid"] = False
    else:
        out.update(
            subscription_valid=True,
            subscription_version=sub_version,
            subscribed_topics=list(sub.topics),
            owned_partitions=_topic_partitions(sub.owned_partitions),
            subscription_generation=sub.generation_id,
            rack_id=sub.rack_id,
        )
    if not m.assignment:
        out["assignment"] = []  # what a member gets when the leader left it out
    else:
        try:
            asg, asg_version = ConsumerProtocolAssignment.decode_versioned(m.assignment, lenient=True)
        except DecodeError:
            pass
        else:
            out.update(assignment_version=asg_version, assignment=_topic_partitions(asg.assigned_partitions))
    return out


def decode_group_metadata(batch: Any) -> Any:
    """Group-metadata records (and tombstones) of a batch of raw ``__consumer_offsets`` records, as a
    ``pyarrow.RecordBatch`` with :data:`GROUP_ARROW_SCHEMA`; members' subscriptions and assignments are
    decoded for protocol type ``consumer``."""
    keys = _column(batch, "key")
    rows = np.flatnonzero(record_types(keys) == _GROUP_METADATA_TYPE)
    if rows.size == 0:
        return _empty(GROUP_ARROW_SCHEMA)
    batch = batch.take(pa.array(rows))
    records: list[dict[str, Any]] = []
    for row in batch.to_pylist():
        try:
            key = GroupMetadataKey.decode(row["key"][2:], _GROUP_METADATA_TYPE)
            decoded = None if row["value"] is None else GroupMetadataValue.decode_versioned(row["value"])
        except DecodeError as exc:
            raise DecodeError(f"__consumer_offsets-{row['partition']} offset {row['offset']}: {exc}") from exc
        rec: dict[str, Any] = {
            "group": key.group,
            "deleted": decoded is None,
            "record_partition": row["partition"],
            "record_offset": row["offset"],
            "record_timestamp": row["timestamp"],
        }
        if decoded is not None:
            value, version = decoded
            consumer = value.protocol_type == "consumer"
            rec.update(
                value_version=version,
                protocol_type=value.protocol_type,
                generation=value.generation,
                protocol=value.protocol,
                leader=value.leader,
                current_state_timestamp=(
                    value.current_state_timestamp * 1000 if value.current_state_timestamp >= 0 else None
                ),
                members=[_member(m, consumer) for m in value.members],
            )
        records.append(rec)
    columns = []
    for f in GROUP_ARROW_SCHEMA:
        values = [r.get(f.name) for r in records]
        if f.name == "current_state_timestamp":
            columns.append(pa.array(values, pa.int64()).cast(TIMESTAMP))
        else:
            columns.append(pa.array(values, f.type))
    return pa.RecordBatch.from_arrays(columns, schema=GROUP_ARROW_SCHEMA)


def decode_consumer_group_metadata(batch: Any) -> Any:
    """KIP-848 ConsumerGroupMetadata records (key type 3) and their tombstones of a batch of raw
    ``__consumer_offsets`` records, as a ``pyarrow.RecordBatch`` with :data:`CONSUMER_GROUP_ARROW_SCHEMA`."""
    keys = _column(batch, "key")
    rows = np.flatnonzero(record_types(keys) == CONSUMER_GROUP_METADATA_TYPE)
    if rows.size == 0:
        return _empty(CONSUMER_GROUP_ARROW_SCHEMA)
    records: list[dict[str, Any]] = []
    for row in batch.take(pa.array(rows)).to_pylist():
        try:
            key = ConsumerGroupMetadataKey.decode(row["key"][2:], CONSUMER_GROUP_METADATA_TYPE)
            value = (
                None if row["value"] is None else ConsumerGroupMetadataValue.decode_versioned(row["value"])
            )
        except DecodeError as exc:
            raise DecodeError(f"__consumer_offsets-{row['partition']} offset {row['offset']}: {exc}") from exc
        records.append(
            {
                "group": key.group_id,
                "deleted": value is None,
                "epoch": None if value is None else value[0].epoch,
                "record_partition": row["partition"],
                "record_offset": row["offset"],
                "record_timestamp": row["timestamp"],
            }
        )
    return pa.RecordBatch.from_pylist(records, schema=CONSUMER_GROUP_ARROW_SCHEMA)


# ------------------------------------------------------------------------------------------ history


class CommitHistory:
    """Gives each offset commit of one ``__consumer_offsets`` partition its ``valid_until`` and
    ``is_current`` (:data:`HISTORY_ARROW_SCHEMA`), from decoded batches fed in log order.

    A group's records all live in the partition its name hashes to, so the partition's own order is the
    order the coordinator wrote them in, and no shuffle is needed. Only the last commit seen of each key
    waits for its successor; everything else comes out of the :meth:`feed` call that sees its successor.
    """

    def __init__(self) -> None:
        self._pending: Any = None  # pa.RecordBatch: the latest row of each key seen so far

    def feed(self, batch: Any) -> Any | None:
        """The rows whose successor is now known (a ``pyarrow.Table``), or None."""
        if batch.num_rows == 0:
            return None
        parts = [batch] if self._pending is None else [self._pending, batch]
        key = _key_ids(parts)
        stamps = np.concatenate([p.column("record_timestamp").cast(pa.int64()).to_numpy() for p in parts])
        # A stable sort keeps each key's rows in log order: each row's successor is the next one.
        order = np.argsort(key, kind="stable")
        same = key[order[1:]] == key[order[:-1]]
        successor = np.full(key.size, -1, np.int64)
        successor[order[:-1][same]] = order[1:][same]
        done = successor >= 0
        until = stamps[np.maximum(successor, 0)]
        out: list[Any] = []
        pending: list[Any] = []
        start = 0
        for part in parts:
            end = start + part.num_rows
            part_done = done[start:end]
            if part_done.any():
                rows = part.filter(pa.array(part_done))
                out.append(
                    _with_interval(rows, pa.array(until[start:end][part_done], TIMESTAMP), current=False)
                )
            if not part_done.all():
                pending.append(part.filter(pa.array(~part_done)))
            start = end
        self._pending = pa.Table.from_batches(pending).combine_chunks().to_batches()[0] if pending else None
        return pa.Table.from_batches(out) if out else None

    def finish(self) -> Any | None:
        """The last commit of every key (``is_current``), once the partition has been read to its end."""
        pending, self._pending = self._pending, None
        if pending is None or pending.num_rows == 0:
            return None
        return pa.Table.from_batches(
            [_with_interval(pending, pa.nulls(pending.num_rows, TIMESTAMP), current=True)]
        )


def _key_ids(parts: list[Any]) -> I64:
    """One integer per row, equal for rows with the same group, topic and partition."""

    def codes(name: str) -> tuple[I64, int]:
        # One dictionary for every chunk of a chunked array.
        encoded = pa.chunked_array([p.column(name) for p in parts]).dictionary_encode()
        ids = np.concatenate([np.asarray(c.indices, np.int64) for c in encoded.chunks])
        return ids, max(len(encoded.chunks[0].dictionary), 1)

    group, groups = codes("group")
    topic, topics = codes("topic")
    partition = np.concatenate([np.asarray(p.column("partition"), np.int64) for p in parts])
    lowest, highest = int(partition.min()), int(partition.max())
    span = highest - lowest + 1
    if groups * topics * span < 2**62:
        combined: I64 = (group * topics + topic) * span + (partition - lowest)
        return combined
    # Too many combinations for one int64: rank the (group, topic, partition) triples instead.
    triples = np.stack([group, topic, partition], axis=1)
    ranks: I64 = np.unique(triples, axis=0, return_inverse=True)[1].astype(np.int64).ravel()
    return ranks


def _with_interval(batch: Any, valid_until: Any, *, current: bool) -> Any:
    columns = {"valid_until": valid_until, "is_current": pa.array(np.full(batch.num_rows, current))}
    return pa.RecordBatch.from_arrays(
        [columns[n] if n in columns else batch.column(n) for n in HISTORY_ARROW_SCHEMA.names],
        schema=HISTORY_ARROW_SCHEMA,
    )


# ------------------------------------------------------------------------------------------ mapInArrow


def offset_commit_batches(batches: Iterable[Any]) -> Iterator[Any]:
    """``mapInArrow`` function: raw ``__consumer_offsets`` records → offset commits."""
    for batch in batches:
        out = decode_offset_commits(batch)
        if out.num_rows:
            yield out


def group_metadata_batches(batches: Iterable[Any]) -> Iterator[Any]:
    """``mapInArrow`` function: raw ``__consumer_offsets`` records → group metadata."""
    for batch in batches:
        out = decode_group_metadata(batch)
        if out.num_rows:
            yield out


def consumer_group_batches(batches: Iterable[Any]) -> Iterator[Any]:
    """``mapInArrow`` function: raw ``__consumer_offsets`` records → KIP-848 ConsumerGroupMetadata."""
    for batch in batches:
        out = decode_consumer_group_metadata(batch)
        if out.num_rows:
            yield out
