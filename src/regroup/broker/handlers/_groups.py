"""Shared by the group API handlers: the broker's group coordinator while it runs, and the split/merge of
offset requests into the partitions the broker answers itself and those the coordinator answers."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from functools import partial
from typing import Any, Protocol, TypeVar

from regroup.broker.context import BrokerPort, RequestContext
from regroup.protocol.errors import ErrorCode
from regroup.runtime.coordinator import GroupCoordinator

__all__ = [
    "coordinator",
    "coordinator_of",
    "merge_commit_response",
    "merge_partitions",
    "now_or_later",
    "split_known",
    "then",
]

_Topic = TypeVar("_Topic", bound=Any)  # a request topic: ``name`` and ``partitions`` with ``partition_index``
_Answer = TypeVar("_Answer")
_Response = TypeVar("_Response")


class _AnsweredTopic(Protocol):
    @property
    def partitions(self) -> Sequence[Any]: ...


class _CommitResponse(Protocol):
    @property
    def topics(self) -> Sequence[_AnsweredTopic]: ...


_Commit = TypeVar("_Commit", bound=_CommitResponse)


def coordinator(ctx: RequestContext) -> GroupCoordinator | None:
    """The broker's group coordinator, or None when it is not running (COORDINATOR_NOT_AVAILABLE)."""
    return coordinator_of(ctx.broker)


def now_or_later(pending: asyncio.Future[_Response]) -> _Response | asyncio.Future[_Response]:
    """The response itself when the coordinator answered at once (the connection writes it in this loop
    step), else the future to wait for."""
    return pending.result() if pending.done() else pending


def then(
    pending: asyncio.Future[_Answer], finish: Callable[[_Answer], _Response]
) -> _Response | asyncio.Future[_Response]:
    """``finish(answer)`` now when the coordinator answered at once, else a future of it once it does (a
    done-callback, not a task: the connection waits on the future as it is)."""
    if pending.done():
        return finish(pending.result())
    out: asyncio.Future[_Response] = pending.get_loop().create_future()
    # A partial, not a nested function: compiled, a nested function and the frame it closes over
    # reference each other, a cycle per parked request for the collector.
    pending.add_done_callback(partial(_settle, out, finish))
    return out


def _settle(
    out: asyncio.Future[_Response],
    finish: Callable[[_Answer], _Response],
    answered: asyncio.Future[_Answer],
) -> None:
    if out.done():
        return
    if answered.cancelled():
        out.cancel()
        return
    exc = answered.exception()
    if exc is not None:
        out.set_exception(exc)
        return
    try:
        out.set_result(finish(answered.result()))
    except Exception as error:
        out.set_exception(error)


def coordinator_of(broker: BrokerPort) -> GroupCoordinator | None:
    coord = broker.group_coordinator
    return coord if coord.running else None


def split_known(ctx: RequestContext, topics: list[_Topic]) -> tuple[list[list[bool]] | None, list[_Topic]]:
    """Which requested partitions exist (one mask per topic) and the request topics cut down to them
    (topics left without a partition dropped). Kafka's broker answers the others
    UNKNOWN_TOPIC_OR_PARTITION itself before consulting the coordinator (OffsetCommit, TxnOffsetCommit,
    OffsetDelete). When every partition exists — nearly always — the masks are ``None`` and the topics are
    the request's own, so the handler passes the request through unchanged."""
    logs = ctx.broker.logs

    def count(name: str) -> int:
        info = logs.topic(name)
        return -1 if info is None else info.partitions

    for topic in topics:
        indexes = [p.partition_index for p in topic.partitions]
        if indexes and (min(indexes) < 0 or max(indexes) >= count(topic.name)):
            break
    else:
        return None, topics
    masks: list[list[bool]] = []
    kept: list[_Topic] = []
    for topic in topics:
        n = count(topic.name)
        mask = [0 <= p.partition_index < n for p in topic.partitions]
        masks.append(mask)
        if any(mask):
            partitions = [p for p, ok in zip(topic.partitions, mask, strict=True) if ok]
            kept.append(replace(topic, partitions=partitions))
    return masks, kept


def merge_partitions(
    topics: Sequence[_Topic],
    masks: list[list[bool]] | None,
    answered: Iterable[_Answer],
    unanswered: Callable[[int, ErrorCode], _Answer],
) -> list[list[_Answer]]:
    """Per requested topic, its partitions' answers in request order: the coordinator's ``answered`` ones
    (in the order :func:`split_known` kept them) for known partitions, ``unanswered(partition_index,
    code)`` for the rest — UNKNOWN_TOPIC_OR_PARTITION, or UNKNOWN_SERVER_ERROR should the coordinator
    have left one out."""
    results = iter(answered)
    merged: list[list[_Answer]] = []
    if masks is None:
        masks = [[True] * len(t.partitions) for t in topics]
    for topic, mask in zip(topics, masks, strict=True):
        partitions: list[_Answer] = []
        for p, ok in zip(topic.partitions, mask, strict=True):
            result = next(results, None) if ok else None
            if result is None:
                code = ErrorCode.UNKNOWN_SERVER_ERROR if ok else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                result = unanswered(p.partition_index, code)
            partitions.append(result)
        merged.append(partitions)
    return merged


def merge_commit_response(
    response_type: Callable[..., _Commit],
    topic_type: Callable[..., Any],
    partition_type: Callable[..., Any],
    topics: Sequence[_Topic],
    masks: list[list[bool]] | None,
    answered: _Commit | None,
) -> _Commit:
    """The whole answer to an OffsetCommit or TxnOffsetCommit (``*_type`` are the API's response, topic and
    partition classes): the coordinator's ``answered`` partitions merged with the broker's own, in request
    order (:func:`merge_partitions`). With every partition known and answered, that is the coordinator's
    answer itself."""
    if masks is None and answered is not None and len(answered.topics) == len(topics):
        for answered_topic, topic in zip(answered.topics, topics, strict=True):
            if len(answered_topic.partitions) != len(topic.partitions):
                break
        else:
            return answered
    merged = merge_partitions(
        topics,
        masks,
        [] if answered is None else [p for t in answered.topics for p in t.partitions],
        lambda index, code: partition_type(partition_index=index, error_code=code),
    )
    return response_type(
        throttle_time_ms=0,
        topics=[topic_type(name=t.name, partitions=ps) for t, ps in zip(topics, merged, strict=True)],
    )
