"""Drive a harness group into each state of docs/design/group-semantics.md §2."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from regroup.group.state import GroupState
from regroup.protocol.errors import ErrorCode

from .harness import Call, Harness, assignment


@dataclass
class Setup:
    members: list[str]
    generation: int  # the generation currently valid for Heartbeat/Sync/Commit
    parked: list[Call[Any]]  # parked JoinGroups / SyncGroups, if any


def stable(h: Harness, group: str = "g", n: int = 2) -> Setup:
    ids, gen = h.form_group(group, n)
    return Setup(ids, gen, [])


def preparing(h: Harness, group: str = "g", n: int = 2) -> Setup:
    """Stable group whose leader rejoined: PreparingRebalance, waiting for the others."""
    ids, gen = h.form_group(group, n)
    parked = h.join(group, ids[0])
    assert not parked.done
    assert h.shard.group(group).state is GroupState.PREPARING_REBALANCE  # type: ignore[union-attr]
    return Setup(ids, gen, [parked])


def completing(h: Harness, group: str = "g", n: int = 2) -> Setup:
    """All members rejoined: CompletingRebalance, nobody synced yet."""
    ids, _ = h.form_group(group, n)
    calls = [h.join(group, m) for m in ids]
    assert all(c.done and c.error is ErrorCode.NONE for c in calls)
    gen = calls[0].response.generation_id
    assert h.shard.group(group).state is GroupState.COMPLETING_REBALANCE  # type: ignore[union-attr]
    return Setup(ids, gen, [])


def empty(h: Harness, group: str = "g", n: int = 2) -> Setup:
    """A consumer group whose members all left: Empty, generation bumped, protocol type kept."""
    ids, _ = h.form_group(group, n)
    leave = h.leave(group, *ids)
    assert leave.error is ErrorCode.NONE
    snap = h.shard.group(group)
    assert snap is not None
    assert snap.state is GroupState.EMPTY
    return Setup(ids, snap.generation_id, [])


def dead(h: Harness, group: str = "g", n: int = 2) -> Setup:
    ids, gen = h.form_group(group, n)
    h.apply(h.shard.on_unloaded())
    assert h.shard.group(group).state is GroupState.DEAD  # type: ignore[union-attr]
    return Setup(ids, gen, [])


SETUPS = {
    GroupState.EMPTY: empty,
    GroupState.PREPARING_REBALANCE: preparing,
    GroupState.COMPLETING_REBALANCE: completing,
    GroupState.STABLE: stable,
    GroupState.DEAD: dead,
}

__all__ = ["SETUPS", "Setup", "assignment"]
