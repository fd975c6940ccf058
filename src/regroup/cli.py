"""The ``regroup`` command line: one entry point, one subcommand per job.

Subcommands import their modules lazily so ``regroup --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence

from regroup import __version__

Handler = Callable[[argparse.Namespace], int]


class _Version(argparse.Action):
    """``--version``: the version and which build runs (imports the group core only when asked)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        from regroup.build import describe

        print(f"regroup {__version__} ({describe()})")
        parser.exit()


def _bench_codec(args: argparse.Namespace) -> int:
    from regroup.bench.codec import main as codec_main

    return codec_main(json_output=args.json, iterations=args.iterations)


def _bench_produce_fetch(args: argparse.Namespace) -> int:
    from regroup.bench.produce_fetch import main as produce_fetch_main

    return produce_fetch_main(
        json_output=args.json,
        bootstrap=args.bootstrap,
        records=args.records,
        record_bytes=args.record_bytes,
        partitions=args.partitions,
        busy_partitions=args.busy_partitions,
        sequential=args.sequential,
        compression=args.compression,
        linger_ms=args.linger_ms,
        broker_overrides=args.broker_override,
        broker=args.broker,
        against=args.against,
        nodes=args.nodes,
        replication_factor=args.replication_factor,
    )


def _bench_cluster_failover(args: argparse.Namespace) -> int:
    from regroup.bench.cluster_failover import main as cluster_failover_main

    return cluster_failover_main(
        nodes=args.nodes,
        broker=args.broker,
        against=args.against,
        members=args.members,
        partitions=args.partitions,
        rounds=args.rounds,
        commit_interval_ms=args.commit_interval_ms,
        broker_config=dict(args.broker_config),
        timeout=args.timeout,
        json_output=args.json,
        progress=not args.quiet,
    )


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    return key.strip(), value


def _serve(args: argparse.Namespace) -> int:
    from regroup.broker.serve import run

    return run(args)


_PIPELINE_HELP = "consumer-group analytics on Spark: offsets, lag, rebalances, expiring offsets, report"


def _run_pipeline(argv: Sequence[str]) -> int:
    # regroup_pipeline is looked up by name, only when this subcommand runs: the broker never imports it
    # (an import-linter contract checks that, and counts an import statement even inside a function).
    # It parses its own arguments and reports a missing 'spark' extra itself.
    pipeline_cli = importlib.import_module("regroup_pipeline.cli")
    status: int = pipeline_cli.main(list(argv), prog="regroup pipeline")
    return status


def _pipeline(args: argparse.Namespace) -> int:
    return _run_pipeline(args.pipeline_args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="regroup",
        description=(
            "regroup: a Kafka-compatible broker whose heart is a faithful consumer-group coordinator. "
            "It speaks the Kafka wire protocol, so Kafka clients and tools work against it unchanged."
        ),
    )
    parser.add_argument(
        "--version", action=_Version, nargs=0, help="show regroup's version and build, then exit"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    from regroup.broker.serve import add_serve_command

    add_serve_command(sub, lambda serve: serve.set_defaults(handler=_serve))

    from regroup.admin.cli import add_parser as add_groups_command

    add_groups_command(sub)

    from regroup.cluster.cli import add_parser as add_cluster_command

    add_cluster_command(sub)

    bench = sub.add_parser(
        "bench",
        help="measure regroup: codecs, produce-fetch, and group-coordinator scenarios beside Apache Kafka",
    )
    bench_sub = bench.add_subparsers(dest="scenario", metavar="SCENARIO", required=True)
    codec = bench_sub.add_parser(
        "codec", help="µs per encode/decode of hot-path messages, regroup vs kafka-python side by side"
    )
    codec.add_argument("--json", action="store_true", help="print machine-readable JSON instead of a table")
    codec.add_argument("--iterations", type=int, default=0, help="iterations per measurement (0: auto)")
    codec.set_defaults(handler=_bench_codec)
    pf = bench_sub.add_parser(
        "produce-fetch",
        help="confluent-kafka producer (acks=all) and consumer through a broker: MB/s, p50/p99 latencies",
    )
    pf.add_argument(
        "--bootstrap", default=None, help="host:port of a running broker (default: start regroup serve)"
    )
    pf.add_argument("--records", type=int, default=100_000, help="records to produce (default: 100000)")
    pf.add_argument("--record-bytes", type=int, default=1024, help="value size in bytes (default: 1024)")
    pf.add_argument("--partitions", type=int, default=6, help="partitions of the topic (default: 6)")
    pf.add_argument(
        "--busy-partitions",
        type=int,
        default=0,
        help="produce to only this many of the partitions, the rest stay idle (default: all); one busy "
        "partition of a wide replicated topic measures what each replication round trip costs",
    )
    pf.add_argument(
        "--sequential",
        action="store_true",
        help="wait for each record's acknowledgement before sending the next: records/s is then one over "
        "the produce round trip (with acks=all and replicas, one replication round trip)",
    )
    pf.add_argument(
        "--compression",
        default="none",
        choices=["none", "gzip", "snappy", "lz4", "zstd"],
        help="producer compression (default: none)",
    )
    pf.add_argument("--linger-ms", type=int, default=5, help="producer linger.ms (default: 5)")
    pf.add_argument(
        "--broker",
        choices=["regroup", "kafka"],
        default="regroup",
        help="the broker to start when no --bootstrap is given (default: regroup)",
    )
    pf.add_argument(
        "--against", choices=["kafka", "regroup"], help="also run on this broker and print ratios"
    )
    pf.add_argument(
        "--nodes",
        type=int,
        default=1,
        help="start a cluster of this many nodes (regroup: plus a private etcd; Kafka: plus one KRaft "
        "controller) instead of one broker (default: 1)",
    )
    pf.add_argument(
        "--replication-factor",
        type=int,
        default=-1,
        help="replicas of the benchmark's topic (default: the broker's default.replication.factor, which "
        "a started cluster sets to min(3, nodes))",
    )
    pf.add_argument(
        "--broker-override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="setting for the brokers the benchmark starts (repeatable), e.g. log.flush.interval.messages=1",
    )
    pf.add_argument("--json", action="store_true", help="print machine-readable JSON instead of a table")
    pf.set_defaults(handler=_bench_produce_fetch)

    cf = bench_sub.add_parser(
        "cluster-failover",
        help="SIGKILL the node coordinating a committing group: time to a new coordinator, to Stable, to "
        "the first commit",
    )
    cf.add_argument("--nodes", type=int, default=3, help="nodes of the cluster (default: 3)")
    cf.add_argument(
        "--broker", choices=["regroup", "kafka"], default="regroup", help="the cluster to start (regroup)"
    )
    cf.add_argument(
        "--against", choices=["kafka", "regroup"], help="also run on this cluster and print ratios"
    )
    cf.add_argument("--members", type=int, default=3, help="confluent-kafka consumers in the group (3)")
    cf.add_argument("--partitions", type=int, default=6, help="partitions of the group's topic (6)")
    cf.add_argument("--rounds", type=int, default=3, help="coordinator kills per cluster (3)")
    cf.add_argument(
        "--commit-interval-ms", type=int, default=100, help="each member commits this often (100)"
    )
    cf.add_argument(
        "--broker-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        type=_key_value,
        help="extra setting for every node (repeatable)",
    )
    cf.add_argument("--timeout", type=float, default=120.0, help="give up a step after this many s (120)")
    cf.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    cf.add_argument("--json", action="store_true", help="print machine-readable JSON instead of a table")
    cf.set_defaults(handler=_bench_cluster_failover)

    from regroup.bench.cli import add_scenarios

    add_scenarios(bench_sub)

    pipeline = sub.add_parser(
        "pipeline",
        help=_PIPELINE_HELP,
        description=f"{_PIPELINE_HELP}; `regroup pipeline --help` lists the jobs",
        add_help=False,  # --help belongs to the pipeline's own parser
    )
    pipeline.add_argument("pipeline_args", nargs=argparse.REMAINDER, metavar="JOB …")
    pipeline.set_defaults(handler=_pipeline)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["pipeline"]:
        # Straight through: argparse's REMAINDER would not pass on options before the job, like --help.
        return _run_pipeline(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 0
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
