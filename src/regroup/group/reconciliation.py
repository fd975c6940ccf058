"""Member reconciliation (Kafka's ``CurrentAssignmentBuilder``): one step of a member from its current
assignment towards its target.

Partitions the member must give up are revoked first (UNREVOKED_PARTITIONS, epoch unchanged) and stay
held — pending revocation — until the member reports that it no longer owns them. A partition of the
target is added only once no other member holds it (assigned or pending revocation); until then it is
withheld (UNRELEASED_PARTITIONS). A partition therefore never belongs to two members at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from regroup.group.consumer_group import ConsumerGroupMember, MemberAssignment, MemberState, Partitions
from regroup.protocol.primitives import Uuid

__all__ = ["FencedMemberEpoch", "reconcile"]


class FencedMemberEpoch(Exception):
    """A member in the UNKNOWN state reported owned partitions (FENCED_MEMBER_EPOCH)."""


@dataclass(slots=True, unsafe_hash=True)
class _Step:
    member: ConsumerGroupMember
    target_epoch: int
    target: Partitions
    subscribed: frozenset[Uuid]
    owned: Partitions | None
    held_by_other: Callable[[tuple[Uuid, int]], bool]


def reconcile(
    member: ConsumerGroupMember,
    target_epoch: int,
    target: Partitions,
    subscribed_topic_ids: frozenset[Uuid],
    owned: Partitions | None,
    held_by_other: Callable[[tuple[Uuid, int]], bool],
    subscription_changed: bool,
) -> ConsumerGroupMember:
    """The member after one reconciliation step. ``owned`` is what the member reported (None: not sent);
    ``held_by_other(tp)`` tells whether another member still holds ``tp``."""
    step = _Step(member, target_epoch, target, subscribed_topic_ids, owned, held_by_other)
    state = member.state
    if state is MemberState.STABLE:
        if member.member_epoch != target_epoch:
            return _compute_next(step)
        if subscription_changed:
            return _drop_unsubscribed(step)
        return member
    if state is MemberState.UNREVOKED_PARTITIONS:
        if _owns_any(owned, member.pending_revocation):
            return _drop_unsubscribed(step) if subscription_changed else member
        return _compute_next(step)
    if state is MemberState.UNRELEASED_PARTITIONS:
        return _compute_next(step)
    if owned is None or owned:
        raise FencedMemberEpoch(member.member_id)
    return _compute_next(step)


def _owns_any(owned: Partitions | None, partitions: Partitions) -> bool:
    """Kafka's ``ownsRevokedPartitions``: a member that did not report its partitions still owns them."""
    return owned is None or not owned.isdisjoint(partitions)


def _epochs(
    step: _Step, assigned: Partitions, epoch: int, pending: Partitions = frozenset()
) -> dict[tuple[Uuid, int], int]:
    """Assignment epochs of the member's next partitions: one it had assigned keeps its epoch, a new one
    gets ``epoch``. Partitions pending revocation keep theirs, so that an OffsetCommit at an older epoch may
    still commit them (KIP-1251)."""
    old = step.member.assignment.assignment_epochs
    epochs = {tp: old.get(tp, epoch) if tp in step.member.assigned else epoch for tp in assigned}
    for tp in pending:
        epochs[tp] = old.get(tp, epoch)
    return epochs


def _compute_next(step: _Step) -> ConsumerGroupMember:
    member = step.member
    current = member.assigned
    target = frozenset(tp for tp in step.target if tp[0] in step.subscribed)
    kept = current & target
    revoke = current - kept
    candidates = target - kept
    unreleased = frozenset(
        tp for tp in candidates if tp not in member.pending_revocation and step.held_by_other(tp)
    )
    add = candidates - unreleased
    epoch = member.member_epoch
    if revoke and _owns_any(step.owned, revoke):
        return member.with_assignment(
            MemberAssignment(
                member_epoch=epoch,
                previous_member_epoch=epoch,
                state=MemberState.UNREVOKED_PARTITIONS,
                assigned=kept,
                pending_revocation=revoke,
                assignment_epochs=_epochs(step, kept, epoch, revoke),
            )
        )
    assigned = kept | add
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return member.with_assignment(
        MemberAssignment(
            member_epoch=step.target_epoch,
            previous_member_epoch=epoch,
            state=state,
            assigned=assigned,
            pending_revocation=frozenset(),
            assignment_epochs=_epochs(step, assigned, step.target_epoch),
        )
    )


def _drop_unsubscribed(step: _Step) -> ConsumerGroupMember:
    """The subscription changed at the member's current epoch: partitions of topics it left are revoked
    right away (Kafka's ``updateCurrentAssignment``)."""
    member = step.member
    kept = frozenset(tp for tp in member.assigned if tp[0] in step.subscribed)
    dropped = member.assigned - kept
    if not dropped:
        return member
    pending = member.pending_revocation | dropped
    epoch = member.member_epoch
    if _owns_any(step.owned, pending):
        return member.with_assignment(
            MemberAssignment(
                member_epoch=epoch,
                previous_member_epoch=epoch,
                state=MemberState.UNREVOKED_PARTITIONS,
                assigned=kept,
                pending_revocation=pending,
                assignment_epochs=_epochs(step, kept, epoch, pending),
            )
        )
    return member.with_assignment(
        MemberAssignment(
            member_epoch=epoch,
            previous_member_epoch=member.previous_member_epoch,
            state=member.state,
            assigned=kept,
            pending_revocation=frozenset(),
            assignment_epochs=_epochs(step, kept, epoch),
        )
    )
