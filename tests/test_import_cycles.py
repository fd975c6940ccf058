"""No import cycles among the modules under ``src/``: every import counts, also those under
``if TYPE_CHECKING:`` and those inside functions (import-linter's layer contracts see only some of these).

A cycle is a strongly connected component of the module import graph with more than one module; importing a
package's submodule is an edge to that submodule, importing a name from a package an edge to the package's
``__init__``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"


def modules(root: Path) -> dict[str, tuple[Path, bool]]:
    """Module name -> (file, is a package ``__init__``) for every ``.py`` file under ``root``."""
    found: dict[str, tuple[Path, bool]] = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        found[".".join(parts)] = (path, is_package)
    return found


def _owner(name: str, known: dict[str, tuple[Path, bool]]) -> str | None:
    """The longest known module name that ``name`` is or lies in."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(root: Path) -> dict[str, set[str]]:
    known = modules(root)
    graph: dict[str, set[str]] = {name: set() for name in known}
    for name, (path, is_package) in known.items():
        package = name if is_package else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*anchor, *([node.module] if node.module else [])])
                submodules = [f"{base}.{alias.name}" for alias in node.names]
                targets = [m for m in submodules if m in known] or [base]
            for target in targets:
                owner = _owner(target, known)
                if owner is not None and owner != name:
                    graph[name].add(owner)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for succ in edges:
                if succ not in index:
                    index[succ] = low[succ] = counter
                    counter += 1
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph[succ]))))
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_no_import_cycles_in_src() -> None:
    found = cycles(import_graph(SRC))
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_check_sees_type_checking_and_function_level_imports(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import B\n"
    )
    (pkg / "b.py").write_text("def f():\n    from pkg import c\n")
    (pkg / "c.py").write_text("from . import a\n")
    (pkg / "d.py").write_text("import pkg.a\n")
    assert cycles(import_graph(tmp_path)) == [["pkg.a", "pkg.b", "pkg.c"]]
