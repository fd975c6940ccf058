"""Shared by the KIP-848 handlers (ConsumerGroupHeartbeat, ConsumerGroupDescribe): whether the broker serves
the consumer rebalance protocol at all."""

from __future__ import annotations

from regroup.broker.config import BrokerConfig

__all__ = ["consumer_protocol_enabled"]


def consumer_protocol_enabled(config: BrokerConfig) -> bool:
    """``group.coordinator.rebalance.protocols`` lists ``consumer`` (Kafka's
    ``isConsumerGroupProtocolEnabled``; regroup has no ``group.version`` feature to check besides)."""
    return "consumer" in config.get("group.coordinator.rebalance.protocols")
