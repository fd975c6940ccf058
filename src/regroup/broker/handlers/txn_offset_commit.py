"""TxnOffsetCommit (key 28) v0-4.

regroup has no transaction coordinator (InitProducerId with a transactional id is refused with
COORDINATOR_NOT_AVAILABLE), so no transaction can be ongoing: after Kafka's broker-level
UNKNOWN_TOPIC_OR_PARTITION checks, the coordinator answers every partition with the error Kafka's
transaction verification gives for a producer without an ongoing transaction. Group-id and
coordinator-level errors are reported as for any group request (v0-1 get COORDINATOR_NOT_AVAILABLE instead
of COORDINATOR_LOAD_IN_PROGRESS, as Kafka does for them).
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import replace

from regroup.broker.context import RequestContext
from regroup.broker.handlers import HandlerRegistry
from regroup.broker.handlers._groups import coordinator, merge_commit_response, split_known, then
from regroup.protocol.api_keys import ApiKey
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages.txn_offset_commit import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    TxnOffsetCommitResponsePartition,
    TxnOffsetCommitResponseTopic,
)
from regroup.runtime.responses import txn_offset_commit_error


def handle(
    ctx: RequestContext, request: TxnOffsetCommitRequest
) -> TxnOffsetCommitResponse | Awaitable[TxnOffsetCommitResponse]:
    masks, kept = split_known(ctx, request.topics)
    if not kept:
        return _merge(request, masks, None)
    filtered = request if masks is None else replace(request, topics=kept)
    coord = coordinator(ctx)
    if coord is None:
        error = txn_offset_commit_error(filtered, ctx.api_version, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        return _merge(request, masks, error)
    pending = coord.txn_offset_commit(ctx.client_id, ctx.client_address, ctx.api_version, filtered)
    return then(pending, lambda answered: _merge(request, masks, answered))


def _merge(
    request: TxnOffsetCommitRequest, masks: list[list[bool]] | None, answered: TxnOffsetCommitResponse | None
) -> TxnOffsetCommitResponse:
    return merge_commit_response(
        TxnOffsetCommitResponse,
        TxnOffsetCommitResponseTopic,
        TxnOffsetCommitResponsePartition,
        request.topics,
        masks,
        answered,
    )


def register(registry: HandlerRegistry) -> None:
    registry.register(ApiKey.TXN_OFFSET_COMMIT, 0, 4, handle)
