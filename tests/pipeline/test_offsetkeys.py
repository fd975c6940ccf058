"""Commit runs folded by regroup_pipeline.offsetkeys, without Spark: each key's commits cut where a
membership record of its group lies between them, for more keys than the fold's first allocation and with
groups that have no membership records."""

from __future__ import annotations

import random
from itertools import groupby
from typing import Any

import pytest

pa = pytest.importorskip("pyarrow")

from regroup_pipeline.decode import HISTORY_ARROW_SCHEMA  # noqa: E402  # after the importorskip
from regroup_pipeline.offsetkeys import OffsetKeys  # noqa: E402


def _history(rows: list[tuple[str, int, int]]) -> Any:
    """History rows (group, partition, position) in log order: commits of topic "t", never a tombstone."""
    n = len(rows)
    stamps = pa.array([1_000_000 * (i + 1) for i in range(n)], pa.int64()).cast(pa.timestamp("us", tz="UTC"))
    columns = {
        "group": pa.array([r[0] for r in rows], pa.string()),
        "topic": pa.array(["t"] * n, pa.string()),
        "partition": pa.array([r[1] for r in rows], pa.int32()),
        "committed_offset": pa.array(list(range(n)), pa.int64()),
        "leader_epoch": pa.array([0] * n, pa.int32()),
        "metadata": pa.array([""] * n, pa.string()),
        "commit_timestamp": stamps,
        "expire_timestamp": pa.nulls(n, pa.timestamp("us", tz="UTC")),
        "deleted": pa.array([False] * n),
        "record_timestamp": stamps,
        "valid_until": pa.nulls(n, pa.timestamp("us", tz="UTC")),
        "is_current": pa.array([False] * n),
        "record_partition": pa.array([0] * n, pa.int32()),
        "record_offset": pa.array([r[2] for r in rows], pa.int64()),
        "key_version": pa.array([1] * n, pa.int32()),
        "value_version": pa.array([3] * n, pa.int32()),
    }
    return pa.RecordBatch.from_arrays(
        [columns[f.name] for f in HISTORY_ARROW_SCHEMA], schema=HISTORY_ARROW_SCHEMA
    )


def test_runs_are_cut_at_each_groups_own_membership_records() -> None:
    rng = random.Random(7)
    groups = [f"g{i}" for i in range(700)]
    keys = [(g, p) for g in groups for p in range(3)]  # 2,100 keys: more than the first 1,024 slots
    positions = sorted(rng.sample(range(1, 200_000), 12_000))
    rows = [(*rng.choice(keys), position) for position in positions]
    # Every other group has membership records; the rest have none (one run per key).
    boundaries: dict[str, Any] = {
        g: pa.array(sorted(rng.sample(range(200_000), 4)), pa.int64()).to_numpy() for g in groups[::2]
    }
    keys_fold = OffsetKeys(boundaries)
    for start in range(0, len(rows), 1_000):  # several batches: keys first seen in later ones too
        keys_fold.feed(_history(rows[start : start + 1_000]))
    runs = keys_fold.finish_runs()
    got = sorted(
        zip(
            runs.column("group").to_pylist(),
            runs.column("partition").to_pylist(),
            runs.column("record_offset").to_pylist(),
            runs.column("commits").to_pylist(),
            strict=True,
        )
    )

    def interval(group: str, position: int) -> int:
        return sum(1 for b in boundaries.get(group, ()) if b < position)

    expected = []
    for (group, partition), commits in groupby(
        sorted(rows, key=lambda r: (r[0], r[1], r[2])), lambda r: r[:2]
    ):
        for _, run in groupby(commits, lambda r: interval(r[0], r[2])):
            members = list(run)
            expected.append((group, partition, members[0][2], len(members)))
    assert got == sorted(expected)
    assert len(keys_fold.finish()) == len({r[:2] for r in rows}) > 1_024
