"""Exceptions raised by the client side of the group protocol."""

from __future__ import annotations

from regroup.protocol.errors import ErrorCode, KafkaError

__all__ = [
    "CommitFailedError",
    "ConnectionClosedError",
    "FencedInstanceIdError",
    "KafkaConnectionError",
    "NoBrokersAvailableError",
    "RebalanceInProgressError",
    "RequestTimedOutError",
    "UnsupportedApiVersionError",
]


class KafkaConnectionError(ConnectionError):
    """A broker connection could not be established or was lost."""


class ConnectionClosedError(KafkaConnectionError):
    """The connection was closed (by us or the broker) while a request was outstanding."""


class RequestTimedOutError(KafkaConnectionError):
    """No response within the request timeout; the connection is closed, as Java's NetworkClient does."""


class NoBrokersAvailableError(KafkaConnectionError):
    """None of the bootstrap servers (or known brokers) accepted a connection."""


class UnsupportedApiVersionError(Exception):
    """The broker and this client share no version of an API (or of a feature the caller needs)."""


class FencedInstanceIdError(KafkaError):
    """Another member with the same ``group.instance.id`` took over; this member is fenced (fatal)."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(ErrorCode.FENCED_INSTANCE_ID, message)


class CommitFailedError(KafkaError):
    """An offset commit was rejected because the member is no longer part of the generation.

    Mirrors Java's ``CommitFailedException``: the member has been reset and rejoins on the next poll.
    """

    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(
            code,
            message
            or "Commit cannot be completed since the group has already rebalanced and assigned the "
            "partitions to another member",
        )


class RebalanceInProgressError(KafkaError):
    """The operation needs a stable generation; complete the rebalance with ``poll()`` and retry."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(ErrorCode.REBALANCE_IN_PROGRESS, message)
