"""A partition leader's view of its replication: per follower the progress its fetches report, the ISR as
the leader knows it (committed by the controller, possibly with one change in flight), when followers fall
out of sync or may join, and the high watermark — the leader side of Kafka's ``Partition`` with its
``Replica``/``ReplicaState``.

Pure: the leader's log end offset (LEO) and ``now_ms`` are arguments; ISR changes come out as proposals
for an AlterPartition request and go back in as the controller's answer; nothing here does I/O.

**High watermark** (``Partition.maybeIncrementLeaderHW``, Kafka 4.x): the smallest LEO among the leader,
the followers in the *maximal* ISR (the committed ISR plus a member being added, KIP-497) and the
followers that are caught up and eligible but not in the ISR yet (so they can reach the HW and join); it
never moves backwards, and it does not move at all while the committed ISR is smaller than the effective
``min.insync.replicas`` = min(``min.insync.replicas``, replication factor). That last rule is Kafka 4's
(``isUnderMinIsr``, added with KIP-966's groundwork in 3.7); earlier versions advanced the HW regardless.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace
from typing import Final

from regroup.protocol.errors import ErrorCode, KafkaError

__all__ = [
    "UNKNOWN_OFFSET",
    "FollowerFetch",
    "FollowerState",
    "LeaderPartitionState",
    "high_watermark",
]

log = logging.getLogger("regroup.cluster")

UNKNOWN_OFFSET: Final = -1
_NO_BROKER_EPOCH: Final = -1


def high_watermark(
    current: int,
    leader_log_end_offset: int,
    follower_log_end_offsets: Iterable[int],
    *,
    isr_size: int,
    effective_min_isr: int,
) -> int:
    """The new high watermark: the minimum of the leader's LEO and the given followers' LEOs (the maximal
    ISR and the caught-up followers about to join), but never below ``current``, and ``current`` while
    ``isr_size`` (the committed ISR) < ``effective_min_isr``. A follower whose LEO is unknown (-1) holds
    it."""
    if isr_size < effective_min_isr:
        return current
    candidate = min([leader_log_end_offset, *follower_log_end_offsets])
    return max(current, candidate)


def _later(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    return a if b is None else max(a, b)


@dataclass(frozen=True, slots=True)
class FollowerState:
    """What the leader knows of one follower (Kafka's ``ReplicaState``). Times are None for "never"
    (Kafka uses 0, which a wall clock never reads)."""

    log_start_offset: int = UNKNOWN_OFFSET
    log_end_offset: int = UNKNOWN_OFFSET
    """The offset of its last fetch: every offset below it is in its log."""
    last_fetch_leader_log_end_offset: int = UNKNOWN_OFFSET
    """The leader's LEO when that fetch arrived."""
    last_fetch_time_ms: int | None = None
    last_caught_up_time_ms: int | None = None
    """The last time t at which the follower held everything the leader held at t."""
    broker_epoch: int | None = None
    """The broker epoch its fetches carry (Fetch v15+ ``ReplicaState.ReplicaEpoch``; -1 = not sent)."""

    def is_caught_up(self, leader_log_end_offset: int, now_ms: int, replica_lag_time_max_ms: int) -> bool:
        """``ReplicaState.isCaughtUp``: at the leader's LEO, or caught up within the allowed lag."""
        if self.log_end_offset == leader_log_end_offset:
            return True
        caught_up = self.last_caught_up_time_ms
        return caught_up is not None and now_ms - caught_up <= replica_lag_time_max_ms

    def after_fetch(
        self,
        *,
        fetch_offset: int,
        log_start_offset: int,
        fetch_time_ms: int,
        leader_log_end_offset: int,
        broker_epoch: int,
    ) -> FollowerState:
        """``Replica.updateFetchStateOrThrow``: a fetch at ``fetch_offset`` arrived at ``fetch_time_ms`` while
        the leader's LEO was ``leader_log_end_offset``. The follower is caught up *now* if it asked for
        the leader's LEO; else, if it asked for at least the leader's LEO of its previous fetch, it was
        caught up as of that previous fetch. Either way the last caught-up time never moves back."""
        if fetch_offset >= leader_log_end_offset:
            caught_up = _later(self.last_caught_up_time_ms, fetch_time_ms)
        elif fetch_offset >= self.last_fetch_leader_log_end_offset:
            caught_up = _later(self.last_caught_up_time_ms, self.last_fetch_time_ms)
        else:
            caught_up = self.last_caught_up_time_ms
        return FollowerState(
            log_start_offset=log_start_offset,
            log_end_offset=fetch_offset,
            last_fetch_leader_log_end_offset=max(
                leader_log_end_offset, self.last_fetch_leader_log_end_offset
            ),
            last_fetch_time_ms=fetch_time_ms,
            last_caught_up_time_ms=caught_up,
            broker_epoch=broker_epoch,
        )

    def reset(self, now_ms: int, epoch_start_offset: int, *, new_leader: bool, in_isr: bool) -> FollowerState:
        """``Replica.resetReplicaState`` at a new leader epoch: ISR members count as caught up now (so they
        are not dropped before they can fetch), others as never. A node that just became leader knows
        nothing of its followers' logs; one that stays leader keeps what it knew."""
        seen = now_ms if in_isr else None
        if new_leader:
            return FollowerState(last_caught_up_time_ms=seen)
        return replace(
            self,
            last_fetch_leader_log_end_offset=epoch_start_offset,
            last_fetch_time_ms=seen,
            last_caught_up_time_ms=seen,
        )


@dataclass(frozen=True, slots=True)
class FollowerFetch:
    """What a follower's fetch changed: whether the HW advanced (complete parked produces and long polls)
    and the ISR to propose in an AlterPartition when the follower may now join."""

    high_watermark_advanced: bool
    proposed_isr: tuple[int, ...] | None = None


class LeaderPartitionState:
    """One partition on its leader, from becoming leader at an epoch until it stops leading.

    Construct it when the node becomes leader (``Partition.makeLeader`` with a new leader; the caller also
    adds (``leader_epoch``, ``log_end_offset``) to the log's leader-epoch cache); call
    :meth:`update_leadership` for every later metadata change while it still leads. ``high_watermark`` is
    the log's restored (checkpointed) HW, which may advance at once (an ISR of the leader alone); the
    caller stores each new value in the log. ``label`` names the partition in log lines.
    """

    def __init__(
        self,
        *,
        local_id: int,
        replicas: Sequence[int],
        isr: Sequence[int],
        leader_epoch: int,
        partition_epoch: int,
        log_end_offset: int,
        high_watermark: int,
        now_ms: int,
        min_insync_replicas: int = 1,
        replica_lag_time_max_ms: int = 30_000,
        broker_epochs: Mapping[int, int] | None = None,
        shutting_down: AbstractSet[int] = frozenset(),
        label: str = "",
    ) -> None:
        self.local_id = local_id
        self.label = label
        self.min_insync_replicas = min_insync_replicas
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self._broker_epochs = broker_epochs
        self._shutting_down = shutting_down
        self._high_watermark = high_watermark
        self._replicas: tuple[int, ...] = ()
        self._followers: dict[int, FollowerState] = {}
        self._isr: tuple[int, ...] = ()
        self._proposed_isr: tuple[int, ...] | None = None
        self._leader_epoch = leader_epoch
        self._partition_epoch = partition_epoch
        self._epoch_start_offset = log_end_offset
        self._set_assignment(replicas, isr)
        self._reset_followers(now_ms, new_leader=True)
        self.maybe_increment_high_watermark(log_end_offset, now_ms)  # an ISR of the leader alone: HW = LEO

    # ------------------------------------------------------------------------------------------ views

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def leader_epoch(self) -> int:
        return self._leader_epoch

    @property
    def partition_epoch(self) -> int:
        return self._partition_epoch

    @property
    def leader_epoch_start_offset(self) -> int:
        """The leader's LEO when its current epoch began."""
        return self._epoch_start_offset

    @property
    def replicas(self) -> tuple[int, ...]:
        return self._replicas

    @property
    def isr(self) -> tuple[int, ...]:
        """The ISR the controller committed."""
        return self._isr

    @property
    def maximal_isr(self) -> frozenset[int]:
        """The committed ISR plus a member being added (a member being removed still counts): the set every
        commit waits for (KIP-497)."""
        return frozenset(self._isr).union(self._proposed_isr or ())

    @property
    def pending_isr(self) -> tuple[int, ...] | None:
        """The ISR proposed to the controller and not answered yet (one change in flight at a time)."""
        return self._proposed_isr

    @property
    def effective_min_isr(self) -> int:
        """min(``min.insync.replicas``, replication factor) (``Partition.effectiveMinIsr``)."""
        return min(self.min_insync_replicas, len(self._followers) + 1)

    @property
    def under_min_isr(self) -> bool:
        return len(self._isr) < self.effective_min_isr

    def follower(self, replica_id: int) -> FollowerState | None:
        return self._followers.get(replica_id)

    # ------------------------------------------------------------------------------------ metadata in

    def update_leadership(
        self,
        *,
        replicas: Sequence[int],
        isr: Sequence[int],
        leader_epoch: int,
        partition_epoch: int,
        log_end_offset: int,
        now_ms: int,
    ) -> bool:
        """A newer partition state naming this node leader again (``Partition.makeLeader`` while leading):
        the committed ISR replaces any change in flight; at a new leader epoch the followers' catch-up
        clocks restart and the epoch starts at ``log_end_offset``. A state older than the one known (by
        partition epoch) is ignored. Returns whether the HW advanced."""
        if partition_epoch < self._partition_epoch:
            log.info(
                "%signoring partition epoch %d as leader: already at %d",
                self._prefix(),
                partition_epoch,
                self._partition_epoch,
            )
            return False
        self._set_assignment(replicas, isr)
        if leader_epoch > self._leader_epoch:
            self._leader_epoch = leader_epoch
            self._epoch_start_offset = log_end_offset
            self._reset_followers(now_ms, new_leader=False)
        self._partition_epoch = partition_epoch
        return self.maybe_increment_high_watermark(log_end_offset, now_ms)

    def update_nodes(self, broker_epochs: Mapping[int, int] | None, shutting_down: AbstractSet[int]) -> None:
        """The registered nodes with their broker epochs, and those shutting down, as the metadata now says
        (None: every replica may join the ISR, as in single-node mode)."""
        self._broker_epochs = broker_epochs
        self._shutting_down = shutting_down

    # --------------------------------------------------------------------------------------- fetches

    def update_follower_fetch_state(
        self,
        replica_id: int,
        *,
        fetch_offset: int,
        log_start_offset: int,
        fetch_time_ms: int,
        leader_log_end_offset: int,
        broker_epoch: int = _NO_BROKER_EPOCH,
    ) -> FollowerFetch:
        """A follower's fetch (``Partition.updateFollowerFetchState``): record its progress, propose adding
        it to the ISR if it may join, and advance the HW if its LEO moved.

        Raises ``KafkaError`` UNKNOWN_LEADER_EPOCH for a node that is not a follower of this partition at
        this epoch (``Partition.followerReplicaOrThrow``; a Fetch without a current leader epoch answers
        NOT_LEADER_OR_FOLLOWER instead) and NOT_LEADER_OR_FOLLOWER for a fetch from an older incarnation of
        the follower (its broker epoch is below the registered one).
        """
        state = self._followers.get(replica_id)
        if state is None:
            raise KafkaError(
                ErrorCode.UNKNOWN_LEADER_EPOCH,
                f"node {replica_id} is not a follower at leader epoch {self._leader_epoch}",
            )
        registered = None if self._broker_epochs is None else self._broker_epochs.get(replica_id)
        if broker_epoch != _NO_BROKER_EPOCH and registered is not None and registered > broker_epoch:
            raise KafkaError(
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
                f"Received stale fetch state update. broker epoch={broker_epoch} vs expected={registered}",
            )
        self._followers[replica_id] = state.after_fetch(
            fetch_offset=fetch_offset,
            log_start_offset=log_start_offset,
            fetch_time_ms=fetch_time_ms,
            leader_log_end_offset=leader_log_end_offset,
            broker_epoch=broker_epoch,
        )
        proposed = self.maybe_expand_isr(replica_id)
        advanced = False
        if fetch_offset != state.log_end_offset:
            advanced = self.maybe_increment_high_watermark(leader_log_end_offset, fetch_time_ms)
        return FollowerFetch(advanced, proposed)

    def maybe_increment_high_watermark(self, leader_log_end_offset: int, now_ms: int) -> bool:
        """Recompute the HW (after a follower fetch, a leader append or an ISR change); whether it
        advanced."""
        maximal = self.maximal_isr
        counted = [
            state.log_end_offset
            for replica_id, state in self._followers.items()
            if replica_id in maximal
            or (
                state.is_caught_up(leader_log_end_offset, now_ms, self.replica_lag_time_max_ms)
                and self._isr_eligible(replica_id)
            )
        ]
        new = high_watermark(
            self._high_watermark,
            leader_log_end_offset,
            counted,
            isr_size=len(self._isr),
            effective_min_isr=self.effective_min_isr,
        )
        if new > self._high_watermark:
            self._high_watermark = new
            return True
        return False

    # ------------------------------------------------------------------------------------------- ISR

    def is_follower_in_sync(self, replica_id: int) -> bool:
        """``Partition.isFollowerInSync``: its LEO reached both the HW and the start of the current leader
        epoch (so it cannot lead without data committed in this epoch)."""
        state = self._followers.get(replica_id)
        if state is None:
            return False
        leo = state.log_end_offset
        return leo >= self._high_watermark and leo >= self._epoch_start_offset

    def eligible_to_join_isr(self, replica_id: int) -> bool:
        """``Partition.needsExpandIsr``: no ISR change in flight, not in the ISR, an eligible node
        (registered, not shutting down, fetching with its current broker epoch: KIP-841/903) and in
        sync."""
        return (
            self._proposed_isr is None
            and replica_id not in self._isr
            and self._isr_eligible(replica_id)
            and self.is_follower_in_sync(replica_id)
        )

    def maybe_expand_isr(self, replica_id: int) -> tuple[int, ...] | None:
        """The ISR to propose with ``replica_id`` added, now in flight; None when it may not join yet."""
        if not self.eligible_to_join_isr(replica_id):
            return None
        proposed = (*self._isr, replica_id)
        log.info("%sexpanding ISR from %s to %s", self._prefix(), list(self._isr), list(proposed))
        self._proposed_isr = proposed
        return proposed

    def out_of_sync_replicas(self, leader_log_end_offset: int, now_ms: int) -> frozenset[int]:
        """``Partition.getOutOfSyncReplicas``: the followers in the committed ISR that have not been caught
        up within ``replica.lag.time.max.ms`` (stuck or too slow); none while an ISR change is in flight."""
        if self._proposed_isr is not None:
            return frozenset()
        return frozenset(
            replica_id
            for replica_id in self._isr
            if replica_id != self.local_id and not self._caught_up(replica_id, leader_log_end_offset, now_ms)
        )

    def maybe_shrink_isr(self, leader_log_end_offset: int, now_ms: int) -> tuple[int, ...] | None:
        """The ISR to propose without the out-of-sync followers, now in flight (``Partition.maybeShrinkIsr``,
        run every ``replica.lag.time.max.ms`` / 2); None when every member is in sync."""
        out = self.out_of_sync_replicas(leader_log_end_offset, now_ms)
        if not out:
            return None
        proposed = tuple(replica_id for replica_id in self._isr if replica_id not in out)
        log.info(
            "%sshrinking ISR from %s to %s (HW %d, LEO %d); out of sync: %s",
            self._prefix(),
            list(self._isr),
            list(proposed),
            self._high_watermark,
            leader_log_end_offset,
            sorted(out),
        )
        self._proposed_isr = proposed
        return proposed

    def alter_partition_succeeded(
        self,
        *,
        isr: Sequence[int],
        leader_epoch: int,
        partition_epoch: int,
        leader_log_end_offset: int,
        now_ms: int,
    ) -> bool:
        """The controller's answer to the change in flight (``Partition.handleAlterPartitionUpdate``): its ISR
        becomes the committed one unless the answer is for another leader epoch or older than the state
        known. Returns whether the HW advanced."""
        if self._proposed_isr is None:
            return False
        if leader_epoch != self._leader_epoch or partition_epoch < self._partition_epoch:
            log.debug(
                "%signoring ISR %s at epochs %d/%d: stale",
                self._prefix(),
                list(isr),
                leader_epoch,
                partition_epoch,
            )
            return False
        self._isr = tuple(isr)
        self._proposed_isr = None
        self._partition_epoch = partition_epoch
        log.info(
            "%sISR updated to %s%s, partition epoch %d",
            self._prefix(),
            list(isr),
            self._under_min_note(),
            partition_epoch,
        )
        return self.maybe_increment_high_watermark(leader_log_end_offset, now_ms)

    def alter_partition_failed(self, error: ErrorCode) -> bool:
        """The controller refused the change in flight (``Partition.handleAlterPartitionError``). For
        INELIGIBLE_REPLICA and OPERATION_NOT_ATTEMPTED it was certainly not applied: back to the committed
        ISR. For UNKNOWN_TOPIC_OR_PARTITION, FENCED_LEADER_EPOCH and INVALID_UPDATE_VERSION the leader's
        metadata is behind: the change stays in flight until newer metadata arrives. Returns True when the
        request should be retried (any other error)."""
        if self._proposed_isr is None:
            return False
        if error in (ErrorCode.INELIGIBLE_REPLICA, ErrorCode.OPERATION_NOT_ATTEMPTED):
            log.info(
                "%sISR change to %s refused (%s); back to %s",
                self._prefix(),
                self._proposed_isr,
                error.name,
                list(self._isr),
            )
            self._proposed_isr = None
            return False
        if error in (
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            ErrorCode.FENCED_LEADER_EPOCH,
            ErrorCode.INVALID_UPDATE_VERSION,
        ):
            log.debug(
                "%sISR change to %s refused (%s); awaiting newer metadata",
                self._prefix(),
                self._proposed_isr,
                error.name,
            )
            return False
        log.warning(
            "%sISR change to %s failed with unexpected %s; retrying",
            self._prefix(),
            self._proposed_isr,
            error.name,
        )
        return True

    # -------------------------------------------------------------------------------------- internals

    def _set_assignment(self, replicas: Sequence[int], isr: Sequence[int]) -> None:
        """``Partition.updateAssignmentAndIsr`` as leader: followers are the other replicas (new ones start
        unknown, removed ones are forgotten); the ISR is committed, nothing in flight."""
        self._replicas = tuple(replicas)
        self._followers = {
            r: self._followers.get(r, FollowerState()) for r in self._replicas if r != self.local_id
        }
        self._isr = tuple(isr)
        self._proposed_isr = None

    def _reset_followers(self, now_ms: int, *, new_leader: bool) -> None:
        for replica_id, state in self._followers.items():
            self._followers[replica_id] = state.reset(
                now_ms, self._epoch_start_offset, new_leader=new_leader, in_isr=replica_id in self._isr
            )

    def _caught_up(self, replica_id: int, leader_log_end_offset: int, now_ms: int) -> bool:
        state = self._followers.get(replica_id)
        return state is not None and state.is_caught_up(
            leader_log_end_offset, now_ms, self.replica_lag_time_max_ms
        )

    def _isr_eligible(self, replica_id: int) -> bool:
        """``Partition.isReplicaIsrEligible``: registered, not shutting down, and its fetches carry its
        current broker epoch (or -1); anyone when no node information is given."""
        if self._broker_epochs is None:
            return True
        registered = self._broker_epochs.get(replica_id)
        state = self._followers.get(replica_id)
        if registered is None or state is None or state.broker_epoch is None:
            return False
        if replica_id in self._shutting_down:
            return False
        return state.broker_epoch in (_NO_BROKER_EPOCH, registered)

    def _prefix(self) -> str:
        return f"[Partition {self.label}] " if self.label else ""

    def _under_min_note(self) -> str:
        return " (under min ISR)" if self.under_min_isr else ""
