"""Running a pipeline job from parsed command-line arguments: build the session, read the inputs once,
write the tables as Parquet (and the report), print a short summary."""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Final

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from regroup_pipeline import jobs, monitoring
from regroup_pipeline.datasource import HistoryOutputs, first_commit_ms, write_history
from regroup_pipeline.decode import HISTORY_ARROW_SCHEMA
from regroup_pipeline.inputs import (
    CONSUMER_GROUP_SCHEMA,
    DATA_TOPICS_PATTERN,
    GROUP_SCHEMA,
    Inputs,
    TimeWindow,
    from_datadir,
    from_kafka,
)
from regroup_pipeline.offsetkeys import KEY_ARROW_SCHEMA, RUN_ARROW_SCHEMA, SAMPLE_ARROW_SCHEMA, LagGrid
from regroup_pipeline.report import parquet_bytes, read_table, write_report_from_tables
from regroup_pipeline.session import build_session
from regroup_pipeline.timespec import parse_time

__all__ = [
    "MONITORING_JOBS",
    "StepCounts",
    "load_inputs",
    "persist_inputs",
    "run_job",
    "window_from_args",
    "write_table",
]

# Where ``all`` keeps what the tasks that write the offsets table fold and decode on the way (per-key rows,
# commit runs, group records, each key's last record, the lag grid's samples; see
# datasource.HistoryOutputs) while it runs; removed when it is done. They sit
# in a directory whose name starts with "_", which Spark and Hadoop skip when they list the output directory,
# while their own names do not: Spark warns "All paths were ignored" about a path it reads whose last part
# starts with "_" or ".".
WORK_ROOT: Final = "_work"
WORK_DIRECTORIES: Final = {
    "keys": "offset_keys",
    "runs": "commit_runs",
    "group_records": "group_records",
    "consumer_group_records": "consumer_group_records",
    "latest": "latest_offsets",
    "samples": "lag_samples",
}
MONITORING_JOBS: Final = (
    "lag_trend",
    "retention_risk",
    "stuck_partitions",
    "member_commits",
    "group_summary",
)


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


def persist_inputs(inputs: Inputs, *, group_records: bool = True) -> Inputs:
    """Keep the inputs that jobs read more than once in memory (spilling to disk); the group records only
    with ``group_records`` (not when they are read from Parquet already). Offset commits are read once,
    into the commit history that :func:`jobs.compute_all` keeps."""
    level = StorageLevel.MEMORY_AND_DISK
    consumer_groups = inputs.consumer_groups
    return dataclasses.replace(
        inputs,
        groups=inputs.groups.persist(level) if group_records else inputs.groups,
        data=inputs.data.persist(level),
        partitions=inputs.partitions.persist(level),
        consumer_groups=consumer_groups.persist(level)
        if consumer_groups is not None and group_records
        else consumer_groups,
    )


def unpersist_inputs(inputs: Inputs) -> None:
    """Release what :func:`persist_inputs` kept."""
    for df in (inputs.groups, inputs.data, inputs.partitions, inputs.consumer_groups):
        if df is not None:
            df.unpersist()


# Up to this many bytes of Parquet, a table the tasks of ``all`` wrote on the way is read back as one
# partition: a single-partition input satisfies every grouping Spark asks of it, so the aggregations,
# windows and joins over the group records, per-key rows and commit runs (a few MB for 10M commits) run
# without the shuffles (each a stage and a job of its own under adaptive execution) that two or more
# partitions need. Larger tables keep Spark's split, across the cores or the cluster.
SINGLE_PARTITION_BYTES: Final = 32 * 2**20


def _read_small(spark: SparkSession, directory: Path, schema: StructType) -> DataFrame:
    df = read_table(spark, directory, schema)
    return df.coalesce(1) if (parquet_bytes(directory) or 0) <= SINGLE_PARTITION_BYTES else df


# Tables ``all`` writes at once. Most of its jobs run a task or two (the tables derived from the history
# are small), and between them the driver plans, optimises and compiles the next query on one core: with
# two tables under way, one's planning overlaps the other's tasks. Spark runs their jobs side by side and
# computes a table they share (the cached intermediates) once, the other waiting for its blocks.
TABLE_WRITERS: Final = 2


def write_table(df: DataFrame, output: Path, name: str) -> None:
    df.write.mode("overwrite").parquet(str(output / name))


@dataclasses.dataclass(frozen=True, slots=True)
class StepCounts:
    """What one step of :func:`write_all` ran: Spark jobs, stages that ran tasks, and tasks."""

    jobs: int
    stages: int
    tasks: int


class _Steps:
    """Seconds per step and, when ``counts`` is given, the Spark jobs each step ran (its jobs carry the
    step's job group)."""

    def __init__(self, spark: SparkSession, counts: dict[str, StepCounts] | None) -> None:
        self.sc = spark.sparkContext
        self.run = uuid.uuid4().hex
        self.seconds: dict[str, float] = {}
        self.counts = counts

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        # A uuid per run: a later run's _Steps can get this one's id(), and would count this run's jobs too.
        group = f"regroup-pipeline-{name}-{self.run}"
        previous = self.sc.getLocalProperty("spark.jobGroup.id")
        if self.counts is not None:
            self.sc.setLocalProperty("spark.jobGroup.id", group)
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start
            if self.counts is not None:
                self.sc.setLocalProperty("spark.jobGroup.id", previous)  # type: ignore[arg-type]
                self.counts[name] = self._count(group, self.counts.get(name))

    def _count(self, group: str, before: StepCounts | None) -> StepCounts:
        tracker = self.sc.statusTracker()
        job_ids = tracker.getJobIdsForGroup(group)
        stage_ids = {s for j in job_ids if (job := tracker.getJobInfo(j)) is not None for s in job.stageIds}
        stages = [stage for s in stage_ids if (stage := tracker.getStageInfo(s)) is not None]
        ran = [s for s in stages if s.numCompletedTasks > 0]
        jobs = len(job_ids) + (before.jobs if before else 0)
        return StepCounts(
            jobs=jobs,
            stages=len(ran) + (before.stages if before else 0),
            tasks=sum(s.numCompletedTasks for s in ran) + (before.tasks if before else 0),
        )


def write_all(
    inputs: Inputs,
    output: Path,
    report: Path,
    *,
    retention_minutes: int = jobs.DEFAULT_RETENTION_MINUTES,
    horizon_ms: int = jobs.DEFAULT_HORIZON_MS,
    lag_samples: int = jobs.DEFAULT_LAG_SAMPLES,
    lag_interval_ms: int | None = None,
    stuck_after_ms: int = monitoring.DEFAULT_STUCK_AFTER_MS,
    show: int = 0,
    counts: dict[str, StepCounts] | None = None,
) -> dict[str, float]:
    """The ``all`` job: every table written to ``output`` as Parquet, then the report drawn from them.
    Returns the seconds each step took; ``counts``, when given, receives the Spark jobs each ran.

    Without ``since`` the offsets table is the whole commit history, which the other tables derive from:
    it is written first, straight from the input (from a data directory by the tasks that decode it, see
    :func:`~regroup_pipeline.datasource.write_history`), and read back by the others (Parquet is
    columnar, so each reads only the columns it needs) instead of being cached in memory.
    """
    spark = inputs.commits.sparkSession
    steps = _Steps(spark, counts)
    history = folded = None
    work = {name: output / WORK_ROOT / directory for name, directory in WORK_DIRECTORIES.items()}
    decoded_groups = False
    if inputs.window.since_ms is None:
        with steps.step("offsets"):
            schema = None
            if inputs.history_options is not None:
                # The lag grid starts at the first commit, which the tasks that read the commits learn
                # together with their samples: they sample at the grid of the first commit that the
                # partitions' starts tell, which is the grid when that was the earliest (the lag rows
                # use the samples only then). They look the samples up in the data topics' records when
                # those are few enough to broadcast.
                first = first_commit_ms(inputs.history_options)
                grid = (
                    LagGrid.spanning(first, inputs.window.as_of_ms, lag_samples, lag_interval_ms)
                    if first is not None
                    else None
                )
                records = jobs.data_record_index(inputs) if grid is not None else None
                sampling = grid is not None and records is not None
                outputs = HistoryOutputs(
                    str(output / "offsets"),
                    **{n: str(d) for n, d in work.items() if sampling or n != "samples"},
                )
                written = write_history(
                    spark, dict(inputs.history_options), outputs, grid if sampling else None, records
                )
                schema = from_arrow_schema(HISTORY_ARROW_SCHEMA)
                folded = jobs.Folded(
                    keys=_read_small(spark, work["keys"], from_arrow_schema(KEY_ARROW_SCHEMA)),
                    first_record_ms=written.first_record_ms,
                    runs=_read_small(spark, work["runs"], from_arrow_schema(RUN_ARROW_SCHEMA)),
                    latest=_read_small(spark, work["latest"], schema),
                    grid=grid if sampling else None,
                    samples=_read_small(spark, work["samples"], from_arrow_schema(SAMPLE_ARROW_SCHEMA))
                    if sampling
                    else None,
                    records=records,
                )
                # The same records the data source would decode again, read back as Parquet.
                inputs = dataclasses.replace(
                    inputs,
                    groups=_read_small(spark, work["group_records"], GROUP_SCHEMA),
                    consumer_groups=_read_small(spark, work["consumer_group_records"], CONSUMER_GROUP_SCHEMA),
                )
                decoded_groups = True
            else:
                write_table(jobs.offsets(inputs), output, "offsets")
            history = read_table(spark, output / "offsets", schema)
    inputs = persist_inputs(inputs, group_records=not decoded_groups)
    with steps.step("plan"):
        tables = jobs.compute_all(
            inputs,
            retention_minutes=retention_minutes,
            horizon_ms=horizon_ms,
            lag_samples=lag_samples,
            lag_interval_ms=lag_interval_ms,
            stuck_after_ms=stuck_after_ms,
            history=history,
            folded=folded,
        )

    def write(name: str, df: DataFrame) -> None:
        with steps.step(name):
            write_table(df, output, name)

    to_write = [(name, df) for name, df in tables.items() if name != "offsets" or history is None]
    with ThreadPoolExecutor(TABLE_WRITERS, thread_name_prefix="regroup-table") as writers:
        for done in [writers.submit(write, name, df) for name, df in to_write]:
            done.result()
    for name, df in tables.items():
        _show(df, name, show)
    tables.unpersist()
    unpersist_inputs(inputs)
    jobs.release_lookups()
    shutil.rmtree(output / WORK_ROOT, ignore_errors=True)
    with steps.step("report"):
        write_report_from_tables(spark, output, report, inputs.window, horizon_ms=horizon_ms)
    return steps.seconds


def run_job(args: argparse.Namespace) -> int:
    started = time.monotonic()
    spark = build_session(
        args.master,
        kafka=bool(args.bootstrap_server),
        conf=dict(args.conf),
        one_shot=args.job != "stream",
    )
    output = Path(args.output)
    if args.job == "stream":
        from regroup_pipeline.streaming import run_stream

        return run_stream(spark, args)
    window = window_from_args(args)
    # Only the report-writing jobs have --report.
    target = Path(args.report) if getattr(args, "report", None) else output / "report.html"
    if args.job == "report" and args.from_tables:
        write_report_from_tables(spark, output, target, window, horizon_ms=args.horizon)
        print(f"report: {target}")
        return 0
    inputs = load_inputs(spark, args, window)
    if args.job == "all":
        write_all(
            inputs,
            output,
            target,
            retention_minutes=args.retention_minutes,
            horizon_ms=args.horizon,
            lag_samples=args.lag_samples,
            lag_interval_ms=args.lag_interval,
            stuck_after_ms=args.stuck_after,
            show=args.show,
        )
        print(f"report: {target}", file=sys.stderr)
    elif args.job == "report":
        inputs = persist_inputs(inputs)
        tables = jobs.compute_all(
            inputs,
            retention_minutes=args.retention_minutes,
            horizon_ms=args.horizon,
            lag_samples=args.lag_samples,
            lag_interval_ms=args.lag_interval,
            stuck_after_ms=args.stuck_after,
        )
        # The report reads the lag table twice: keep it rather than compute it again.
        lag_table = tables.lag.persist(StorageLevel.MEMORY_AND_DISK)
        tables = dataclasses.replace(tables, lag=lag_table, cached=(*tables.cached, lag_table))
        from regroup_pipeline.report import write_report

        write_report(tables, target, window, horizon_ms=args.horizon)
        tables.unpersist()
        jobs.release_lookups()
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
                (
                    "assignment_health",
                    jobs.assignment_health(
                        jobs.rebalances(inputs), inputs.partitions, inputs.partition_counts
                    ),
                )
            ]
        elif args.job == "consumer_group_members":
            produced = [("consumer_group_members", jobs.consumer_group_members(inputs))]
        elif args.job in MONITORING_JOBS:
            watched = jobs.monitoring_tables(
                inputs,
                horizon_ms=getattr(args, "horizon", jobs.DEFAULT_HORIZON_MS),
                stuck_after_ms=getattr(args, "stuck_after", monitoring.DEFAULT_STUCK_AFTER_MS),
            )
            produced = [(args.job, getattr(watched, args.job))]
        else:
            raise ValueError(f"unknown job {args.job!r}")
        for name, df in produced:
            write_table(df, output, name)
            _show(df, name, args.show)
        jobs.release_lookups()
    print(f"{args.job}: tables in {output} ({time.monotonic() - started:.1f}s)", file=sys.stderr)
    return 0


def _show(df: DataFrame, name: str, rows: int) -> None:
    if rows > 0:
        print(f"== {name}")
        df.show(rows, truncate=False)
