"""The controller's decisions about one partition's leader and ISR: the partition state it should write after
nodes come and go or start a controlled shutdown, its validation of a leader's AlterPartition, and the
preferred-leader election — Kafka's ``PartitionChangeBuilder`` with the callers in
``ReplicationControlManager`` that feed it, for regroup's metadata values.

Pure: a partition's replicas (from its ``TopicRecord``), its ``PartitionRecord`` and which nodes are
registered and which are shutting down go in; a new ``PartitionRecord``, or None when nothing changes,
comes out. Every change bumps ``partition_epoch``; every leader change (including to and from no leader)
also bumps ``leader_epoch``; an ISR change alone does not (KAFKA-15021 made that bump unnecessary).

A node is an *acceptable leader* when it is registered and not shutting down (KRaft's ``isActive``:
unfenced and not in controlled shutdown). Pass nodes in ``storage_failed`` state as shutting down.

Logging is the caller's, who knows the partition: an AlterPartition refusal carries its reason, and an
unclean election (Kafka logs it at INFO: it may lose data) is a new leader from outside the previous ISR.

Not modelled: eligible leader replicas (KIP-966; off by default in Kafka 4) and reassignment.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from regroup.cluster.model import NO_LEADER, LeaderRecoveryState, NodeRegistration, PartitionRecord
from regroup.protocol.errors import ErrorCode

__all__ = [
    "AlterPartitionProposal",
    "AlterPartitionResult",
    "alter_partition",
    "check_broker_epoch",
    "elect_preferred_leader",
    "node_liveness",
    "preferred_leader",
    "reconcile",
]

NO_BROKER_EPOCH = -1
"""A broker epoch of -1 in a proposed ISR skips the epoch check (requests from before KIP-903)."""


class _Election(enum.Enum):
    """``PartitionChangeBuilder.Election``."""

    PREFERRED = "preferred"
    ONLINE = "online"
    UNCLEAN = "unclean"


def node_liveness(nodes: Mapping[int, NodeRegistration]) -> tuple[dict[int, int], frozenset[int]]:
    """From a cluster image's nodes: the registered nodes with their broker epochs, and the registered nodes
    that may not lead or join an ISR (shutting down or with failed storage)."""
    return (
        {node_id: reg.broker_epoch for node_id, reg in nodes.items()},
        frozenset(node_id for node_id, reg in nodes.items() if not reg.running),
    )


def reconcile(
    replicas: Sequence[int],
    partition: PartitionRecord,
    registered: AbstractSet[int],
    shutting_down: AbstractSet[int],
    *,
    unclean: bool = False,
) -> PartitionRecord | None:
    """The partition state the controller should write given who is alive now, or None if it is right as is.

    Level-triggered: one function covers each node event Kafka handles separately, and gives the same result
    for a single event —
    - a node gone (registration deleted; ``handleBrokerFenced``/``handleBrokerUnregistered``) or shutting
      down (``handleBrokerInControlledShutdown``, KIP-841): it leaves every ISR, except that an ISR is never
      emptied (its last member stays, so the partition waits for it to return); where it led, the first
      replica in assignment order that is in the new ISR and an acceptable leader takes over, or nobody
      (leader -1, partition offline);
    - a node back (``handleBrokerUnfenced``): a leaderless partition gets the first acceptable ISR member;
    - with ``unclean`` (``unclean.leader.election.enable``) and no acceptable ISR member: the first
      acceptable replica leads with ISR = {it} and ``leader_recovery_state`` RECOVERING (KIP-704).

    Several nodes gone at once are removed together; if that would empty the ISR, the ISR is kept whole (as
    Kafka keeps it when the target ISR is empty), which is safe: the stored ISR is what a leader needed for a
    commit, so each member holds every committed record.

    A node that registered again (new broker epoch) while still in an ISR may have lost unflushed data: the
    caller should first reconcile with it counted as gone, as KRaft unregisters the old incarnation first.
    """
    acceptable = _acceptor(registered, shutting_down)
    # ReplicationControlManager.generateLeaderAndIsrUpdates: target ISR = ISR without the removed brokers
    target_isr = tuple(node for node in partition.isr if acceptable(node))
    election = _Election.UNCLEAN if unclean else _Election.ONLINE
    return _build(replicas, partition, target_isr, acceptable, election)


def preferred_leader(
    replicas: Sequence[int],
    partition: PartitionRecord,
    registered: AbstractSet[int],
    shutting_down: AbstractSet[int],
) -> int | None:
    """The preferred replica (the first in assignment order) if it could lead now: in the ISR, registered and
    not shutting down; else None."""
    if not replicas:
        return None
    first = replicas[0]
    return first if first in partition.isr and _acceptor(registered, shutting_down)(first) else None


def elect_preferred_leader(
    replicas: Sequence[int],
    partition: PartitionRecord,
    registered: AbstractSet[int],
    shutting_down: AbstractSet[int],
) -> PartitionRecord | None:
    """A preferred-leader election (ElectLeaders PREFERRED, ``auto.leader.rebalance.enable``): the preferred
    replica if it can lead, else the current leader if it still can, else the first ISR member that can.
    None when that changes nothing (Kafka then answers ELECTION_NOT_NEEDED or
    PREFERRED_LEADER_NOT_AVAILABLE)."""
    acceptable = _acceptor(registered, shutting_down)
    return _build(replicas, partition, partition.isr, acceptable, _Election.PREFERRED)


# ------------------------------------------------------------------------------------------ AlterPartition


@dataclass(frozen=True, slots=True)
class AlterPartitionProposal:
    """One partition of an AlterPartition request (v3: ``NewIsrWithEpochs``, KIP-903)."""

    broker_id: int
    """The requesting node (the request's ``BrokerId``)."""
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[tuple[int, int], ...]
    """(node id, broker epoch) per proposed ISR member; broker epoch -1 skips the epoch check."""
    leader_recovery_state: LeaderRecoveryState = LeaderRecoveryState.RECOVERED


@dataclass(frozen=True, slots=True)
class AlterPartitionResult:
    """The controller's answer for one partition: on NONE, the state to reply with (``changed``: it differs
    from the stored one and must be written first); on an error, no state and the ``reason`` to log."""

    error: ErrorCode
    partition: PartitionRecord | None = None
    changed: bool = False
    reason: str = ""


def check_broker_epoch(broker_id: int, broker_epoch: int, broker_epochs: Mapping[int, int]) -> ErrorCode:
    """The request-level check of an AlterPartition's sender (``ClusterControlManager.checkBrokerEpoch``):
    STALE_BROKER_EPOCH unless it is registered with exactly this broker epoch."""
    registered = broker_epochs.get(broker_id)
    if registered is None or registered != broker_epoch:
        return ErrorCode.STALE_BROKER_EPOCH
    return ErrorCode.NONE


def alter_partition(
    replicas: Sequence[int],
    partition: PartitionRecord | None,
    proposal: AlterPartitionProposal,
    broker_epochs: Mapping[int, int],
    shutting_down: AbstractSet[int],
) -> AlterPartitionResult:
    """Validate and apply a leader's ISR change as the controller does (``ReplicationControlManager
    .alterPartition`` / ``validateAlterPartitionData``), checks in Kafka's order:

    - unknown partition → UNKNOWN_TOPIC_OR_PARTITION;
    - a leader or partition epoch *newer* than the stored one → NOT_CONTROLLER (this controller's view is
      behind; the leader looks for the real controller);
    - an older leader epoch → FENCED_LEADER_EPOCH;
    - the sender is not the leader (at the current epoch) → INVALID_REQUEST;
    - an older partition epoch → INVALID_UPDATE_VERSION (the leader's view of the ISR is stale);
    - a proposed ISR that is not a duplicate-free subset of the replicas, or lacks the leader →
      INVALID_REQUEST;
    - RECOVERING with more than one ISR member, or RECOVERED → RECOVERING → INVALID_REQUEST;
    - a member not registered, shutting down, or whose broker epoch (≠ -1) is not its registration's →
      INELIGIBLE_REPLICA (KIP-841, KIP-903).

    On success the ISR and recovery state become the proposed ones, ``partition_epoch`` + 1 if anything
    changed; the leader and ``leader_epoch`` stay (the leader is in the proposed ISR and eligible).
    ``broker_epochs`` maps every registered node to its broker epoch.
    """
    if partition is None:
        return AlterPartitionResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    error, reason = _validate_alter_partition(replicas, partition, proposal, broker_epochs, shutting_down)
    if error is not ErrorCode.NONE:
        return AlterPartitionResult(error, reason=reason)
    acceptable = _acceptor(broker_epochs.keys(), shutting_down)
    target_isr = tuple(node for node, _ in proposal.new_isr)
    changed = _build(
        replicas, partition, target_isr, acceptable, _Election.ONLINE, proposal.leader_recovery_state
    )
    if changed is None:
        return AlterPartitionResult(ErrorCode.NONE, partition, changed=False)
    if changed.leader != partition.leader:  # pragma: no cover - the validation above rules it out
        raise AssertionError(f"AlterPartition from the leader changed the leader: {partition} -> {changed}")
    return AlterPartitionResult(ErrorCode.NONE, changed, changed=True)


def _validate_alter_partition(
    replicas: Sequence[int],
    partition: PartitionRecord,
    proposal: AlterPartitionProposal,
    broker_epochs: Mapping[int, int],
    shutting_down: AbstractSet[int],
) -> tuple[ErrorCode, str]:
    sender = proposal.broker_id
    if proposal.leader_epoch > partition.leader_epoch or proposal.partition_epoch > partition.partition_epoch:
        return ErrorCode.NOT_CONTROLLER, (
            f"epochs {proposal.leader_epoch}/{proposal.partition_epoch} are newer than the controller's "
            f"{partition.leader_epoch}/{partition.partition_epoch}"
        )
    if proposal.leader_epoch < partition.leader_epoch:
        return ErrorCode.FENCED_LEADER_EPOCH, (
            f"the current leader epoch is {partition.leader_epoch}, not {proposal.leader_epoch}"
        )
    if sender != partition.leader:
        return ErrorCode.INVALID_REQUEST, f"the current leader is {partition.leader}"
    if proposal.partition_epoch < partition.partition_epoch:
        return ErrorCode.INVALID_UPDATE_VERSION, (
            f"the current partition epoch is {partition.partition_epoch}, not {proposal.partition_epoch}"
        )
    new_isr = [node for node, _ in proposal.new_isr]
    if not _valid_isr(replicas, new_isr):
        return ErrorCode.INVALID_REQUEST, f"invalid ISR {new_isr} for replicas {list(replicas)}"
    if partition.leader not in new_isr:
        return ErrorCode.INVALID_REQUEST, f"the ISR {new_isr} does not include the leader"
    recovering = proposal.leader_recovery_state is LeaderRecoveryState.RECOVERING
    if recovering and len(new_isr) > 1:
        return ErrorCode.INVALID_REQUEST, f"the ISR {new_isr} has several members while the leader recovers"
    if recovering and partition.leader_recovery_state is LeaderRecoveryState.RECOVERED:
        return (
            ErrorCode.INVALID_REQUEST,
            "the leader recovery state cannot change from RECOVERED to RECOVERING",
        )
    ineligible = _ineligible_replicas(proposal.new_isr, broker_epochs, shutting_down)
    if ineligible:
        return (
            ErrorCode.INELIGIBLE_REPLICA,
            f"ineligible replicas in the new ISR {new_isr}: {'; '.join(ineligible)}",
        )
    return ErrorCode.NONE, ""


def _valid_isr(replicas: Sequence[int], isr: Collection[int]) -> bool:
    """``Replicas.validateIsr``: no duplicates, no negative ids, every member a replica."""
    return len(set(isr)) == len(isr) and all(node >= 0 and node in replicas for node in isr)


def _ineligible_replicas(
    new_isr: Sequence[tuple[int, int]], broker_epochs: Mapping[int, int], shutting_down: AbstractSet[int]
) -> list[str]:
    """``ReplicationControlManager.ineligibleReplicasForIsr``, with the reason per member."""
    reasons = []
    for node, epoch in new_isr:
        registered_epoch = broker_epochs.get(node)
        if registered_epoch is None:
            reasons.append(f"{node}: not registered")
        elif node in shutting_down:
            reasons.append(f"{node}: shutting down")
        elif epoch not in (NO_BROKER_EPOCH, registered_epoch):
            reasons.append(f"{node}: broker epoch mismatch: requested={epoch} VS expected={registered_epoch}")
    return reasons


# --------------------------------------------------------------------------------------------- the builder


def _acceptor(registered: AbstractSet[int], shutting_down: AbstractSet[int]) -> Callable[[int], bool]:
    """KRaft's ``isAcceptableLeader`` for the current nodes: registered and not shutting down."""

    def acceptable(node: int) -> bool:
        return node in registered and node not in shutting_down

    return acceptable


def _build(
    replicas: Sequence[int],
    partition: PartitionRecord,
    target_isr: tuple[int, ...],
    acceptable: Callable[[int], bool],
    election: _Election,
    target_recovery_state: LeaderRecoveryState | None = None,
) -> PartitionRecord | None:
    """``PartitionChangeBuilder.build`` without ELR and reassignment: elect, then set the ISR (never to
    empty), then the recovery state; None when the result equals ``partition``."""
    leader, unclean = _elect(replicas, partition, target_isr, acceptable, election)
    isr = partition.isr
    recovery = partition.leader_recovery_state
    leader_changed = leader != partition.leader
    if leader_changed and unclean:
        # An unclean leader's log defines the partition from now on: it is the whole ISR (may lose data).
        isr = (leader,)
        recovery = LeaderRecoveryState.RECOVERING
    elif target_isr and target_isr != partition.isr:
        isr = target_isr
    if target_recovery_state is not None:
        recovery = target_recovery_state
    if not leader_changed and isr == partition.isr and recovery == partition.leader_recovery_state:
        return None
    return PartitionRecord(
        leader=leader,
        leader_epoch=partition.leader_epoch + 1 if leader_changed else partition.leader_epoch,
        isr=isr,
        partition_epoch=partition.partition_epoch + 1,
        leader_recovery_state=recovery,
    )


def _elect(
    replicas: Sequence[int],
    partition: PartitionRecord,
    target_isr: tuple[int, ...],
    acceptable: Callable[[int], bool],
    election: _Election,
) -> tuple[int, bool]:
    """(leader, unclean): ``PartitionChangeBuilder.electPreferredLeader`` / ``electAnyLeader``."""

    def valid(node: int) -> bool:
        return node in target_isr and acceptable(node)

    if election is _Election.PREFERRED and replicas and valid(replicas[0]):
        return replicas[0], False
    if valid(partition.leader):  # a leader that still qualifies keeps leading
        return partition.leader, False
    for node in replicas:
        if valid(node):
            return node, False
    if election is _Election.UNCLEAN:
        for node in replicas:
            if acceptable(node):
                return node, True
    return NO_LEADER, False
