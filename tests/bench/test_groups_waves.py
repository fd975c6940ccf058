"""``regroup bench heartbeat`` when the open-files limit cannot give every member a join lane: the groups
form a wave at a time over lanes for the largest group, against a real regroup broker; and the files each
scenario asks the limit for."""

from __future__ import annotations

import pytest

from bench.support import tiny
from regroup.bench.groups import scenarios
from regroup.bench.groups.brokers import BenchTarget
from regroup.bench.groups.scenarios import run_scenario
from regroup.bench.groups.wire import JoinLanes


def test_groups_form_a_wave_at_a_time_when_the_limit_is_short(
    regroup_broker: BenchTarget, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 24 members in 4 groups of 6, and a hard limit that cannot hold a lane per member.
    monkeypatch.setattr(scenarios, "_open_files_hard_limit", lambda: 24 + scenarios._SPARE_FILES - 1)
    sizes: list[int] = []
    grow = JoinLanes.grow

    async def recording(self: JoinLanes, size: int, parallel: int = 200) -> None:
        await grow(self, size, parallel)
        sizes.append(self.size)

    monkeypatch.setattr(JoinLanes, "grow", recording)
    result = run_scenario("heartbeat", regroup_broker, tiny(members=24, groups=4))
    assert result.error is None, result.error
    assert not [k for k in result.errors if not k.startswith("setup")], result.errors
    assert max(sizes) == 6  # the largest group's lanes, never one per member
    metrics = {m.key: m.value for m in result.metrics}
    assert metrics[("saturation", "achieved")]


def test_every_group_forms_at_once_when_the_limit_allows(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scenarios, "_open_files_hard_limit", lambda: 24 + scenarios._SPARE_FILES)
    assert scenarios._heartbeat_lanes(tiny(members=24, groups=4)) == 24
    monkeypatch.setattr(scenarios, "_open_files_hard_limit", lambda: None)
    assert scenarios._heartbeat_lanes(tiny(members=24, groups=4)) == 24


def test_waves_pack_whole_groups() -> None:
    class M:
        def __init__(self, group_id: str) -> None:
            self.group_id = group_id

    members = [M(g) for g in "abcabcab"]  # a: 3, b: 3, c: 2
    waves = scenarios._waves(members, 5)  # type: ignore[arg-type]
    assert [[m.group_id for m in w] for w in waves] == [["a", "a", "a"], ["b", "b", "b", "c", "c"]]


def test_the_files_a_run_asks_for() -> None:
    spare = scenarios._SPARE_FILES
    assert scenarios._open_files_needed("formation", tiny(members=20000)) == 20000 + spare
    consumer = tiny(members=20000, protocol="consumer", connections=8)
    assert scenarios._open_files_needed("formation", consumer) == 8 + spare
    assert scenarios._open_files_needed("heartbeat", consumer) == 8 + spare
