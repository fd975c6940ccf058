"""``regroup pipeline bench`` on a tiny synthetic data set: it runs end to end and its counts add up (the
numbers themselves are for docs/benchmarks.md, not for tests)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from regroup_pipeline import bench
from regroup_pipeline.cli import main

from .support import SPARK_SOCKETS

# About a minute of small Spark jobs: opt in with --run-slow.
pytestmark = [pytest.mark.spark, pytest.mark.slow, SPARK_SOCKETS]


def test_bench_runs_on_a_tiny_data_set(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    small = {"GROUPS": 20, "TOPICS": 2, "PARTITIONS": 10, "DATA_RECORDS_PER_PARTITION": 20}
    for name, value in small.items():
        monkeypatch.setattr(bench, name, value)
    argv = ["bench", "--records", "2000", "--baseline-records", "500", "--workdir", str(tmp_path), "--json"]
    assert main(argv) == 0
    results = json.loads(capsys.readouterr().out)
    assert results["dataset"]["offset_commits"] == 2000
    assert results["dataset"]["group_metadata"] == 20 * bench.GENERATIONS
    assert results["dataset"]["data_records"] == 2 * 10 * 20
    assert results["decode_rows"] == 2000
    assert 250 <= results["baseline_rows"] <= 750  # a sample of about 500
    assert results["history_write_rows"] == 2000
    for key in ("vectorised_rows_per_s", "data_source_decode_rows_per_s", "baseline_rows_per_s"):
        assert results[key] > 0
    assert results["data_source_first_seconds"] > 0
    assert results["data_source_share_of_transfer"] > 0
    assert set(results["all_job_stage_seconds"]) >= {"offsets", "lag", "rebalances", "report"}
    assert spark.range(1).count() == 1  # the shared session is still usable
