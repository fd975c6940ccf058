"""Decoding __consumer_offsets records: every key/value version, tombstones, tagged fields, the consumer
embedded protocol inside group metadata; the vectorised path against regroup's generated codecs."""

from __future__ import annotations

import itertools
import random
from typing import Any

import pytest

from regroup.protocol.primitives import DecodeError
from regroup.protocol.record_batch import Record, build_batch

pa = pytest.importorskip("pyarrow")

from regroup_pipeline import decode  # noqa: E402  # after the importorskip
from regroup_pipeline.commitscan import scan_commit_pairs  # noqa: E402
from regroup_pipeline.logformat import decode_records, index_batches, records_to_arrow  # noqa: E402
from regroup_pipeline.synthetic import (  # noqa: E402
    MemberSpec,
    group_metadata,
    group_tombstone,
    offset_commit,
    offset_tombstone,
)

pytestmark = pytest.mark.spark

TS = 1_795_000_000_000


def raw_batch(records: list[tuple[bytes, bytes | None]], partition: int = 3) -> Any:
    recs = [Record(i, TS + i, k, v) for i, (k, v) in enumerate(records)]
    data = build_batch(recs, base_offset=0)
    return records_to_arrow(decode_records(data, index_batches(data)), "__consumer_offsets", partition)


def test_every_offset_commit_version_and_tombstones() -> None:
    rows = []
    for key_version in (0, 1):
        for value_version in (0, 1, 2, 3, 4):
            rows.append(
                offset_commit(
                    f"g{key_version}{value_version}",
                    "topic-é",
                    value_version,
                    100 + value_version,
                    commit_ts=TS,
                    key_version=key_version,
                    value_version=value_version,
                    metadata="meta" * value_version,
                    leader_epoch=7,
                    expire_ts=TS + 5 if value_version == 1 else -1,
                )
            )
    rows.append(offset_tombstone("gone", "t", 0))
    rows.append(group_metadata("other", 1, [MemberSpec("m", ["t"], {"t": [0]})], state_ts=TS))
    out = decode.decode_offset_commits(raw_batch(rows)).to_pylist()
    assert len(out) == 11
    for r in out[:10]:
        kv, vv = int(r["group"][1]), int(r["group"][2])
        assert (r["key_version"], r["value_version"]) == (kv, vv)
        assert (r["topic"], r["partition"], r["committed_offset"]) == ("topic-é", vv, 100 + vv)
        assert r["metadata"] == "meta" * vv
        assert r["leader_epoch"] == (7 if vv >= 3 else -1)
        assert int(r["commit_timestamp"].timestamp() * 1000) == TS
        assert (r["expire_timestamp"] is not None) == (vv == 1)
        assert not r["deleted"]
        assert r["record_partition"] == 3
    gone = out[10]
    assert gone["deleted"]
    assert gone["committed_offset"] is None
    assert gone["value_version"] is None


def test_v4_values_with_tagged_fields_take_the_fast_path() -> None:
    key, value = offset_commit("g", "t", 0, 42, commit_ts=TS, value_version=4)
    # Kafka 4.x appends the topic id as tag 0 (16 bytes) to OffsetCommitValue v4.
    tagged = value[:-1] + bytes([1, 0, 16]) + bytes(range(16))
    batch = raw_batch([(key, tagged), (key, value)])
    fast = scan_commit_pairs(batch)
    assert fast is not None
    assert fast.column("committed_offset").to_pylist() == [42, 42]
    assert fast.to_pylist() == decode._offset_commits_codec(batch).to_pylist()


def test_unusual_batches_fall_back_to_the_codecs_and_garbage_is_an_error() -> None:
    key, value = offset_commit("g", "t", 0, 1, commit_ts=TS, value_version=3)
    trailing = value + b"\x00"  # a v3 value with a trailing byte: not the fixed layout
    with pytest.raises(DecodeError):
        decode.decode_offset_commits(raw_batch([(key, trailing)]))
    unknown = b"\x00\x09" + value[2:]
    with pytest.raises(DecodeError, match="offset 0"):
        decode.decode_offset_commits(raw_batch([(key, unknown)]))


def test_fast_path_equals_codec_path_on_random_records() -> None:
    rng = random.Random(5)
    rows: list[tuple[bytes, bytes | None]] = []
    for i in range(500):
        if rng.random() < 0.1:
            rows.append(offset_tombstone(f"g{rng.randint(0, 9)}", "t", i % 7))
            continue
        rows.append(
            offset_commit(
                f"group-{rng.randint(0, 50)}",
                rng.choice(["a", "topic", "ü" * 5]),
                rng.randint(0, 100),
                rng.randint(0, 2**40),
                commit_ts=TS + rng.randint(0, 10**6),
                key_version=rng.choice([0, 1]),
                value_version=rng.choice([0, 1, 2, 3, 4]),
                metadata="x" * rng.choice([0, 1, 200, 5000]),
                leader_epoch=rng.randint(-1, 5),
                expire_ts=TS + 1,
            )
        )
    batch = raw_batch(rows)
    fast = scan_commit_pairs(batch)
    assert fast is not None
    assert fast.to_pylist() == decode._offset_commits_codec(batch).to_pylist()


def test_group_metadata_with_the_consumer_protocol_inside() -> None:
    members = [
        MemberSpec(
            "m1", ["b", "a"], {"a": [0, 2], "b": [1]}, group_instance_id="static-1", subscription_version=3
        ),
        MemberSpec("m2", ["a"], {"a": [1]}, subscription_version=0, assignment_version=3),
        MemberSpec("m3", ["a"], {}, assignment_bytes=b""),
    ]
    rows = [
        group_metadata("g", 0, [], state_ts=TS, protocol_type="", value_version=3),
        group_metadata("g", 5, members, state_ts=TS, value_version=3),
        group_metadata("g", 6, [], state_ts=TS + 9, value_version=4),
        group_metadata("old", 2, members[:1], value_version=0),
        group_metadata(
            "connect", 1, [MemberSpec("w", [], subscription=b"\x00\x01opaque")], protocol_type="connect"
        ),
        group_metadata("broken", 1, [MemberSpec("w", [], subscription=b"\xff")]),
        group_tombstone("g"),
        offset_commit("g", "a", 0, 1, commit_ts=TS),
    ]
    out = decode.decode_group_metadata(raw_batch(rows)).to_pylist()
    assert [r["group"] for r in out] == ["g", "g", "g", "old", "connect", "broken", "g"]
    created, stable, empty, old, connect, broken, tomb = out
    assert created["protocol_type"] == ""
    assert created["protocol"] is None
    assert created["members"] == []
    assert stable["generation"] == 5
    assert stable["leader"] == "m1"
    assert stable["value_version"] == 3
    m1, m2, m3 = stable["members"]
    assert m1["group_instance_id"] == "static-1"
    assert m1["subscribed_topics"] == ["a", "b"]
    assert m1["subscription_version"] == 3
    assert m1["owned_partitions"] == [{"topic": "a", "partitions": [0, 2]}, {"topic": "b", "partitions": [1]}]
    assert m1["assignment"] == [{"topic": "a", "partitions": [0, 2]}, {"topic": "b", "partitions": [1]}]
    assert m2["subscription_version"] == 0
    assert m2["assignment_version"] == 3
    assert m3["assignment"] == []
    assert m3["assignment_version"] is None
    assert empty["members"] == []
    assert empty["value_version"] == 4
    assert int(empty["current_state_timestamp"].timestamp() * 1000) == TS + 9
    assert old["current_state_timestamp"] is None
    assert old["members"][0]["rebalance_timeout_ms"] == -1
    assert connect["members"][0]["subscription_valid"] is None
    assert broken["members"][0]["subscription_valid"] is False
    assert tomb["deleted"]
    assert tomb["members"] is None


def _history_rows(batches: list[Any]) -> list[dict[str, Any]]:
    history = decode.CommitHistory()
    out: list[Any] = []
    for batch in batches:
        out.append(history.feed(batch))
    out.append(history.finish())
    rows = [r for table in out if table is not None for r in table.to_pylist()]
    return sorted(rows, key=lambda r: r["record_offset"])


@pytest.mark.parametrize("seed", range(4))
def test_commit_history_matches_the_next_record_of_each_key_whatever_the_chunks(seed: int) -> None:
    rng = random.Random(seed)
    rows: list[tuple[bytes, bytes | None]] = []
    for i in range(600):
        group, topic, partition = f"g{rng.randint(0, 6)}", rng.choice(["a", "b"]), rng.randint(0, 3)
        if rng.random() < 0.1:
            rows.append(offset_tombstone(group, topic, partition))
        else:
            rows.append(offset_commit(group, topic, partition, i, commit_ts=TS + i))
    commits = decode.decode_offset_commits(raw_batch(rows))
    # The same key can sit at very different places: chunks of random sizes, some of one row.
    cuts = sorted(
        {0, commits.num_rows, *(rng.randint(0, commits.num_rows) for _ in range(rng.randint(0, 30)))}
    )
    chunks = [commits.slice(a, b - a) for a, b in itertools.pairwise(cuts)]

    got = _history_rows(chunks)

    expected = commits.to_pylist()
    following: dict[tuple[str, str, int], Any] = {}
    for row in reversed(expected):
        key = (row["group"], row["topic"], row["partition"])
        nxt = following.get(key)
        row["valid_until"] = nxt["record_timestamp"] if nxt is not None else None
        row["is_current"] = nxt is None
        following[key] = row
    assert got == expected
    assert decode.HISTORY_ARROW_SCHEMA.names == list(got[0])
    assert sum(r["is_current"] for r in got) == len(following)


def test_consumer_group_records_of_every_type_and_their_tombstones() -> None:
    """KIP-848 records as regroup's coordinator builds them (byte-identical to Kafka 4.3's)."""
    import uuid

    from regroup.group import records as cr
    from regroup.group.consumer_group import MemberAssignment, MemberState, MemberSubscription
    from regroup.protocol.records.consumer_group_partition_metadata import (
        ConsumerGroupPartitionMetadataKey,
        ConsumerGroupPartitionMetadataValue,
        TopicMetadata,
    )

    t1, t2 = uuid.UUID(int=0x1234), uuid.UUID(int=0x5678)
    sub = MemberSubscription(
        instance_id="i-1",
        rack_id="r1",
        client_id="c1",
        client_host="/10.0.0.1",
        subscribed_topic_names=("b", "a"),
        subscribed_topic_regex="x.*",
        rebalance_timeout_ms=30_000,
        server_assignor="uniform",
    )
    assignment = MemberAssignment(
        member_epoch=7,
        previous_member_epoch=6,
        state=MemberState.UNREVOKED_PARTITIONS,
        assigned=frozenset({(t1, 0), (t1, 2)}),
        pending_revocation=frozenset({(t2, 1)}),
        assignment_epochs={(t1, 0): 5},
    )
    partition_metadata = (
        ConsumerGroupPartitionMetadataKey(group_id="g").encode_versioned(4),
        ConsumerGroupPartitionMetadataValue(
            topics=[TopicMetadata(topic_id=t1, topic_name="a", num_partitions=3)]
        ).encode_versioned(0),
    )
    built = [
        cr.consumer_group_metadata_record("g", 9, metadata_hash=42),
        cr.member_subscription_record("g", "m1", sub),
        cr.target_metadata_record("g", 9, timestamp_ms=TS),
        cr.target_member_record("g", "m1", frozenset({(t1, 1)})),
        cr.current_assignment_record("g", "m1", assignment),
        cr.regular_expression_record("g", "x.*", ["x2", "x1"], 3, TS),
        cr.current_assignment_tombstone("g", "m1"),
        cr.member_subscription_tombstone("g", "m1"),
        cr.target_member_tombstone("g", "m1"),
        cr.target_metadata_tombstone("g"),
        cr.regular_expression_tombstone("g", "x.*"),
        cr.partition_metadata_tombstone("g"),
        cr.consumer_group_metadata_tombstone("g"),
    ]
    raw = [(r.key, r.value) for r in built]
    raw.insert(1, partition_metadata)
    raw.insert(0, offset_commit("g", "a", 0, 5, commit_ts=TS))  # other types are left out
    raw.append(group_metadata("classic", 1, [MemberSpec("m", ["t"], {"t": [0]})], state_ts=TS))
    out = decode.decode_consumer_group_records(raw_batch(raw))
    assert out.schema == decode.CONSUMER_GROUP_ARROW_SCHEMA
    rows = out.to_pylist()
    assert [(r["record_type"], r["member_id"], r["deleted"], r["record_offset"]) for r in rows] == [
        (3, None, False, 1),
        (4, None, False, 2),
        (5, "m1", False, 3),
        (6, None, False, 4),
        (7, "m1", False, 5),
        (8, "m1", False, 6),
        (16, None, False, 7),
        (8, "m1", True, 8),
        (5, "m1", True, 9),
        (7, "m1", True, 10),
        (6, None, True, 11),
        (16, None, True, 12),
        (4, None, True, 13),
        (3, None, True, 14),
    ]
    assert {r["group"] for r in rows} == {"g"}
    meta, pmeta, member, target, target_member, current, regex = rows[:7]
    assert (meta["epoch"], meta["metadata_hash"]) == (9, 42)
    tid1, tid2 = decode.topic_id_string(t1), decode.topic_id_string(t2)
    assert tid1 == "AAAAAAAAAAAAAAAAAAASNA"
    assert pmeta["topic_metadata"] == [{"topic_id": tid1, "topic": "a", "num_partitions": 3}]
    assert {k: member[k] for k in ("instance_id", "rack_id", "client_id", "client_host")} == {
        "instance_id": "i-1",
        "rack_id": "r1",
        "client_id": "c1",
        "client_host": "/10.0.0.1",
    }
    assert member["subscribed_topics"] == ["a", "b"]
    assert (member["subscribed_topic_regex"], member["rebalance_timeout_ms"], member["server_assignor"]) == (
        "x.*",
        30_000,
        "uniform",
    )
    assert member["classic_session_timeout_ms"] is None
    assert target["assignment_epoch"] == 9
    assert int(target["assignment_timestamp"].timestamp() * 1000) == TS
    assert target_member["target_partitions"] == [{"topic_id": tid1, "partitions": [1]}]
    assert (current["member_epoch"], current["previous_member_epoch"], current["member_state"]) == (7, 6, 1)
    assert current["assigned_partitions"] == [
        {"topic_id": tid1, "partitions": [0, 2], "assignment_epochs": [5, 7]}
    ]
    assert current["partitions_pending_revocation"] == [
        {"topic_id": tid2, "partitions": [1], "assignment_epochs": [7]}
    ]
    assert (regex["regex"], regex["resolved_topics"], regex["regex_version"]) == ("x.*", ["x1", "x2"], 3)
    # A tombstone keeps its key and nulls every value column.
    tomb = rows[7]
    assert (tomb["member_epoch"], tomb["assigned_partitions"]) == (None, None)
    assert rows[11]["regex"] == "x.*"
    # Type 3 alone (the former decode mode), and garbage is an error naming the record.
    assert [r["record_type"] for r in decode.decode_consumer_group_metadata(raw_batch(raw)).to_pylist()] == [
        3,
        3,
    ]
    with pytest.raises(DecodeError, match="__consumer_offsets-3 offset 0"):
        decode.decode_consumer_group_records(raw_batch([(built[4].key, b"\x00\x00\x01")]))
