"""kafka-python 3.0.12 consumer groups (range, synchronous commits) against ``regroup serve``: every
record consumed exactly once through a clean leave, a new member and a SIGKILLed member; a static member
restarted within its session timeout gets its partitions back without a rebalance."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator.interop_support import STATIC_SESSION_MS, run_scenario, run_static_scenario, start_member

pytestmark = pytest.mark.interop


def test_group_consumes_every_record_once_through_leave_join_and_kill(tmp_path: Path) -> None:
    stats = run_scenario(
        tmp_path, lambda bootstrap, name: start_member("kafka-python", bootstrap, "g", "events", name)
    )
    assert stats["records"] > 1000
    assert stats["generations"] >= 4


def test_static_member_restarted_within_its_session_keeps_its_partitions(tmp_path: Path) -> None:
    stats = run_static_scenario(
        tmp_path,
        lambda bootstrap, name, instance: start_member(
            "kafka-python", bootstrap, "g", "events", name, instance_id=instance, session_ms=STATIC_SESSION_MS
        ),
    )
    assert stats["records"] > 500
