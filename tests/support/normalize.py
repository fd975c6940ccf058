"""Turning protocol messages into comparable plain data, normalising what legitimately differs between two
brokers, and diffing field by field.

Plain data: a message or struct becomes a ``dict`` of the fields that exist at the version it was encoded
at (in schema order), lists stay lists, bytes become ``bytes``. :class:`IdNormaliser` replaces the random
UUID part of member ids (``<client or instance id>-<uuid>``) with placeholders numbered by first appearance,
so the same script run on two brokers yields the same placeholders.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from regroup.protocol.message import Struct

__all__ = [
    "UUID_SUFFIX",
    "Difference",
    "IdNormaliser",
    "diff",
    "glob_match",
    "plain",
    "render",
]

UUID_SUFFIX = re.compile(r"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})")

Plain = Any


def plain(value: Any, version: int) -> Plain:
    """``value`` (a generated message/struct, list, scalar) as plain data at ``version``."""
    if isinstance(value, Struct):
        out: dict[str, Plain] = {}
        for spec in type(value).FIELDS:
            if spec.present_in(version):
                out[spec.name] = plain(getattr(value, spec.name), version)
        return out
    if isinstance(value, list):
        return [plain(v, version) for v in value]
    if isinstance(value, memoryview | bytearray):
        return bytes(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    return value


class IdNormaliser:
    """Maps each distinct UUID found inside strings to ``M1``, ``M2``… in order of registration."""

    def __init__(self) -> None:
        self._map: dict[str, str] = {}

    def register(self, text: str | None) -> None:
        if text:
            for found in UUID_SUFFIX.findall(text):
                self._map.setdefault(found, f"M{len(self._map) + 1}")

    def register_all(self, data: Plain) -> None:
        for text in _strings(data):
            self.register(text)

    def __call__(self, data: Plain) -> Plain:
        if isinstance(data, str):
            return UUID_SUFFIX.sub(lambda m: self._map.setdefault(m.group(1), f"M{len(self._map) + 1}"), data)
        if isinstance(data, dict):
            return {k: self(v) for k, v in data.items()}
        if isinstance(data, list):
            return [self(v) for v in data]
        return data


def _strings(data: Plain) -> Iterator[str]:
    if isinstance(data, str):
        yield data
    elif isinstance(data, dict):
        for v in data.values():
            yield from _strings(v)
    elif isinstance(data, list):
        for v in data:
            yield from _strings(v)


@dataclass(frozen=True)
class Difference:
    """One field that differs: ``path`` like ``groups[0].members[1].client_host``."""

    path: str
    expected: Plain
    actual: Plain

    def matches(self, pattern: str) -> bool:
        """``pattern`` is the path with ``*`` standing for any run of characters (brackets are literal)."""
        return glob_match(pattern, self.path)


def glob_match(pattern: str, text: str) -> bool:
    regex = ".*".join(re.escape(part) for part in pattern.split("*"))
    return re.fullmatch(regex, text) is not None


_MISSING = "<absent>"


def diff(expected: Plain, actual: Plain, path: str = "") -> list[Difference]:
    """Every leaf that differs between two plain values (lists compared element by element)."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        out: list[Difference] = []
        for key in list(expected) + [k for k in actual if k not in expected]:
            sub = f"{path}.{key}" if path else key
            if key not in actual:
                out.append(Difference(sub, expected[key], _MISSING))
            elif key not in expected:
                out.append(Difference(sub, _MISSING, actual[key]))
            else:
                out.extend(diff(expected[key], actual[key], sub))
        return out
    if isinstance(expected, list) and isinstance(actual, list):
        out = []
        if len(expected) != len(actual):
            out.append(Difference(f"{path}.<len>", len(expected), len(actual)))
        for i, (e, a) in enumerate(zip(expected, actual, strict=False)):
            out.extend(diff(e, a, f"{path}[{i}]"))
        for i in range(len(actual), len(expected)):
            out.append(Difference(f"{path}[{i}]", expected[i], _MISSING))
        for i in range(len(expected), len(actual)):
            out.append(Difference(f"{path}[{i}]", _MISSING, actual[i]))
        return out
    if expected != actual:
        return [Difference(path, expected, actual)]
    return []


def render(value: Plain, limit: int = 120) -> str:
    """A short, readable rendering of a plain value for failure reports."""
    text = value.hex() if isinstance(value, bytes) else repr(value)
    if isinstance(value, bytes):
        text = f"0x{text}" if text else "b''"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def sort_list(data: Plain, path: Sequence[str], key: Callable[[Plain], Any]) -> Plain:
    """Sort the list found at ``path`` (dict keys; ``*`` walks every list element) by ``key``."""
    if not path:
        return sorted(data, key=key) if isinstance(data, list) else data
    head, rest = path[0], path[1:]
    if head == "*":
        return [sort_list(v, rest, key) for v in data] if isinstance(data, list) else data
    if isinstance(data, Mapping) and head in data:
        return {**data, head: sort_list(data[head], rest, key)}
    return data
