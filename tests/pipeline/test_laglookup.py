"""The lag lookups' two ways (:mod:`regroup_pipeline.laglookup`) give the same rows: the broadcast index
over every partition's records against the cogroup function given one partition's rows and records."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from regroup_pipeline.laglookup import RecordIndex, lag_lookup

US = pa.timestamp("us", tz="UTC")
ROW_SCHEMA = pa.schema(
    [
        ("group", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("sample_time", US),
        ("is_current", pa.bool_()),
        ("kind", pa.string()),
        ("committed_offset", pa.int64()),
        ("commit_timestamp", US),
        ("log_end_offset", pa.int64()),
    ]
)


def _records(rng: np.random.Generator) -> dict[tuple[str, int], tuple[Any, Any]]:
    """Per partition: offsets with gaps (compaction) in log order and timestamps that mostly rise, with
    ties and a few out of order (producers' own timestamps). Some partitions have none."""
    out = {}
    for topic in ("a", "b", "long-topic-name"):
        for partition in range(4):
            n = int(rng.integers(0, 40)) if partition else 0
            offsets = np.cumsum(rng.integers(1, 4, n)) + int(rng.integers(0, 100))
            stamps = 1_000_000 * (np.cumsum(rng.integers(0, 3, n)) + rng.integers(-2, 3, n))
            out[(topic, partition)] = (offsets.astype(np.int64), stamps.astype(np.int64))
    return out


def _rows(rng: np.random.Generator, n: int) -> pa.RecordBatch:
    """Lag rows over the partitions above and one that has no records anywhere ("c"), committed offsets
    and sample times around the records', some with a known log end offset."""
    topics = rng.choice(["a", "b", "long-topic-name", "c"], n)
    partitions = rng.integers(0, 5, n).astype(np.int32)
    committed = rng.integers(-5, 200, n)
    samples = 1_000_000 * rng.integers(-10, 120, n)
    known = rng.random(n) < 0.2
    return pa.RecordBatch.from_arrays(
        [
            pa.array([f"g{i % 7}" for i in range(n)]),
            pa.array(topics.tolist()),
            pa.array(partitions, pa.int32()),
            pa.array(samples, pa.int64()).cast(US),
            pa.array(known),
            pa.array(["current" if k else "sample" for k in known]),
            pa.array(committed, pa.int64()),
            pa.array(samples - 5, pa.int64()).cast(US),
            pa.array(np.where(known, 500, 0), pa.int64(), mask=~known),
        ],
        schema=ROW_SCHEMA,
    )


def _by_partition(
    rows: pa.RecordBatch, records: dict[tuple[str, int], tuple[Any, Any]]
) -> dict[tuple[str, int], list[dict[str, Any]]]:
    """lag_lookup, one partition at a time, as the cogroup calls it."""
    table = pa.Table.from_batches([rows])
    out: dict[tuple[str, int], list[dict[str, Any]]] = {}
    keys = set(zip(table.column("topic").to_pylist(), table.column("partition").to_pylist(), strict=True))
    for topic, partition in keys:
        mask = pa.array(
            [
                t == topic and p == partition
                for t, p in zip(table["topic"].to_pylist(), table["partition"].to_pylist(), strict=True)
            ]
        )
        offsets, stamps = records.get((topic, partition), (np.zeros(0, np.int64), np.zeros(0, np.int64)))
        recs = pa.table(
            {"offset": pa.array(offsets, pa.int64()), "timestamp": pa.array(stamps, pa.int64()).cast(US)}
        )
        out[(topic, partition)] = lag_lookup(table.filter(mask), recs).to_pylist()
    return out


@pytest.mark.parametrize("seed", range(8))
def test_the_broadcast_index_looks_up_as_the_cogroup_does(seed: int) -> None:
    rng = np.random.default_rng(seed)
    records = _records(rng)
    flat = [(t, p, o, s) for (t, p), (os_, ss) in records.items() for o, s in zip(os_, ss, strict=True)]
    order = rng.permutation(len(flat))  # the collected records come in any order
    index = RecordIndex(
        pa.table(
            {
                "topic": pa.array([flat[i][0] for i in order], pa.string()),
                "partition": pa.array([flat[i][1] for i in order], pa.int32()),
                "offset": pa.array([flat[i][2] for i in order], pa.int64()),
                "timestamp": pa.array([flat[i][3] for i in order], pa.int64()).cast(US),
            }
        )
    )
    rows = _rows(rng, 300)
    filled = index.fill(rows)
    assert filled.schema.names == [*ROW_SCHEMA.names[:-1], "log_end_offset", "first_unconsumed_timestamp"]
    expected = _by_partition(rows, records)
    got: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for row in filled.to_pylist():
        got.setdefault((row["topic"], row["partition"]), []).append(row)
    assert got == expected
    # The lookups found something: not every row is empty-handed.
    assert any(r["first_unconsumed_timestamp"] is not None for r in filled.to_pylist())
    assert any(r["log_end_offset"] is None for r in filled.to_pylist())


def test_an_empty_index_and_an_empty_batch() -> None:
    empty = pa.table(
        {
            "topic": pa.array([], pa.string()),
            "partition": pa.array([], pa.int32()),
            "offset": pa.array([], pa.int64()),
            "timestamp": pa.array([], US),
        }
    )
    rows = _rows(np.random.default_rng(1), 10)
    filled = RecordIndex(empty).fill(rows).to_pylist()
    assert all(r["first_unconsumed_timestamp"] is None for r in filled)
    assert [r["log_end_offset"] for r in filled] == rows.column("log_end_offset").to_pylist()
    assert RecordIndex(empty).fill(rows.slice(0, 0)).num_rows == 0
