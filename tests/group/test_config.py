"""GroupConfig and the group → ``__consumer_offsets`` partition mapping."""

from __future__ import annotations

import pytest

from regroup.group.config import GroupConfig, partition_for


def test_partition_for() -> None:
    assert partition_for("polygenelubricants", 50) == 0  # abs(MIN_VALUE) is taken as 0
    assert partition_for("Hello World", 50) == 862545276 % 50
    assert partition_for("hello", 7) == 99162322 % 7
    assert GroupConfig(offsets_topic_num_partitions=3).partition_for("a") == 97 % 3


def test_defaults_are_kafkas() -> None:
    cfg = GroupConfig()
    assert (
        cfg.group_min_session_timeout_ms,
        cfg.group_max_session_timeout_ms,
        cfg.group_initial_rebalance_delay_ms,
        cfg.group_max_size,
        cfg.offsets_retention_ms,
        cfg.offsets_retention_check_interval_ms,
        cfg.offset_metadata_max_bytes,
        cfg.offsets_topic_num_partitions,
        cfg.new_member_join_timeout_ms,
    ) == (6000, 1_800_000, 3000, 2**31 - 1, 7 * 24 * 3600 * 1000, 600_000, 4096, 50, 300_000)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"group_max_size": 0},
        {"offsets_topic_num_partitions": 0},
        {"group_min_session_timeout_ms": 10, "group_max_session_timeout_ms": 5},
        {"rebalance_history_size": 0},
    ],
)
def test_invalid_configs(kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError, match=r"must|exceeds"):
        GroupConfig(**kwargs)
