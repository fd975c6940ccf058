"""Compaction: latest value per key, tombstone horizons, preserved offsets, crash-safe swaps."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from regroup.log import cleaner
from regroup.log.config import LogConfig
from regroup.log.partition import PartitionLog
from regroup.protocol.record_batch import LOG_APPEND_TIME, decode_batches

from .helpers import batch, kv_batch, open_log, read_all, small_config

DAY = 86_400_000


def compact_config(**changes: object) -> LogConfig:
    return small_config(cleanup_policy=frozenset({"compact"}), **changes)


def write_history(
    plog: PartitionLog, rounds: int = 6, keys: int = 8
) -> dict[bytes, tuple[int, bytes | None]]:
    """Append ``rounds`` values for each key (a tombstone for k0 at the end); returns key -> (offset, value)
    of the latest record."""
    latest: dict[bytes, tuple[int, bytes | None]] = {}
    for r in range(rounds):
        for k in range(keys):
            key = b"k%d" % k
            value: bytes | None = b"v%d-%d" % (k, r) + b"." * 60
            if k == 0 and r == rounds - 1:
                value = None
            info = plog.append(kv_batch([(key, value)], ts=1_000 + r), now_ms=0)
            latest[key] = (info.base_offset, value)
    return latest


def closed_records(plog: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    active = plog.segment_bases()[-1]
    return [(r.offset, r.key, r.value) for r in read_all(plog) if r.offset < active]


def test_keeps_the_latest_record_per_key_with_its_offset(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0", compact_config())
    latest = write_history(plog)
    plog.roll(now_ms=0)
    before = plog.segment_count
    stats = plog.compact(now_ms=0)
    assert stats is not None
    assert stats.records_removed == 8 * 5
    survivors = closed_records(plog)
    assert sorted((o, k, v) for k, (o, v) in latest.items()) == survivors
    # segments grouped by their (now small) sizes are merged by the next pass
    assert plog.compact(now_ms=0, force=True) is not None
    assert plog.segment_count < before
    assert closed_records(plog) == survivors
    # offsets keep their gaps: reading an offset that was compacted away returns the next survivor
    gone = next(o for o in range(plog.log_end_offset) if o not in {s[0] for s in survivors})
    first = decode_batches(plog.read(gone, 1).data)[0]
    assert first.base_offset > gone
    assert plog.log_end_offset == 48  # the end never moves
    plog.close()
    reopened = open_log(tmp_path / "t-0", compact_config(), clean_shutdown=True)
    assert closed_records(reopened) == survivors
    reopened.close()


def test_tombstones_go_after_delete_retention(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0", compact_config())
    write_history(plog)
    plog.roll(now_ms=0)
    plog.compact(now_ms=10_000)
    assert (b"k0", None) in [(k, v) for _, k, v in closed_records(plog)]  # horizon stamped, kept for now
    assert plog.compact(now_ms=10_000 + DAY - 1) is None  # nothing dirty, horizon not reached
    stats = plog.compact(now_ms=10_000 + DAY)
    assert stats is not None
    assert stats.records_removed == 1
    keys = [k for _, k, _ in closed_records(plog)]
    assert b"k0" not in keys
    assert len(keys) == 7
    plog.close()


def test_null_keys_are_kept(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0", compact_config())
    plog.append(kv_batch([(None, b"a"), (b"x", b"1"), (None, b"b"), (b"x", b"2")]), now_ms=0)
    plog.roll(now_ms=0)
    plog.compact(now_ms=0)
    assert closed_records(plog) == [(0, None, b"a"), (2, None, b"b"), (3, b"x", b"2")]
    plog.close()


def test_the_active_segment_and_the_lag_window_are_not_cleaned(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0", compact_config(segment_bytes=1 << 20, min_compaction_lag_ms=5_000))
    plog.append(kv_batch([(b"a", b"1"), (b"a", b"2")], ts=1_000), now_ms=0)
    assert plog.compact(now_ms=10**9) is None  # only the active segment
    plog.roll(now_ms=0)
    plog.append(kv_batch([(b"a", b"3")], ts=1_000), now_ms=0)
    assert plog.compact(now_ms=5_000) is None  # within min.compaction.lag.ms
    assert plog.compact(now_ms=6_002) is not None
    assert [(r.offset, r.value) for r in read_all(plog)] == [(1, b"2"), (2, b"3")]
    plog.close()


def test_dirty_ratio_gates_cleaning(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0", compact_config(min_cleanable_dirty_ratio=0.99))
    for i in range(40):
        plog.append(kv_batch([(b"k%d" % (i % 4), b"x" * 80)]), now_ms=0)
    plog.roll(now_ms=0)
    assert plog.compact(now_ms=0) is not None  # all dirty the first time
    for i in range(3):
        plog.append(kv_batch([(b"k%d" % i, b"y" * 80)]), now_ms=0)
    plog.roll(now_ms=0)
    assert plog.compact(now_ms=0) is None  # the new dirty part is small
    assert plog.compact(now_ms=0, force=True) is not None
    plog.close()


def test_batches_are_rewritten_only_where_records_are_dropped(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0", compact_config(segment_bytes=1 << 20))
    plog.append(kv_batch([(b"a", b"1"), (b"b", b"1")]), now_ms=0)
    plog.append(kv_batch([(b"c", b"1"), (b"d", b"1")]), now_ms=0)
    untouched = plog.read(2, 1).data
    plog.append(kv_batch([(b"a", b"2")]), now_ms=0)
    plog.roll(now_ms=0)
    stats = plog.compact(now_ms=0)
    assert stats is not None
    assert stats.batches_rewritten == 1
    assert plog.read(2, 1).data == untouched
    (rewritten,) = decode_batches(plog.read(0, 1).data)
    assert (rewritten.base_offset, rewritten.last_offset_delta) == (0, 1)  # original range kept
    assert [(r.offset, r.key) for r in rewritten.records] == [(1, b"b")]
    plog.close()


def test_compressed_and_log_append_time_batches_keep_their_attributes(tmp_path: Path) -> None:
    from regroup.protocol.record_batch import Compression, Record, build_batch

    plog = open_log(
        tmp_path / "t-0", compact_config(segment_bytes=1 << 20, message_timestamp_type="LogAppendTime")
    )
    recs = [Record(i, 5, b"k%d" % (i % 2), b"v%d" % i, [("h", b"x")]) for i in range(4)]
    plog.append(build_batch(recs, compression=Compression.ZSTD), now_ms=900)
    plog.roll(now_ms=0)
    plog.compact(now_ms=1_000)
    (b,) = decode_batches(plog.read(0, 1).data)
    assert b.compression is Compression.ZSTD
    assert b.timestamp_type == LOG_APPEND_TIME
    assert b.max_timestamp == 900
    assert [(r.offset, r.value, list(r.headers)) for r in b.records] == [
        (2, b"v2", [("h", b"x")]),
        (3, b"v3", [("h", b"x")]),
    ]
    plog.close()


def test_the_last_batch_of_a_producer_survives_empty(tmp_path: Path) -> None:
    plog = open_log(tmp_path / "t-0", compact_config(segment_bytes=1 << 20))
    plog.append(batch(2, key=b"a", producer_id=9, producer_epoch=0, base_sequence=0), now_ms=0)
    plog.append(kv_batch([(b"a", b"later")]), now_ms=0)
    plog.roll(now_ms=0)
    plog.compact(now_ms=0)
    batches = decode_batches(plog.read(0, 1 << 20).data)
    assert [(b.base_offset, b.last_offset_delta, len(b.records), b.producer_id) for b in batches] == [
        (0, 1, 0, 9),
        (2, 0, 1, -1),
    ]
    plog.close()
    reopened = open_log(tmp_path / "t-0", compact_config(), clean_shutdown=False)
    # the producer's sequence survives: the next batch must follow sequence 1
    assert (
        reopened.append(
            batch(1, key=b"z", producer_id=9, producer_epoch=0, base_sequence=2), now_ms=0
        ).base_offset
        == 3
    )
    reopened.close()


class Crash(Exception):
    pass


@pytest.mark.parametrize("step", ["cleaned", "committed", "replaced-deleted", "renamed"])
def test_crash_during_the_swap_keeps_a_consistent_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    d = tmp_path / "t-0"
    plog = open_log(d, compact_config())
    latest = write_history(plog)
    plog.roll(now_ms=0)
    plog.flush()
    expected_survivors = sorted((o, k, v) for k, (o, v) in latest.items())
    full_history = closed_records(plog)

    def hook(name: str) -> None:
        if name == step:
            raise Crash(name)

    monkeypatch.setattr(cleaner, "_fault_hook", hook)
    with pytest.raises(Crash):
        plog.compact(now_ms=0)
    plog.close_handles()
    monkeypatch.setattr(cleaner, "_fault_hook", None)

    reopened = open_log(d, compact_config())
    leftovers = [p.name for p in d.iterdir() if p.name.endswith((".swap", ".cleaned", ".tmp"))]
    assert leftovers == []
    records = closed_records(reopened)
    if step == "cleaned":
        assert records == full_history  # crashed before the commit point: the old segments are intact
    else:
        # the first group's committed swap was completed; later groups were never cleaned
        assert records != full_history
        assert set(records) <= set(full_history)
        assert set(expected_survivors) <= set(records)
    assert reopened.log_end_offset == 48
    reopened.compact(now_ms=0, force=True)
    assert closed_records(reopened) == expected_survivors
    assert reopened.append(kv_batch([(b"new", b"1")]), now_ms=0).base_offset == 48
    reopened.close()


def test_random_histories_match_a_model(tmp_path: Path) -> None:
    rng = random.Random(7)
    plog = open_log(tmp_path / "t-0", compact_config(segment_bytes=1_500))
    model: dict[bytes, tuple[int, bytes | None]] = {}
    for round_ in range(6):
        for _ in range(rng.randrange(10, 40)):
            pairs = [
                (b"k%d" % rng.randrange(12), None if rng.random() < 0.1 else b"v" * rng.randrange(1, 50))
                for _ in range(rng.randrange(1, 4))
            ]
            info = plog.append(kv_batch(pairs), now_ms=0)
            for i, (k, v) in enumerate(pairs):
                model[k] = (info.base_offset + i, v)
        plog.roll(now_ms=0)
        plog.compact(now_ms=round_, force=True)
        survivors = {k: (o, v) for o, k, v in closed_records(plog) if k is not None}
        assert survivors == dict(model.items())
    plog.close()


def test_a_pass_that_changes_nothing_leaves_the_files_alone(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    plog = open_log(d, compact_config(segment_bytes=1 << 20))
    plog.append(kv_batch([(b"a", b"1"), (b"b", b"1")]), now_ms=0)
    plog.roll(now_ms=0)
    plog.flush()
    before = {p.name: p.read_bytes() for p in d.iterdir() if p.name.startswith("0" * 20)}
    assert before.keys() >= {f"{0:020d}.log", f"{0:020d}.index", f"{0:020d}.timeindex"}
    stats = plog.compact(now_ms=0, force=True)
    assert stats is not None
    assert stats.segments_after == 1
    assert stats.records_removed == 0
    after = {p.name: p.read_bytes() for p in d.iterdir() if p.name.startswith("0" * 20)}
    assert after == before
    plog.close()


def test_a_pass_prepared_while_the_log_takes_appends_keeps_them(tmp_path: Path) -> None:
    """plan → prepare (a worker thread in the broker) → appends meanwhile → finish: the pass swaps in its
    cleaned segments and every record appended meanwhile is still there after them."""
    plog = open_log(tmp_path / "t-0", compact_config())
    latest = write_history(plog)
    plog.roll(now_ms=0)
    plan = plog.plan_compaction(now_ms=0)
    assert plan is not None
    prepared = plan.prepare()
    later = [plog.append(kv_batch([(b"k1", b"later-%d" % i)]), now_ms=0).base_offset for i in range(3)]
    stats = plog.finish_compaction(plan, prepared)
    assert stats is not None
    assert stats.records_removed == 8 * 5
    assert closed_records(plog) == sorted((o, k, v) for k, (o, v) in latest.items())
    tail = [(r.offset, r.value) for r in read_all(plog) if r.offset >= later[0]]
    assert tail == [(o, b"later-%d" % i) for i, o in enumerate(later)]
    assert not list((tmp_path / "t-0").glob("*" + cleaner.CLEANED_SUFFIX))
    reopened_records = [(r.offset, r.key, r.value) for r in read_all(plog)]
    plog.close()
    assert [(r.offset, r.key, r.value) for r in read_all(open_log(tmp_path / "t-0", compact_config()))] == (
        reopened_records
    )


@pytest.mark.parametrize("change", ["retention", "truncation", "close"])
def test_a_pass_whose_segments_changed_meanwhile_is_dropped(tmp_path: Path, change: str) -> None:
    plog = open_log(tmp_path / "t-0", compact_config())
    write_history(plog)
    plog.roll(now_ms=0)
    write_history(plog, rounds=2)
    plog.roll(now_ms=0)
    plan = plog.plan_compaction(now_ms=0)
    assert plan is not None
    prepared = plan.prepare()
    assert list((tmp_path / "t-0").glob("*" + cleaner.CLEANED_SUFFIX))
    if change == "retention":
        plog.delete_records_before(plog.segment_bases()[1])
    elif change == "truncation":
        plog.truncate_to(plog.segment_bases()[1] - 3)
    before = [(r.offset, r.key, r.value) for r in read_all(plog)] if change != "close" else []
    if change == "close":
        plog.close()
    assert plog.finish_compaction(plan, prepared) is None
    assert not list((tmp_path / "t-0").glob("*" + cleaner.CLEANED_SUFFIX))
    if change != "close":
        assert [(r.offset, r.key, r.value) for r in read_all(plog)] == before
    if change == "retention":
        assert plog.compact(now_ms=0, force=True) is not None  # the next pass starts over
