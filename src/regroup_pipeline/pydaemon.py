"""The Python daemon of a local Spark session: PySpark's own (``pyspark.daemon``), with what the pipeline's
Python workers use loaded before it starts forking them.

Spark starts one daemon per worker kind (tasks, and each planning step of a Python data source) and the
daemon forks a process per concurrent task. Each of those processes imported numpy, pyarrow, numba and the
pipeline's modules on its own, and loaded the compiled passes from numba's disk cache: about 0.7 s of CPU a
process, for the ten or so processes of a local ``all``. Loaded in the daemon, they are in every forked
worker from its start (copy-on-write). Set as ``spark.python.daemon.module`` for local masters only
(:func:`regroup_pipeline.session.build_session`): executors elsewhere need not have regroup installed.

Two costs every task of a reused worker paid, which the daemon takes off before it forks:

- Spark puts the archives of its Python code on every worker's path (``pyspark.zip``, py4j's source zip,
  Spark's core jar), and each task's setup calls ``importlib.invalidate_caches()``, which Python 3.11's zip
  importer answers by reading its archive's whole directory again, once for each package imported from it:
  about 0.2 s of CPU a task. A pip-installed PySpark has the same code in plain directories, so the daemon
  imports it from there (:func:`_without_installed_archives`).
- After each task the worker runs a full garbage collection, which walked the 160,000 objects of the
  modules loaded here (0.08 s a task); frozen (``gc.freeze``), they are no longer walked.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import zipfile
from importlib.machinery import PathFinder


def preload() -> None:
    """Import the workers' modules and load each compiled pass once, on a few records in memory (the
    argument types the tasks use, so numba's cached machine code for them is what gets loaded)."""
    import pyarrow.parquet  # type: ignore[import-untyped,unused-ignore]  # noqa: F401  # pyarrow ships no type information

    from regroup.protocol.record_batch import Record, build_batch
    from regroup_pipeline import commitscan, datasource, decode, logformat, offsetkeys  # noqa: F401
    from regroup_pipeline.synthetic import MemberSpec, group_metadata, offset_commit, offset_tombstone

    records = [
        offset_commit("g", "t", 0, 5, commit_ts=1_000),
        offset_tombstone("g", "t", 1),
        group_metadata("g", 1, [MemberSpec("m", ["t"], {"t": [0]})], state_ts=1_000),
    ]
    data = build_batch(
        [Record(key=k, value=v, timestamp=1_000, offset=i) for i, (k, v) in enumerate(records)],
        base_offset=0,
    )
    commitscan.whole_batches_end(data, len(data))
    commits = commitscan.scan_offset_commits(data, len(data), 0)
    commitscan.scan_records(data, len(data), "__consumer_offsets", 0, (logformat.GROUP_METADATA_TYPE,))
    raw = logformat.records_to_arrow(
        logformat.decode_records(data, logformat.index_batches(data, 0, len(data))), "__consumer_offsets", 0
    )
    commitscan.scan_commit_pairs(raw)
    history = decode.CommitHistory()
    fed = [history.feed(commits), history.finish()]
    keys = offsetkeys.OffsetKeys({})
    for table in fed:
        if table is not None:
            for batch in table.to_batches():
                keys.feed(batch)
    keys.finish()
    keys.finish_runs()


def _importable_from(directories: list[str], archive: str) -> bool:
    """Whether every top-level module or package of the zip ``archive`` is found in ``directories``."""
    try:
        with zipfile.ZipFile(archive) as z:
            names = {n.split("/", 1)[0].removesuffix(".py") for n in z.namelist() if n.endswith(".py")}
    except (OSError, zipfile.BadZipFile):
        return False
    return all(PathFinder.find_spec(name, directories) is not None for name in names)


def _without_installed_archives(path: list[str]) -> list[str]:
    """``path`` without the archives (zip, jar) that lie inside the PySpark package found in its plain
    directories and whose modules those directories hold too: the same installation's code, imported
    from files instead."""
    directories = [p for p in path if os.path.isdir(p)]
    spec = PathFinder.find_spec("pyspark", directories)
    if spec is None or not spec.submodule_search_locations:
        return path  # PySpark from its archives only (a Spark distribution): nothing to swap
    home = os.path.realpath(next(iter(spec.submodule_search_locations)))

    def installed(entry: str) -> bool:
        real = os.path.realpath(entry)
        return (
            os.path.isfile(real)
            and os.path.commonpath([home, real]) == home
            and _importable_from(directories, real)
        )

    return [p for p in path if not installed(p)]


def _import_pyspark_from_directories() -> None:
    """:func:`_without_installed_archives` as this process's path, before anything imports PySpark."""
    kept = _without_installed_archives(sys.path)
    for dropped in set(sys.path) - set(kept):
        sys.path_importer_cache.pop(dropped, None)
    sys.path[:] = kept


def main() -> None:
    # A worker loads what it needs itself, from the path Spark gave it: a failed path swap or preload is
    # never a reason for the daemon not to start.
    with contextlib.suppress(Exception):
        _import_pyspark_from_directories()
    with contextlib.suppress(Exception):
        preload()
    # pyspark.daemon reads the worker module Spark names in argv, as when it runs as the main module.
    from pyspark import daemon

    gc.freeze()
    daemon.manager()  # type: ignore[no-untyped-call]  # pyspark's daemon is untyped


if __name__ == "__main__":
    main()
