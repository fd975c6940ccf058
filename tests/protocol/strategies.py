"""Hypothesis strategies for the generated protocol codecs, built from each class's ``FIELDS``.

``values(cls, version)`` draws a random instance of any generated struct/message/record class that is
valid at ``version``: fields the version lacks keep their dataclass default, ``None`` appears only where
the field is nullable at that version, numbers stay within their wire type and nested structs recurse
(depth-limited, arrays kept small so encodings stay a few hundred bytes).

Also home of the class enumeration shared by the protocol tests (``all_classes`` & co.).
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache
from typing import Any

from hypothesis import strategies as st

import regroup.protocol.messages
import regroup.protocol.records
from regroup.protocol.message import Data, FieldSpec, Message, Struct
from regroup.protocol.primitives import ZERO_UUID

__all__ = [
    "GROUP_APIS",
    "INT_RANGES",
    "all_classes",
    "api_name",
    "class_id",
    "class_versions",
    "field_value",
    "top_level_classes",
    "values",
]

INT_RANGES: dict[str, tuple[int, int]] = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
}

# The consumer-group APIs this project is about; tests give them more examples.
GROUP_APIS = frozenset(
    {
        "JoinGroup",
        "SyncGroup",
        "Heartbeat",
        "LeaveGroup",
        "OffsetCommit",
        "OffsetFetch",
        "FindCoordinator",
        "DescribeGroups",
        "ListGroups",
        "DeleteGroups",
        "OffsetDelete",
    }
)

MAX_DEPTH = 4  # struct nesting levels generated below the top-level class (specs nest at most 4 deep)


def _ints(type_name: str) -> st.SearchStrategy[int]:
    lo, hi = INT_RANGES[type_name]
    # Bias towards the edges: they are where sign/width mistakes show.
    return st.one_of(st.sampled_from([lo, hi, 0, -1 if lo < 0 else 1]), st.integers(lo, hi))


def _scalar(type_name: str) -> st.SearchStrategy[Any]:
    if type_name in INT_RANGES:
        return _ints(type_name)
    if type_name == "bool":
        return st.booleans()
    if type_name == "float64":
        return st.floats(allow_nan=False)
    if type_name == "string":
        return st.text(max_size=12)
    if type_name in {"bytes", "records"}:
        return st.binary(max_size=24)
    if type_name == "uuid":
        return st.one_of(st.just(ZERO_UUID), st.uuids())
    raise AssertionError(f"unknown primitive type {type_name!r}")


def field_value(f: FieldSpec, version: int, depth: int = MAX_DEPTH) -> st.SearchStrategy[Any]:
    """Values of field ``f`` valid at ``version`` (``None`` only when nullable there)."""
    if f.struct is not None:
        if depth <= 0:
            # Too deep: an empty array / a default struct still exercises the framing of the level.
            elem: st.SearchStrategy[Any] = st.builds(f.struct)
            base = st.just([]) if f.is_array else elem
        else:
            elem = values(f.struct, version, depth - 1)
            base = st.lists(elem, max_size=3 if depth >= MAX_DEPTH - 1 else 2) if f.is_array else elem
    elif f.is_array:
        base = st.lists(_scalar(f.type_name), max_size=4)
    else:
        base = _scalar(f.type_name)
    if f.nullable_in(version):
        return st.one_of(st.none(), base)
    return base


@cache
def values(cls: type[Struct], version: int, depth: int = MAX_DEPTH) -> st.SearchStrategy[Any]:
    """Random valid instances of ``cls`` at ``version`` (fields absent there keep their defaults)."""
    kwargs = {f.name: field_value(f, version, depth) for f in cls.FIELDS if f.present_in(version)}
    return st.builds(cls, **kwargs)


# ------------------------------------------------------------------------------------- enumeration


def _modules() -> list[Any]:
    mods = []
    for pkg in (regroup.protocol.messages, regroup.protocol.records):
        for info in pkgutil.iter_modules(pkg.__path__):
            mods.append(importlib.import_module(f"{pkg.__name__}.{info.name}"))
    return mods


@cache
def all_classes() -> tuple[type[Struct], ...]:
    """Every generated class (messages, headers, records, nested structs), in module order."""
    out: list[type[Struct]] = []
    for mod in _modules():
        for obj in vars(mod).values():
            if isinstance(obj, type) and issubclass(obj, Struct) and obj.__module__ == mod.__name__:
                out.append(obj)
    return tuple(out)


def top_level_classes() -> tuple[type[Struct], ...]:
    """Requests, responses, headers, ``__consumer_offsets`` records and the consumer protocol."""
    return tuple(c for c in all_classes() if issubclass(c, (Message, Data)))


def class_versions(cls: type[Struct]) -> list[int]:
    return [v for v in range(cls.MIN_VERSION, cls.MAX_VERSION + 1) if cls.supports(v)]


def class_id(cls: type[Struct]) -> str:
    """A unique, readable id: nested struct names repeat across modules (e.g. ``PartitionData``)."""
    return f"{cls.__module__.rsplit('.', 1)[-1]}.{cls.NAME}"


def api_name(cls: type[Struct]) -> str | None:
    """``JoinGroup`` for ``JoinGroupRequest``/``JoinGroupResponse``; None for other classes."""
    if not issubclass(cls, Message) or cls.API_KEY < 0:
        return None
    for suffix in ("Request", "Response"):
        if cls.NAME.endswith(suffix):
            return cls.NAME[: -len(suffix)]
    return None
