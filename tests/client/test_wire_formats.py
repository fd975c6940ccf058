"""Byte layouts shared with Java and librdkafka members, and assignor results fixed by Kafka's own tests."""

from __future__ import annotations

import struct

import pytest

from regroup.client.assignors import (
    CooperativeStickyAssignor,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
    create_assignor,
    decode_sticky_user_data,
    encode_sticky_user_data,
)
from regroup.client.assignors.sticky import MemberData
from regroup.client.consumer_protocol import (
    Assignment,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from regroup.client.types import TopicPartition, java_order
from regroup.protocol.primitives import DecodeError


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def s(v: str) -> bytes:
    return i16(len(v.encode())) + v.encode()


def tp(topic: str, partition: int) -> TopicPartition:
    return TopicPartition(topic, partition)


# ------------------------------------------------------------------------------------- consumer protocol


def test_subscription_v3_layout_matches_java() -> None:
    sub = Subscription(
        topics=("t2", "t1"),
        user_data=None,
        owned_partitions=(tp("t1", 1), tp("t1", 0)),
        generation_id=5,
        rack_id="r1",
    )
    expected = (
        i16(3)
        + i32(2) + s("t1") + s("t2")  # topics, sorted
        + i32(-1)  # null user data
        + i32(1) + s("t1") + i32(2) + i32(0) + i32(1)  # owned partitions, sorted
        + i32(5)  # generation
        + s("r1")  # rack
    )  # fmt: skip
    assert encode_subscription(sub) == expected
    assert decode_subscription(expected) == Subscription(
        ("t1", "t2"), None, (tp("t1", 0), tp("t1", 1)), 5, "r1"
    )


def test_assignment_layout_matches_java() -> None:
    a = Assignment((tp("b", 2), tp("a", 0), tp("b", 1)), user_data=b"\x01")
    expected = (
        i16(3) + i32(2) + s("b") + i32(2) + i32(2) + i32(1) + s("a") + i32(1) + i32(0) + i32(1) + b"\x01"
    )
    assert encode_assignment(a) == expected
    assert decode_assignment(expected) == Assignment((tp("b", 2), tp("b", 1), tp("a", 0)), b"\x01")


def test_older_and_newer_subscription_versions_decode() -> None:
    v0 = i16(0) + i32(1) + s("t") + i32(3) + b"abc"
    assert decode_subscription(v0) == Subscription(("t",), b"abc")
    v1 = i16(1) + i32(1) + s("t") + i32(-1) + i32(1) + s("t") + i32(1) + i32(4)
    assert decode_subscription(v1) == Subscription(("t",), None, (tp("t", 4),))
    # A future version: parsed with the v3 schema, appended fields ignored.
    v9 = encode_subscription(Subscription(("t",), generation_id=2))[2:]
    assert decode_subscription(i16(9) + v9 + b"future") == Subscription(("t",), generation_id=2)
    with pytest.raises(DecodeError):
        decode_subscription(i16(-1) + v9)


def test_assignment_without_version_is_rejected() -> None:
    with pytest.raises(DecodeError):
        decode_assignment(b"")


# ------------------------------------------------------------------------------------------ user data


def test_sticky_user_data_v1_layout() -> None:
    data = encode_sticky_user_data([tp("b", 3), tp("a", 1), tp("b", 0)], 7)
    expected = i32(2) + s("a") + i32(1) + i32(1) + s("b") + i32(2) + i32(3) + i32(0) + i32(7)
    assert data == expected
    assert decode_sticky_user_data(data) == MemberData((tp("a", 1), tp("b", 3), tp("b", 0)), 7)


def test_sticky_user_data_falls_back_like_java() -> None:
    v0 = i32(1) + s("a") + i32(1) + i32(2)
    assert decode_sticky_user_data(v0) == MemberData((tp("a", 2),), None)
    assert decode_sticky_user_data(None) == MemberData((), None)
    assert decode_sticky_user_data(b"") == MemberData((), None)
    assert decode_sticky_user_data(b"\xff\xff") == MemberData((), -1)


def test_sticky_subscription_user_data_round_trip() -> None:
    assignor = StickyAssignor()
    assert assignor.subscription_user_data(frozenset({"a"})) is None
    assignor.on_assignment(Assignment((tp("a", 0),)), 4)
    data = assignor.subscription_user_data(frozenset({"a"}))
    assert assignor.member_data(Subscription(("a",), user_data=data)) == MemberData((tp("a", 0),), 4)


def test_cooperative_user_data_is_the_generation() -> None:
    assignor = CooperativeStickyAssignor()
    assert assignor.subscription_user_data(frozenset()) == i32(-1)
    assignor.on_assignment(Assignment(), 9)
    assert assignor.subscription_user_data(frozenset()) == i32(9)
    # Subscription v2+ carries the generation itself; older members put it in the user data.
    owned = (tp("a", 1),)
    assert assignor.member_data(Subscription(("a",), i32(3), owned, 5)).generation == 5
    assert assignor.member_data(Subscription(("a",), i32(3), owned)).generation == 3
    assert assignor.member_data(Subscription(("a",), None, owned)).generation is None
    assert assignor.member_data(Subscription(("a",), b"\x01", owned)).generation == -1


# ------------------------------------------------------------------------- results from Kafka's tests


def _static(member: str, instance: str, topics: tuple[str, ...]) -> Subscription:
    return Subscription(topics, group_instance_id=instance)


def _parts(result: dict[str, Assignment]) -> dict[str, list[TopicPartition]]:
    return {m: sorted(a.partitions, key=TopicPartition.sort_key) for m, a in result.items()}


def test_range_orders_static_members_first() -> None:
    # RangeAssignorTest.testStaticMemberRangeAssignmentPersistent
    topics = ("topic1", "topic2")
    subs = {
        "consumer1": _static("consumer1", "instance1", topics),
        "consumer2": _static("consumer2", "instance2", topics),
        "consumer3": _static("consumer3", "instance3", topics),
        "consumer4": Subscription(topics),
    }
    expected = {
        "consumer1": [tp("topic1", 0), tp("topic1", 1), tp("topic2", 0)],
        "consumer2": [tp("topic1", 2), tp("topic2", 1)],
        "consumer3": [tp("topic1", 3), tp("topic2", 2)],
        "consumer4": [tp("topic1", 4), tp("topic2", 3)],
    }
    cluster = {"topic1": 5, "topic2": 4}
    assert _parts(RangeAssignor().assign(cluster, subs)) == expected
    del subs["consumer4"]
    subs["consumer5"] = Subscription(topics)
    expected["consumer5"] = expected.pop("consumer4")
    assert _parts(RangeAssignor().assign(cluster, subs)) == expected


def test_range_static_ordering_is_by_instance_id_not_member_id() -> None:
    topics = ("t",)
    subs = {
        "a-member": _static("a-member", "zz", topics),
        "b-member": _static("b-member", "aa", topics),
        "0-dynamic": Subscription(topics),
    }
    result = _parts(RangeAssignor().assign({"t": 3}, subs))
    assert result == {"b-member": [tp("t", 0)], "a-member": [tp("t", 1)], "0-dynamic": [tp("t", 2)]}


def test_roundrobin_orders_static_members_first() -> None:
    # RoundRobinAssignorTest.testStaticMemberRoundRobinAssignmentPersistent
    topics = ("topic1", "topic2")
    subs = {
        "consumer1": _static("consumer1", "instance1", topics),
        "consumer2": _static("consumer2", "instance2", topics),
        "consumer3": _static("consumer3", "instance3", topics),
        "consumer4": Subscription(topics),
    }
    expected = {
        "consumer1": [tp("topic1", 0), tp("topic2", 1)],
        "consumer2": [tp("topic1", 1), tp("topic2", 2)],
        "consumer3": [tp("topic1", 2)],
        "consumer4": [tp("topic2", 0)],
    }
    assert _parts(RoundRobinAssignor().assign({"topic1": 3, "topic2": 3}, subs)) == expected


def test_roundrobin_skips_members_not_subscribed() -> None:
    subs = {
        "c0": Subscription(("t0",)),
        "c1": Subscription(("t0", "t1")),
        "c2": Subscription(("t0", "t1", "t2")),
    }
    result = _parts(RoundRobinAssignor().assign({"t0": 1, "t1": 2, "t2": 3}, subs))
    assert result == {
        "c0": [tp("t0", 0)],
        "c1": [tp("t1", 0)],
        "c2": [tp("t1", 1), tp("t2", 0), tp("t2", 1), tp("t2", 2)],
    }


def test_topics_without_metadata_are_skipped() -> None:
    subs = {"c0": Subscription(("known", "unknown"))}
    for name in ("range", "roundrobin", "sticky", "cooperative-sticky"):
        result = create_assignor(name).assign({"known": 2, "empty": 0}, subs)
        assert result["c0"].partitions == (tp("known", 0), tp("known", 1))


def test_names_sort_as_java_strings() -> None:
    # U+FFFF sorts after U+10000 in Java (UTF-16 code units), before it in Python.
    assert sorted(["\U00010000", "\uffff"], key=java_order) == ["\U00010000", "\uffff"]


def test_unknown_assignor_name() -> None:
    with pytest.raises(ValueError, match="unknown assignor"):
        create_assignor("uniform")
