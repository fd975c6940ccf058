"""The hot requests leave no reference cycles behind: a cycle per request is garbage only the cyclic
collector frees, in pauses that grow with the request rate (compiled by mypyc, a nested function and the
frame it closes over reference each other — every commit once left its request and offsets that way)."""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from itertools import count

from regroup.group.config import GroupConfig
from regroup.protocol.errors import ErrorCode

from .harness import Harness, image


@contextmanager
def _cyclic_garbage() -> Iterator[Counter[str]]:
    """The types of the objects that only the cyclic collector could free, made inside the block."""
    found: Counter[str] = Counter()
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        yield found
        gc.collect()
        found.update(type(o).__qualname__ for o in gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


def _none_left(work: Callable[[], None]) -> None:
    work()  # first calls fill caches (interned names, lru caches) that are not per-request garbage
    with _cyclic_garbage() as garbage:
        for _ in range(20):
            work()
    assert garbage == Counter()


def test_commits_and_classic_heartbeats_leave_no_cycles() -> None:
    h = Harness()
    members, generation = h.form_group("g", 2)

    def work() -> None:
        assert h.commit("g", {("t", 0): 5, ("t", 1): 6}, generation_id=generation, member_id=members[0]).done
        assert h.heartbeat("g", members[1], generation).error is ErrorCode.NONE

    _none_left(work)


def test_consumer_heartbeats_leave_no_cycles() -> None:
    h = Harness(GroupConfig(), now=10_000, topics=image({"t": 4}))
    joined = h.cgh("g", "m", names=["t"])
    assert joined.error is ErrorCode.NONE
    epoch = joined.response.member_epoch

    def work() -> None:
        assert h.cgh("g", "m", epoch).error is ErrorCode.NONE

    _none_left(work)


def test_classic_rebalances_and_leaves_leave_no_cycles() -> None:
    h = Harness()
    rounds = count()

    def work() -> None:
        group_id = f"g{next(rounds)}"
        members, _ = h.form_group(group_id, 2)
        assert h.leave(group_id, *members).error is ErrorCode.NONE

    _none_left(work)
