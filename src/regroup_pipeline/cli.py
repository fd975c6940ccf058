"""``regroup pipeline <job> …`` and ``python -m regroup_pipeline <job> …``.

Importing this module is cheap (argparse only): Spark is imported when a job runs, so the broker's CLI can
offer the subcommand whether or not the ``spark`` extra is installed.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any, Final

from regroup_pipeline.timespec import parse_duration

__all__ = ["JOBS", "add_subparser", "configure_parser", "main", "run"]

JOBS: Final = {
    "offsets": "committed offset per group/topic/partition: the full commit history",
    "lag": "log-end offset minus committed offset, and time lag, per group/topic/partition over time",
    "rebalances": "one row per generation (members, assignments, joins/leaves) and per-group frequency",
    "expiring_offsets": "offsets that offsets.retention.minutes removes within a horizon",
    "assignment_health": "per generation: subscribed partitions unassigned or assigned twice",
    "lag_trend": "per group/partition: consume, produce and lag rates over the window, time to catch up",
    "retention_risk": "per group/partition: distance from the log start, records lost, data-loss forecast",
    "stuck_partitions": "committed offsets unchanged for --stuck-after while the log end grows, with owner",
    "member_commits": "commits and commit rate per member (credited by the assignment in force)",
    "group_summary": "per group: state, protocol, total lag and trend, stuck partitions, retention risk",
    "consumer_group_members": "KIP-848 consumer groups' current members: subscription, epoch, assignment",
    "report": "a self-contained HTML report (group summary, lag over time, rebalances, stuck partitions, …)",
    "all": "every table above plus the report, sharing one read of the inputs",
    "stream": "Structured Streaming: keep lag and rebalances current",
    "bench": "decode throughput and end-to-end time on synthetic __consumer_offsets records",
}
_DESCRIPTION: Final = (
    "Consumer-group analytics on Spark, from a data directory or any Kafka-compatible cluster."
)
_SPARK_MISSING: Final = (
    "regroup pipeline needs PySpark: install the 'spark' extra (pip install 'regroup[spark]')"
)


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    return key.strip(), value


def _add_spark_options(p: argparse.ArgumentParser) -> None:
    spark = p.add_argument_group("Spark")
    spark.add_argument(
        "--master",
        default="local[*]",
        help="Spark master URL (default: local[*]; e.g. spark://host:7077, yarn)",
    )
    spark.add_argument(
        "--conf",
        action="append",
        type=_key_value,
        default=[],
        metavar="KEY=VALUE",
        help="extra Spark configuration (repeatable)",
    )


def _add_input_options(p: argparse.ArgumentParser) -> None:
    src = p.add_argument_group("input (exactly one)")
    which = src.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--data-dir",
        action="append",
        metavar="PATH",
        help="a broker data directory (log.dirs; repeatable: every log dir of a broker, or of every node "
        "of a cluster, whose replicas are read once), read by the 'regroup' Python Data Source",
    )
    which.add_argument(
        "--bootstrap-server",
        metavar="HOST:PORT[,…]",
        help="a Kafka-compatible cluster, read through Spark's Kafka source",
    )
    src.add_argument(
        "--kafka-option",
        action="append",
        type=_key_value,
        default=[],
        metavar="KEY=VALUE",
        help="option for Spark's Kafka source, e.g. kafka.security.protocol=SSL (repeatable)",
    )
    src.add_argument(
        "--topics",
        default=None,
        metavar="REGEX",
        help="data topics to read for log end offsets and record timestamps (default: all but internal)",
    )


def _add_window_options(p: argparse.ArgumentParser) -> None:
    win = p.add_argument_group("time window")
    win.add_argument(
        "--since", metavar="TIME", help="output history from this instant (ISO 8601, epoch ms, now-2h)"
    )
    win.add_argument("--until", metavar="TIME", help="ignore records after this instant (default: now)")


def _add_job_options(p: argparse.ArgumentParser, job: str) -> None:
    if job in ("lag", "report", "all", "stream"):
        p.add_argument(
            "--lag-samples", type=int, default=60, help="lag samples over the window (default: 60)"
        )
        p.add_argument(
            "--lag-interval", type=parse_duration, default=None, help="sample lag every DURATION instead"
        )
    if job in ("expiring_offsets", "report", "all"):
        p.add_argument(
            "--retention-minutes",
            type=int,
            default=10080,
            help="the cluster's offsets.retention.minutes (default: 10080)",
        )
    if job in ("expiring_offsets", "retention_risk", "group_summary", "report", "all"):
        p.add_argument(
            "--horizon", type=parse_duration, default=parse_duration("24h"), help="look-ahead (default: 24h)"
        )
    if job in ("stuck_partitions", "group_summary", "report", "all"):
        p.add_argument(
            "--stuck-after",
            type=parse_duration,
            default=parse_duration("5m"),
            metavar="DURATION",
            help="a committed offset unchanged this long while the log end grows is stuck (default: 5m)",
        )
    if job in ("report", "all"):
        p.add_argument("--report", metavar="FILE", help="HTML file to write (default: <output>/report.html)")
    if job == "report":
        p.add_argument(
            "--from-tables",
            action="store_true",
            help="render from the Parquet tables already in --output instead of recomputing them",
        )


def _add_stream_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--checkpoint", required=True, metavar="DIR", help="Structured Streaming checkpoint directory"
    )
    p.add_argument(
        "--trigger", type=parse_duration, default=10_000, help="micro-batch interval (default: 10s)"
    )
    p.add_argument("--once", action="store_true", help="process what is there now, then stop")
    p.add_argument(
        "--commit-group",
        metavar="GROUP",
        help="also commit this stream's own progress to GROUP (needs --bootstrap-server)",
    )


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Add the job subcommands to ``parser``."""
    jobs = parser.add_subparsers(dest="job", metavar="JOB", required=True)
    for job, help_text in JOBS.items():
        p = jobs.add_parser(job, help=help_text, description=help_text)
        if job == "bench":
            p.add_argument("--records", type=int, default=10_000_000, help="synthetic records (default: 10M)")
            p.add_argument(
                "--baseline-records",
                type=int,
                default=None,
                help="records for the plain Python UDF baseline, a sample of about that many (default: all)",
            )
            p.add_argument(
                "--workdir", default=None, help="where to keep the synthetic data (default: a temp dir)"
            )
            p.add_argument("--json", action="store_true", help="print JSON instead of a table")
            p.add_argument("--master", default="local[2]", help="Spark master (default: local[2])")
            p.add_argument("--conf", action="append", type=_key_value, default=[], metavar="KEY=VALUE")
            continue
        _add_input_options(p)
        _add_window_options(p)
        _add_spark_options(p)
        p.add_argument(
            "--output",
            default="regroup-pipeline-out",
            metavar="DIR",
            help="directory of the Parquet tables (default: ./regroup-pipeline-out)",
        )
        p.add_argument("--show", type=int, default=0, metavar="N", help="also print the first N rows")
        if job == "stream":
            _add_stream_options(p)
        _add_job_options(p, job)


def run(args: argparse.Namespace) -> int:
    """Run the job ``args.job`` (Spark is imported here)."""
    try:
        import pyspark  # noqa: F401  # only checking that the extra is installed
    except ImportError:
        print(_SPARK_MISSING, file=sys.stderr)
        return 2
    if args.job == "bench":
        from regroup_pipeline.bench import run_bench

        return run_bench(args)
    from pyspark.errors import PySparkRuntimeError

    from regroup_pipeline.connector import ConnectorError
    from regroup_pipeline.runner import run_job

    try:
        return run_job(args)
    except ConnectorError as exc:
        print(f"regroup pipeline: {exc}", file=sys.stderr)
        return 1
    except PySparkRuntimeError as exc:
        if exc.getCondition() != "JAVA_GATEWAY_EXITED":
            raise
        # Spark's JVM wrote why it exited (a package it could not resolve, a bad setting) to stderr.
        packages = dict(args.conf).get("spark.jars.packages")
        given = f" (spark.jars.packages={packages})" if packages else ""
        print(
            f"regroup pipeline: Spark's JVM exited while starting{given}; its output above says why",
            file=sys.stderr,
        )
        return 1


def add_subparser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``pipeline`` to an argparse subparsers object (the handler is stored as ``handler``)."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "pipeline",
        help="consumer-group analytics on Spark: offsets, lag, rebalances, expiring offsets, report",
        description=_DESCRIPTION,
    )
    configure_parser(p)
    p.set_defaults(handler=run)
    return p


def main(argv: Sequence[str] | None = None, *, prog: str = "python -m regroup_pipeline") -> int:
    parser = argparse.ArgumentParser(prog=prog, description=_DESCRIPTION)
    configure_parser(parser)
    return run(parser.parse_args(argv))
