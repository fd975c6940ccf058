"""Which build of regroup is running: the group coordinator's hot path compiled by mypyc (what ``pip
install .`` builds where a C compiler is available) or pure Python (an editable install,
``REGROUP_PURE_PYTHON=1``, or a machine where compiling failed). See setup.py."""

from __future__ import annotations

import importlib
from importlib.machinery import EXTENSION_SUFFIXES

__all__ = ["COMPILED_PROBE", "compiled", "describe"]

COMPILED_PROBE = "regroup.group.shard"
"""A module every compiled build compiles; the build is compiled when it is loaded from an extension."""


def compiled() -> bool:
    path = getattr(importlib.import_module(COMPILED_PROBE), "__file__", None) or ""
    return path.endswith(tuple(EXTENSION_SUFFIXES))


def describe() -> str:
    return "compiled with mypyc" if compiled() else "pure Python"
