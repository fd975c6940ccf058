"""Fetch session metadata (KIP-227) both sides of a Fetch agree on: the epochs and how they advance."""

from __future__ import annotations

from typing import Final

__all__ = ["FINAL_EPOCH", "INITIAL_EPOCH", "INVALID_SESSION_ID", "next_epoch"]

INVALID_SESSION_ID: Final = 0  # no session: a sessionless fetch, or a full fetch asking for one
INITIAL_EPOCH: Final = 0  # a full fetch that asks for a new session (closing the one named)
FINAL_EPOCH: Final = -1  # a full fetch that closes the session named and asks for none
_INT32_MAX: Final = 2**31 - 1


def next_epoch(epoch: int) -> int:
    """The epoch of the request after one with ``epoch`` (Kafka's ``FetchMetadata.nextEpoch``): a full
    fetch is followed by epoch 1, and 1 follows the largest int32."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch >= _INT32_MAX else epoch + 1
