"""confluent-kafka (librdkafka) consumer groups against ``regroup serve``: range, roundrobin and
cooperative-sticky through a clean leave, a new member and a SIGKILLed member; static members restarted
within their session timeout get their partitions back without a rebalance."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator.interop_support import STATIC_SESSION_MS, run_scenario, run_static_scenario, start_member

pytestmark = pytest.mark.interop


@pytest.mark.parametrize("assignor", ["range", "roundrobin", "cooperative-sticky"])
def test_group_consumes_every_record_once_through_leave_join_and_kill(tmp_path: Path, assignor: str) -> None:
    stats = run_scenario(
        tmp_path,
        lambda bootstrap, name: start_member("confluent", bootstrap, "g", "events", name, assignor=assignor),
    )
    assert stats["records"] > 1000
    assert stats["generations"] >= 4  # formed, clean leave, new member, expired session


@pytest.mark.parametrize("assignor", ["range", "cooperative-sticky"])
def test_static_member_restarted_within_its_session_keeps_its_partitions(
    tmp_path: Path, assignor: str
) -> None:
    stats = run_static_scenario(
        tmp_path,
        lambda bootstrap, name, instance: start_member(
            "confluent",
            bootstrap,
            "g",
            "events",
            name,
            assignor=assignor,
            instance_id=instance,
            session_ms=STATIC_SESSION_MS,
        ),
    )
    assert stats["records"] > 500
