"""The command line (``regroup pipeline <job>`` / ``python -m regroup_pipeline``) and the HTML report."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from regroup_pipeline.cli import JOBS, add_subparser, main
from regroup_pipeline.timespec import parse_duration, parse_time
from support.browser import artifacts_dir, headless_chromium

from .support import SPARK_SOCKETS

pytestmark = [pytest.mark.spark, SPARK_SOCKETS]

TABLES = (
    "offsets",
    "lag",
    "rebalances",
    "rebalance_frequency",
    "expiring_offsets",
    "assignment_health",
    "lag_trend",
    "retention_risk",
    "stuck_partitions",
    "member_commits",
    "group_summary",
    "consumer_group_members",
)


def test_durations_and_times() -> None:
    assert parse_duration("1500") == 1500
    assert parse_duration("1h30m") == 5_400_000
    assert parse_duration("250ms") == 250
    assert parse_duration("7d") == 7 * 86_400_000
    with pytest.raises(argparse.ArgumentTypeError):
        parse_duration("soon")
    now = 1_795_000_000_000
    assert parse_time("now", now_ms=now) == now
    assert parse_time("now-2h", now_ms=now) == now - 7_200_000
    assert parse_time("-15m", now_ms=now) == now - 900_000
    assert parse_time("2026-11-21T10:00:00Z") == parse_time("2026-11-21T10:00:00") == 1_795_255_200_000
    assert parse_time("2026-11-21T11:00:00+01:00") == 1_795_255_200_000
    with pytest.raises(argparse.ArgumentTypeError):
        parse_time("yesterday")


def test_wires_into_a_parent_cli_in_one_call() -> None:
    parser = argparse.ArgumentParser(prog="regroup")
    sub = parser.add_subparsers(dest="command")
    add_subparser(sub)
    args = parser.parse_args(
        ["pipeline", "lag", "--data-dir", "/d", "--since", "now-1h", "--master", "local[2]"]
    )
    assert args.command == "pipeline"
    assert args.job == "lag"
    assert args.data_dir == ["/d"]
    assert callable(args.handler)
    for job in JOBS:
        assert job in parser.format_help() or job in sub.choices["pipeline"].format_help()
    with pytest.raises(SystemExit):
        parser.parse_args(["pipeline", "lag"])  # an input is required


def test_regroup_dispatches_pipeline_without_importing_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from regroup import cli as regroup_cli

    # Building the broker's command line (every subcommand, `pipeline` included) loads neither.
    script = (
        "import sys, regroup.cli as c; c.build_parser(); "
        "print(sorted(m for m in sys.modules if m.startswith(('regroup_pipeline', 'pyspark'))))"
    )
    loaded = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "[]"
    assert "pipeline" in regroup_cli.build_parser().format_help()

    seen: list[tuple[list[str], str]] = []

    def fake_main(argv: list[str], *, prog: str) -> int:
        seen.append((argv, prog))
        return 7

    import regroup_pipeline.cli

    monkeypatch.setattr(regroup_pipeline.cli, "main", fake_main)
    assert regroup_cli.main(["pipeline", "--help"]) == 7
    assert regroup_cli.main(["pipeline", "lag", "--data-dir", "/d", "--since", "-1h"]) == 7
    assert seen == [
        (["--help"], "regroup pipeline"),
        (["lag", "--data-dir", "/d", "--since", "-1h"], "regroup pipeline"),
    ]
    monkeypatch.undo()

    # Without the 'spark' extra: one line saying how to install it, and a usage error status.
    monkeypatch.setitem(sys.modules, "pyspark", None)
    assert regroup_cli.main(["pipeline", "offsets", "--data-dir", "/d"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "regroup pipeline needs PySpark: install the 'spark' extra (pip install 'regroup[spark]')"


def test_all_writes_every_table_and_a_self_contained_report(
    spark: Any, scenario: Any, regroup_copy: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    until = str(scenario.snapshot_ms)
    assert (
        main(
            [
                "all",
                "--data-dir",
                str(regroup_copy),
                "--output",
                str(out),
                "--until",
                until,
                "--lag-samples",
                "5",
                "--stuck-after",
                "1ms",
            ]
        )
        == 0
    )
    for name in TABLES:
        assert any((out / name).glob("*.parquet")), name
    page = (out / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert "<svg" in page
    assert "g-churn" in page
    assert "g-rr" in page
    # The group summary, the stuck partition with its owner, and what retention took from g-slow.
    groups = _section(page, "Groups")
    assert '<td>g-stuck</td><td><span class="state Stable">Stable</span></td><td>classic</td>' in groups
    assert "8 records lost" in groups
    stuck = _section(page, "Stuck partitions")
    assert "<td>g-stuck</td><td>clicks-0</td><td>S-" in stuck
    assert "<td>g-slow</td><td>events-0</td>" in _section(page, "Retention risk")
    # Self-contained: no scripts, and nothing loaded from elsewhere.
    assert "<script" not in page.lower()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page, re.IGNORECASE)
    assert "@import" not in page
    assert "url(" not in page

    _check_in_a_browser(out / "report.html")

    report = tmp_path / "again.html"
    assert (
        main(
            [
                "report",
                "--data-dir",
                str(regroup_copy),
                "--output",
                str(out),
                "--from-tables",
                "--report",
                str(report),
            ]
        )
        == 0
    )
    assert "g-churn" in report.read_text()


def _check_in_a_browser(report: Path) -> None:
    """The report as headless Chromium lays it out: the summary row of each group with its cells shown,
    the charts drawn with a size, nothing wider than the window; a screenshot goes to test-artifacts/."""
    from selenium.webdriver.common.by import By

    with headless_chromium() as browser:
        browser.get(report.as_uri())
        heading = browser.find_element(By.XPATH, "//h2[text()='Groups']")
        summary = heading.find_element(By.XPATH, "following-sibling::table")
        rows = {
            cells[0].text: [c.text for c in cells]
            for row in summary.find_elements(By.TAG_NAME, "tr")
            if (cells := row.find_elements(By.TAG_NAME, "td"))
        }
        assert {"g-churn", "g-rr", "g-stuck", "g-slow"} <= rows.keys(), rows.keys()
        assert rows["g-stuck"][1:3] == ["Stable", "classic"], rows["g-stuck"]
        assert "records lost" in rows["g-slow"][-1], rows["g-slow"]
        charts = browser.find_elements(By.CSS_SELECTOR, "svg.chart")
        assert charts, "no chart in the report"
        assert all(c.size["width"] > 100 and c.size["height"] > 50 for c in charts), [c.size for c in charts]
        # A page as wide as its widest table: still readable without scrolling sideways at 1280 px.
        overflow = browser.execute_script("return document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"the report is {overflow} px wider than the window"
        browser.save_screenshot(str(artifacts_dir() / "pipeline-report.png"))


def _section(page: str, title: str) -> str:
    start = page.index(f"<h2>{title}</h2>")
    return page[start : page.index("</section>", start)]


def test_single_jobs_from_the_cluster(spark: Any, scenario: Any, settled: None, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    out = tmp_path / "out"
    assert main(["rebalances", "--bootstrap-server", scenario.bootstrap, "--output", str(out)]) == 0
    generations = pq.read_table(out / "rebalances").to_pylist()
    assert {r["group"] for r in generations} >= {"g-churn", "g-rr"}
    assert (out / "rebalance_frequency").is_dir()
    assert (
        main(
            [
                "expiring_offsets",
                "--bootstrap-server",
                scenario.bootstrap,
                "--output",
                str(out),
                "--retention-minutes",
                "1",
                "--horizon",
                "3650d",
            ]
        )
        == 0
    )
    expiring = pq.read_table(out / "expiring_offsets").to_pylist()
    assert {r["group"] for r in expiring} >= {"g-churn", "g-admin"}
    args = ["stuck_partitions", "--bootstrap-server", scenario.bootstrap, "--output", str(out)]
    assert main([*args, "--stuck-after", "1ms"]) == 0
    stuck = pq.read_table(out / "stuck_partitions").to_pylist()
    assert [(r["group"], r["topic"], r["partition"]) for r in stuck] == [("g-stuck", "clicks", 0)]
    # Not for as long as a day.
    assert main([*args, "--stuck-after", "1d"]) == 0
    assert pq.read_table(out / "stuck_partitions").num_rows == 0


def test_the_all_job_writes_the_same_tables_as_compute_all(
    spark: Any, scenario: Any, regroup_copy: Path, datadir_tables: Any, tmp_path: Path
) -> None:
    # write_all derives the other tables from the offsets table it wrote and read back; compute_all keeps
    # the history in memory instead.
    from regroup_pipeline.inputs import TimeWindow, from_datadir
    from regroup_pipeline.runner import write_all

    from .support import SHORT_RETENTION, rows

    out = tmp_path / "tables"
    inputs = from_datadir(spark, [str(regroup_copy)], TimeWindow(now_ms=scenario.snapshot_ms))
    seconds = write_all(inputs, out, out / "report.html", **SHORT_RETENTION)
    assert set(seconds) >= {"offsets", "lag", "rebalances", "report"}
    for name in TABLES:
        assert rows(spark.read.parquet(str(out / name))) == datadir_tables[name], name
    assert "g-churn" in (out / "report.html").read_text()


def test_a_second_all_in_the_session_reuses_the_code_spark_generated(
    spark: Any, scenario: Any, regroup_copy: Path, tmp_path: Path
) -> None:
    # One `all` generates ~400 classes, more than Spark's default cache of generated code (100) holds:
    # without the session's larger cache every run compiled ~400 again. With it, a run compiles only the
    # few whose code differs from the last run's (10-30 here; the first run's figure depends on what the
    # session ran before).
    from regroup_pipeline.inputs import TimeWindow, from_datadir
    from regroup_pipeline.runner import write_all

    compilations = spark._jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME()
    compiled = []
    jobs: list[int] = []
    for run in ("first", "second"):
        before = compilations.getCount()
        inputs = from_datadir(spark, [str(regroup_copy)], TimeWindow(now_ms=scenario.snapshot_ms))
        counts: dict[str, Any] = {}
        write_all(inputs, tmp_path / run, tmp_path / run / "report.html", counts=counts)
        compiled.append(compilations.getCount() - before)
        jobs.append(sum(c.jobs for c in counts.values()))
    assert compiled[1] <= 60, compiled
    # Each run counts its own Spark jobs only.
    assert 0 < jobs[1] < 1.5 * jobs[0], jobs


def test_all_plans_no_runtime_filters_and_reads_no_hidden_paths(
    spark: Any, scenario: Any, regroup_copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Spark takes a Python data source's output as 8 EiB, so without the session's setting the optimizer
    # puts runtime Bloom filters (`might_contain`) on joins with tables derived from one; and Spark warns
    # "All paths were ignored" about a path it reads whose last part starts with "_" or ".".
    from regroup_pipeline import runner
    from regroup_pipeline.inputs import TimeWindow, from_datadir

    plans: dict[str, str] = {}
    read: list[Path] = []
    write_table, read_table = runner.write_table, runner.read_table

    def planned(df: Any, output: Path, name: str) -> None:
        plans[name] = df._jdf.queryExecution().executedPlan().toString()
        write_table(df, output, name)

    def reading(spark: Any, directory: Path, schema: Any = None) -> Any:
        read.append(directory)
        return read_table(spark, directory, schema)

    monkeypatch.setattr(runner, "write_table", planned)
    monkeypatch.setattr(runner, "read_table", reading)
    out = tmp_path / "out"
    inputs = from_datadir(spark, [str(regroup_copy)], TimeWindow(now_ms=scenario.snapshot_ms))
    runner.write_all(inputs, out, out / "report.html")
    assert "stuck_partitions" in plans
    assert [name for name, plan in plans.items() if "might_contain" in plan] == []
    assert len(read) >= len(runner.WORK_DIRECTORIES)
    assert [d for d in read if d.name.startswith(("_", "."))] == []
    assert not (out / runner.WORK_ROOT).exists()


def test_small_tables_are_read_back_as_one_partition_and_large_ones_split(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pyspark.sql.types import LongType, StructField, StructType

    from regroup_pipeline import runner

    schema = StructType([StructField("id", LongType())])
    directory = tmp_path / "table"
    spark.range(0, 1000, 1, 4).write.parquet(str(directory))
    assert runner._read_small(spark, directory, schema).rdd.getNumPartitions() == 1
    monkeypatch.setattr(runner, "SINGLE_PARTITION_BYTES", 1000)
    split = runner._read_small(spark, directory, schema)
    assert split.rdd.getNumPartitions() > 1
    assert sorted(r.id for r in split.collect()) == list(range(1000))
