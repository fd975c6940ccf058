"""The ``regroup`` command line: one entry point, one subcommand per job.

Subcommands import their modules lazily so ``regroup --help`` stays fast.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from regroup import __version__

Handler = Callable[[argparse.Namespace], int]


def _bench_codec(args: argparse.Namespace) -> int:
    from regroup.bench.codec import main as codec_main

    return codec_main(json_output=args.json, iterations=args.iterations)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="regroup",
        description=(
            "regroup: a Kafka-compatible broker whose heart is a faithful consumer-group coordinator. "
            "It speaks the Kafka wire protocol, so Kafka clients and tools work against it unchanged."
        ),
    )
    parser.add_argument("--version", action="version", version=f"regroup {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    bench = sub.add_parser("bench", help="measure regroup (codec speed now; broker scenarios later)")
    bench_sub = bench.add_subparsers(dest="scenario", metavar="SCENARIO", required=True)
    codec = bench_sub.add_parser(
        "codec", help="µs per encode/decode of hot-path messages, regroup vs kafka-python side by side"
    )
    codec.add_argument("--json", action="store_true", help="print machine-readable JSON instead of a table")
    codec.add_argument("--iterations", type=int, default=0, help="iterations per measurement (0: auto)")
    codec.set_defaults(handler=_bench_codec)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 0
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
