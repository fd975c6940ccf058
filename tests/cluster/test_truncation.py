"""A follower's truncation point from the leader's OffsetForLeaderEpoch answer: each branch of the decision,
KIP-101's two scenarios and KIP-279's double failover replayed on small replica models, and a property over
random histories of elections, appends and fetches: after truncating, a follower's log is exactly the part
it shares with the leader's."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import event, given, settings
from hypothesis import strategies as st

from regroup.cluster.truncation import OffsetTruncationState, epoch_to_request, offset_truncation_state
from regroup.log.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, LeaderEpochCache


def cache_of(*entries: tuple[int, int]) -> LeaderEpochCache:
    cache = LeaderEpochCache()
    for epoch, offset in entries:
        cache.assign(epoch, offset)
    return cache


def decide(
    leader_answer: tuple[int, int], follower: LeaderEpochCache, leo: int, hw: int = 0
) -> OffsetTruncationState:
    return offset_truncation_state(
        leader_epoch=leader_answer[0],
        leader_end_offset=leader_answer[1],
        follower_epochs=follower,
        follower_log_end_offset=leo,
        high_watermark=hw,
    )


# ---------------------------------------------------------------------------------------------- the branches


def test_leader_without_an_answer_sends_the_follower_to_its_high_watermark() -> None:
    assert decide(
        (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET), cache_of((1, 0)), 50, hw=30
    ) == OffsetTruncationState(30, True)


def test_answer_without_an_epoch_uses_the_leaders_offset() -> None:
    assert decide((UNDEFINED_EPOCH, 40), cache_of((1, 0)), 50) == OffsetTruncationState(40, True)
    assert decide((UNDEFINED_EPOCH, 60), cache_of((1, 0)), 50) == OffsetTruncationState(50, True)


def test_known_epoch_truncates_to_the_smaller_end() -> None:
    follower = cache_of((1, 0), (3, 100), (5, 120))
    assert decide((3, 110), follower, 200) == OffsetTruncationState(
        110, True
    )  # the leader's epoch 3 is shorter
    assert decide((3, 130), follower, 200) == OffsetTruncationState(120, True)  # the follower's epoch 3 is
    assert decide((5, 300), follower, 200) == OffsetTruncationState(200, True)  # nothing to drop


def test_epoch_unknown_to_the_follower_truncates_and_asks_again() -> None:
    follower = cache_of((3, 100), (5, 120))
    first = decide((4, 155), follower, 200)
    assert first == OffsetTruncationState(120, False)  # end of epoch 3, the follower's largest below 4
    follower.truncate_from_end(first.offset)
    assert epoch_to_request(follower) == 3
    assert decide((3, 101), follower, first.offset) == OffsetTruncationState(101, True)


def test_follower_that_cannot_place_the_answered_epoch_uses_the_leaders_offset() -> None:
    # an epoch above everything the follower has (its cache changed since it asked)
    assert decide((7, 80), cache_of((1, 0), (3, 40)), 60) == OffsetTruncationState(60, True)
    assert decide((7, 30), cache_of((1, 0), (3, 40)), 60) == OffsetTruncationState(30, True)
    assert decide((2, 30), LeaderEpochCache(), 60) == OffsetTruncationState(30, True)


def test_answered_epoch_below_the_followers_first_counts_as_known() -> None:
    assert decide((1, 30), cache_of((3, 10), (4, 20)), 60) == OffsetTruncationState(10, True)


def test_follower_without_epochs_does_not_ask() -> None:
    assert epoch_to_request(LeaderEpochCache()) is None
    assert epoch_to_request(cache_of((1, 0), (4, 9))) == 4


# ---------------------------------------------------------------------------------------- a replica model


@dataclass
class Replica:
    """A replica's log as (epoch, value) per offset, its epoch cache and its high watermark."""

    name: str
    log: list[tuple[int, str]] = field(default_factory=list)
    epochs: LeaderEpochCache = field(default_factory=LeaderEpochCache)
    hw: int = 0

    @property
    def leo(self) -> int:
        return len(self.log)

    def become_leader(self, epoch: int) -> None:
        self.epochs.assign(epoch, self.leo)  # Partition.makeLeader: the epoch starts at the LEO

    def append(self, epoch: int, *values: str) -> None:
        for value in values:
            self.epochs.assign(epoch, self.leo)
            self.log.append((epoch, value))

    def truncate_to(self, offset: int) -> None:
        # UnifiedLog.truncateTo: the epoch cache is truncated even when the log is not (offset ≥ LEO): a
        # node elected leader that wrote nothing left an entry at its LEO which must go.
        del self.log[offset:]
        self.epochs.truncate_from_end(min(offset, self.leo))
        self.hw = min(self.hw, offset)

    def fetch_from(self, leader: Replica, count: int | None = None) -> None:
        """Append the leader's records after this log's end, as-is (the follower's fetch)."""
        for epoch, value in leader.log[self.leo : None if count is None else self.leo + count]:
            self.append(epoch, value)
        self.hw = min(leader.hw, self.leo)


def truncate_before_fetching(follower: Replica, leader: Replica) -> int:
    """The OffsetForLeaderEpoch exchange until the follower's truncation completes; the rounds it took."""
    rounds = 0
    while True:
        requested = epoch_to_request(follower.epochs)
        if requested is None:
            follower.truncate_to(follower.hw)
            return rounds
        rounds += 1
        answer = leader.epochs.end_offset_for(requested, leader.leo)
        state = decide(answer, follower.epochs, follower.leo, follower.hw)
        follower.truncate_to(state.offset)
        if state.truncation_completed:
            return rounds
        assert rounds < 100, "truncation does not converge"


def common_prefix(a: Replica, b: Replica) -> int:
    n = 0
    while n < min(a.leo, b.leo) and a.log[n] == b.log[n]:
        n += 1
    return n


# ------------------------------------------------------------------------------------------------ scenarios


def test_kip101_a_lagging_high_watermark_does_not_lose_a_committed_record() -> None:
    # A leads epoch 0 and writes m1, m2; B fetches both. A knows both are committed (HW 2); B learned only
    # HW 1 before it restarted. Truncating to its HW would drop m2, which A then takes to its grave.
    a, b = Replica("A"), Replica("B")
    a.become_leader(0)
    a.append(0, "m1", "m2")
    b.fetch_from(a)
    a.hw, b.hw = 2, 1
    assert truncate_before_fetching(b, a) == 1
    assert b.log == [(0, "m1"), (0, "m2")]  # the epoch says m2 is A's too: kept
    b.become_leader(1)  # A dies: B leads with both committed records
    assert [v for _, v in b.log] == ["m1", "m2"]


def test_kip101_replicas_do_not_diverge_after_both_restart() -> None:
    # A leads epoch 0: m1 reaches both, m2 only A. Both lose power; B returns first, leads epoch 1, writes m3
    # at the offset where A holds m2.
    a, b = Replica("A"), Replica("B")
    a.become_leader(0)
    a.append(0, "m1")
    b.fetch_from(a)
    a.append(0, "m2")
    b.become_leader(1)
    b.append(1, "m3")
    assert truncate_before_fetching(a, b) == 1
    assert a.log == [(0, "m1")]  # m2 goes: epoch 0 ends at offset 1 on the new leader
    a.fetch_from(b)
    assert a.log == b.log == [(0, "m1"), (1, "m3")]


def test_kip279_fast_double_failover() -> None:
    # A leads epoch 1 and writes m1, m2 (B fetches only m1); A fails and B leads epoch 2, writing m3 where A
    # has m2; B fails quickly and A leads epoch 3, writing m4. B comes back: A never saw epoch 2.
    a, b = Replica("A"), Replica("B")
    a.become_leader(1)
    a.append(1, "m1")
    b.fetch_from(a)
    a.append(1, "m2")
    b.become_leader(2)
    b.append(2, "m3")
    a.become_leader(3)
    a.append(3, "m4")
    assert a.epochs.end_offset_for(2, a.leo) == (1, 2)  # the largest epoch at or below 2 A knows, and its end
    assert truncate_before_fetching(b, a) == 1
    assert b.log == [(1, "m1")]  # m3 goes: it sits where epoch 1 continues on A
    b.fetch_from(a)
    assert b.log == a.log


def test_kip279_follower_missing_the_leaders_epoch_asks_twice() -> None:
    # Epoch 1 (leader X) writes r0..r4; L got r0..r2, F all five. L leads epoch 2 from offset 3; F, elected
    # uncleanly at epoch 3, writes at 5; L leads epoch 4. F asks about 3, L answers for 2, which F never saw.
    x, lead, f = Replica("X"), Replica("L"), Replica("F")
    x.become_leader(1)
    x.append(1, "r0", "r1", "r2", "r3", "r4")
    lead.fetch_from(x, 3)
    f.fetch_from(x)
    lead.become_leader(2)
    lead.append(2, "l3", "l4", "l5")
    f.become_leader(3)
    f.append(3, "f5")
    lead.become_leader(4)
    lead.append(4, "l6")
    assert truncate_before_fetching(f, lead) == 2
    assert f.log == x.log[:3]  # r3 and r4 never reached L: gone too
    f.fetch_from(lead)
    assert f.log == lead.log


def test_follower_in_step_with_the_leader_keeps_everything() -> None:
    a, b = Replica("A"), Replica("B")
    a.become_leader(0)
    a.append(0, "x", "y")
    b.fetch_from(a)
    a.become_leader(1)  # same leader, new epoch (KAFKA-7164: followers still check)
    assert truncate_before_fetching(b, a) == 1
    assert b.leo == 2


# ------------------------------------------------------------------------------------------------ property

Op = tuple[str, int, int]
ops_st = st.lists(
    st.one_of(
        st.tuples(st.just("elect"), st.integers(0, 2), st.just(0)),
        st.tuples(st.just("append"), st.integers(1, 4), st.just(0)),
        st.tuples(st.just("fetch"), st.integers(0, 2), st.integers(0, 6)),
    ),
    max_size=50,
)


@settings(max_examples=300)
@given(ops_st)
def test_truncation_keeps_exactly_the_prefix_shared_with_the_leader(ops: list[Op]) -> None:
    # Any replica may be elected at any time (unclean elections included); every new epoch makes every
    # follower truncate before it fetches again.
    replicas = [Replica(name) for name in "ABC"]
    leader: Replica | None = None
    epoch = -1
    must_truncate = [False, False, False]
    written = 0
    for op, a, b in ops:
        if op == "elect":
            epoch += 1
            leader = replicas[a]
            leader.become_leader(epoch)
            must_truncate = [r is not leader for r in replicas]
        elif leader is None:
            continue
        elif op == "append":
            for _ in range(a):
                written += 1
                leader.append(epoch, f"v{written}")
        elif replicas[a] is not leader:
            follower = replicas[a]
            if must_truncate[a]:
                shared = common_prefix(follower, leader)
                dropped = follower.leo - shared
                rounds = truncate_before_fetching(follower, leader)
                label = "3+" if dropped >= 3 else str(dropped)
                event(f"OffsetForLeaderEpoch rounds: {rounds}; records dropped: {label}")
                assert follower.leo == shared  # not one record more, not one less
                must_truncate[a] = False
            assert follower.log == leader.log[: follower.leo]
            follower.fetch_from(leader, b)
        for replica in replicas:
            entries = replica.epochs.entries
            assert [e.epoch for e in entries] == sorted({e.epoch for e in entries})
