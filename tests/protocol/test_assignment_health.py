"""Assignment health: unowned and doubly assigned partitions, judged from consumer-protocol bytes."""

from __future__ import annotations

from regroup.client.consumer_protocol import Assignment, Subscription, encode_assignment, encode_subscription
from regroup.client.types import TopicPartition
from regroup.protocol.assignment_health import MemberAssignment, check_assignment, decode_member


def member(
    member_id: str, topics: list[str], partitions: list[tuple[str, int]], version: int = 3
) -> MemberAssignment:
    metadata = encode_subscription(Subscription(topics=tuple(topics)), version)
    assignment = encode_assignment(Assignment(tuple(TopicPartition(t, p) for t, p in partitions)), version)
    return decode_member(member_id, metadata, assignment)


def test_decodes_every_consumer_protocol_version() -> None:
    for version in range(4):
        m = member("a", ["t", "u"], [("t", 0), ("u", 2)], version)
        assert m == MemberAssignment("a", ("t", "u"), (("t", 0), ("u", 2)))


def test_a_full_disjoint_assignment_is_healthy() -> None:
    health = check_assignment(
        [member("a", ["t"], [("t", 0), ("t", 1)]), member("b", ["t"], [("t", 2)])], {"t": 3}
    )
    assert health.ok
    assert health.summary() == "OK"


def test_unowned_and_duplicated_partitions_are_reported() -> None:
    health = check_assignment(
        [member("a", ["t", "u"], [("t", 0), ("u", 0)]), member("b", ["t"], [("t", 0)])],
        {"t": 3, "u": 1},
    )
    assert health.unowned == (("t", 1), ("t", 2))
    assert health.duplicated == (("t", 0, ("a", "b")),)
    assert health.summary() == "UNOWNED=2,DUPLICATED=1"
    assert "t-0 by a and b" in health.describe()


def test_topics_that_do_not_exist_cannot_be_unowned() -> None:
    health = check_assignment(
        [member("a", ["t", "gone"], [("t", 0)])], lambda topic: 1 if topic == "t" else None
    )
    assert health.ok


def test_a_member_that_has_not_synced_owns_nothing() -> None:
    metadata = encode_subscription(Subscription(topics=("t",)))
    health = check_assignment([decode_member("a", metadata, b"")], {"t": 2})
    assert health.unowned == (("t", 0), ("t", 1))


def test_garbage_is_reported_not_raised() -> None:
    bad = decode_member("x", b"\x00\x03\xff", b"")
    assert bad.error is not None
    health = check_assignment([bad], {})
    assert health.undecodable == ("x",)
    assert health.summary() == "UNDECODABLE=1"
