"""ListOffsets (key 2) v0-10.

Special timestamps as in Kafka's ``UnifiedLog.fetchOffsetByTimestamp``: -1 latest (the last stable offset
under read_committed, which equals the log end without transactions), -2 earliest, -3 (v7+) the record with
the largest timestamp, -4 (v8+) earliest local (= earliest, no tiered storage), -5 (v9+) latest tiered
(nothing is tiered: offset -1). Any other value finds the first record at or after that timestamp.

v0 (removed from Kafka 4.0, kept for old clients such as Burrow's sarama) answers ``old_style_offsets``:
latest → [log end offset, log start offset] and earliest → [log start offset], cut to ``max_num_offsets``;
a timestamp → the offset found for it, if any.
"""

from __future__ import annotations

from typing import Final

from regroup.broker.context import RequestContext
from regroup.broker.handlers import HandlerRegistry
from regroup.log import PartitionLog
from regroup.protocol.api_keys import ApiKey
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages.list_offsets import (
    ListOffsetsPartitionResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopicResponse,
)

LATEST: Final = -1
EARLIEST: Final = -2
MAX_TIMESTAMP: Final = -3
EARLIEST_LOCAL: Final = -4
LATEST_TIERED: Final = -5
READ_COMMITTED: Final = 1


def handle(ctx: RequestContext, request: ListOffsetsRequest) -> ListOffsetsResponse:
    logs = ctx.broker.logs
    topology = ctx.broker.topology
    version = ctx.api_version
    committed = request.isolation_level == READ_COMMITTED
    topics: list[ListOffsetsTopicResponse] = []
    for topic in request.topics:
        seen: dict[int, int] = {}
        for p in topic.partitions:
            seen[p.partition_index] = seen.get(p.partition_index, 0) + 1
        partitions: list[ListOffsetsPartitionResponse] = []
        topics.append(ListOffsetsTopicResponse(topic.name, partitions))
        for p in topic.partitions:
            r = ListOffsetsPartitionResponse(partition_index=p.partition_index)
            partitions.append(r)
            if version >= 1 and seen[p.partition_index] > 1:
                r.error_code = ErrorCode.INVALID_REQUEST  # Kafka refuses duplicate partitions from v1
                continue
            requested_epoch = p.current_leader_epoch if version >= 4 else -1
            error = topology.leader_error(topic.name, p.partition_index, requested_epoch)
            plog = logs.partition(topic.name, p.partition_index) if error is ErrorCode.NONE else None
            if plog is None:
                r.error_code = error or ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            ts = p.timestamp
            latest = plog.last_stable_offset if committed else plog.high_watermark
            if version == 0:
                if ts == LATEST:
                    offsets = [latest] if latest == plog.log_start_offset else [latest, plog.log_start_offset]
                elif ts == EARLIEST:
                    offsets = [plog.log_start_offset]
                else:
                    found = plog.offset_for_timestamp(ts)
                    offsets = [] if found is None else [found[0]]
                r.old_style_offsets = offsets[: max(p.max_num_offsets, 0)]
                continue
            offset, timestamp = -1, -1
            if ts == LATEST:
                offset = latest
            elif ts in (EARLIEST, EARLIEST_LOCAL) and (ts == EARLIEST or version >= 8):
                offset = plog.log_start_offset
            elif ts == MAX_TIMESTAMP and version >= 7:
                found = plog.max_timestamp()
                if found is not None:
                    offset, timestamp = found
            elif ts == LATEST_TIERED and version >= 9:
                pass  # nothing is in remote storage
            else:
                found = plog.offset_for_timestamp(ts)
                if found is not None:
                    offset, timestamp = found
                    if committed and offset >= latest:
                        offset, timestamp = -1, -1
            r.offset = offset
            r.timestamp = timestamp
            if version >= 4:
                r.leader_epoch = _epoch_of(plog, offset)
    return ListOffsetsResponse(throttle_time_ms=0, topics=topics)


def _epoch_of(plog: PartitionLog, offset: int) -> int:
    """The leader epoch of the batch holding ``offset`` (the log end: the latest epoch); -1 for none. A
    single node, which records no epochs, leads at epoch 0."""
    if offset < 0:
        return -1
    entry = plog.epochs.epoch_for_offset(offset)
    if entry is not None:
        return entry
    latest = plog.epochs.latest_epoch
    return latest if latest is not None else 0


def register(registry: HandlerRegistry) -> None:
    registry.register(ApiKey.LIST_OFFSETS, 0, 10, handle)
