"""Which build the suite runs: ``scripts/test`` runs it against the wheel ``pip install .`` builds (the
hot path compiled by mypyc) and says so in ``REGROUP_EXPECT_BUILD``; a build that silently fell back to
pure Python must not pass for a compiled one."""

from __future__ import annotations

import ast
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

import regroup.group.classic_group
import regroup.runtime.shard_runner
from regroup.build import compiled, describe


def test_the_suite_runs_the_build_it_was_given() -> None:
    expected = os.environ.get("REGROUP_EXPECT_BUILD")
    if expected is None:
        pytest.skip("not run by scripts/test")
    assert describe() == {"compiled": "compiled with mypyc", "pure": "pure Python"}[expected]


def test_a_compiled_build_compiles_the_group_core_and_its_runtime_together() -> None:
    files = [regroup.group.classic_group.__file__ or "", regroup.runtime.shard_runner.__file__ or ""]
    assert [f.endswith(".py") for f in files] == [not compiled()] * 2


def test_version_names_the_build() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "regroup.cli", "--version"], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip().endswith(f"({describe()})")


def _compiled_sources() -> list[Path]:
    """The modules setup.py hands mypyc."""
    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("regroup_setup", root / "setup.py")
    assert spec is not None
    assert spec.loader is not None
    setup = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(setup)
    return [root / path for path in setup._compiled_sources()]


def _range_bounds_rebound_in_their_loop(tree: ast.AST) -> list[int]:
    lines = []
    for loop in ast.walk(tree):
        if not (
            isinstance(loop, ast.For)
            and isinstance(loop.iter, ast.Call)
            and isinstance(loop.iter.func, ast.Name)
            and loop.iter.func.id == "range"
        ):
            continue
        bounds = {n.id for arg in loop.iter.args for n in ast.walk(arg) if isinstance(n, ast.Name)}
        stored = {
            n.id
            for stmt in loop.body
            for n in ast.walk(stmt)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
        }
        if bounds & stored:
            lines.append(loop.lineno)
    return lines


def test_no_compiled_loop_rebinds_its_range_bound() -> None:
    """Compiled by mypyc 2.4, ``for _ in range(n)`` reads ``n`` again on every iteration, so a loop that
    assigns ``n`` inside runs a different number of times than in Python (record headers were cut short)."""
    sources = _compiled_sources()
    assert len(sources) > 20
    found = {
        str(path): lines
        for path in sources
        if (lines := _range_bounds_rebound_in_their_loop(ast.parse(path.read_text())))
    }
    assert found == {}


def test_the_range_check_sees_a_rebound_bound() -> None:
    code = "for _ in range(n):\n    n = 0\nfor _ in range(m):\n    k = m\n"
    assert _range_bounds_rebound_in_their_loop(ast.parse(code)) == [1]


def _except_names_rebound_across_types(tree: ast.AST) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Try):
            types: dict[str, set[str]] = {}
            for handler in node.handlers:
                if handler.name is not None and handler.type is not None:
                    types.setdefault(handler.name, set()).add(ast.dump(handler.type))
            if any(len(t) > 1 for t in types.values()):
                lines.append(node.lineno)
    return lines


def test_no_compiled_handlers_share_a_name_across_exception_types() -> None:
    """Compiled by mypyc 2.4, ``except A as exc`` then ``except B as exc`` in one ``try`` gives ``exc``
    the first clause's type, and the second clause raises TypeError when a B arrives."""
    found = {
        str(path): lines
        for path in _compiled_sources()
        if (lines := _except_names_rebound_across_types(ast.parse(path.read_text())))
    }
    assert found == {}


def test_the_except_check_sees_a_shared_name() -> None:
    code = "try:\n    pass\nexcept A as e:\n    pass\nexcept B as e:\n    pass\n"
    assert _except_names_rebound_across_types(ast.parse(code)) == [1]
