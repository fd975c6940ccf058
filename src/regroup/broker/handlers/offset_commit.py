"""OffsetCommit (key 8) v1-9.

Broker-level checks come first, as in Kafka's ``KafkaApis``: a partition of an unknown topic, or beyond the
topic's partition count, gets UNKNOWN_TOPIC_OR_PARTITION; the rest goes to the group coordinator and the
two answers are merged back in request order. When no partition survives, the coordinator is not consulted
(no group validation at all). The response comes once the commit records are durable.

v0 is not served: it stored offsets in ZooKeeper, a KRaft broker answers it with UNSUPPORTED_VERSION and
Kafka 4 no longer advertises it (KIP-896); no client that negotiates versions needs it.
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import replace

from regroup.broker.context import RequestContext
from regroup.broker.handlers import HandlerRegistry
from regroup.broker.handlers._groups import coordinator, merge_commit_response, split_known, then
from regroup.protocol.api_keys import ApiKey
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
)
from regroup.runtime.responses import offset_commit_error


def handle(
    ctx: RequestContext, request: OffsetCommitRequest
) -> OffsetCommitResponse | Awaitable[OffsetCommitResponse]:
    masks, kept = split_known(ctx, request.topics)
    if not kept:
        return _merge(request, masks, None)
    filtered = request if masks is None else replace(request, topics=kept)
    coord = coordinator(ctx)
    if coord is None:
        return _merge(request, masks, offset_commit_error(filtered, ErrorCode.COORDINATOR_NOT_AVAILABLE))
    # Kafka 4.3 resolves each committed topic's id from its metadata and stores it in the offset record.
    topic_ids = {t.name: info.topic_id for t in kept if (info := ctx.broker.logs.topic(t.name)) is not None}
    pending = coord.offset_commit(ctx.client_id, ctx.client_address, ctx.api_version, filtered, topic_ids)
    return then(pending, lambda answered: _merge(request, masks, answered))


def _merge(
    request: OffsetCommitRequest, masks: list[list[bool]] | None, answered: OffsetCommitResponse | None
) -> OffsetCommitResponse:
    return merge_commit_response(
        OffsetCommitResponse,
        OffsetCommitResponseTopic,
        OffsetCommitResponsePartition,
        request.topics,
        masks,
        answered,
    )


def register(registry: HandlerRegistry) -> None:
    registry.register(ApiKey.OFFSET_COMMIT, 1, 9, handle)
