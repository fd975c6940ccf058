"""Property tests of the built-in assignors (hypothesis)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from regroup.client.assignors import (
    CooperativeStickyAssignor,
    PartitionAssignor,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
    encode_sticky_user_data,
)
from regroup.client.consumer_protocol import Assignment, Subscription
from regroup.client.types import TopicPartition

ALL_ASSIGNORS: list[type[PartitionAssignor]] = [
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
    CooperativeStickyAssignor,
]
STICKY: list[type[StickyAssignor | CooperativeStickyAssignor]] = [StickyAssignor, CooperativeStickyAssignor]

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

topic_names = st.sampled_from(["a", "b", "c", "d", "topic-e"])
clusters = st.dictionaries(topic_names, st.integers(min_value=0, max_value=12), min_size=1, max_size=4)
member_ids = st.lists(
    st.text(alphabet="mnxyz-0123456789", min_size=1, max_size=6), min_size=1, max_size=7, unique=True
)


@st.composite
def groups(draw: st.DrawFn, equal: bool | None = None) -> tuple[dict[str, int], dict[str, Subscription]]:
    """A cluster and subscriptions: all members subscribe to the same topics, or each to a subset."""
    cluster = draw(clusters)
    topics = sorted(cluster)
    members = draw(member_ids)
    same = draw(st.booleans()) if equal is None else equal
    subs: dict[str, Subscription] = {}
    for m in members:
        chosen = topics if same else draw(st.lists(st.sampled_from(topics), min_size=1, unique=True))
        instance = draw(st.one_of(st.none(), st.sampled_from(["i1", "i2", "i3", "i4", "i5", "i6", "i7"])))
        if instance is not None and any(s.group_instance_id == instance for s in subs.values()):
            instance = None
        subs[m] = Subscription(topics=tuple(chosen), group_instance_id=instance)
    return cluster, subs


def _subscribed(cluster: Mapping[str, int], subs: Mapping[str, Subscription]) -> set[TopicPartition]:
    topics = {t for s in subs.values() for t in s.topics}
    return {TopicPartition(t, p) for t in topics for p in range(cluster.get(t, 0))}


def _check_valid(
    cluster: Mapping[str, int], subs: Mapping[str, Subscription], result: Mapping[str, Assignment]
) -> None:
    assert set(result) == set(subs)
    flat = [tp for a in result.values() for tp in a.partitions]
    assert len(flat) == len(set(flat)), "a partition is assigned twice"
    assert set(flat) == _subscribed(cluster, subs), "not every subscribed partition is assigned"
    for member, a in result.items():
        assert all(tp.topic in subs[member].topics for tp in a.partitions), "assigned an unsubscribed topic"


def _counts(result: Mapping[str, Assignment]) -> list[int]:
    return [len(a.partitions) for a in result.values()]


def _movable_imbalance(
    cluster: Mapping[str, int], subs: Mapping[str, Subscription], result: Mapping[str, Assignment]
) -> list[str]:
    """Java's balance criterion: no partition could move to a subscribed member holding 2+ fewer."""
    owner = {tp: m for m, a in result.items() for tp in a.partitions}
    problems = []
    for member, sub in subs.items():
        mine = len(result[member].partitions)
        for t in sub.topics:
            for p in range(cluster.get(t, 0)):
                other = owner[TopicPartition(t, p)]
                if other != member and mine + 1 < len(result[other].partitions):
                    problems.append(f"{t}-{p} could move from {other} to {member}")
    return problems


# ----------------------------------------------------------------------------------- every assignor


@SETTINGS
@given(group=groups())
def test_every_subscribed_partition_assigned_exactly_once(
    group: tuple[dict[str, int], dict[str, Subscription]],
) -> None:
    cluster, subs = group
    for cls in ALL_ASSIGNORS:
        _check_valid(cluster, subs, cls().assign(cluster, subs))


@SETTINGS
@given(group=groups(equal=True))
def test_equal_subscriptions_are_balanced(group: tuple[dict[str, int], dict[str, Subscription]]) -> None:
    cluster, subs = group
    for cls in (RoundRobinAssignor, StickyAssignor, CooperativeStickyAssignor):
        counts = _counts(cls().assign(cluster, subs))
        assert max(counts) - min(counts) <= 1, (cls.name, counts)
    # range balances each topic on its own.
    result = RangeAssignor().assign(cluster, subs)
    for topic in cluster:
        per_topic = [sum(1 for tp in a.partitions if tp.topic == topic) for a in result.values()]
        assert max(per_topic) - min(per_topic) <= 1


@SETTINGS
@given(group=groups(equal=False))
def test_sticky_is_balanced_whatever_the_subscriptions(
    group: tuple[dict[str, int], dict[str, Subscription]],
) -> None:
    cluster, subs = group
    for cls in STICKY:
        result = cls().assign(cluster, subs)
        assert not _movable_imbalance(cluster, subs, result), cls.name


@SETTINGS
@given(group=groups(), data=st.data())
def test_deterministic_and_independent_of_member_order(
    group: tuple[dict[str, int], dict[str, Subscription]], data: st.DataObject
) -> None:
    cluster, subs = group
    shuffled_ids = data.draw(st.permutations(list(subs)))
    shuffled = {m: subs[m] for m in shuffled_ids}
    for cls in ALL_ASSIGNORS:
        first = cls().assign(cluster, subs)
        assert first == cls().assign(cluster, subs)
        assert first == cls().assign(dict(reversed(list(cluster.items()))), shuffled)


# ---------------------------------------------------------------------------------------- stickiness


def _with_ownership(
    cls: type[StickyAssignor | CooperativeStickyAssignor],
    topics: tuple[str, ...],
    owned: Mapping[str, tuple[TopicPartition, ...]],
    generation: int,
) -> dict[str, Subscription]:
    """Subscriptions reporting previous ownership the way each assignor's members encode it."""
    subs = {}
    for member, parts in owned.items():
        if cls is StickyAssignor:
            subs[member] = Subscription(topics, user_data=encode_sticky_user_data(parts, generation))
        else:
            subs[member] = Subscription(topics, owned_partitions=parts, generation_id=generation)
    return subs


def _minimum_moves(total: int, previous_counts: list[int], members: int) -> int:
    """Fewest partitions that must change owner to reach a balanced assignment over ``members``."""
    lo, extra = divmod(total, members)
    counts = sorted(previous_counts + [0] * (members - len(previous_counts)), reverse=True)
    kept = sum(min(c, lo) for c in counts)
    if extra:
        kept += min(extra, sum(1 for c in counts if c >= lo + 1))
    return total - kept


@SETTINGS
@given(
    cluster=clusters.filter(lambda c: sum(c.values()) > 0),
    members=member_ids,
    change=st.sampled_from(["add", "remove", "add-two", "remove-two"]),
    new_ids=st.lists(st.text(alphabet="pq", min_size=1, max_size=4), min_size=2, max_size=2, unique=True),
)
def test_sticky_moves_only_the_minimum(
    cluster: dict[str, int], members: list[str], change: str, new_ids: list[str]
) -> None:
    topics = tuple(sorted(cluster))
    total = sum(cluster.values())
    for cls in STICKY:
        fresh = cls().assign(cluster, {m: Subscription(topics) for m in members})
        previous = {m: a.partitions for m, a in fresh.items()}
        remaining = dict(previous)
        if change.startswith("remove"):
            for gone in members[: 2 if change == "remove-two" else 1]:
                if len(remaining) > 1:
                    del remaining[gone]
        else:
            for new in new_ids[: 2 if change == "add-two" else 1]:
                remaining[new] = ()
        subs = _with_ownership(cls, topics, remaining, generation=3)
        result = cls().assign(cluster, subs)
        kept = sum(len(set(result[m].partitions) & set(parts)) for m, parts in remaining.items())
        survivors = [len(p) for m, p in remaining.items() if p]
        minimum = _minimum_moves(total, survivors, len(remaining))
        assert total - kept == minimum, (cls.name, change, total - kept, minimum)
        if cls is StickyAssignor:
            counts = _counts(result)
            assert max(counts) - min(counts) <= 1


# --------------------------------------------------------------------------------------- cooperative


@st.composite
def claimed_groups(draw: st.DrawFn) -> tuple[dict[str, int], dict[str, Subscription]]:
    """Groups whose members report owned partitions, possibly overlapping, from various generations."""
    cluster, base = draw(groups())
    subs = {}
    for member, sub in base.items():
        candidates = [TopicPartition(t, p) for t in sorted(cluster) for p in range(cluster[t])]
        owned = draw(st.lists(st.sampled_from(candidates), unique=True, max_size=6)) if candidates else []
        generation = draw(st.integers(min_value=-1, max_value=4))
        subs[member] = Subscription(
            sub.topics,
            owned_partitions=tuple(owned),
            generation_id=generation,
            group_instance_id=sub.group_instance_id,
        )
    return cluster, subs


@SETTINGS
@given(group=claimed_groups())
def test_cooperative_never_assigns_a_partition_another_member_still_owns(
    group: tuple[dict[str, int], dict[str, Subscription]],
) -> None:
    cluster, subs = group
    result = CooperativeStickyAssignor().assign(cluster, subs)
    flat = [tp for a in result.values() for tp in a.partitions]
    assert len(flat) == len(set(flat))
    for member, a in result.items():
        for tp in a.partitions:
            if tp in subs[member].owned_partitions:
                continue
            claimants = [m for m, s in subs.items() if m != member and tp in s.owned_partitions]
            assert not claimants, f"{tp} given to {member} while {claimants} still own it"
    # Everything not withheld is assigned: only partitions some member still claims can be missing.
    missing = _subscribed(cluster, subs) - set(flat)
    claimed = {tp for s in subs.values() for tp in s.owned_partitions}
    assert missing <= claimed


@SETTINGS
@given(group=claimed_groups())
def test_cooperative_converges_in_follow_up_rebalances(
    group: tuple[dict[str, int], dict[str, Subscription]],
) -> None:
    """Members revoke what they lost and rejoin; within a few rounds every partition is assigned and
    nothing moves anymore."""
    cluster, subs = group
    generation = max(s.generation_id for s in subs.values()) + 1
    previous: dict[str, Assignment] | None = None
    for _ in range(4):
        result = CooperativeStickyAssignor().assign(cluster, subs)
        if result == previous:
            break
        previous = result
        generation += 1
        subs = {
            m: Subscription(
                s.topics,
                owned_partitions=result[m].partitions,
                generation_id=generation,
                group_instance_id=s.group_instance_id,
            )
            for m, s in subs.items()
        }
    _check_valid(cluster, subs, result)
    assert CooperativeStickyAssignor().assign(cluster, subs) == result


def test_cooperative_withholds_then_assigns() -> None:
    cluster = {"t": 6}
    a_owns = tuple(TopicPartition("t", p) for p in range(6))
    subs = {
        "a": Subscription(("t",), owned_partitions=a_owns, generation_id=5),
        "b": Subscription(("t",), generation_id=-1),
    }
    first = CooperativeStickyAssignor().assign(cluster, subs)
    assert first["a"].partitions == a_owns[:3]
    assert first["b"].partitions == ()  # withheld while "a" still owns them
    subs["a"] = Subscription(("t",), owned_partitions=a_owns[:3], generation_id=6)
    subs["b"] = Subscription(("t",), owned_partitions=(), generation_id=6)
    second = CooperativeStickyAssignor().assign(cluster, subs)
    assert second["a"].partitions == a_owns[:3]
    assert set(second["b"].partitions) == set(a_owns[3:])


def test_equal_generation_conflicts_drop_the_claim() -> None:
    cluster = {"t": 2}
    tp = TopicPartition("t", 0)
    subs = {
        "a": Subscription(("t",), owned_partitions=(tp,), generation_id=4),
        "b": Subscription(("t",), owned_partitions=(tp,), generation_id=4),
    }
    result = CooperativeStickyAssignor().assign(cluster, subs)
    # Claimed twice in one generation: nobody keeps it, and nobody may take it this round.
    assert tp not in {p for a in result.values() for p in a.partitions}


def test_higher_generation_wins_a_conflict() -> None:
    cluster = {"t": 2}
    tp0, tp1 = TopicPartition("t", 0), TopicPartition("t", 1)
    subs = {
        "a": Subscription(("t",), owned_partitions=(tp0,), generation_id=7),
        "b": Subscription(("t",), owned_partitions=(tp0, tp1), generation_id=3),
    }
    result = CooperativeStickyAssignor().assign(cluster, subs)
    assert result["a"].partitions == (tp0,)
    assert result["b"].partitions == (tp1,)


def test_many_members_and_partitions_stay_fast() -> None:
    cluster = {f"topic-{i}": 20 for i in range(10)}
    members = [f"member-{i:03d}" for i in range(50)]
    subs = {
        m: Subscription(tuple(itertools.islice(itertools.cycle(cluster), i % 10, i % 10 + 4)))
        for i, m in enumerate(members)
    }
    for cls in STICKY:
        result = cls().assign(cluster, subs)
        _check_valid(cluster, subs, result)
