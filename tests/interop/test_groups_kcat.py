"""``kcat -G`` (librdkafka 2.0.2) consumer groups against ``regroup serve``: every record consumed through
a clean leave (SIGTERM), a new member and a SIGKILLed member, duplicates only from the killed member.

kcat commits with librdkafka's auto-commit, whose periodic commits stop after the first one in 2.0.2
(the stored/committed position comparison includes the leader epoch; the same happens against Apache
Kafka 4.3), so the killed member's uncommitted window is not bounded by ``auto.commit.interval.ms``: the
check is that every duplicate was consumed by the killed member. kcat also drops, without printing, the
record it polls right after SIGTERM although its offset is committed on close (``consume_cb`` returns when
``!conf.run``); those records are the only ones allowed to be missing. A static kcat member
(``group.instance.id``) restarted within its session timeout gets its partitions back without a rebalance.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator.interop_support import (
    STATIC_SESSION_MS,
    kcat_dropped_at_exit,
    run_scenario,
    run_static_scenario,
    start_kcat,
)

pytestmark = pytest.mark.interop


def test_kcat_group_consumes_every_record_through_leave_join_and_kill(tmp_path: Path, kcat: str) -> None:
    stats = run_scenario(
        tmp_path,
        lambda bootstrap, name: start_kcat(kcat, bootstrap, "g", "events", name),
        exact_commit_window=False,
        may_miss=kcat_dropped_at_exit,
    )
    assert stats["records"] > 1000
    assert stats["generations"] >= 4


def test_static_kcat_member_restarted_within_its_session_keeps_its_partitions(
    tmp_path: Path, kcat: str
) -> None:
    stats = run_static_scenario(
        tmp_path,
        lambda bootstrap, name, instance: start_kcat(
            kcat, bootstrap, "g", "events", name, instance_id=instance, session_ms=STATIC_SESSION_MS
        ),
        exact_commit_window=False,
    )
    assert stats["records"] > 500
