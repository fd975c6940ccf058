"""Java ``.properties`` text, as ``java.util.Properties.load`` reads it: the one parser of the broker's
``server.properties`` and ``meta.properties`` and of the admin tool's ``--command-config`` files.

``#`` and ``!`` start comment lines; a key ends at the first unescaped ``=``, ``:`` or whitespace, and
whitespace around the separator is skipped; a line ending in an odd number of backslashes continues on the
next one (whose leading whitespace is dropped, and which is never a comment); ``\\t \\n \\r \\f \\uXXXX``
are escapes and a backslash before any other character stands for that character.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["load_properties", "parse_properties"]

_WHITESPACE: Final = " \t\f"
_ESCAPES: Final = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_HEX4: Final = re.compile(r"[0-9A-Fa-f]{4}")


def parse_properties(text: str) -> list[tuple[str, str, int]]:
    """``(key, value, line number of the entry's first line)`` in file order (a key may repeat)."""
    entries: list[tuple[str, str, int]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        start = i
        line = lines[i].lstrip(_WHITESPACE)
        i += 1
        if not line or line[0] in "#!":
            continue
        while _continues(line) and i < len(lines):
            line = line[:-1] + lines[i].lstrip(_WHITESPACE)
            i += 1
        if _continues(line):
            line = line[:-1]
        key_chars: list[str] = []
        pos = 0
        while pos < len(line):
            ch = line[pos]
            if ch == "\\" and pos + 1 < len(line):
                key_chars.append(line[pos : pos + 2])
                pos += 2
                continue
            if ch in "=:" or ch in _WHITESPACE:
                break
            key_chars.append(ch)
            pos += 1
        while pos < len(line) and line[pos] in _WHITESPACE:
            pos += 1
        if pos < len(line) and line[pos] in "=:":
            pos += 1
            while pos < len(line) and line[pos] in _WHITESPACE:
                pos += 1
        entries.append((_unescape("".join(key_chars)), _unescape(line[pos:]), start + 1))
    return entries


def load_properties(text: str) -> dict[str, str]:
    """The properties as ``Properties.load`` leaves them: a later entry of a key replaces an earlier one."""
    return {key: value for key, value, _ in parse_properties(text)}


def _continues(line: str) -> bool:
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    out: list[str] = []
    pos = 0
    while pos < len(text):
        ch = text[pos]
        if ch != "\\" or pos + 1 >= len(text):
            out.append(ch)
            pos += 1
            continue
        nxt = text[pos + 1]
        if nxt == "u" and _HEX4.fullmatch(text, pos + 2, pos + 6):
            out.append(chr(int(text[pos + 2 : pos + 6], 16)))
            pos += 6
            continue
        out.append(_ESCAPES.get(nxt, nxt))
        pos += 2
    return "".join(out)
