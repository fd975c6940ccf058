"""Command-line validation: Kafka 4.3.1's checks, in its order, with its messages."""

from __future__ import annotations

import io

import pytest

from regroup.admin.options import EXECUTE_MISSING_WARNING, HelpRequested, UsageError, parse_options

B = ["--bootstrap-server", "localhost:9092"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--list"], 'Missing required argument "[bootstrap-server]"'),
        (
            B,
            "Command must include exactly one action: --list, --describe, --delete, --reset-offsets, "
            "--delete-offsets",
        ),
        ([*B, "--describe", "--group", "g", "--delete"], "Command must include exactly one action:"),
        ([*B, "--list", "--delete"], "Option [delete] takes one of these options: [all-groups], [group]"),
        ([*B, "--describe"], "Option [describe] takes one of these options: [all-groups], [group]"),
        (
            [*B, "--describe", "--group", "g", "--members", "--state"],
            "Option [describe] takes at most one of these options: [members], [offsets], [state]",
        ),
        (
            [*B, "--describe", "--group", "g", "--state", "stable"],
            "Option [describe] does not take a value for [state]",
        ),
        (
            [*B, "--delete", "--group", "g", "--topic", "t"],
            "The consumer does not support topic-specific offset deletion from a consumer group.",
        ),
        (
            [*B, "--delete-offsets", "--group", "g"],
            "Option [delete-offsets] takes the following options: [group], [topic]",
        ),
        (
            [
                *B,
                "--reset-offsets",
                "--group",
                "g",
                "--dry-run",
                "--execute",
                "--to-earliest",
                "--all-topics",
            ],
            "Option [reset-offsets] only accepts one of [execute] and [dry-run]",
        ),
        (
            [*B, "--reset-offsets", "--dry-run", "--to-earliest", "--all-topics"],
            "Option [reset-offsets] takes one of these options: [all-groups], [group]",
        ),
        (
            [
                *B,
                "--reset-offsets",
                "--group",
                "g",
                "--dry-run",
                "--to-earliest",
                "--to-latest",
                "--all-topics",
            ],
            'Option "[to-earliest]" can\'t be used with option "[to-latest]"',
        ),
        (
            [*B, "--reset-offsets", "--group", "g", "--dry-run", "--to-earliest", "--from-file", "f"],
            'Option "[to-earliest]" can\'t be used with option "[from-file]"',
        ),
        (
            [*B, "--group", "g", "--all-groups", "--describe"],
            'Option "[group]" can\'t be used with option "[all-groups]"',
        ),
        ([*B, "--group", "g", "--list"], 'Option "[group]" can\'t be used with option "[list]"'),
        ([*B, "--topic", "t", "--list"], 'Option "[topic]" can\'t be used with option "[list]"'),
        (
            [*B, "--topic", "t", "--describe", "--group", "g"],
            'Option "[topic]" can\'t be used with option "[describe]"',
        ),
        (
            [*B, "--list", "--members"],
            "Option(s) [members] are unavailable given other options on the command line",
        ),
        (
            [*B, "--describe", "--group", "g", "--type"],
            "Option(s) [type] are unavailable given other options",
        ),
        ([*B, "--list", "--bogus"], "bogus is not a recognized option"),
        ([*B, "--list", "--output", "yaml"], "Option [output] takes 'table' or 'json', not 'yaml'"),
        (
            [
                *B,
                "--reset-offsets",
                "--group",
                "g",
                "--all-topics",
                "--to-latest",
                "--export",
                "--output",
                "json",
            ],
            "Option [export] can't be used with --output json",
        ),
        ([], "This tool helps to list all consumer groups"),
    ],
)
def test_usage_errors(argv: list[str], message: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_options(argv, io.StringIO())
    assert str(info.value).startswith(message)


def test_missing_execute_warns_before_later_checks() -> None:
    warnings = io.StringIO()
    with pytest.raises(UsageError, match=r"takes one of these options"):
        parse_options([*B, "--reset-offsets", "--to-earliest", "--all-topics"], warnings)
    assert warnings.getvalue() == EXECUTE_MISSING_WARNING + "\n"
    warnings = io.StringIO()
    parse_options(
        [*B, "--reset-offsets", "--group", "g", "--to-earliest", "--all-topics", "--dry-run"], warnings
    )
    assert warnings.getvalue() == ""


def test_parsed_values() -> None:
    o = parse_options(
        [
            *B,
            "--reset-offsets",
            "--group",
            "a",
            "--group",
            "b",
            "--topic",
            "t:0,1",
            "--shift-by",
            "-5",
            "--execute",
        ],
        io.StringIO(),
    )
    assert o.action == "reset-offsets"
    assert o.group == ["a", "b"]
    assert o.topic == ["t:0,1"]
    assert o.shift_by == ["-5"]
    assert o.execute
    listing = parse_options([*B, "--list", "--state", "--type", "classic"], io.StringIO())
    assert listing.action == "list"
    assert listing.state == [""]
    assert listing.type == ["classic"]


def test_stray_words_are_ignored_like_joptsimple() -> None:
    assert parse_options([*B, "--describe", "--group", "g1", "g2"], io.StringIO()).group == ["g1"]


def test_help_and_version() -> None:
    with pytest.raises(HelpRequested) as info:
        parse_options([*B, "--help"], io.StringIO())
    assert info.value.args == ()
    with pytest.raises(HelpRequested) as info:
        parse_options(["--version"], io.StringIO())
    assert info.value.args == ("version",)
