"""Hypothesis state machine: random appends, rolls, clean and unclean reopens, DeleteRecords and retention
keep reads, timestamp lookups and offsets consistent with a plain list model."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from regroup.log.partition import PartitionLog
from regroup.protocol.record_batch import Record, build_batch, decode_batches

from .helpers import read_all, small_config


class LogModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="regroup-log-model-")) / "t-0"
        self.config = small_config(segment_bytes=2_000, index_interval_bytes=64)
        self.plog = PartitionLog.open(self.dir, self.config)
        self.values: list[bytes] = []  # by offset
        self.start = 0

    def teardown(self) -> None:
        if not self.plog.closed:
            self.plog.close()
        shutil.rmtree(self.dir.parent, ignore_errors=True)

    @rule(sizes=st.lists(st.integers(0, 300), min_size=1, max_size=5), salt=st.integers(0, 255))
    def append(self, sizes: list[int], salt: int) -> None:
        base = len(self.values)
        values = [bytes([(salt + i) % 256]) * n for i, n in enumerate(sizes)]
        # timestamps grow with offsets so the model can answer timestamp lookups
        records = [Record(i, 10 * (base + i), None, v, []) for i, v in enumerate(values)]
        info = self.plog.append(build_batch(records), now_ms=0)
        assert (info.base_offset, info.last_offset) == (base, base + len(values) - 1)
        self.values.extend(values)

    @rule()
    def roll(self) -> None:
        self.plog.roll(now_ms=0)

    @rule(clean=st.booleans(), flush=st.booleans())
    def reopen(self, clean: bool, flush: bool) -> None:
        if clean:
            self.plog.close()
        else:
            if flush:
                self.plog.flush()
            self.plog.close_handles()
        self.plog = PartitionLog.open(
            self.dir,
            self.config,
            clean_shutdown=clean,
            recovery_point=self.plog.recovery_point,
            log_start_offset=self.start,
        )

    @precondition(lambda self: len(self.values) > self.start)
    @rule(data=st.data())
    def delete_records(self, data: st.DataObject) -> None:
        target = data.draw(st.integers(self.start, len(self.values)))
        assert self.plog.delete_records_before(target) == target
        self.start = target

    @rule()
    def retention(self) -> None:
        self.plog.apply_retention(now_ms=0)  # retention.ms is -1: only segments below the start go
        assert self.plog.log_start_offset == self.start

    @invariant()
    def offsets_match(self) -> None:
        assert self.plog.log_start_offset == self.start
        assert self.plog.log_end_offset == self.plog.high_watermark == len(self.values)

    @invariant()
    def full_read_matches(self) -> None:
        got = read_all(self.plog, max_bytes=700)
        assert [r.offset for r in got] == list(range(self.start, len(self.values)))
        assert [r.value for r in got] == self.values[self.start :]

    @precondition(lambda self: len(self.values) > self.start)
    @rule(data=st.data(), max_bytes=st.integers(1, 2_000))
    def point_read(self, data: st.DataObject, max_bytes: int) -> None:
        offset = data.draw(st.integers(self.start, len(self.values) - 1))
        raw = self.plog.read(offset, max_bytes).data
        batches = decode_batches(raw)
        assert batches[0].base_offset <= offset <= batches[0].last_offset
        assert len(batches) == 1 or len(raw) <= max_bytes  # at least one batch, else within max_bytes
        for b in batches:
            for r in b.records:
                assert r.value == self.values[r.offset]

    @rule(ts=st.integers(-5, 4_000))
    def timestamp_lookup(self, ts: int) -> None:
        expected_offset = max(self.start, (max(ts, 0) + 9) // 10)
        got = self.plog.offset_for_timestamp(ts)
        if expected_offset < len(self.values):
            assert got == (expected_offset, 10 * expected_offset)
        else:
            assert got is None


TestLogModel = LogModel.TestCase
TestLogModel.settings = settings(max_examples=40, stateful_step_count=25, deadline=None)
