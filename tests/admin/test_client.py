"""Admin client pieces that need no broker: request builders at every version, assignment decoding."""

from __future__ import annotations

import pytest

from regroup.admin.client import (
    EARLIEST,
    canonical_state,
    decode_consumer_assignment,
    list_offsets_request,
    metadata_request,
)
from regroup.client.types import TopicPartition
from regroup.protocol.framing import encode_request
from regroup.protocol.messages.list_offsets import ListOffsetsRequest
from regroup.protocol.messages.metadata import MetadataRequest
from regroup.protocol.records.consumer_protocol import (
    ConsumerProtocolAssignment,
    ConsumerProtocolAssignmentTopicPartition,
)


@pytest.mark.parametrize("version", range(1, MetadataRequest.MAX_VERSION + 1))
def test_metadata_request_encodes_at_every_version(version: int) -> None:
    for topics in (None, [], ["a", "b"]):
        encode_request(metadata_request(topics, version), version, 1)


@pytest.mark.parametrize("version", range(1, ListOffsetsRequest.MAX_VERSION + 1))
def test_list_offsets_request_encodes_at_every_version(version: int) -> None:
    request = list_offsets_request([TopicPartition("a", 0), TopicPartition("a", 1)], EARLIEST, 5000, version)
    assert [p.partition_index for p in request.topics[0].partitions] == [0, 1]
    assert request.replica_id == -1
    encode_request(request, version, 1)


def test_consumer_assignment_decoding() -> None:
    assignment = ConsumerProtocolAssignment(
        assigned_partitions=[ConsumerProtocolAssignmentTopicPartition("t", [2, 0])], user_data=b"x"
    )
    for version in range(4):
        data = assignment.encode_versioned(version)
        assert decode_consumer_assignment(data) == (TopicPartition("t", 2), TopicPartition("t", 0))
    # Newer versions parse with the newest known schema; empty or garbage bytes mean no partitions.
    assert decode_consumer_assignment(b"\x00\x09" + assignment.encode_versioned(3)[2:]) == (
        TopicPartition("t", 2),
        TopicPartition("t", 0),
    )
    assert decode_consumer_assignment(b"") == ()
    assert decode_consumer_assignment(b"\x00") == ()


def test_canonical_state_names() -> None:
    assert canonical_state("stable") == "Stable"
    assert canonical_state("PREPARINGREBALANCE") == "PreparingRebalance"
    assert canonical_state("Preparing_Rebalance") == "Unknown"
