"""Client-side partition assignors, interoperable with Java's and librdkafka's built-ins of the same name."""

from __future__ import annotations

from collections.abc import Callable

from regroup.client.assignors.base import PartitionAssignor, RebalanceProtocol, member_order_key
from regroup.client.assignors.range import RangeAssignor
from regroup.client.assignors.roundrobin import RoundRobinAssignor
from regroup.client.assignors.sticky import (
    AbstractStickyAssignor,
    CooperativeStickyAssignor,
    StickyAssignor,
    decode_sticky_user_data,
    encode_sticky_user_data,
)

__all__ = [
    "ASSIGNORS",
    "AbstractStickyAssignor",
    "CooperativeStickyAssignor",
    "PartitionAssignor",
    "RangeAssignor",
    "RebalanceProtocol",
    "RoundRobinAssignor",
    "StickyAssignor",
    "common_rebalance_protocol",
    "create_assignor",
    "decode_sticky_user_data",
    "encode_sticky_user_data",
    "member_order_key",
]

ASSIGNORS: dict[str, Callable[[], PartitionAssignor]] = {
    RangeAssignor.name: RangeAssignor,
    RoundRobinAssignor.name: RoundRobinAssignor,
    StickyAssignor.name: StickyAssignor,
    CooperativeStickyAssignor.name: CooperativeStickyAssignor,
}


def create_assignor(name: str) -> PartitionAssignor:
    """A fresh instance of the built-in assignor called ``name``."""
    try:
        return ASSIGNORS[name]()
    except KeyError:
        raise ValueError(f"unknown assignor {name!r} (built-ins: {', '.join(ASSIGNORS)})") from None


def common_rebalance_protocol(assignors: list[PartitionAssignor]) -> RebalanceProtocol:
    """The most advanced protocol every assignor supports (Java's ConsumerCoordinator constructor)."""
    if not assignors:
        raise ValueError("at least one assignor is required")
    common = set(assignors[0].supported_protocols)
    for assignor in assignors[1:]:
        common &= set(assignor.supported_protocols)
    if not common:
        names = sorted(a.name for a in assignors)
        raise ValueError(f"assignors {names} have no commonly supported rebalance protocol")
    return max(common)
