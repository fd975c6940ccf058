"""A wire-level KIP-848 consumer-group member (ConsumerGroupHeartbeat v1 on its own connection) for tests
that need members whose every step they control: when each heartbeat goes out, and whether the member
acknowledges a revocation."""

from __future__ import annotations

import uuid

from regroup.client.blocking import BlockingConnection
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages.consumer_group_heartbeat import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatRequestTopicPartitions,
    ConsumerGroupHeartbeatResponse,
)
from regroup.protocol.messages.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
)

__all__ = ["WireMember"]


class WireMember:
    """One member. ``owned`` is what it reports holding: it acknowledges every new assignment at once,
    unless ``stubborn``, when it keeps reporting the partitions it had (it never finishes revoking)."""

    def __init__(
        self,
        address: tuple[str, int],
        group: str,
        topics: list[str],
        *,
        client_id: str,
        rebalance_timeout_ms: int = 20_000,
    ) -> None:
        self.conn = BlockingConnection(address, client_id=client_id)
        self.group = group
        self.topics = topics
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.member_id = uuid.uuid4().hex  # v1: the member names itself
        self.epoch = 0
        self.owned: dict[uuid.UUID, list[int]] = {}
        self.stubborn = False

    def heartbeat(self) -> ConsumerGroupHeartbeatResponse:
        """One heartbeat (a full join request at epoch 0); errors are returned, not raised."""
        joining = self.epoch == 0
        response = self.conn.request(
            ConsumerGroupHeartbeatRequest(
                group_id=self.group,
                member_id=self.member_id,
                member_epoch=self.epoch,
                rebalance_timeout_ms=self.rebalance_timeout_ms if joining else -1,
                subscribed_topic_names=self.topics if joining else None,
                topic_partitions=[
                    ConsumerGroupHeartbeatRequestTopicPartitions(topic_id=t, partitions=ps)
                    for t, ps in self.owned.items()
                ],
            ),
            ConsumerGroupHeartbeatResponse,
            version=1,
        )
        if response.error_code == ErrorCode.NONE:
            self.epoch = response.member_epoch
            if response.assignment is not None and not self.stubborn:
                self.owned = {
                    tp.topic_id: sorted(tp.partitions) for tp in response.assignment.topic_partitions
                }
        return response

    def rejoin(self) -> None:
        """Forget the membership, as a fenced client does: the next heartbeat joins with epoch 0."""
        self.epoch = 0
        self.owned = {}

    def commit(self, topic: str, offsets: dict[int, int]) -> None:
        """OffsetCommit v9 at the member's epoch; every partition must succeed."""
        partitions = [OffsetCommitRequestPartition(p, o) for p, o in offsets.items()]
        request = OffsetCommitRequest(
            group_id=self.group,
            generation_id_or_member_epoch=self.epoch,
            member_id=self.member_id,
            topics=[OffsetCommitRequestTopic(topic, partitions)],
        )
        response = self.conn.request(request, OffsetCommitResponse, version=9)
        assert {p.error_code for p in response.topics[0].partitions} == {ErrorCode.NONE}, response

    def close(self) -> None:
        self.conn.close()
