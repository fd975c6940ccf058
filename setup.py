"""Build regroup with its hot path compiled by mypyc, or as pure Python.

When ``pip install .`` builds a wheel, the group coordinator's core (``regroup.group``) and the rest of
the heartbeat and commit paths except the server (``COMPILED_MODULES``) are compiled to C extension
modules by mypyc: they are ``mypy --strict`` code already, and compiled they take a fraction of the
CPU of pure Python per heartbeat and per commit (docs/benchmarks.md). The ``.py`` sources ship beside the
extensions.

Pure Python is built instead when ``REGROUP_PURE_PYTHON=1`` is set, when mypyc is not available or
refuses a module, for an editable install (a compiled module in ``src/`` would shadow later edits of its
source), and when any compiled module fails to build (no C compiler): then none is installed.
"""

from __future__ import annotations

import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from setuptools import setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).parent
SRC = ROOT / "src"

# Compiled: the group core, and the modules a heartbeat and a commit pass through — the codecs' bases,
# the request and response headers and the two APIs' generated codecs, framing and record batches, the
# runtime, the partition log, the two handlers and the request metrics. Left as Python: the other
# generated codecs (their classes subclass the compiled bases), the primitive readers (the codecs hand
# them memoryviews where ``bytes`` is declared, which compiled code refuses), the server (asyncio
# protocols and closures) and everything off the hot path.
COMPILED_PACKAGES = ("regroup/group",)
COMPILED_MODULES = (
    "regroup/protocol/message.py",
    "regroup/protocol/messages/headers.py",
    "regroup/protocol/messages/heartbeat.py",
    "regroup/protocol/messages/offset_commit.py",
    "regroup/protocol/framing.py",
    "regroup/protocol/record_batch.py",
    "regroup/runtime/timers.py",
    "regroup/runtime/shard_runner.py",
    "regroup/runtime/coordinator.py",
    "regroup/log/segment.py",
    "regroup/log/partition.py",
    "regroup/broker/wire.py",
    "regroup/broker/handlers/_common.py",
    "regroup/broker/handlers/_groups.py",
    "regroup/broker/handlers/heartbeat.py",
    "regroup/broker/handlers/offset_commit.py",
    "regroup/broker/ops/request_stats.py",
)


def _compiled_sources() -> list[str]:
    paths: list[str] = []
    for package in COMPILED_PACKAGES:
        paths.extend(str(p.relative_to(ROOT)) for p in sorted((SRC / package).glob("*.py")))
    paths.extend(str((SRC / m).relative_to(ROOT)) for m in COMPILED_MODULES)
    return paths


def _wants_pure() -> bool:
    if os.environ.get("REGROUP_PURE_PYTHON", "") not in ("", "0"):
        return True
    # pip's PEP 660 editable build runs `editable_wheel`; the legacy `develop` is the same case.
    return any(arg in ("editable_wheel", "develop") for arg in sys.argv[1:])


class OptionalBuildExt(build_ext):
    """Builds the compiled modules all or none: mypyc's modules share one runtime library, so when any
    of them fails to compile (no C compiler, say) none is installed and the Python sources serve."""

    def run(self) -> None:
        if getattr(self, "editable_mode", False) or self.inplace:
            self.extensions = []
        super().run()

    def build_extension(self, ext: Any) -> None:
        # mypyc's shared library is one extension of ~40 C files, which setuptools compiles one by one.
        compile_one = self.compiler.compile

        def compile_all(sources: list[str], **kwargs: Any) -> list[str]:
            with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
                return [o for objs in pool.map(lambda s: compile_one([s], **kwargs), sources) for o in objs]

        self.compiler.compile = compile_all
        try:
            super().build_extension(ext)
        finally:
            self.compiler.compile = compile_one

    def build_extensions(self) -> None:
        built: list[Path] = []
        try:
            for ext in self.extensions:
                self.build_extension(ext)
                built.append(Path(self.get_ext_fullpath(ext.name)))
        except Exception as exc:  # any compiler or linker failure means pure Python
            print(f"regroup: compiling with mypyc failed ({exc}); installing pure Python", file=sys.stderr)
            for path in built:
                path.unlink(missing_ok=True)


def _ext_modules() -> list[object]:
    if _wants_pure():
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        print("regroup: mypyc is not installed; building pure Python", file=sys.stderr)
        return []
    try:
        return list(mypycify(["--strict", *_compiled_sources()], opt_level="3", multi_file=True))
    except (Exception, SystemExit) as exc:  # a module mypyc refuses means pure Python
        print(f"regroup: mypyc cannot compile the hot path ({exc}); building pure Python", file=sys.stderr)
        return []


if __name__ == "__main__":  # as setuptools runs it; tests import the module for _compiled_sources
    setup(ext_modules=_ext_modules(), cmdclass={"build_ext": OptionalBuildExt})
