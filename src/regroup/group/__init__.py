"""The pure group-coordinator core: classic groups, KIP-848 consumer groups, offsets and their records, one
shard per ``__consumer_offsets`` partition (see :mod:`regroup.group.shard` for the surface the runtime
drives)."""

from regroup.group.config import GroupConfig, partition_for
from regroup.group.context import GroupRequestContext, MemberIdFactory
from regroup.group.shard import GroupShard

__all__ = ["GroupConfig", "GroupRequestContext", "GroupShard", "MemberIdFactory", "partition_for"]
