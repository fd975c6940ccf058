"""The client side of the consumer-group protocols (classic, and KIP-848's ``group.protocol=consumer``):
connections, a group member, assignors."""

from regroup.client.assignors import (
    CooperativeStickyAssignor,
    PartitionAssignor,
    RangeAssignor,
    RebalanceProtocol,
    RoundRobinAssignor,
    StickyAssignor,
    create_assignor,
)
from regroup.client.connection import Connection, Connector, Transport, open_connection
from regroup.client.consumer_membership import (
    ConsumerMembership,
    ConsumerMembershipConfig,
    ConsumerMemberState,
    StaleMemberEpochError,
)
from regroup.client.consumer_protocol import Assignment, Subscription
from regroup.client.errors import (
    CommitFailedError,
    ConnectionClosedError,
    FencedInstanceIdError,
    KafkaConnectionError,
    NoBrokersAvailableError,
    RebalanceInProgressError,
    RequestTimedOutError,
    UnsupportedApiVersionError,
)
from regroup.client.member import GroupMember, GroupMemberConfig, RebalanceListener
from regroup.client.membership import Generation, Membership, MembershipConfig, MemberState
from regroup.client.types import OffsetAndMetadata, TopicPartition

__all__ = [
    "Assignment",
    "CommitFailedError",
    "Connection",
    "ConnectionClosedError",
    "Connector",
    "ConsumerMemberState",
    "ConsumerMembership",
    "ConsumerMembershipConfig",
    "CooperativeStickyAssignor",
    "FencedInstanceIdError",
    "Generation",
    "GroupMember",
    "GroupMemberConfig",
    "KafkaConnectionError",
    "MemberState",
    "Membership",
    "MembershipConfig",
    "NoBrokersAvailableError",
    "OffsetAndMetadata",
    "PartitionAssignor",
    "RangeAssignor",
    "RebalanceInProgressError",
    "RebalanceListener",
    "RebalanceProtocol",
    "RequestTimedOutError",
    "RoundRobinAssignor",
    "StaleMemberEpochError",
    "StickyAssignor",
    "Subscription",
    "TopicPartition",
    "Transport",
    "UnsupportedApiVersionError",
    "create_assignor",
    "open_connection",
]
