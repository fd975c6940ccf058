"""The interop scenarios' "every record once" check itself: which duplicates it explains and which it
reports."""

from __future__ import annotations

import subprocess
import sys

import pytest

from coordinator.interop_support import Member, Record, check_exactly_once


def _member(name: str, records: list[tuple[int, int]], *, killed: bool = False) -> Member:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    m = Member(name, proc, f"interop-{name}")
    m.records = [Record(p, o, f"r-{p}-{o}") for p, o in records]
    m.killed = killed
    return m


PRODUCED = [(0, o, f"r-0-{o}") for o in range(6)]


def test_a_record_consumed_twice_without_a_reason_is_reported() -> None:
    first = _member("a", [(0, o) for o in range(4)])
    first.commits = {0: 4}
    first.commit_log = [(0, 4)]
    second = _member("b", [(0, o) for o in range(3, 6)])
    with pytest.raises(AssertionError, match="record 0/3 consumed by"):
        check_exactly_once(PRODUCED, [first, second])


def test_a_record_whose_commit_was_refused_may_be_consumed_again() -> None:
    first = _member("a", [(0, o) for o in range(4)])
    first.commits = {0: 2}
    first.uncommitted = [(0, 2, 4)]  # the batch 2..3 was consumed, its commit refused
    second = _member("b", [(0, o) for o in range(2, 6)])
    stats = check_exactly_once(PRODUCED, [first, second])
    assert stats["duplicates"] == 2
    assert stats["redelivered_after_failed_commit"] == 2


def test_a_killed_members_uncommitted_window_may_be_consumed_again_but_not_what_it_committed() -> None:
    first = _member("a", [(0, o) for o in range(4)], killed=True)
    first.commits = {0: 3}
    second = _member("b", [(0, o) for o in range(3, 6)])
    assert check_exactly_once(PRODUCED, [first, second])["duplicates"] == 1
    early = _member("c", [(0, o) for o in range(2, 6)])
    with pytest.raises(AssertionError, match="redelivered though"):
        check_exactly_once(PRODUCED, [first, early])
