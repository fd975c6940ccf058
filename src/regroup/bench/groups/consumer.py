"""Simulated consumer-protocol (KIP-848) members: ConsumerGroupHeartbeat state machines driven from one
event loop, beside the classic :class:`~regroup.bench.groups.members.SimMember`.

A :class:`ConsumerMember` behaves like the Java consumer with ``group.protocol=consumer`` whose
reconciliation is instant: it joins with epoch 0 and its subscription, heartbeats every
``heartbeat_interval_ms`` the broker hands out, and whenever a response carries an assignment that differs
from what it owns, it revokes what is no longer assigned, takes what is new, and acknowledges at once with
a heartbeat whose owned partitions equal the assignment. It shares the classic members' :class:`Fleet`
(connections, coordinator routing, error counters); the consumer protocol parks no request, so it needs no
join lanes.

:func:`settled` is the members' view of a stable group (one epoch, every assignment acknowledged, every
partition owned once, balanced); :func:`describe_stable` asks the coordinator (ConsumerGroupDescribe)
whether the group epoch, the assignment epoch and every member's epoch agree and every member holds its
target assignment.
"""

from __future__ import annotations

import asyncio
import base64
import time
import uuid
from collections.abc import Sequence

from regroup.bench.groups.members import Fleet
from regroup.client.requests import CoordinatorAnswer
from regroup.protocol.errors import ErrorCode
from regroup.protocol.message import Message
from regroup.protocol.messages.consumer_group_describe import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
)
from regroup.protocol.messages.consumer_group_describe import (
    TopicPartitions as DescribedPartitions,
)
from regroup.protocol.messages.consumer_group_heartbeat import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatRequestTopicPartitions,
    ConsumerGroupHeartbeatResponse,
)

__all__ = ["Assigned", "ConsumerMember", "describe_stable", "settled"]

Assigned = frozenset[tuple[uuid.UUID, int]]
"""A set of (topic id, partition)."""

_NOTHING: Assigned = frozenset()
_RETRY = frozenset(
    {
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.REQUEST_TIMED_OUT,
    }
)
# Java's consumer gives up its partitions and joins again with epoch 0 (keeping its member id).
_REJOIN = frozenset({ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID})
_RETRY_BACKOFF = 0.1


def _new_member_id() -> str:
    """As Java's ``Uuid.randomUuid().toString()``: URL-safe base64 of 16 random bytes, unpadded."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


def _owned(assigned: Assigned) -> list[ConsumerGroupHeartbeatRequestTopicPartitions]:
    by_topic: dict[uuid.UUID, list[int]] = {}
    for topic_id, partition in assigned:
        by_topic.setdefault(topic_id, []).append(partition)
    return [
        ConsumerGroupHeartbeatRequestTopicPartitions(topic_id=t, partitions=sorted(ps))
        for t, ps in sorted(by_topic.items())
    ]


class ConsumerMember:
    """One consumer-protocol member; see the module docstring."""

    def __init__(
        self, fleet: Fleet, index: int, group_id: str, topic: str, rebalance_timeout_ms: int
    ) -> None:
        self.fleet = fleet
        self.index = index
        self.group_id = group_id
        self.topic = topic
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.wire = fleet.bootstrap_route.wire_for(index)
        self.lanes = fleet.lanes
        self.member_id = _new_member_id()
        self.epoch = 0
        # The last assignment the coordinator sent, and what the member owns (equal once reconciled).
        self.assigned: Assigned | None = None
        self.owned: Assigned = _NOTHING
        # The coordinator answered the heartbeat that reported ``owned`` == ``assigned``.
        self.acked = False
        self.interval = 3.0
        self.heartbeats = True
        self.stopped = False
        self.fatal: ErrorCode | None = None
        self.sent = 0  # heartbeats sent by the member itself
        self.revocations = 0  # assignments that took partitions away
        self.first_sent: float | None = None
        self.first_assigned_at: float | None = None  # first non-empty assignment received
        self.changed_at = 0.0  # the last response that changed epoch, assignment or acknowledgement
        self._full = True  # the next heartbeat carries the subscription (a join)
        self._report_owned = True  # the next heartbeat carries the owned partitions
        self._in_flight = False
        self._timer: asyncio.TimerHandle | None = None
        self._loop = asyncio.get_running_loop()
        fleet.members.append(self)
        fleet.by_group.setdefault(group_id, []).append(self)

    @property
    def reconciled(self) -> bool:
        """Owns what it was last assigned, and the coordinator heard so."""
        return self.acked and self.assigned is not None and self.owned == self.assigned

    def on_coordinator(self, answer: CoordinatorAnswer, now_ms: int) -> None:
        """The fleet routed the member's group (its wire is set); nothing else to keep."""

    # ----------------------------------------------------------------------------------- heartbeats

    def start(self) -> None:
        """Join: the first heartbeat, epoch 0, with the subscription."""
        if not self.stopped:
            self._send()

    def set_heartbeats(self, enabled: bool) -> None:
        """Start or stop the member's own heartbeats (benchmarks that send heartbeats themselves stop
        them)."""
        self.heartbeats = enabled
        if enabled:
            self._schedule(self.interval)
        elif self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def request(self) -> ConsumerGroupHeartbeatRequest:
        """The next heartbeat: full when joining, else only what changed (the owned partitions after a
        reconciliation), as Java sends it."""
        request = ConsumerGroupHeartbeatRequest(
            group_id=self.group_id, member_id=self.member_id, member_epoch=self.epoch
        )
        if self._full:
            request.rebalance_timeout_ms = self.rebalance_timeout_ms
            request.subscribed_topic_names = [self.topic]
        if self._full or self._report_owned:
            request.topic_partitions = _owned(self.owned)
        return request

    def _schedule(self, delay: float) -> None:
        if self.stopped or not self.heartbeats or self._in_flight or self._timer is not None:
            return
        self._timer = self._loop.call_later(delay, self._due)

    def _due(self) -> None:
        self._timer = None
        if not self.stopped and self.heartbeats:
            self._send()

    def _send(self) -> None:
        if self._in_flight:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        request = self.request()
        reported = request.topic_partitions is not None
        self._in_flight = True
        self.sent += 1
        if self.first_sent is None:
            self.first_sent = time.perf_counter()

        def done(result: Message | BaseException, _rtt: float) -> None:
            self._in_flight = False
            if not self.stopped:
                self._on_response(result, reported)

        self.wire.send(request, done)

    def _on_response(self, result: Message | BaseException, reported: bool) -> None:
        fleet = self.fleet
        if not isinstance(result, ConsumerGroupHeartbeatResponse):
            fleet.count_error(result if isinstance(result, BaseException) else TypeError())
            self._schedule(_RETRY_BACKOFF)
            return
        error = ErrorCode.from_code(result.error_code)
        if error is not ErrorCode.NONE:
            fleet.count_error(error)
            if error in _REJOIN:
                self.epoch = 0
                self.owned = _NOTHING
                self.assigned = None
                self.acked = False
                self._full = self._report_owned = True
                self.changed_at = time.perf_counter()
                fleet.changes[self.group_id] += 1
                self._send()
            elif error in _RETRY:
                self._schedule(_RETRY_BACKOFF)
            else:
                self.fatal = error
            return
        now = time.perf_counter()
        changed = False
        if result.member_id and result.member_id != self.member_id:
            self.member_id = result.member_id
        if result.heartbeat_interval_ms > 0:
            self.interval = result.heartbeat_interval_ms / 1000
        if result.member_epoch != self.epoch:
            self.epoch = result.member_epoch
            changed = True
        self._full = False
        if reported:
            self._report_owned = False
        ack_now = False
        if result.assignment is not None:
            new: Assigned = frozenset(
                (tp.topic_id, p) for tp in result.assignment.topic_partitions for p in tp.partitions
            )
            if new and self.first_assigned_at is None:
                self.first_assigned_at = now
            if new != self.assigned:
                self.assigned = new
                changed = True
            if new != self.owned:
                # Reconcile at once: revoke what is gone, take what is new, and say so.
                if self.owned - new:
                    self.revocations += 1
                self.owned = new
                self.acked = False
                self._report_owned = ack_now = True
        if reported and not ack_now and not self.acked and self.owned == self.assigned:
            self.acked = changed = True
        if changed:
            self.changed_at = now
            fleet.changes[self.group_id] += 1
        if ack_now:
            self._send()
        else:
            self._schedule(self.interval)

    def stop(self) -> None:
        """Vanish without a word, as a crashed process does."""
        self.stopped = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


def settled(members: Sequence[ConsumerMember], partitions: int) -> bool:
    """The members' view of a stable group of ``partitions`` partitions: all at one epoch, every
    assignment acknowledged, every partition owned by exactly one member, each member holding
    ⌊partitions / members⌋ or ⌈…⌉ of them (the uniform assignor balances)."""
    if not members:
        return False
    epoch = members[0].epoch
    total = 0
    seen: set[tuple[uuid.UUID, int]] = set()
    low, high = divmod(partitions, len(members))
    high = low + (1 if high else 0)
    for m in members:
        if m.epoch != epoch or epoch <= 0 or not m.reconciled or m.fatal is not None:
            return False
        n = len(m.owned)
        if n < low or n > high:
            return False
        total += n
        seen |= m.owned
    return total == partitions and len(seen) == partitions


def _pairs(parts: Sequence[DescribedPartitions]) -> frozenset[tuple[uuid.UUID, int]]:
    return frozenset((t.topic_id, p) for t in parts for p in t.partitions)


async def describe_stable(fleet: Fleet, group_id: str, expected_members: int) -> tuple[bool, str]:
    """Ask ``group_id``'s coordinator: (stable, why not). Stable means ``expected_members`` members, the
    group epoch equal to the assignment epoch and to every member's epoch, and every member's assignment
    equal to its target assignment."""
    members = fleet.by_group.get(group_id)
    wire = members[0].wire if members else fleet.fast[0]
    resp = await wire.call(ConsumerGroupDescribeRequest(group_ids=[group_id]), ConsumerGroupDescribeResponse)
    if not resp.groups:
        return False, "no group in the ConsumerGroupDescribe response"
    g = resp.groups[0]
    if g.error_code != ErrorCode.NONE:
        return False, f"ConsumerGroupDescribe: {ErrorCode.from_code(g.error_code).name}"
    if len(g.members) != expected_members:
        return False, f"{len(g.members)} members, expected {expected_members}"
    if g.group_epoch != g.assignment_epoch:
        return False, f"group epoch {g.group_epoch}, assignment epoch {g.assignment_epoch}"
    behind = sum(1 for m in g.members if m.member_epoch != g.group_epoch)
    if behind:
        return False, f"{behind} members behind the group epoch {g.group_epoch}"
    pending = sum(
        1
        for m in g.members
        if _pairs(m.assignment.topic_partitions) != _pairs(m.target_assignment.topic_partitions)
    )
    if pending:
        return False, f"{pending} members not at their target assignment"
    return True, f"stable at epoch {g.group_epoch} ({g.group_state})"
