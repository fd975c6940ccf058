"""Where a follower truncates its log before fetching from a new leader (KIP-101, KIP-279): from the
leader's OffsetForLeaderEpoch answer and the follower's own leader-epoch cache — the decision of Kafka's
``AbstractFetcherThread.getOffsetTruncationState``.

The exchange: the follower asks for its latest epoch E (:func:`epoch_to_request`); the leader answers the
largest epoch ≤ E it knows and where that epoch ends in its log (``LeaderEpochCache.end_offset_for``); the
follower truncates to the offset :func:`offset_truncation_state` gives and, when that state is not final,
asks again with its (now smaller) latest epoch. Every record below the final offset is identical on both
replicas, because one leader wrote each epoch.

Truncating means, as ``UnifiedLog.truncateTo`` does: drop the log from the offset, and truncate the epoch
cache from ``min(offset, LEO)`` *even when the offset is at or past the LEO* — a node that was elected and
wrote nothing left an epoch entry at its LEO, and asking about that epoch again would never converge.

Pure: no I/O; the follower's cache is read through :class:`EpochEndOffsets` (``LeaderEpochCache`` is one).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

from regroup.log.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET

__all__ = ["EpochEndOffsets", "OffsetTruncationState", "epoch_to_request", "offset_truncation_state"]

log = logging.getLogger("regroup.cluster")


class EpochEndOffsets(Protocol):
    """The follower's leader-epoch cache, as far as truncation needs it."""

    @property
    def latest_epoch(self) -> int | None: ...

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]: ...


@dataclass(frozen=True, slots=True)
class OffsetTruncationState:
    """Truncate the log to ``offset`` (drop every offset ≥ it); then ``truncation_completed``: fetch from
    there, or not: ask the leader again with the new latest epoch (KIP-279)."""

    offset: int
    truncation_completed: bool


def epoch_to_request(follower_epochs: EpochEndOffsets) -> int | None:
    """The epoch a follower asks the leader about: its latest. None when its cache is empty: it then
    truncates to its high watermark without asking (``AbstractFetcherThread.truncateToHighWatermark``)."""
    return follower_epochs.latest_epoch


def offset_truncation_state(
    *,
    leader_epoch: int,
    leader_end_offset: int,
    follower_epochs: EpochEndOffsets,
    follower_log_end_offset: int,
    high_watermark: int,
    label: str = "",
) -> OffsetTruncationState:
    """The follower's truncation point from the leader's answer (``leader_epoch``, ``leader_end_offset``):

    - the leader knows no epoch ≤ the requested one (-1 offset): truncate to the follower's high
      watermark (the fetch's initial offset), final;
    - no epoch in the answer (-1 epoch, v0 responses): min(leader's offset, follower's LEO), final;
    - the follower knows the answered epoch: min(leader's end of it, follower's end of it, follower's
      LEO), final;
    - the follower's largest epoch ≤ the answered one is smaller (it never saw the leader's epoch):
      truncate to the end of that smaller epoch and ask again (KIP-279's fast double failover);
    - the follower's cache has no answer for the epoch (it is empty, or the epoch is above its latest):
      min(leader's offset, follower's LEO), final.

    An answered epoch below the follower's first one counts as known: its end is the follower's first
    start offset (``LeaderEpochCache.end_offset_for``). ``label`` names the partition in log lines.
    """
    prefix = f"[{label}] " if label else ""
    if leader_end_offset == UNDEFINED_EPOCH_OFFSET:
        log.warning(
            "%sthe leader replied with an unknown offset; truncating to the high watermark %d",
            prefix,
            high_watermark,
        )
        return OffsetTruncationState(high_watermark, truncation_completed=True)
    if leader_epoch == UNDEFINED_EPOCH:
        return OffsetTruncationState(
            min(leader_end_offset, follower_log_end_offset), truncation_completed=True
        )
    follower_epoch, follower_end = follower_epochs.end_offset_for(leader_epoch, follower_log_end_offset)
    if follower_end == UNDEFINED_EPOCH_OFFSET:
        # UnifiedLog.endOffsetForEpoch found nothing in the follower's cache
        offset = min(leader_end_offset, follower_log_end_offset)
        log.warning(
            "%sthe leader replied with epoch %d, which the follower's epochs cannot place; truncating to %d",
            prefix,
            leader_epoch,
            offset,
        )
        return OffsetTruncationState(offset, truncation_completed=True)
    if follower_epoch != leader_epoch:
        offset = min(follower_end, follower_log_end_offset)
        log.info(
            "%sthe leader replied with epoch %d, unknown to the follower: truncating to %d and asking again",
            prefix,
            leader_epoch,
            offset,
        )
        return OffsetTruncationState(offset, truncation_completed=False)
    return OffsetTruncationState(
        min(follower_end, leader_end_offset, follower_log_end_offset), truncation_completed=True
    )
