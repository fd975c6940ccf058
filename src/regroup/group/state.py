"""The classic group state machine: the five states, their wire names and the allowed transitions."""

from __future__ import annotations

import enum
from typing import Final

from mypy_extensions import mypyc_attr

__all__ = ["ALLOWED_PREVIOUS_STATES", "GroupState", "IllegalStateTransition"]


@mypyc_attr(native_class=False)  # compiled, an exception class stays a Python class
class IllegalStateTransition(RuntimeError):
    """A transition the state table forbids: always a coordinator bug, never a client error."""


class GroupState(enum.Enum):
    """State of a classic group; the value is the name sent on the wire (DescribeGroups, ListGroups).

    * ``EMPTY`` — no members. Offsets may still exist; a group that only ever had offset commits (a
      "simple" group) stays here forever. Offsets expire ``offsets.retention`` after the group became
      Empty; the group itself is deleted by the expiration job once it has no offsets.
    * ``PREPARING_REBALANCE`` — the join phase: the coordinator parks JoinGroups until every member has
      rejoined, the rebalance timeout passes, or (initial rebalance) the initial delay runs out. The old
      generation stays valid for Heartbeat, OffsetCommit and SyncGroup checks.
    * ``COMPLETING_REBALANCE`` — the sync phase: the new generation exists, the coordinator waits for the
      leader's assignment; followers' SyncGroups are parked; heartbeats are answered NONE, commits
      REBALANCE_IN_PROGRESS.
    * ``STABLE`` — the leader's assignment is durable and has been handed out.
    * ``DEAD`` — the group was unloaded (or removed); every API answers COORDINATOR_NOT_AVAILABLE or
      treats it as unknown.
    """

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"

    @property
    def wire_name(self) -> str:
        return self.value

    def can_transition_to(self, target: GroupState) -> bool:
        return self in ALLOWED_PREVIOUS_STATES[target]

    @classmethod
    def parse(cls, name: str) -> GroupState | None:
        """Case-insensitive, whitespace-trimmed lookup by wire name (ListGroups' states filter)."""
        wanted = name.strip().lower()
        for state in cls:
            if state.value.lower() == wanted:
                return state
        return None


# target state <- states it may be entered from (Kafka's ClassicGroupState.validPreviousStates)
ALLOWED_PREVIOUS_STATES: Final[dict[GroupState, frozenset[GroupState]]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
}
