"""The zip of pure-Python code that a cluster's executors import, for ``SparkContext.addPyFile``.

Executors unpickle the pipeline's functions by reference — the ``format("regroup")`` data source, the
``mapInArrow`` decoders — so they import :mod:`regroup_pipeline` and, through it, regroup's wire and record
codecs (:mod:`regroup.protocol`). On a cluster those must not have to be installed on every worker at the
driver's version: :func:`executor_zip` zips them from wherever the driver imports them (an installed
wheel or an editable checkout) and :func:`regroup_pipeline.session.build_session` ships the zip. What
cannot travel in a zip — pyspark, pyarrow, pandas, numpy, numba, and the C extensions ``crc32c`` and
``cramjam`` that :mod:`regroup.protocol` uses — must be installed on the workers (docs/pipeline.md).

The zip is built once per content: its name carries a hash of the files it holds, and it is kept under
``$XDG_CACHE_HOME/regroup/pyfiles/`` (default ``~/.cache``), written to a temporary name and renamed, so
concurrent runs share it and a changed source gives a new zip (Spark adds a file name only once per
application).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import tempfile
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Final

__all__ = ["EXECUTOR_PACKAGES", "executor_zip", "zip_members"]

# What executors import: the pipeline and, of regroup, only the codecs (regroup.client serves the
# driver's Kafka client, which executors never run).
EXECUTOR_PACKAGES: Final = ("regroup_pipeline", "regroup.protocol")
# A fixed timestamp: the same sources give the same bytes.
_EPOCH: Final = (1980, 1, 1, 0, 0, 0)


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"{name} is not an importable package", name=name)
    return Path(next(iter(spec.submodule_search_locations)))


def zip_members(packages: Sequence[str] = EXECUTOR_PACKAGES) -> Iterator[tuple[str, Path]]:
    """(name in the zip, source file) of every ``.py`` file of ``packages`` and of the ``__init__.py`` of
    their parent packages, sorted by name."""
    members: dict[str, Path] = {}
    for package in packages:
        parts = package.split(".")
        for depth in range(1, len(parts)):
            parent = _package_dir(".".join(parts[:depth])) / "__init__.py"
            members["/".join(parts[:depth]) + "/__init__.py"] = parent
        root = _package_dir(package)
        prefix = "/".join(parts)
        for path in root.rglob("*.py"):
            if "__pycache__" not in path.parts:
                members[f"{prefix}/{path.relative_to(root).as_posix()}"] = path
    yield from sorted(members.items())


def _cache_root() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "regroup" / "pyfiles"


def executor_zip(packages: Sequence[str] = EXECUTOR_PACKAGES, cache: Path | None = None) -> Path:
    """The zip of ``packages`` as the driver imports them, from ``cache`` (default under the user cache
    directory) when a zip of the same content is there, else built into it."""
    contents = [(name, path.read_bytes()) for name, path in zip_members(packages)]
    digest = hashlib.sha256()
    for name, data in contents:
        digest.update(name.encode() + b"\0" + len(data).to_bytes(8, "big") + data)
    directory = cache or _cache_root()
    target = directory / f"regroup-pyfiles-{digest.hexdigest()[:16]}.zip"
    if target.is_file():
        return target
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".regroup-pyfiles-", suffix=".zip", dir=directory)
    try:
        with os.fdopen(fd, "wb") as out, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
            for name, data in contents:
                info = zipfile.ZipInfo(name, _EPOCH)
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = 0o644 << 16
                archive.writestr(info, data)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
