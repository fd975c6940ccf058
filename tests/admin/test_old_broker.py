"""Against a broker with old API versions: the requests fall back the way Kafka's Admin does (single-key
FindCoordinator, unfiltered ListGroups, one OffsetFetch per group) and the output stays the same."""

from __future__ import annotations

import io
from collections.abc import Iterator

import pytest

from admin.oldbroker import Group, Model, OldBroker, old_broker
from regroup.admin.cli import main


@pytest.fixture
def model() -> Model:
    return Model(
        topics={"t": [(0, 10), (5, 8)]},
        groups={
            "live": Group("Stable", {("t", 0): 4}, [("c-1", "c", [("t", 0), ("t", 1)])]),
            "idle": Group("Empty", {("t", 0): 2, ("t", 1): 6}),
        },
    )


@pytest.fixture
def broker(model: Model) -> Iterator[OldBroker]:
    with old_broker(model) as b:
        yield b


def run(broker: OldBroker, *args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(
        ["--bootstrap-server", f"127.0.0.1:{broker.port}", "--timeout", "5000", *args], out=out, err=err
    )
    return code, out.getvalue(), err.getvalue()


def test_list_states_come_from_describe_groups(broker: OldBroker, model: Model) -> None:
    code, out, _ = run(broker, "--list", "--state", "stable", "--type")
    assert code == 0
    assert out.splitlines()[1].split() == ["live", "Unknown", "Stable"]
    assert len(out.splitlines()) == 2
    sent = {name for name, _ in model.requests}
    assert ("LIST_GROUPS", 2) in model.requests
    assert "DESCRIBE_GROUPS" in sent
    assert all(v <= 2 for name, v in model.requests if name == "FIND_COORDINATOR")


def test_describe_and_reset(broker: OldBroker, model: Model) -> None:
    code, out, err = run(broker, "--describe", "--group", "live", "--group", "idle")
    assert code == 0
    assert err == "\nConsumer group 'idle' has no active members.\n"
    rows = [line.split()[:6] for line in out.splitlines() if line.startswith(("live ", "idle "))]
    assert rows == [
        ["idle", "t", "0", "2", "10", "8"],
        ["idle", "t", "1", "6", "8", "2"],
        ["live", "t", "0", "4", "10", "6"],
        ["live", "t", "1", "-", "8", "-"],
    ]
    assert ("OFFSET_FETCH", 5) in model.requests
    code, out, _ = run(
        broker, "--reset-offsets", "--group", "idle", "--all-topics", "--to-earliest", "--execute"
    )
    assert code == 0
    assert model.groups["idle"].offsets == {("t", 0): 0, ("t", 1): 5}
    assert ("OFFSET_COMMIT", 6) in model.requests


def test_delete_and_unsupported_delete_offsets(broker: OldBroker, model: Model) -> None:
    code, out, _ = run(broker, "--delete", "--group", "idle")
    assert (code, out) == (0, "Deletion of requested consumer groups ('idle') was successful.\n")
    assert "idle" not in model.groups
    code, out, _ = run(broker, "--delete-offsets", "--group", "live", "--topic", "t:0")
    assert code == 0
    assert out.startswith("\nError: Encountered some unknown error: UNSUPPORTED_VERSION\n")
    assert "Error: org.apache.kafka.common.errors.UnsupportedVersionException" in out
