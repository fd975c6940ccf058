"""OffsetFetch (key 9) v1-9: committed offsets, one group (v1-7) or many (v8+, split by coordinator
partition and merged in request order).

No topic check is made (an unknown topic just has no offset), as in Kafka. v1 has no top-level error field:
a group-level error is put on every requested partition instead. v0 read ZooKeeper and is not served
(KRaft brokers answer it UNSUPPORTED_VERSION; Kafka 4 does not advertise it).
"""

from __future__ import annotations

from collections.abc import Sequence

from regroup.broker.context import RequestContext
from regroup.broker.handlers import HandlerRegistry
from regroup.broker.handlers._groups import coordinator
from regroup.protocol.api_keys import ApiKey
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages.offset_fetch import (
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetFetchResponseGroup,
    OffsetFetchResponsePartition,
    OffsetFetchResponseTopic,
)
from regroup.runtime.responses import offset_fetch_group_error

Wanted = tuple[str, Sequence[tuple[str, Sequence[int]]] | None]


async def handle(ctx: RequestContext, request: OffsetFetchRequest) -> OffsetFetchResponse:
    version = ctx.api_version
    groups: list[Wanted]
    if version >= 8:
        groups = [
            (g.group_id, None if g.topics is None else [(t.name, t.partition_indexes) for t in g.topics])
            for g in request.groups
        ]
    else:
        topics = None if request.topics is None else [(t.name, t.partition_indexes) for t in request.topics]
        groups = [(request.group_id, topics)]
    # v9 (KIP-848): a consumer-protocol member names itself; a consumer group checks id and epoch.
    members = [(g.member_id, g.member_epoch) for g in request.groups] if version >= 9 else None
    coord = coordinator(ctx)
    if coord is None:
        results = [offset_fetch_group_error(g, ErrorCode.COORDINATOR_NOT_AVAILABLE) for g, _ in groups]
    else:
        results = await coord.offset_fetch(groups, request.require_stable and version >= 7, version, members)
    if version >= 8:
        return OffsetFetchResponse(throttle_time_ms=0, groups=results)
    return _single_group(results[0], groups[0][1], version)


def _single_group(
    group: OffsetFetchResponseGroup, requested: Sequence[tuple[str, Sequence[int]]] | None, version: int
) -> OffsetFetchResponse:
    if group.error_code != ErrorCode.NONE and version < 2 and requested is not None:
        topics = [
            OffsetFetchResponseTopic(
                name=name,
                partitions=[
                    OffsetFetchResponsePartition(
                        partition_index=p,
                        committed_offset=-1,
                        committed_leader_epoch=-1,
                        metadata="",
                        error_code=group.error_code,
                    )
                    for p in partitions
                ],
            )
            for name, partitions in requested
        ]
        return OffsetFetchResponse(throttle_time_ms=0, topics=topics, error_code=ErrorCode.NONE)
    return OffsetFetchResponse(
        throttle_time_ms=0,
        error_code=group.error_code,
        topics=[
            OffsetFetchResponseTopic(
                name=t.name,
                partitions=[
                    OffsetFetchResponsePartition(
                        partition_index=p.partition_index,
                        committed_offset=p.committed_offset,
                        committed_leader_epoch=p.committed_leader_epoch,
                        metadata=p.metadata,
                        error_code=p.error_code,
                    )
                    for p in t.partitions
                ],
            )
            for t in group.topics
        ],
    )


def register(registry: HandlerRegistry) -> None:
    registry.register(ApiKey.OFFSET_FETCH, 1, 9, handle)
