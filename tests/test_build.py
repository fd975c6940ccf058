"""Which build the suite runs: ``scripts/test`` runs it against the wheel ``pip install .`` builds (the
hot path compiled by mypyc) and says so in ``REGROUP_EXPECT_BUILD``; a build that silently fell back to
pure Python must not pass for a compiled one."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import importlib.util
import inspect
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import regroup.group.classic_group
import regroup.protocol.messages
import regroup.protocol.records
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


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(Path(__file__).resolve().parents[1] / "src").with_suffix("").parts)


def _own_init_mismatches(cls: type) -> list[str]:
    """How a dataclass's hand-written ``__init__`` differs from the one the decorator would write: its
    parameters must be the fields, in order, with the fields' defaults (a new list for a list factory)."""
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    fields = dataclasses.fields(cls)
    if [p.name for p in params] != [f.name for f in fields]:
        return [f"{cls.__qualname__}: parameters {[p.name for p in params]}"]
    # Built with every argument left out that has a default, the others given as a marker.
    marker = object()
    obj = cls(*(marker for p in params if p.default is inspect.Parameter.empty))
    wrong = []
    for p, f in zip(params, fields, strict=True):
        value = getattr(obj, f.name)
        if f.default is not dataclasses.MISSING:
            ok = p.default is not inspect.Parameter.empty and value == f.default
        elif f.default_factory is not dataclasses.MISSING:
            ok = value == f.default_factory() and value is not p.default
        else:
            ok = value is marker
        if not ok:
            wrong.append(f"{cls.__qualname__}.{f.name}: {value!r}")
    return wrong


def test_the_init_check_sees_a_wrong_default() -> None:
    @dataclasses.dataclass(init=False)
    class Wrong:
        a: int
        b: list[int] = dataclasses.field(default_factory=list)
        c: int = 1

        def __init__(self, a: int, b: list[int] | None = None, c: int = 2) -> None:
            self.a, self.b, self.c = a, b or [], c

    assert _own_init_mismatches(Wrong) == ["test_the_init_check_sees_a_wrong_default.<locals>.Wrong.c: 2"]


@pytest.mark.skipif(compiled(), reason="a compiled __init__ has no signature to read; the pure pass checks")
def test_hand_written_dataclass_inits_match_their_fields() -> None:
    """Compiled modules' dataclasses on the hot path write their own ``__init__`` (``init=False``), and the
    generated codecs do too: each must take exactly the fields with their defaults."""
    names = {_module_name(p) for p in _compiled_sources()}
    for package in (regroup.protocol.messages, regroup.protocol.records):
        names.update(m.name for m in pkgutil.iter_modules(package.__path__, package.__name__ + "."))
    checked = 0
    wrong: list[str] = []
    for name in sorted(names):
        module = importlib.import_module(name)
        for cls in vars(module).values():
            if not (isinstance(cls, type) and cls.__module__ == name and dataclasses.is_dataclass(cls)):
                continue
            if cls.__dataclass_params__.init or "__init__" not in vars(cls):  # type: ignore[attr-defined]
                continue
            checked += 1
            wrong.extend(_own_init_mismatches(cls))
    assert checked > 400
    assert wrong == []
