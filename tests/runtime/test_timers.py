"""Keyed timers: replacement, cancellation, stale fires, manual and real clocks."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from regroup.runtime.clock import ManualClock, SystemClock
from regroup.runtime.timers import Fired, TimerService


def make(clock: ManualClock) -> tuple[TimerService[str], list[Fired[str]]]:
    fired: list[Fired[str]] = []
    return TimerService(clock, fired.append), fired


def test_fires_in_deadline_order_when_the_manual_clock_advances() -> None:
    clock = ManualClock(0)
    timers, fired = make(clock)
    timers.schedule("b", 200)
    timers.schedule("a", 100)
    timers.schedule("c", 300)
    clock.advance(99)
    assert fired == []
    clock.advance(150)
    assert [f.key for f in fired] == ["a", "b"]
    assert all(timers.claim(f) for f in fired)
    assert len(timers) == 1


def test_same_key_replaces_the_previous_deadline() -> None:
    clock = ManualClock(0)
    timers, fired = make(clock)
    timers.schedule("hb", 100)
    timers.schedule("hb", 500)
    clock.advance(200)
    assert fired == []
    assert timers.deadline("hb") == 500
    clock.advance(300)
    assert [(f.key, f.deadline_ms) for f in fired] == [("hb", 500)]


def test_cancel_forgets_the_timer() -> None:
    clock = ManualClock(0)
    timers, fired = make(clock)
    timers.schedule("x", 10)
    timers.cancel("x")
    clock.advance(100)
    assert fired == []
    assert timers.deadline("x") is None


def test_a_fire_is_stale_when_the_key_was_rescheduled_before_the_lane_processed_it() -> None:
    clock = ManualClock(0)
    timers, fired = make(clock)
    timers.schedule("hb", 10)
    clock.advance(10)
    (event,) = fired
    timers.schedule("hb", 1000)  # e.g. a heartbeat arrived before the lane handled the expiry
    assert not timers.claim(event)
    assert timers.deadline("hb") == 1000


def test_claim_consumes_the_live_timer() -> None:
    clock = ManualClock(0)
    timers, fired = make(clock)
    timers.schedule("k", 5)
    clock.advance(5)
    assert timers.claim(fired[0])
    assert not timers.claim(fired[0])


def test_scheduling_in_the_past_fires_immediately_on_a_manual_clock() -> None:
    clock = ManualClock(1000)
    timers, fired = make(clock)
    timers.schedule("late", 500)
    assert [f.key for f in fired] == ["late"]


def test_many_reschedules_keep_the_heap_bounded() -> None:
    clock = ManualClock(0)
    timers, _ = make(clock)
    for i in range(10_000):
        timers.schedule("hb", 1_000 + i)
    assert len(timers._heap) < 300


def test_deadlines_moved_earlier_leave_at_most_one_dead_entry_per_timer() -> None:
    """Each joining member's session comes before its join timeout: the moved deadline's old heap entry
    (holding its key) must not stay behind for every member until it comes up."""
    clock = ManualClock(0)
    timers, _ = make(clock)
    for i in range(1_000):
        timers.schedule(f"m{i}", 300_000)  # the new member's join timeout
        timers.schedule(f"m{i}", 45_000)  # its session, once the join phase completes
        timers.schedule(f"m{i}", 10_000)  # a shorter session on its next join
        assert len(timers._heap) <= max(64, 2 * len(timers))


def test_real_clock_timers_fire_on_the_event_loop() -> None:
    async def run() -> list[str]:
        fired: list[Fired[str]] = []
        done = asyncio.Event()

        def on_fire(f: Fired[str]) -> None:
            fired.append(f)
            if len(fired) == 2:
                done.set()

        clock = SystemClock()
        timers: TimerService[str] = TimerService(clock, on_fire)
        now = clock.now_ms()
        timers.schedule("slow", now + 60)
        timers.schedule("fast", now + 20)
        timers.schedule("gone", now + 10)
        timers.cancel("gone")
        await asyncio.wait_for(done.wait(), 5)
        timers.close()
        return [f.key for f in fired]

    assert asyncio.run(run()) == ["fast", "slow"]


def test_next_deadline_is_the_earliest_live_one() -> None:
    clock = ManualClock(0)
    timers, _ = make(clock)
    assert timers.next_deadline() is None
    timers.schedule("a", 300)
    timers.schedule("b", 100)
    timers.schedule("b", 500)  # replaced: its old deadline no longer counts
    assert timers.next_deadline() == 300
    timers.cancel("a")
    assert timers.next_deadline() == 500


def test_moving_a_deadline_later_pushes_nothing_and_fires_at_the_new_deadline() -> None:
    clock = ManualClock(0)
    timers, fired = make(clock)
    timers.schedule("hb", 100)
    for deadline in range(101, 1_101):
        timers.schedule("hb", deadline)  # a heartbeat re-arming its session
    assert len(timers._heap) == 1
    clock.advance(1_099)
    assert fired == []
    clock.advance(1)
    assert [(f.key, f.deadline_ms) for f in fired] == [("hb", 1_100)]
    assert timers.claim(fired[0])


def test_a_timer_rearmed_after_a_stale_fire_still_fires() -> None:
    clock = ManualClock(0)
    timers, fired = make(clock)
    timers.schedule("hb", 10)
    clock.advance(10)
    timers.schedule("hb", 50)  # the lane has not handled the fire yet
    assert not timers.claim(fired[0])
    clock.advance(40)
    assert [(f.key, f.deadline_ms) for f in fired] == [("hb", 10), ("hb", 50)]
    assert timers.claim(fired[1])


def test_moving_a_deadline_earlier_replaces_it() -> None:
    clock = ManualClock(0)
    timers, fired = make(clock)
    timers.schedule("j", 500)
    timers.schedule("j", 100)
    clock.advance(100)
    assert [(f.key, f.deadline_ms) for f in fired] == [("j", 100)]
    clock.advance(1_000)
    assert len(fired) == 1


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("schedule"), st.sampled_from("abc"), st.integers(0, 60)),
            st.tuples(st.just("cancel"), st.sampled_from("abc"), st.just(0)),
            st.tuples(st.just("advance"), st.just(""), st.integers(0, 25)),
        ),
        max_size=60,
    )
)
def test_every_key_fires_once_at_its_last_deadline_whatever_the_moves(
    ops: list[tuple[str, str, int]],
) -> None:
    """Against a model that keeps only each key's last deadline: moves later, earlier, back and forth,
    cancels and re-arms after a fire leave heap entries behind that must never fire early, late or twice."""
    clock = ManualClock(0)
    timers, fired = make(clock)
    model: dict[str, int] = {}
    expected: list[tuple[str, int]] = []

    def due() -> None:
        for deadline, key in sorted((d, k) for k, d in model.items() if d <= clock.now_ms()):
            expected.append((key, deadline))
            del model[key]

    for op, key, n in ops:
        if op == "schedule":
            deadline = max(clock.now_ms() + n - 20, clock.now_ms())  # some in the past: due at once
            timers.schedule(key, deadline)
            model[key] = deadline
        elif op == "cancel":
            timers.cancel(key)
            model.pop(key, None)
        else:
            for _ in range(n):
                clock.advance(1)
                due()
            continue
        due()
        assert timers.deadline(key) == model.get(key)
    clock.advance(200)
    due()
    assert sorted((f.key, f.deadline_ms) for f in fired) == sorted(expected)
    assert [f.deadline_ms for f in fired] == sorted(f.deadline_ms for f in fired)
    assert len({(f.key, f.seq) for f in fired}) == len(fired)
    assert timers.next_deadline() is None
    assert len(timers) == 0
