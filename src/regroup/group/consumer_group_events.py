"""Why a consumer group's epoch was bumped: the :class:`ConsumerGroupEpochBumped` Notify event.

:func:`note_epoch_bump` is called where the manager writes a new group epoch (before it is applied). It
reads what the same Outcome wrote so far — members removed (type-5 tombstones), members added or
resubscribed (type-5 records), regex resolutions (type 16) — and whether the subscribed topics' metadata
hash changed, and registers a continuation: once the records are durable it emits the event with the group
as the whole operation left it (new group epoch, assignment epoch, the reconciliation progress of the
members the operation changed — those its type-5, 7 and 8 records name — and how many members the group has
and how many are not yet reconciled). A failed append emits nothing (the bump did not happen).

Listing only the changed members keeps a bump's cost to what the operation did: every joining member bumps
the epoch, so listing every member made forming a group of N members cost O(N²) (and O(N²) bytes of
``__group_events``). A bump that also computed a new target assignment lists the members whose target
changed, at most once per ``group.consumer.assignment.interval.ms``.

What removed a member is not visible in the records: the runtime knows which timer fired or which request
or control ran, and hands it to :meth:`ConsumerGroupEpochBumped.attributed` (a member removed by a
ConsumerGroupHeartbeat or a classic LeaveGroup left; by its session or rebalance timer it was fenced).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from regroup.group.config import GroupConfig
from regroup.group.consumer_group import ConsumerGroup, MemberSubscription, Partitions, by_topic
from regroup.group.effects import CoordinatorRecord, TimerKey, TimerKind
from regroup.group.outcome import Outcome
from regroup.group.records import (
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_RECORD_TYPE,
    CONSUMER_GROUP_MEMBER_METADATA_RECORD_TYPE,
    CONSUMER_GROUP_REGULAR_EXPRESSION_RECORD_TYPE,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_RECORD_TYPE,
    DecodedConsumerGroupRecord,
    RecordError,
    decode_record,
)
from regroup.group.topics_image import TopicsImage
from regroup.protocol.errors import ErrorCode
from regroup.protocol.primitives import I16, DecodeError
from regroup.protocol.records.consumer_group_current_member_assignment import (
    ConsumerGroupCurrentMemberAssignmentKey,
)
from regroup.protocol.records.consumer_group_member_metadata import ConsumerGroupMemberMetadataKey
from regroup.protocol.records.consumer_group_target_assignment_member import (
    ConsumerGroupTargetAssignmentMemberKey,
)

__all__ = [
    "ConsumerGroupEpochBumped",
    "EpochBumpCause",
    "MemberProgress",
    "Trigger",
    "changed_members",
    "member_progress",
    "note_epoch_bump",
]

# Cause kinds (the ``kind`` of a ``__group_events`` cause).
MEMBER_JOINED = "member_joined"
MEMBER_LEFT = "member_left"
FENCED_SESSION_TIMEOUT = "member_fenced_session_timeout"
FENCED_REBALANCE_TIMEOUT = "member_fenced_rebalance_timeout"
SUBSCRIPTION_CHANGED = "subscription_changed"
REGEX_RESOLUTION_CHANGED = "regex_resolution_changed"
TOPIC_METADATA_CHANGED = "topic_metadata_changed"
STATIC_MEMBER_REPLACED = "static_member_replaced"

_LEAVE_OPERATIONS = frozenset({"consumer_group_heartbeat", "leave_group"})
_FORCED_EXPIRY_OPERATION = "expire_member"


@dataclass(slots=True, unsafe_hash=True)
class Trigger:
    """What the runtime was doing when the epoch was bumped: a timer that fired, or the name of the shard
    operation it ran (a request or a ``regroup.testing`` control)."""

    timer: TimerKey | None = None
    operation: str | None = None
    time_ms: int | None = None


@dataclass(slots=True, unsafe_hash=True)
class EpochBumpCause:
    kind: str
    description: str
    member_id: str | None = None
    group_instance_id: str | None = None
    details: tuple[tuple[str, Any], ...] = ()

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"kind": self.kind, "description": self.description}
        if self.member_id is not None:
            doc["member_id"] = self.member_id
            doc["group_instance_id"] = self.group_instance_id
        doc.update(self.details)
        return doc


@dataclass(slots=True, unsafe_hash=True)
class MemberProgress:
    """A member's reconciliation as the operation left it; partitions as ``{topic: [partition, ...]}``."""

    member_id: str
    group_instance_id: str | None
    member_epoch: int
    state: str  # STABLE, UNREVOKED_PARTITIONS, UNRELEASED_PARTITIONS
    assigned: tuple[tuple[str, tuple[int, ...]], ...]
    pending_revocation: tuple[tuple[str, tuple[int, ...]], ...]
    target: tuple[tuple[str, tuple[int, ...]], ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "member_id": self.member_id,
            "group_instance_id": self.group_instance_id,
            "member_epoch": self.member_epoch,
            "state": self.state,
            "assigned": {t: list(ps) for t, ps in self.assigned},
            "pending_revocation": {t: list(ps) for t, ps in self.pending_revocation},
            "target": {t: list(ps) for t, ps in self.target},
        }


@dataclass(slots=True, unsafe_hash=True)
class _Facts:
    removed: tuple[str, ...]
    joined: tuple[tuple[str, MemberSubscription], ...]
    resubscribed: tuple[tuple[str, MemberSubscription], ...]
    regexes: tuple[tuple[str, tuple[str, ...]], ...]
    metadata_changed: bool
    subscribed_topics: tuple[tuple[str, int | None], ...]  # (topic, partitions now) when the hash changed
    session_timeout_ms: int


@dataclass(slots=True, unsafe_hash=True)
class ConsumerGroupEpochBumped:
    """A consumer group's epoch was bumped (and the records are durable)."""

    group_id: str
    group_epoch: int
    previous_group_epoch: int
    assignment_epoch: int
    state: str  # the group's state after the operation (Assigning, Reconciling, Stable, Empty)
    assignor: str | None
    members: tuple[MemberProgress, ...]
    """The members the operation changed (subscription, target or current assignment), as it left them."""
    facts: _Facts = field(repr=False)
    trigger: Trigger | None = None
    member_count: int | None = None
    """Members in the group after the operation (None: not counted)."""
    waiting_count: int | None = None
    """Members not (yet) STABLE at the assignment epoch after the operation (None: not counted)."""

    def attributed(self, trigger: Trigger) -> ConsumerGroupEpochBumped:
        return self if self.trigger is not None else replace(self, trigger=trigger)

    @property
    def time_ms(self) -> int | None:
        return None if self.trigger is None else self.trigger.time_ms

    def causes(self) -> tuple[EpochBumpCause, ...]:
        """The cause first, then whatever else changed in the same operation."""
        return _causes(self.facts, self.trigger)

    def message(self) -> str:
        causes = self.causes()
        head = causes[0].description if causes else "unknown cause"
        also = "".join(f"; also: {c.description}" for c in causes[1:])
        return (
            f"consumer group {self.group_id} epoch {self.previous_group_epoch} -> {self.group_epoch} "
            f"(assignment epoch {self.assignment_epoch}, {self.state}): {head}{also}"
        )


def _who(member_id: str, instance_id: str | None) -> str:
    return member_id if instance_id is None else f"{member_id} (instance {instance_id})"


def _subscription(sub: MemberSubscription) -> tuple[tuple[str, Any], ...]:
    return (
        ("subscribed_topic_names", list(sub.subscribed_topic_names)),
        ("subscribed_topic_regex", sub.subscribed_topic_regex),
    )


def _removal(
    member_id: str, instance_id: str | None, trigger: Trigger | None, session_ms: int
) -> EpochBumpCause:
    who = _who(member_id, instance_id)
    timer = None if trigger is None else trigger.timer
    if timer is not None and timer.member_id == member_id:
        if timer.kind is TimerKind.CONSUMER_SESSION:
            return EpochBumpCause(
                FENCED_SESSION_TIMEOUT,
                f"member {who} was fenced: its session expired after {session_ms} ms without a heartbeat",
                member_id,
                instance_id,
                (("timeout_ms", session_ms),),
            )
        if timer.kind is TimerKind.CONSUMER_REBALANCE:
            return EpochBumpCause(
                FENCED_REBALANCE_TIMEOUT,
                f"member {who} was fenced: it did not revoke its partitions within its rebalance timeout",
                member_id,
                instance_id,
                (("timer", "revocation"),),
            )
        if timer.kind in (TimerKind.CONSUMER_JOIN, TimerKind.CONSUMER_SYNC):
            phase = "join" if timer.kind is TimerKind.CONSUMER_JOIN else "sync"
            return EpochBumpCause(
                FENCED_REBALANCE_TIMEOUT,
                f"classic member {who} was fenced: it did not {phase} within its rebalance timeout",
                member_id,
                instance_id,
                (("timer", phase),),
            )
    operation = None if trigger is None else trigger.operation
    if operation == _FORCED_EXPIRY_OPERATION:
        return EpochBumpCause(
            FENCED_SESSION_TIMEOUT,
            f"member {who} was fenced as by a session timeout (forced)",
            member_id,
            instance_id,
            (("timeout_ms", session_ms), ("forced", True)),
        )
    return EpochBumpCause(MEMBER_LEFT, f"member {who} left the group", member_id, instance_id)


def _causes(facts: _Facts, trigger: Trigger | None) -> tuple[EpochBumpCause, ...]:
    causes: list[EpochBumpCause] = []
    joined = dict(facts.joined)
    # A heartbeat removes a member only to replace a static one by a member with its instance id.
    replaced_by: dict[str, tuple[str, str]] = {}  # removed member id -> (new member id, instance id)
    unpaired = list(facts.removed)
    for new, sub in facts.joined:
        if sub.instance_id is not None and unpaired:
            replaced_by[unpaired.pop(0)] = (new, sub.instance_id)
    for old in facts.removed:
        pair = replaced_by.get(old)
        if pair is not None:
            new, instance = pair
            causes.append(
                EpochBumpCause(
                    STATIC_MEMBER_REPLACED,
                    f"static member {instance} replaced ({old} -> {new})",
                    new,
                    instance,
                    (("old_member_id", old), ("new_member_id", new)),
                )
            )
            joined.pop(new, None)
        else:
            causes.append(_removal(old, None, trigger, facts.session_timeout_ms))
    for member_id, sub in joined.items():
        causes.append(
            EpochBumpCause(
                MEMBER_JOINED,
                f"new member {_who(member_id, sub.instance_id)} joined",
                member_id,
                sub.instance_id,
                _subscription(sub),
            )
        )
    for member_id, sub in facts.resubscribed:
        target = sub.subscribed_topic_regex or ", ".join(sub.subscribed_topic_names) or "nothing"
        causes.append(
            EpochBumpCause(
                SUBSCRIPTION_CHANGED,
                f"member {_who(member_id, sub.instance_id)} changed its subscription (now {target})",
                member_id,
                sub.instance_id,
                _subscription(sub),
            )
        )
    if facts.regexes and not facts.resubscribed and not joined:
        resolved = "; ".join(f"{r} -> [{', '.join(ts)}]" for r, ts in facts.regexes)
        causes.append(
            EpochBumpCause(
                REGEX_RESOLUTION_CHANGED,
                f"a subscribed regular expression resolves to other topics ({resolved})",
                details=(("regexes", {r: list(ts) for r, ts in facts.regexes}),),
            )
        )
    # A new subscription changes the hash too: metadata counts only when no member's subscription did.
    if facts.metadata_changed and not (facts.removed or facts.joined or facts.resubscribed):
        topics = ", ".join(
            f"{t} ({'deleted' if n is None else f'{n} partitions'})" for t, n in facts.subscribed_topics
        )
        causes.append(
            EpochBumpCause(
                TOPIC_METADATA_CHANGED,
                "the subscribed topics' metadata changed (partitions added, topic created or deleted)"
                + (f": {topics}" if topics else ""),
                details=(("topics", dict(facts.subscribed_topics)),),
            )
        )
    return tuple(causes)


def _named(partitions: Partitions, topics: TopicsImage) -> tuple[tuple[str, tuple[int, ...]], ...]:
    named: dict[str, tuple[int, ...]] = {}
    for topic_id, ps in by_topic(partitions).items():
        image = topics.by_id(topic_id)
        named[str(topic_id) if image is None else image.name] = tuple(sorted(ps))
    return tuple(sorted(named.items()))


def member_progress(
    group: ConsumerGroup, topics: TopicsImage, member_ids: Iterable[str] | None = None
) -> tuple[MemberProgress, ...]:
    """The reconciliation of the members ``member_ids`` (None: every member) still in the group, sorted by
    member id."""
    members = group.members
    ids = members if member_ids is None else (i for i in set(member_ids) if i in members)
    return tuple(
        MemberProgress(
            member_id=m.member_id,
            group_instance_id=m.instance_id,
            member_epoch=m.member_epoch,
            state=m.state.name,
            assigned=_named(m.assigned, topics),
            pending_revocation=_named(m.pending_revocation, topics),
            target=_named(group.targets.get(m.member_id, frozenset()), topics),
        )
        for m in sorted((members[i] for i in ids), key=lambda m: m.member_id)
    )


_MEMBER_KEYS: dict[int, Any] = {
    CONSUMER_GROUP_MEMBER_METADATA_RECORD_TYPE: ConsumerGroupMemberMetadataKey,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_RECORD_TYPE: ConsumerGroupTargetAssignmentMemberKey,
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_RECORD_TYPE: ConsumerGroupCurrentMemberAssignmentKey,
}


def changed_members(records: Iterable[CoordinatorRecord], group_id: str) -> set[str]:
    """The members of ``group_id`` whose subscription, target or current assignment the records write
    (types 5, 7, 8, tombstones included): only the keys are read."""
    changed: set[str] = set()
    for record in records:
        key = record.key
        if len(key) < 2:
            continue
        (record_type,) = I16.unpack_from(key, 0)
        key_type = _MEMBER_KEYS.get(record_type)
        if key_type is None:
            continue
        try:
            decoded, _ = key_type.read(key, 2, record_type)
        except DecodeError:
            continue
        if decoded.group_id == group_id:
            changed.add(decoded.member_id)
    return changed


def _facts(
    out: Outcome, group: ConsumerGroup, metadata_hash: int, config: GroupConfig, topics: TopicsImage
) -> _Facts:
    removed: list[str] = []
    subscribed: dict[str, MemberSubscription] = {}
    regexes: dict[str, tuple[str, ...]] = {}
    for record in out.records:
        try:
            decoded = decode_record(record)
        except (RecordError, ValueError):
            continue
        if not isinstance(decoded, DecodedConsumerGroupRecord) or decoded.group_id != group.group_id:
            continue
        if decoded.record_type == CONSUMER_GROUP_MEMBER_METADATA_RECORD_TYPE:
            if decoded.value is None:
                subscribed.pop(decoded.member_id, None)
                removed.append(decoded.member_id)
            elif isinstance(decoded.value, MemberSubscription):
                subscribed[decoded.member_id] = decoded.value
        elif decoded.record_type == CONSUMER_GROUP_REGULAR_EXPRESSION_RECORD_TYPE and decoded.regex:
            value = decoded.value
            regexes[decoded.regex] = tuple(value) if isinstance(value, tuple) else ()
    joined: list[tuple[str, MemberSubscription]] = []
    resubscribed: list[tuple[str, MemberSubscription]] = []
    for member_id, sub in subscribed.items():
        member = group.members.get(member_id)
        # Not yet reconciled (epoch 0): it came in with this operation.
        if member is not None and member.member_epoch == 0 and member_id not in removed:
            joined.append((member_id, sub))
        elif member is not None:
            resubscribed.append((member_id, sub))
    metadata_changed = metadata_hash != group.metadata_hash
    subscribed_topics: tuple[tuple[str, int | None], ...] = ()
    if metadata_changed:
        subscribed_topics = tuple(
            (name, None if (image := topics.by_name(name)) is None else image.num_partitions)
            for name in sorted(group.subscribed_topic_names())
        )
    return _Facts(
        removed=tuple(removed),
        joined=tuple(joined),
        resubscribed=tuple(resubscribed),
        regexes=tuple(sorted(regexes.items())),
        metadata_changed=metadata_changed,
        subscribed_topics=subscribed_topics,
        session_timeout_ms=config.consumer_session_timeout_ms,
    )


def note_epoch_bump(
    out: Outcome,
    group: ConsumerGroup,
    epoch: int,
    metadata_hash: int,
    config: GroupConfig,
    topics: TopicsImage,
    assignor: str | None = None,
) -> None:
    """Called just before ``group`` gets group epoch ``epoch``: emit :class:`ConsumerGroupEpochBumped` once
    the Outcome's records are durable."""
    try:
        facts = _facts(out, group, metadata_hash, config, topics)
    except Exception:  # the timeline is observability: it never fails the operation that bumps the epoch
        return
    previous = group.group_epoch

    def applied(error: ErrorCode | None, after: Outcome) -> None:
        if error is not None:
            return
        # Only the members this operation changed (one bump per joining member: listing every member
        # made a formation O(members²)); the group's totals are counted, not listed.
        changed = changed_members(out.records, group.group_id)
        after.notify(
            ConsumerGroupEpochBumped(
                group_id=group.group_id,
                group_epoch=group.group_epoch,
                previous_group_epoch=previous,
                assignment_epoch=group.assignment_epoch,
                state=group.state.value,
                assignor=assignor,
                members=member_progress(group, topics, changed),
                facts=facts,
                member_count=len(group.members),
                waiting_count=len(group.members) - group.reconciled_count(),
            )
        )

    out.after_append(applied)
