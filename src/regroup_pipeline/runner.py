"""Running a pipeline job from parsed command-line arguments: build the session, read the inputs once,
write the tables as Parquet (and the report), print a short summary."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession

from regroup_pipeline import jobs
from regroup_pipeline.cli import parse_time
from regroup_pipeline.inputs import DATA_TOPICS_PATTERN, Inputs, TimeWindow, from_datadir, from_kafka
from regroup_pipeline.session import build_session

__all__ = ["load_inputs", "persist_inputs", "run_job", "window_from_args", "write_table"]


def window_from_args(args: argparse.Namespace) -> TimeWindow:
    now = int(time.time() * 1000)
    since = parse_time(args.since, now_ms=now) if args.since else None
    until = parse_time(args.until, now_ms=now) if args.until else None
    return TimeWindow(since_ms=since, until_ms=until, now_ms=now)


def load_inputs(spark: SparkSession, args: argparse.Namespace, window: TimeWindow) -> Inputs:
    pattern = args.topics or DATA_TOPICS_PATTERN
    if args.data_dir:
        paths = [p for item in args.data_dir for p in item.split(",") if p]
        return from_datadir(spark, paths, window, topic_pattern=pattern)
    return from_kafka(
        spark, args.bootstrap_server, window, topic_pattern=pattern, options=dict(args.kafka_option)
    )


def persist_inputs(inputs: Inputs) -> Inputs:
    """Keep the inputs that jobs read more than once in memory (spilling to disk). Offset commits are
    read once, into the commit history that :func:`jobs.compute_all` keeps."""
    level = StorageLevel.MEMORY_AND_DISK
    return Inputs(
        commits=inputs.commits,
        groups=inputs.groups.persist(level),
        data=inputs.data.persist(level),
        partitions=inputs.partitions.persist(level),
        window=inputs.window,
    )


def write_table(df: DataFrame, output: Path, name: str) -> None:
    df.write.mode("overwrite").parquet(str(output / name))


def run_job(args: argparse.Namespace) -> int:
    started = time.monotonic()
    spark = build_session(args.master, kafka=bool(args.bootstrap_server), conf=dict(args.conf))
    output = Path(args.output)
    if args.job == "stream":
        from regroup_pipeline.streaming import run_stream

        return run_stream(spark, args)
    if args.job == "report" and args.from_tables:
        from regroup_pipeline.report import write_report_from_tables

        target = Path(args.report) if args.report else output / "report.html"
        write_report_from_tables(spark, output, target, now_ms=window_from_args(args).as_of_ms)
        print(f"report: {target}")
        return 0
    window = window_from_args(args)
    inputs = load_inputs(spark, args, window)
    if args.job in ("all", "report"):
        inputs = persist_inputs(inputs)
        tables = jobs.compute_all(
            inputs,
            retention_minutes=args.retention_minutes,
            horizon_ms=args.horizon,
            lag_samples=args.lag_samples,
            lag_interval_ms=args.lag_interval,
        )
        # The report reads the lag table again after it is written.
        lag_table = tables.lag.persist(StorageLevel.MEMORY_AND_DISK)
        tables = dataclasses.replace(tables, lag=lag_table, cached=(*tables.cached, lag_table))
        if args.job == "all":
            for name, df in tables.items():
                write_table(df, output, name)
                _show(df, name, args.show)
        from regroup_pipeline.report import write_report

        target = Path(args.report) if args.report else output / "report.html"
        write_report(tables, target, window, horizon_ms=args.horizon)
        tables.unpersist()
        print(f"report: {target}", file=sys.stderr)
    else:
        produced: list[tuple[str, DataFrame]]
        if args.job == "offsets":
            produced = [("offsets", jobs.offsets(inputs))]
        elif args.job == "lag":
            produced = [("lag", jobs.lag(inputs, samples=args.lag_samples, interval_ms=args.lag_interval))]
        elif args.job == "rebalances":
            reb = jobs.rebalances(inputs).persist(StorageLevel.MEMORY_AND_DISK)
            produced = [("rebalances", reb), ("rebalance_frequency", jobs.rebalance_frequency(reb))]
        elif args.job == "expiring_offsets":
            produced = [
                (
                    "expiring_offsets",
                    jobs.expiring_offsets(
                        inputs, retention_minutes=args.retention_minutes, horizon_ms=args.horizon
                    ),
                )
            ]
        elif args.job == "assignment_health":
            produced = [
                ("assignment_health", jobs.assignment_health(jobs.rebalances(inputs), inputs.partitions))
            ]
        else:
            raise ValueError(f"unknown job {args.job!r}")
        for name, df in produced:
            write_table(df, output, name)
            _show(df, name, args.show)
    print(f"{args.job}: tables in {output} ({time.monotonic() - started:.1f}s)", file=sys.stderr)
    return 0


def _show(df: DataFrame, name: str, rows: int) -> None:
    if rows > 0:
        print(f"== {name}")
        df.show(rows, truncate=False)
