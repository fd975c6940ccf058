"""``regroup groups``: a drop-in for Kafka's kafka-consumer-groups.sh against any Kafka-compatible cluster.

Exit codes follow Kafka's tool: 1 for command-line errors, 0 once the command ran (even when it printed
an ``Error:``), and 1 when no broker can be reached. This module imports the rest of the tool only when
the command runs, so registering it keeps ``regroup --help`` fast.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from regroup.admin.client import AdminClient
    from regroup.admin.command import Settings
    from regroup.admin.options import Options

__all__ = ["add_parser", "execute", "main"]

HELP = "manage consumer groups on any Kafka-compatible cluster (a drop-in for kafka-consumer-groups.sh)"


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """Register ``groups``; it takes its arguments verbatim and parses them the way Kafka's tool does."""
    parser = subparsers.add_parser(
        "groups",
        help=HELP,
        description=HELP + " Run 'regroup groups --help' for its options.",
        add_help=False,
        prefix_chars="\0",
    )
    parser.add_argument("groups_args", nargs=argparse.REMAINDER)
    parser.set_defaults(handler=lambda args: main(args.groups_args))
    return parser


def _version() -> str:
    try:
        return importlib.metadata.version("regroup")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    from regroup.admin.command import CommandFailed, UnsupportedSecurityError, settings_from
    from regroup.admin.options import HelpRequested, UsageError, build_parser, parse_options

    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        opts = parse_options(args, warnings=err)
    except HelpRequested as request:
        if request.args == ("version",):
            out.write(f"regroup {_version()}\n")
        else:
            out.write(build_parser().format_help())
        return 0
    except UsageError as exc:
        _usage_error(str(exc), err)
        return 1
    try:
        settings = settings_from(opts, err)
    except CommandFailed as exc:
        out.write(f"\nError: Executing consumer group command failed due to {exc}\n")
        return 0
    except UnsupportedSecurityError as exc:
        err.write(f"Error: {exc}\n")
        return 1
    return asyncio.run(_run(opts, settings, out, err))


async def _run(opts: Options, settings: Settings, out: TextIO, err: TextIO) -> int:
    from regroup.admin.client import AdminClient

    try:
        admin = AdminClient(
            settings.bootstrap_servers,
            timeout_ms=settings.timeout_ms,
            client_id=settings.client_id,
            request_timeout_ms=settings.request_timeout_ms,
            retry_backoff_ms=settings.retry_backoff_ms,
        )
    except ValueError as exc:
        err.write(f"Error: invalid --bootstrap-server: {exc}\n")
        return 1
    try:
        return await execute(opts, admin, out, err)
    finally:
        await admin.close()


async def execute(opts: Options, admin: AdminClient, out: TextIO, err: TextIO) -> int:
    """Run the parsed command and map its outcome to Kafka's output and exit code."""
    from regroup.admin.client import AdminError, BrokerUnreachableError
    from regroup.admin.command import CommandFailed, GroupsCommand
    from regroup.admin.history import HistoryUnavailable
    from regroup.admin.options import UsageError

    try:
        await GroupsCommand(opts, admin, out, err).run()
    except UsageError as exc:
        _usage_error(str(exc), err)
        return 1
    except CommandFailed as exc:
        out.write(f"\nError: Executing consumer group command failed due to {exc}\n")
    except AdminError as exc:
        out.write(f"\nError: Executing consumer group command failed due to {exc.java}\n")
    except (BrokerUnreachableError, HistoryUnavailable) as exc:
        err.write(f"Error: {exc}\n")
        return 1
    return 0


def _usage_error(message: str, err: TextIO) -> None:
    from regroup.admin.options import build_parser

    # Kafka's CommandLineUtils.printUsageAndExit: the message, then the option table, on stderr.
    err.write(message + "\n")
    err.write(build_parser().format_help())
