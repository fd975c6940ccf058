"""``regroup bench memory`` against a regroup broker it starts, at a toy size: the rows are there and the
broker's memory totals are positive. No assertion looks at how much memory anything takes."""

from __future__ import annotations

import json

import pytest

from bench.support import tiny
from regroup.bench.groups.scenarios import run


def test_memory_rows_per_member_and_per_offset(capsys: pytest.CaptureFixture[str]) -> None:
    params = tiny(members=20, groups=2, offsets=200, partitions=50)
    code = run("memory", params, broker="regroup", json_output=True)
    doc = json.loads(capsys.readouterr().out)
    (run_doc,) = doc["runs"]
    assert code == 0, run_doc["error"]
    assert "RSS" in doc["note"]
    metrics = {(m["phase"], m["name"]): m for m in run_doc["metrics"]}
    for phase in ("baseline", "connections", "idle members", "committed offsets"):
        assert metrics[(phase, "memory total")]["value"] > 0
        assert metrics[(phase, "RSS total")]["value"] > 0
    # Every member gets a connection of its own before any joins (the warm-up group of 10 has used 10).
    assert metrics[("connections", "connections opened")]["value"] == 20
    steps = (
        ("connections", "connection"),
        ("idle members", "idle member"),
        ("committed offsets", "committed offset"),
    )
    for phase, each in steps:
        # regroup's rows count RSS, which moves by whole pages: at this size a step can fit in pages the
        # process already holds, so a row need only be a reading.
        for name in (each, f"{each} by RSS"):
            assert metrics[(phase, name)]["unit"] == "bytes each"
            assert isinstance(metrics[(phase, name)]["value"], float)
    assert metrics[("idle members", "members still stable at the end")]["value"] == 20
    assert metrics[("committed offsets", "groups (no members)")]["value"] == 4
