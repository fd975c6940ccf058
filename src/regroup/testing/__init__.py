"""Test tooling for applications that use Kafka consumer groups: a real regroup broker in-process, a virtual
coordinator clock, fault injection and forced rebalances, and observations of group state.

    with regroup.testing.TestBroker() as b:
        b.create_topic("orders", partitions=4)
        ... point any Kafka client at b.bootstrap_servers ...
        b.wait_for_stable("my-group", members=2)
        b.force_rebalance("my-group")
        b.clock.advance(45_000)            # session timeouts fire, without waiting

pytest users get the ``regroup_broker`` fixture from the ``regroup`` plugin. See docs/testing.md.

Names are imported on first use, so that loading the pytest plugin (a submodule) costs other test suites
nothing.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from regroup.group.history import (
        GenerationRecord,
        JoinDeadlineEvicted,
        MemberJoined,
        MemberLeft,
        PendingSyncExpired,
        RebalanceForced,
        SessionExpired,
        StaticMemberReplaced,
    )
    from regroup.protocol.api_keys import ApiKey
    from regroup.protocol.errors import ErrorCode
    from regroup.runtime.group_view import GroupView, MemberView
    from regroup.testing.broker import BrokerError, TestBroker
    from regroup.testing.clients import close_consumer
    from regroup.testing.clock import VirtualClock
    from regroup.testing.cluster import Cluster
    from regroup.testing.faults import Fault

__all__ = [
    "ApiKey",
    "BrokerError",
    "Cluster",
    "ErrorCode",
    "Fault",
    "GenerationRecord",
    "GroupView",
    "JoinDeadlineEvicted",
    "MemberJoined",
    "MemberLeft",
    "MemberView",
    "PendingSyncExpired",
    "RebalanceForced",
    "SessionExpired",
    "StaticMemberReplaced",
    "TestBroker",
    "VirtualClock",
    "close_consumer",
]

_HISTORY = "regroup.group.history"
_SOURCES = {
    "ApiKey": "regroup.protocol.api_keys",
    "BrokerError": "regroup.testing.broker",
    "Cluster": "regroup.testing.cluster",
    "ErrorCode": "regroup.protocol.errors",
    "Fault": "regroup.testing.faults",
    "GenerationRecord": _HISTORY,
    "GroupView": "regroup.runtime.group_view",
    "JoinDeadlineEvicted": _HISTORY,
    "MemberJoined": _HISTORY,
    "MemberLeft": _HISTORY,
    "MemberView": "regroup.runtime.group_view",
    "PendingSyncExpired": _HISTORY,
    "RebalanceForced": _HISTORY,
    "SessionExpired": _HISTORY,
    "StaticMemberReplaced": _HISTORY,
    "TestBroker": "regroup.testing.broker",
    "VirtualClock": "regroup.testing.clock",
    "close_consumer": "regroup.testing.clients",
}


def __getattr__(name: str) -> Any:
    source = _SOURCES.get(name)
    if source is None:
        raise AttributeError(f"module 'regroup.testing' has no attribute {name!r}")
    value = getattr(importlib.import_module(source), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
