"""The Python daemon of a local Spark session: PySpark's own (``pyspark.daemon``), with what the pipeline's
Python workers use loaded before it starts forking them.

Spark starts one daemon per worker kind (tasks, and each planning step of a Python data source) and the
daemon forks a process per concurrent task. Each of those processes imported numpy, pyarrow, numba and the
pipeline's modules on its own, and loaded the compiled passes from numba's disk cache: about 0.7 s of CPU a
process, for the ten or so processes of a local ``all``. Loaded in the daemon, they are in every forked
worker from its start (copy-on-write). Set as ``spark.python.daemon.module`` for local masters only
(:func:`regroup_pipeline.session.build_session`): executors elsewhere need not have regroup installed.
"""

from __future__ import annotations

import contextlib


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


def main() -> None:
    # A worker loads what it needs itself: a failed preload is never a reason for the daemon not to start.
    with contextlib.suppress(Exception):
        preload()
    # pyspark.daemon reads the worker module Spark names in argv, as when it runs as the main module.
    from pyspark import daemon

    daemon.manager()  # type: ignore[no-untyped-call]  # pyspark's daemon is untyped


if __name__ == "__main__":
    main()
