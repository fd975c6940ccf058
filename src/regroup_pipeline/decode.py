"""Decoding ``__consumer_offsets`` records into Arrow, one Arrow batch at a time.

Offset commits (key types 0/1, values v0–v4, tombstones) are the bulk of the topic and are decoded by one
compiled pass over the batch's keys and values (:mod:`regroup_pipeline.commitscan`; v4's tagged fields,
such as Kafka 4.3's topic id, are skipped). A batch holding anything unusual — an unknown value version, a
malformed key or value — is decoded instead by regroup's generated codecs, which accept every valid
encoding and raise :class:`DecodeError` on invalid ones. Group metadata (key type 2) is rare, nested and
variable-length; it is decoded with the generated codecs, including each member's consumer-protocol
subscription and assignment. KIP-848 ``consumer`` groups' records (key types 3–8 and 16: group epoch, the
≤4.0 partition metadata, member subscriptions, target assignment, each member's current assignment, resolved
regular expressions) are as rare and decoded the same way, into one wide table with a ``record_type``
column (:data:`CONSUMER_GROUP_ARROW_SCHEMA`). All are meant for ``DataFrame.mapInArrow``.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]  # pyarrow ships no type information

from regroup.protocol.primitives import DecodeError
from regroup.protocol.records.consumer_group_current_member_assignment import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
)
from regroup.protocol.records.consumer_group_member_metadata import (
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
)
from regroup.protocol.records.consumer_group_metadata import (
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
)
from regroup.protocol.records.consumer_group_partition_metadata import (
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
)
from regroup.protocol.records.consumer_group_regular_expression import (
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
)
from regroup.protocol.records.consumer_group_target_assignment_member import (
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
)
from regroup.protocol.records.consumer_group_target_assignment_metadata import (
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
)
from regroup.protocol.records.consumer_protocol import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
)
from regroup.protocol.records.group_metadata import GroupMetadataKey, GroupMetadataValue
from regroup.protocol.records.offset_commit import OffsetCommitKey, OffsetCommitValue
from regroup_pipeline.commitscan import scan_commit_pairs
from regroup_pipeline.logformat import (
    COMMIT_ARROW_SCHEMA,
    CONSUMER_GROUP_METADATA_TYPE,
    CONSUMER_GROUP_RECORD_TYPES,
    GROUP_METADATA_TYPE,
    I64,
    OFFSET_COMMIT_TYPES,
    TIMESTAMP,
    U8,
    be_int,
    binary_parts,
    key_ids,
)

__all__ = [
    "CONSUMER_GROUP_ARROW_SCHEMA",
    "GROUP_ARROW_SCHEMA",
    "HISTORY_ARROW_SCHEMA",
    "CommitHistory",
    "consumer_group_batches",
    "decode_consumer_group_metadata",
    "decode_consumer_group_records",
    "decode_group_metadata",
    "decode_offset_commits",
    "group_metadata_batches",
    "offset_commit_batches",
    "record_types",
    "topic_id_string",
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

_TOPIC_ID_PARTITIONS: Final = pa.list_(
    pa.struct([pa.field("topic_id", pa.string()), pa.field("partitions", pa.list_(pa.int32()))])
)
_TOPIC_ID_PARTITION_EPOCHS: Final = pa.list_(
    pa.struct(
        [
            pa.field("topic_id", pa.string()),
            pa.field("partitions", pa.list_(pa.int32())),
            pa.field("assignment_epochs", pa.list_(pa.int32())),
        ]
    )
)

# KIP-848 consumer groups' records, one row per record whatever its type (``record_type``: the key type);
# the columns of other types are null, and so are all value columns of a tombstone (``deleted``). Topic ids
# are Kafka's string form (URL-safe base64, as ``partition.metadata`` and the admin tools show them).
CONSUMER_GROUP_ARROW_SCHEMA: Final = pa.schema(
    [
        pa.field("group", pa.string()),
        pa.field("record_type", pa.int32()),
        pa.field("member_id", pa.string()),  # 5, 7, 8
        pa.field("deleted", pa.bool_()),
        # 3 ConsumerGroupMetadata
        pa.field("epoch", pa.int32()),
        pa.field("metadata_hash", pa.int64()),
        # 4 ConsumerGroupPartitionMetadata (Kafka ≤4.0)
        pa.field(
            "topic_metadata",
            pa.list_(
                pa.struct(
                    [
                        pa.field("topic_id", pa.string()),
                        pa.field("topic", pa.string()),
                        pa.field("num_partitions", pa.int32()),
                    ]
                )
            ),
        ),
        # 5 ConsumerGroupMemberMetadata
        pa.field("instance_id", pa.string()),
        pa.field("rack_id", pa.string()),
        pa.field("client_id", pa.string()),
        pa.field("client_host", pa.string()),
        pa.field("subscribed_topics", pa.list_(pa.string())),
        pa.field("subscribed_topic_regex", pa.string()),
        pa.field("rebalance_timeout_ms", pa.int32()),
        pa.field("server_assignor", pa.string()),
        pa.field("classic_session_timeout_ms", pa.int32()),  # a classic member's (online migration)
        # 6 ConsumerGroupTargetAssignmentMetadata
        pa.field("assignment_epoch", pa.int32()),
        pa.field("assignment_timestamp", TIMESTAMP),
        # 7 ConsumerGroupTargetAssignmentMember
        pa.field("target_partitions", _TOPIC_ID_PARTITIONS),
        # 8 ConsumerGroupCurrentMemberAssignment
        pa.field("member_epoch", pa.int32()),
        pa.field("previous_member_epoch", pa.int32()),
        pa.field("member_state", pa.int32()),
        pa.field("assigned_partitions", _TOPIC_ID_PARTITION_EPOCHS),
        pa.field("partitions_pending_revocation", _TOPIC_ID_PARTITION_EPOCHS),
        # 16 ConsumerGroupRegularExpression
        pa.field("regex", pa.string()),
        pa.field("resolved_topics", pa.list_(pa.string())),
        pa.field("regex_version", pa.int64()),
        pa.field("regex_timestamp", TIMESTAMP),
        pa.field("record_partition", pa.int32()),
        pa.field("record_offset", pa.int64()),
        pa.field("record_timestamp", TIMESTAMP),
    ]
)


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
    rows = np.flatnonzero((rtype == OFFSET_COMMIT_TYPES[0]) | (rtype == OFFSET_COMMIT_TYPES[1]))
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
    rows = np.flatnonzero(record_types(keys) == GROUP_METADATA_TYPE)
    if rows.size == 0:
        return _empty(GROUP_ARROW_SCHEMA)
    batch = batch.take(pa.array(rows))
    records: list[dict[str, Any]] = []
    for row in batch.to_pylist():
        try:
            key = GroupMetadataKey.decode(row["key"][2:], GROUP_METADATA_TYPE)
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


def topic_id_string(topic_id: Any) -> str:
    """Kafka's ``Uuid.toString`` of a UUID: URL-safe base64 of its 16 bytes, without padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode()


def _id_partitions(items: Any) -> list[dict[str, Any]]:
    return [{"topic_id": topic_id_string(tp.topic_id), "partitions": list(tp.partitions)} for tp in items]


def _id_partition_epochs(items: Any, member_epoch: int) -> list[dict[str, Any]]:
    # Records written before Kafka 4.3 have no assignment epochs: Kafka reads them as max(member epoch, 0).
    return [
        {
            "topic_id": topic_id_string(tp.topic_id),
            "partitions": list(tp.partitions),
            "assignment_epochs": list(tp.assignment_epochs)
            if tp.assignment_epochs
            else [max(member_epoch, 0)] * len(tp.partitions),
        }
        for tp in items
    ]


def _ms_or_none(ms: int) -> int | None:
    return ms * 1000 if ms > 0 else None


def _cg_metadata(key: bytes, value: bytes | None) -> dict[str, Any]:
    k = ConsumerGroupMetadataKey.decode(key, 3)
    out: dict[str, Any] = {"group": k.group_id}
    if value is not None:
        v, _ = ConsumerGroupMetadataValue.decode_versioned(value)
        out.update(epoch=v.epoch, metadata_hash=v.metadata_hash)
    return out


def _cg_partition_metadata(key: bytes, value: bytes | None) -> dict[str, Any]:
    k = ConsumerGroupPartitionMetadataKey.decode(key, 4)
    out: dict[str, Any] = {"group": k.group_id}
    if value is not None:
        v, _ = ConsumerGroupPartitionMetadataValue.decode_versioned(value)
        out["topic_metadata"] = [
            {
                "topic_id": topic_id_string(t.topic_id),
                "topic": t.topic_name,
                "num_partitions": t.num_partitions,
            }
            for t in v.topics
        ]
    return out


def _cg_member_metadata(key: bytes, value: bytes | None) -> dict[str, Any]:
    k = ConsumerGroupMemberMetadataKey.decode(key, 5)
    out: dict[str, Any] = {"group": k.group_id, "member_id": k.member_id}
    if value is not None:
        v, _ = ConsumerGroupMemberMetadataValue.decode_versioned(value)
        classic = v.classic_member_metadata
        out.update(
            instance_id=v.instance_id,
            rack_id=v.rack_id,
            client_id=v.client_id,
            client_host=v.client_host,
            subscribed_topics=list(v.subscribed_topic_names),
            subscribed_topic_regex=v.subscribed_topic_regex or None,  # Kafka writes "" for none
            rebalance_timeout_ms=v.rebalance_timeout_ms,
            server_assignor=v.server_assignor,
            classic_session_timeout_ms=None if classic is None else classic.session_timeout_ms,
        )
    return out


def _cg_target_metadata(key: bytes, value: bytes | None) -> dict[str, Any]:
    k = ConsumerGroupTargetAssignmentMetadataKey.decode(key, 6)
    out: dict[str, Any] = {"group": k.group_id}
    if value is not None:
        v, _ = ConsumerGroupTargetAssignmentMetadataValue.decode_versioned(value)
        out.update(
            assignment_epoch=v.assignment_epoch, assignment_timestamp=_ms_or_none(v.assignment_timestamp)
        )
    return out


def _cg_target_member(key: bytes, value: bytes | None) -> dict[str, Any]:
    k = ConsumerGroupTargetAssignmentMemberKey.decode(key, 7)
    out: dict[str, Any] = {"group": k.group_id, "member_id": k.member_id}
    if value is not None:
        v, _ = ConsumerGroupTargetAssignmentMemberValue.decode_versioned(value)
        out["target_partitions"] = _id_partitions(v.topic_partitions)
    return out


def _cg_current_assignment(key: bytes, value: bytes | None) -> dict[str, Any]:
    k = ConsumerGroupCurrentMemberAssignmentKey.decode(key, 8)
    out: dict[str, Any] = {"group": k.group_id, "member_id": k.member_id}
    if value is not None:
        v, _ = ConsumerGroupCurrentMemberAssignmentValue.decode_versioned(value)
        out.update(
            member_epoch=v.member_epoch,
            previous_member_epoch=v.previous_member_epoch,
            member_state=v.state,
            assigned_partitions=_id_partition_epochs(v.assigned_partitions, v.member_epoch),
            partitions_pending_revocation=_id_partition_epochs(
                v.partitions_pending_revocation, v.member_epoch
            ),
        )
    return out


def _cg_regular_expression(key: bytes, value: bytes | None) -> dict[str, Any]:
    # Kafka 4.0+ keys: the record type, then the key struct at version 0.
    k = ConsumerGroupRegularExpressionKey.decode(key, 0)
    out: dict[str, Any] = {"group": k.group_id, "regex": k.regular_expression}
    if value is not None:
        v, _ = ConsumerGroupRegularExpressionValue.decode_versioned(value)
        out.update(
            resolved_topics=list(v.topics), regex_version=v.version, regex_timestamp=_ms_or_none(v.timestamp)
        )
    return out


_CONSUMER_GROUP_DECODERS: Final[dict[int, Callable[[bytes, bytes | None], dict[str, Any]]]] = {
    3: _cg_metadata,
    4: _cg_partition_metadata,
    5: _cg_member_metadata,
    6: _cg_target_metadata,
    7: _cg_target_member,
    8: _cg_current_assignment,
    16: _cg_regular_expression,
}


def decode_consumer_group_records(batch: Any, types: tuple[int, ...] = CONSUMER_GROUP_RECORD_TYPES) -> Any:
    """KIP-848 consumer groups' records of the given key types (default: all, 3–8 and 16) and their
    tombstones, of a batch of raw ``__consumer_offsets`` records, as a ``pyarrow.RecordBatch`` with
    :data:`CONSUMER_GROUP_ARROW_SCHEMA`."""
    rtype = record_types(_column(batch, "key"))
    rows = np.flatnonzero(np.isin(rtype, np.asarray(types, np.int64)))
    if rows.size == 0:
        return _empty(CONSUMER_GROUP_ARROW_SCHEMA)
    records: list[dict[str, Any]] = []
    for row, record_type in zip(batch.take(pa.array(rows)).to_pylist(), rtype[rows].tolist(), strict=True):
        try:
            rec = _CONSUMER_GROUP_DECODERS[record_type](row["key"][2:], row["value"])
        except DecodeError as exc:
            raise DecodeError(f"__consumer_offsets-{row['partition']} offset {row['offset']}: {exc}") from exc
        rec.update(
            record_type=record_type,
            deleted=row["value"] is None,
            record_partition=row["partition"],
            record_offset=row["offset"],
            record_timestamp=row["timestamp"],
        )
        records.append(rec)
    return _from_records(records, CONSUMER_GROUP_ARROW_SCHEMA)


def _from_records(records: list[dict[str, Any]], schema: Any) -> Any:
    columns = []
    for f in schema:
        values = [r.get(f.name) for r in records]
        if f.type == TIMESTAMP and f.name != "record_timestamp":
            columns.append(pa.array(values, pa.int64()).cast(TIMESTAMP))
        else:
            columns.append(pa.array(values, f.type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def decode_consumer_group_metadata(batch: Any) -> Any:
    """The ConsumerGroupMetadata records (key type 3) alone, as :func:`decode_consumer_group_records`."""
    return decode_consumer_group_records(batch, (CONSUMER_GROUP_METADATA_TYPE,))


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
        key = key_ids(parts)
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
    """``mapInArrow`` function: raw ``__consumer_offsets`` records → KIP-848 consumer groups' records."""
    for batch in batches:
        out = decode_consumer_group_records(batch)
        if out.num_rows:
            yield out
