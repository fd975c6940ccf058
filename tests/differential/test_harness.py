"""The comparison machinery itself, without brokers: normalisation, field-by-field diffs, the allowlist."""

from __future__ import annotations

from differential.allowlist import ALLOWLIST, Allowed
from differential.dsl import Observation, primary_error
from differential.harness import normalise
from support.normalize import Difference, IdNormaliser, diff, glob_match

UUID_A = "0b9ad3c2-5b6e-4c8e-9f8e-0123456789ab"
UUID_B = "f1e2d3c4-b5a6-4978-8a9b-abcdefabcdef"


def _obs(index: int, api: str, version: int, response: object) -> Observation:
    return Observation(index, f"step {index}", api, version, response)


def test_member_ids_are_numbered_by_the_join_answer_that_hands_them_out() -> None:
    join_b = {"error_code": 79, "member_id": f"b-{UUID_B}", "members": [], "throttle_time_ms": 5}
    leader = {
        "error_code": 0,
        "member_id": f"a-{UUID_A}",
        "leader": f"a-{UUID_A}",
        "members": [{"member_id": f"b-{UUID_B}"}, {"member_id": f"a-{UUID_A}"}],
    }
    out = normalise([_obs(0, "JoinGroup", 9, join_b), _obs(1, "JoinGroup", 9, leader)], "g")
    assert out[0] == {"error_code": 79, "member_id": "b-M1", "members": []}
    # The leader's member list is sorted; numbering does not depend on its order.
    assert out[1]["members"] == [{"member_id": "a-M2"}, {"member_id": "b-M1"}]


def test_coordinator_endpoints_are_placeholders_only_on_success() -> None:
    ok = {"coordinators": [{"key": "g", "node_id": 1, "host": "h", "port": 1, "error_code": 0}]}
    failed = {"coordinators": [{"key": "g", "node_id": -1, "host": "", "port": -1, "error_code": 15}]}
    out = normalise([_obs(0, "FindCoordinator", 4, ok), _obs(1, "FindCoordinator", 4, failed)], "g")
    assert out[0]["coordinators"][0]["port"] == "<port>"
    assert out[1]["coordinators"][0]["port"] == -1


def test_diff_reports_every_leaf_with_its_path() -> None:
    kafka = {"groups": [{"group_state": "Stable", "members": [1, 2]}]}
    regroup = {"groups": [{"group_state": "Empty", "members": [1]}], "extra": True}
    paths = {d.path: (d.expected, d.actual) for d in diff(kafka, regroup)}
    assert paths == {
        "groups[0].group_state": ("Stable", "Empty"),
        "groups[0].members.<len>": (2, 1),
        "groups[0].members[1]": (2, "<absent>"),
        "extra": ("<absent>", True),
    }


def test_glob_brackets_are_literal() -> None:
    assert glob_match("coordinators[*].error_message", "coordinators[3].error_message")
    assert glob_match("api_keys.8[0]", "api_keys.8[0]")
    assert not glob_match("api_keys.8[0]", "api_keys.80")


def test_allowlist_entries_are_narrow_and_explained() -> None:
    for entry in ALLOWLIST:
        assert len(entry.reason) > 40, entry
        assert entry.scenario != "*", f"{entry} would apply to every scenario"
    entry = Allowed("ApiVersions", (0, 4), "api_keys.8[0]", "api-versions", "why", kafka=2, regroup=1)
    assert entry.matches("api-versions", "ApiVersions", 3, Difference("api_keys.8[0]", 2, 1))
    assert not entry.matches("api-versions", "ApiVersions", 3, Difference("api_keys.8[0]", 2, 0))
    assert not entry.matches("other", "ApiVersions", 3, Difference("api_keys.8[0]", 2, 1))


def test_primary_error_of_batched_answers() -> None:
    commit = {"topics": [{"name": "t", "partitions": [{"error_code": 25}, {"error_code": 25}]}]}
    mixed = {"topics": [{"name": "t", "partitions": [{"error_code": 0}, {"error_code": 3}]}]}
    assert primary_error("OffsetCommit", commit) == 25
    assert primary_error("OffsetCommit", mixed) is None
    assert primary_error("JoinGroup", {"<no response>": "timeout"}) is None


def test_id_normaliser_keeps_prefixes() -> None:
    ids = IdNormaliser()
    ids.register(f"static-{UUID_B}")
    assert ids({"leader": f"a-{UUID_A}", "m": [f"static-{UUID_B}"]}) == {"leader": "a-M2", "m": ["static-M1"]}
