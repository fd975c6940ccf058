"""The ``__group_events`` record format and the timeline assembled from it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from regroup.group.config import partition_for
from regroup.protocol.group_events import (
    FORMAT_VERSION,
    EventFormatError,
    assemble_timeline,
    decode_event,
    encode_event,
    events_partition,
)

CAUSE = {"kind": "member_joined", "description": "new member m1 joined", "member_id": "m1"}


def completed(generation: int, started: int, done: int, members: list[str], **extra: Any) -> dict[str, Any]:
    return {
        "type": "generation_completed",
        "group_id": "g",
        "time_ms": done,
        "generation_id": generation,
        "protocol_type": "consumer",
        "protocol_name": "range" if members else None,
        "leader_id": members[0] if members else None,
        "members": [{"member_id": m, "group_instance_id": None} for m in members],
        "cause": CAUSE,
        "events": [],
        "waited_for": [],
        "joined": [],
        "left": [],
        "rebalance_started_ms": started,
        "join_completed_ms": done,
        "join_phase_ms": done - started,
        **extra,
    }


def stable(generation: int, done: int, at: int) -> dict[str, Any]:
    return {
        "type": "generation_stable",
        "group_id": "g",
        "time_ms": at,
        "generation_id": generation,
        "join_completed_ms": done,
        "stable_ms": at,
        "sync_phase_ms": at - done,
    }


def started(generation: int, at: int, awaiting: list[tuple[str, int | None]]) -> dict[str, Any]:
    return {
        "type": "rebalance_started",
        "group_id": "g",
        "time_ms": at,
        "generation_id": generation,
        "cause": CAUSE,
        "events": [],
        "rebalance_started_ms": at,
        "join_deadline_ms": at + 30_000,
        "awaiting": [
            {"member_id": m, "group_instance_id": None, "deadline_ms": d, "evicted_by": "session timeout"}
            for m, d in awaiting
        ],
    }


def roundtrip(event: dict[str, Any]) -> dict[str, Any]:
    key, value = encode_event(event)
    decoded = decode_event(key, value)
    assert decoded is not None
    return decoded


def test_encode_decode_round_trip_adds_the_version() -> None:
    event = completed(3, 100, 150, ["m1", "m2"])
    key, value = encode_event(event)
    assert key == b"g"
    assert b" " not in value.replace(b"new member m1 joined", b"")  # compact JSON
    assert json.loads(value)["version"] == FORMAT_VERSION
    assert decode_event(key, value) == {"version": FORMAT_VERSION, **event}


@given(st.text(min_size=1), st.integers(min_value=0, max_value=2**62))
def test_round_trip_of_any_group_id(group_id: str, time_ms: int) -> None:
    event = {**stable(1, time_ms, time_ms), "group_id": group_id}
    assert roundtrip(event)["group_id"] == group_id


def test_newer_versions_and_unknown_types_are_skipped_not_errors() -> None:
    key, value = encode_event(stable(1, 10, 20))
    doc = json.loads(value)
    assert decode_event(key, json.dumps({**doc, "version": FORMAT_VERSION + 1}).encode()) is None
    assert decode_event(key, json.dumps({**doc, "type": "from_the_future"}).encode()) is None


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (b"g", None),
        (b"g", b"\xff"),
        (b"g", b"[1]"),
        (b"g", b'{"type": "generation_stable", "group_id": "g"}'),
        (b"other", encode_event(stable(1, 10, 20))[1]),
        (b"g", json.dumps({**stable(1, 10, 20), "version": 1, "time_ms": "soon"}).encode()),
    ],
)
def test_malformed_records_are_rejected(key: bytes, value: bytes | None) -> None:
    with pytest.raises(EventFormatError):
        decode_event(key, value)


def test_encode_refuses_what_is_not_an_event() -> None:
    with pytest.raises(EventFormatError):
        encode_event({"type": "nonsense", "group_id": "g"})


@given(st.text(), st.integers(min_value=1, max_value=200))
def test_events_partition_is_the_coordinator_partition(group_id: str, partitions: int) -> None:
    assert events_partition(group_id, partitions) == partition_for(group_id, partitions)


def test_timeline_joins_stable_events_dedups_and_keeps_in_progress() -> None:
    events = [
        started(0, 100, []),
        completed(1, 100, 110, ["a"]),
        stable(1, 110, 115),
        completed(1, 100, 110, ["a"]),  # written twice (at least once)
        {
            "type": "static_member_replaced",
            "group_id": "g",
            "time_ms": 200,
            "generation_id": 1,
            "group_instance_id": "i",
            "old_member_id": "a",
            "new_member_id": "a2",
            "reason": None,
        },
        {**stable(7, 1, 2), "group_id": "another group"},
        started(1, 300, [("a2", 5300), ("b", None)]),
    ]
    view = assemble_timeline("g", [roundtrip(e) for e in events], now_ms=1300)
    (gen,) = view["generations"]
    assert gen["generation_id"] == 1
    assert (gen["join_phase_ms"], gen["stable_ms"], gen["sync_phase_ms"]) == (10, 115, 5)
    assert gen["static_replacements"] == [
        {
            "time_ms": 200,
            "group_instance_id": "i",
            "old_member_id": "a",
            "new_member_id": "a2",
            "reason": None,
        }
    ]
    progress = view["in_progress"]
    assert progress["elapsed_ms"] == 1000
    assert [(m["member_id"], m["time_left_ms"]) for m in progress["awaiting"]] == [("a2", 4000), ("b", None)]


def test_a_completed_generation_ends_the_rebalance_in_progress_and_limit_keeps_the_last() -> None:
    events = [
        started(0, 100, [("a", 200)]),
        completed(1, 100, 150, ["a"]),
        stable(1, 150, 160),
        completed(2, 400, 400, []),
        completed(3, 500, 520, ["b"]),
    ]
    view = assemble_timeline("g", events, now_ms=1000, limit=2)
    assert view["in_progress"] is None
    assert [g["generation_id"] for g in view["generations"]] == [2, 3]
    assert view["generations"][0]["stable_ms"] is None
