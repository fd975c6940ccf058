"""The ``.properties`` parser shared by server.properties, meta.properties and --command-config files."""

from __future__ import annotations

from regroup.properties import load_properties, parse_properties


def test_separators_comments_continuations_and_escapes() -> None:
    text = "\n".join(
        [
            "# comment",
            "! another comment",
            "a=1",
            "b: 2",
            "c 3",
            "  d  =  spaced value  ",
            "e=line\\",
            "   continued",
            "f=tab\\tand\\u0041",
            "g\\=h=1",
            "esc\\ aped\\:key = x",
            "empty=",
            "",
        ]
    )
    assert load_properties(text) == {
        "a": "1",
        "b": "2",
        "c": "3",
        "d": "spaced value  ",
        "e": "linecontinued",
        "f": "tab\tandA",
        "g=h": "1",
        "esc aped:key": "x",
        "empty": "",
    }


def test_entries_keep_order_repeats_and_first_line_numbers() -> None:
    text = "k=1\n# c\nlong=a\\\n  b\nk=2\n"
    assert parse_properties(text) == [("k", "1", 1), ("long", "ab", 3), ("k", "2", 5)]
    assert load_properties(text) == {"k": "2", "long": "ab"}


def test_even_backslashes_do_not_continue_and_a_continued_line_is_never_a_comment() -> None:
    text = "a=x\\\\\nb=y\\\n# not a comment\n"
    assert load_properties(text) == {"a": "x\\", "b": "y# not a comment"}


def test_trailing_continuation_at_end_of_file_is_dropped() -> None:
    assert load_properties("a=x\\") == {"a": "x"}
