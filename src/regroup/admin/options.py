"""Command-line options of ``regroup groups``: kafka-consumer-groups.sh's, validated in the same order
with the same messages (``ConsumerGroupCommandOptions.checkArgs`` of Kafka 4.3), plus the regroup extensions
``--output`` and ``--history`` (an action of its own, outside Kafka's list of actions).

Values keep their raw text here; numbers are converted when the command starts, which is also when
Kafka's tool reports a malformed number.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NoReturn, TextIO

__all__ = [
    "DESCRIPTION",
    "EXECUTE_MISSING_WARNING",
    "HelpRequested",
    "Options",
    "UsageError",
    "build_parser",
    "parse_options",
]

DESCRIPTION = (
    "This tool helps to list all consumer groups, describe a consumer group, delete consumer group info, "
    "or reset consumer group offsets."
)

EXECUTE_MISSING_WARNING = (
    "WARN: No action will be performed as the --execute option is missing. In version 5.0, this command "
    "will require either --dry-run or --execute to be specified. You should add the --dry-run option "
    "explicitly if you are scripting this command and want to keep the current default behavior without "
    "prompting."
)

ACTIONS = ("list", "describe", "delete", "reset-offsets", "delete-offsets")
SCENARIOS = (
    "to-offset",
    "to-datetime",
    "by-duration",
    "to-earliest",
    "to-latest",
    "to-current",
    "shift-by",
    "from-file",
)


class UsageError(Exception):
    """A command line Kafka's tool rejects with its usage text and exit code 1."""


class HelpRequested(Exception):
    """``--help``: print the usage on stdout and exit 0."""


@dataclass(slots=True)
class Options:
    """The parsed command line (raw values; see :mod:`regroup.admin.command` for conversions)."""

    bootstrap_server: list[str] = field(default_factory=list)
    command_config: list[str] = field(default_factory=list)
    group: list[str] = field(default_factory=list)
    topic: list[str] = field(default_factory=list)
    all_topics: bool = False
    all_groups: bool = False
    timeout: list[str] = field(default_factory=list)
    list_groups: bool = False
    describe: bool = False
    delete: bool = False
    reset_offsets: bool = False
    delete_offsets: bool = False
    dry_run: bool = False
    execute: bool = False
    export: bool = False
    to_offset: list[str] = field(default_factory=list)
    to_datetime: list[str] = field(default_factory=list)
    by_duration: list[str] = field(default_factory=list)
    shift_by: list[str] = field(default_factory=list)
    from_file: list[str] = field(default_factory=list)
    to_earliest: bool = False
    to_latest: bool = False
    to_current: bool = False
    members: bool = False
    verbose: bool = False
    offsets: bool = False
    # None: absent; "" present without a value.
    state: list[str] = field(default_factory=list)
    type: list[str] = field(default_factory=list)
    output: list[str] = field(default_factory=list)
    history: bool = False
    health: bool = False

    def has(self, name: str) -> bool:
        """Whether option ``--name`` was given."""
        attr = "list_groups" if name == "list" else name.replace("-", "_")
        return bool(getattr(self, attr))

    @property
    def action(self) -> str:
        if self.history:
            return "history"
        return next(a for a in ACTIONS if self.has(a))


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def _opt(name: str) -> str:
    # joptsimple prints an OptionSpec as the list of its names.
    return f"[{name}]"


def build_parser(prog: str = "regroup groups") -> argparse.ArgumentParser:
    p = _Parser(
        prog=prog,
        description=DESCRIPTION,
        add_help=False,
        allow_abbrev=True,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(
            "regroup extension: --output json prints one JSON document instead of the tables "
            "(see regroup.admin.jsonout for its shape).\n"
            "Only PLAINTEXT listeners are supported: --command-config files asking for SSL or SASL "
            "are refused."
        ),
    )
    ap = p.add_argument
    ap("--bootstrap-server", action="append", default=[], metavar="<String: server to connect to>",
       help="REQUIRED: The server(s) to connect to.")  # fmt: skip
    ap("--command-config", action="append", default=[], metavar="<String: command config property file>",
       help="Property file containing configs to be passed to Admin Client and Consumer.")  # fmt: skip
    ap("--group", action="append", default=[], metavar="<String: consumer group>",
       help="The consumer group we wish to act on.")  # fmt: skip
    ap("--topic", action="append", default=[], metavar="<String: topic>",
       help="The topic whose consumer group information should be deleted or topic whose should be included "
       "in the reset offset process. In `reset-offsets` case, partitions can be specified using this format: "
       "`topic1:0,1,2`, where 0,1,2 are the partition to be included in the process. Reset-offsets also "
       "supports multiple topic inputs.")  # fmt: skip
    ap("--all-topics", action="store_true",
       help="Consider all topics assigned to a group in the `reset-offsets` process.")  # fmt: skip
    ap("--list", action="store_true", help="List all consumer groups.")
    ap("--describe", action="store_true",
       help="Describe consumer group and list offset lag (number of messages not yet processed) related to "
       "given group.")  # fmt: skip
    ap("--all-groups", action="store_true", help="Apply to all consumer groups.")
    ap("--delete", action="store_true",
       help="Pass in groups to delete topic partition offsets and ownership information over the entire "
       "consumer group. For instance --group g1 --group g2")  # fmt: skip
    ap("--timeout", action="append", default=[], metavar="<Long: timeout (ms)>",
       help="The timeout that can be set for some use cases. For example, it can be used when describing the "
       "group to specify the maximum amount of time in milliseconds to wait before the group stabilizes "
       "(when the group is just created, or is going through some changes). (default: 30000)")  # fmt: skip
    ap("--reset-offsets", action="store_true",
       help="Reset offsets of consumer group. Supports one consumer group at the time, and instances should "
       "be inactive. Has 2 execution options: --dry-run (the default) to plan which offsets to reset, and "
       "--execute to update the offsets. Additionally, the --export option is used to export the results "
       "to a CSV format. You must choose one of the following reset specifications: --to-datetime, "
       "--by-duration, --to-earliest, --to-latest, --shift-by, --from-file, --to-current, --to-offset. To "
       "define the scope use --all-topics or --topic. One scope must be specified unless you use "
       "'--from-file'.")  # fmt: skip
    ap("--delete-offsets", action="store_true",
       help="Delete offsets of consumer group. Supports one consumer group at the time, and multiple "
       "topics.")  # fmt: skip
    ap("--dry-run", action="store_true",
       help="Only show results without executing changes on Consumer Groups. Supported operations: "
       "reset-offsets.")  # fmt: skip
    ap("--execute", action="store_true", help="Execute operation. Supported operations: reset-offsets.")
    ap("--export", action="store_true",
       help="Export operation execution to a CSV file. Supported operations: reset-offsets.")  # fmt: skip
    ap("--to-offset", action="append", default=[], metavar="<Long: offset>",
       help="Reset offsets to a specific offset.")  # fmt: skip
    ap("--from-file", action="append", default=[], metavar="<String: path to CSV file>",
       help="Reset offsets to values defined in CSV file.")  # fmt: skip
    ap("--to-datetime", action="append", default=[], metavar="<String: datetime>",
       help="Reset offsets to offset from datetime. Format: 'YYYY-MM-DDTHH:mm:SS.sss' (UTC unless a zone "
       "such as Z, +01:00 or -05 follows).")  # fmt: skip
    ap("--by-duration", action="append", default=[], metavar="<String: duration>",
       help="Reset offsets to offset by duration from current timestamp. Format: 'PnDTnHnMnS'")  # fmt: skip
    ap("--to-earliest", action="store_true", help="Reset offsets to earliest offset.")
    ap("--to-latest", action="store_true", help="Reset offsets to latest offset.")
    ap("--to-current", action="store_true", help="Reset offsets to current offset.")
    ap("--shift-by", action="append", default=[], metavar="<Long: number-of-offsets>",
       help="Reset offsets shifting current offset by 'n', where 'n' can be positive or "
       "negative.")  # fmt: skip
    ap("--members", action="store_true",
       help="Describe members of the group. This option may be used with '--describe' and "
       "'--bootstrap-server' options only.")  # fmt: skip
    ap("--verbose", action="store_true",
       help="Provide additional information, if any, when describing the group. This option may be used with "
       "'--offsets'/'--members'/'--state' and '--bootstrap-server' options only.")  # fmt: skip
    ap("--offsets", action="store_true",
       help="Describe the group and list all topic partitions in the group along with their offset lag. This "
       "is the default sub-action of and may be used with '--describe' and '--bootstrap-server' options "
       "only.")  # fmt: skip
    ap("--state", action="append", nargs="?", const="", default=[], metavar="String",
       help="When specified with '--describe', includes the state of the group. When specified with "
       "'--list', it displays the state of all groups. It can also be used to list groups with specific "
       "states (e.g. --list --state stable,empty). This option may be used with '--describe', '--list' and "
       "'--bootstrap-server' options only.")  # fmt: skip
    ap("--type", action="append", nargs="?", const="", default=[], metavar="String",
       help="When specified with '--list', it displays the types of all the groups. It can also be used to "
       "list groups with specific types (e.g. --list --type classic,consumer). This option may be used with "
       "the '--list' option only.")  # fmt: skip
    ap("--output", action="append", default=[], metavar="{table,json}",
       help="regroup extension: 'json' prints one JSON document on stdout instead of the tables "
       "(default: table).")  # fmt: skip
    ap("--history", action="store_true",
       help="regroup extension: print the rebalance timeline of the --group(s) (each generation with its "
       "cause, who joined and left, join/sync phase durations, awaited members), read from the broker's "
       "__group_events topic.")  # fmt: skip
    ap("--health", action="store_true",
       help="regroup extension, with '--describe --state': add an ASSIGNMENT-HEALTH column judging each "
       "Stable consumer group's assignment from DescribeGroups and Metadata: OK, or how many subscribed "
       "partitions no member owns (UNOWNED) and how many are assigned to two members "
       "(DUPLICATED).")  # fmt: skip
    ap("--help", action="store_true", help="Print usage information.")
    ap("--version", action="store_true", help="Display the regroup version.")
    return p


def parse_options(argv: Sequence[str], warnings: TextIO | None = None) -> Options:
    """Parse and validate ``argv`` like Kafka's tool; raises :class:`UsageError` / :class:`HelpRequested`.

    The warning about a missing ``--execute`` goes to ``warnings`` at the point Kafka prints it.
    """
    if not argv:
        raise UsageError(DESCRIPTION)
    parser = build_parser()
    namespace, extras = parser.parse_known_args(list(argv))
    unknown = next((e for e in extras if e.startswith("-") and e != "-"), None)
    if unknown is not None:
        raise UsageError(f"{unknown.lstrip('-').split('=', 1)[0]} is not a recognized option")
    # Other stray words are ignored, as joptsimple's non-option arguments are.
    values = {k: v for k, v in vars(namespace).items() if k not in ("help", "version")}
    values["list_groups"] = values.pop("list")
    o = Options(**values)
    if namespace.help:
        raise HelpRequested
    if namespace.version:
        raise HelpRequested("version")

    unavailable = [
        name
        for name, needs in (
            ("members", ("describe",)),
            ("verbose", ("describe",)),
            ("offsets", ("describe",)),
            ("state", ("describe", "list")),
            ("type", ("list",)),
        )
        if o.has(name) and not any(o.has(n) for n in needs)
    ]
    if unavailable:
        names = ", ".join(_opt(n) for n in unavailable)
        raise UsageError(f"Option(s) {names} are unavailable given other options on the command line")

    _check_args(o, warnings)

    actions = [a for a in ACTIONS if o.has(a)]
    if o.history:
        if actions:
            raise UsageError(f'Option "{_opt("history")}" can\'t be used with option "{_opt(actions[0])}"')
        if not o.group:
            raise UsageError(f"Option {_opt('history')} takes the following options: {_opt('group')}")
        if o.all_groups:
            raise UsageError(f'Option "{_opt("history")}" can\'t be used with option "{_opt("all-groups")}"')
    elif len(actions) != 1:
        raise UsageError("Command must include exactly one action: " + ", ".join(f"--{a}" for a in ACTIONS))
    if o.health and not (o.describe and o.state):
        needs = f"{_opt('describe')}, {_opt('state')}"
        raise UsageError(f"Option {_opt('health')} takes the following options: {needs}")
    if o.output and o.output[-1] not in ("table", "json"):
        raise UsageError(f"Option {_opt('output')} takes 'table' or 'json', not '{o.output[-1]}'")
    if o.export and o.output and o.output[-1] == "json":
        raise UsageError(f"Option {_opt('export')} can't be used with --output json")
    return o


def _check_args(o: Options, warnings: TextIO | None) -> None:
    scope = f"{_opt('all-groups')}, {_opt('group')}"
    if not o.bootstrap_server:
        raise UsageError(f'Missing required argument "{_opt("bootstrap-server")}"')

    if o.describe:
        if not o.group and not o.all_groups:
            raise UsageError(f"Option {_opt('describe')} takes one of these options: {scope}")
        if sum(o.has(n) for n in ("members", "offsets", "state")) > 1:
            raise UsageError(
                f"Option {_opt('describe')} takes at most one of these options: "
                f"{_opt('members')}, {_opt('offsets')}, {_opt('state')}"
            )
        if o.state and o.state[0] != "":
            raise UsageError(f"Option {_opt('describe')} does not take a value for {_opt('state')}")

    if o.delete:
        if not o.group and not o.all_groups:
            raise UsageError(f"Option {_opt('delete')} takes one of these options: {scope}")
        if o.topic:
            raise UsageError(
                "The consumer does not support topic-specific offset deletion from a consumer group."
            )

    if o.delete_offsets and (not o.group or not o.topic):
        raise UsageError(
            f"Option {_opt('delete-offsets')} takes the following options: {_opt('group')}, {_opt('topic')}"
        )

    if o.reset_offsets:
        if o.dry_run and o.execute:
            raise UsageError(
                f"Option {_opt('reset-offsets')} only accepts one of {_opt('execute')} and {_opt('dry-run')}"
            )
        if not o.dry_run and not o.execute and warnings is not None:
            print(EXECUTE_MISSING_WARNING, file=warnings)
        if not o.group and not o.all_groups:
            raise UsageError(f"Option {_opt('reset-offsets')} takes one of these options: {scope}")
        for used in SCENARIOS:
            if o.has(used):
                for other in SCENARIOS:
                    if other != used and o.has(other):
                        raise UsageError(f'Option "{_opt(used)}" can\'t be used with option "{_opt(other)}"')

    if o.group and o.all_groups:
        raise UsageError(f'Option "{_opt("group")}" can\'t be used with option "{_opt("all-groups")}"')
    if o.group and o.list_groups:
        raise UsageError(f'Option "{_opt("group")}" can\'t be used with option "{_opt("list")}"')
    if o.topic:
        for other in ("list", "describe"):
            if o.has(other):
                raise UsageError(f'Option "{_opt("topic")}" can\'t be used with option "{_opt(other)}"')
