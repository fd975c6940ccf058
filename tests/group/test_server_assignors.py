"""The server-side assignors of consumer groups: ``uniform`` (balanced, sticky; homogeneous and heterogeneous
subscriptions) and ``range`` (contiguous ranges, static members first). Kafka's exact output is internal, so
these check the invariants of docs/design/consumer-group-semantics.md §3.2."""

from __future__ import annotations

from collections.abc import Mapping

from hypothesis import given, settings
from hypothesis import strategies as st

from regroup.group.consumer_group import Partitions
from regroup.group.server_assignors import MemberSpec, RangeAssignor, UniformAssignor
from regroup.group.topics_image import TopicsImage

from .harness import image, topic_id

T = topic_id("t")
U = topic_id("u")


def spec(
    member_id: str, *topics: str, current: Partitions = frozenset(), instance_id: str | None = None
) -> MemberSpec:
    return MemberSpec(member_id, instance_id, None, frozenset(topic_id(t) for t in topics), current)


def check_complete(
    specs: Mapping[str, MemberSpec], topics: TopicsImage, result: Mapping[str, Partitions]
) -> None:
    """Every partition of a subscribed existing topic goes to exactly one of its subscribers."""
    seen: set[tuple[object, int]] = set()
    for member_id, partitions in result.items():
        for tp in partitions:
            assert tp[0] in specs[member_id].subscribed_topic_ids
            assert tp not in seen
            seen.add(tp)
    expected = {
        (t.topic_id, p)
        for t in topics.topics()
        if any(t.topic_id in s.subscribed_topic_ids for s in specs.values())
        for p in range(t.num_partitions)
    }
    assert seen == expected


def test_uniform_two_members_then_a_third_moves_one_partition() -> None:
    topics = image({"t": 4})
    first = UniformAssignor().assign({"a": spec("a", "t"), "b": spec("b", "t")}, topics)
    assert sorted(len(p) for p in first.values()) == [2, 2]
    specs = {m: spec(m, "t", current=first.get(m, frozenset())) for m in ("a", "b", "c")}
    second = UniformAssignor().assign(specs, topics)
    check_complete(specs, topics, second)
    assert sorted(len(p) for p in second.values()) == [1, 1, 2]
    moved = sum(len(first[m] - second[m]) for m in ("a", "b"))
    assert moved == 1


def test_uniform_drops_unsubscribed_topics_and_ignores_missing_ones() -> None:
    topics = image({"t": 2, "u": 2})
    current = frozenset({(T, 0), (T, 1), (U, 0), (U, 1)})
    specs = {"a": spec("a", "u", "missing", current=current)}
    result = UniformAssignor().assign(specs, topics)
    assert result == {"a": frozenset({(U, 0), (U, 1)})}


def test_uniform_heterogeneous_gives_each_partition_to_a_subscriber() -> None:
    topics = image({"t": 3, "u": 3})
    specs = {"a": spec("a", "t"), "b": spec("b", "t", "u"), "c": spec("c", "u")}
    result = UniformAssignor().assign(specs, topics)
    check_complete(specs, topics, result)
    assert sorted(len(p) for p in result.values()) == [2, 2, 2]


def test_range_contiguous_ranges_static_members_first() -> None:
    topics = image({"t": 5, "u": 2})
    specs = {
        "m-b": spec("m-b", "t", "u"),
        "m-a": spec("m-a", "t"),
        "m-z": spec("m-z", "t", "u", instance_id="i0"),
    }
    result = RangeAssignor().assign(specs, topics)
    check_complete(specs, topics, result)
    # t: order m-z (static), m-a, m-b → [0,1] [2,3] [4]
    assert result["m-z"] == {(T, 0), (T, 1), (U, 0)}
    assert result["m-a"] == {(T, 2), (T, 3)}
    assert result["m-b"] == {(T, 4), (U, 1)}


_TOPICS = {"t": 5, "u": 3, "v": 1}
_subscriptions = st.lists(st.sampled_from(sorted(_TOPICS)), unique=True, max_size=3)


@settings(max_examples=150, deadline=None)
@given(
    subs=st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), _subscriptions, min_size=1),
    homogeneous=st.booleans(),
    seed_current=st.booleans(),
)
def test_uniform_is_complete_balanced_and_stable(
    subs: dict[str, list[str]], homogeneous: bool, seed_current: bool
) -> None:
    topics = image(_TOPICS)
    if homogeneous:
        first = next(iter(subs.values()))
        subs = dict.fromkeys(subs, first)
    specs = {m: spec(m, *ts) for m, ts in subs.items()}
    result = UniformAssignor().assign(specs, topics)
    check_complete(specs, topics, result)
    if homogeneous:
        sizes = [len(p) for p in result.values()]
        assert max(sizes) - min(sizes) <= 1
    if seed_current:
        # nothing changed: the assignment stays as it is (stickiness)
        again = UniformAssignor().assign({m: spec(m, *subs[m], current=result[m]) for m in subs}, topics)
        assert again == result


@settings(max_examples=100, deadline=None)
@given(subs=st.dictionaries(st.sampled_from(["a", "b", "c"]), _subscriptions, min_size=1))
def test_range_is_complete(subs: dict[str, list[str]]) -> None:
    topics = image(_TOPICS)
    specs = {m: spec(m, *ts) for m, ts in subs.items()}
    check_complete(specs, topics, RangeAssignor().assign(specs, topics))
