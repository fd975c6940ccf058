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
