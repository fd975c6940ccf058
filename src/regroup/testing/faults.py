"""Fault injection in the broker's request path: error responses, delays and dropped connections.

:class:`Faults` is installed as the server's interceptor (``BrokerServer.interceptor``): every decoded
request passes through it before its handler. A rule matches by API and, optionally, group id; the first
matching rule with a count left applies and spends one count. Error responses have the shape the API's
handler would produce for that error (per partition for OffsetCommit, per group for DescribeGroups and
OffsetFetch v8+, per key for FindCoordinator v4+), built without running the handler: a failed commit
commits nothing.

Every method runs on the broker's event loop; :class:`regroup.testing.Broker` marshals calls onto it.
"""

from __future__ import annotations

import asyncio
import inspect
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from regroup.broker.context import RequestContext
from regroup.broker.handlers import Handler, HandlerResult
from regroup.protocol.api_keys import API_INFO, ApiKey, response_class
from regroup.protocol.errors import ErrorCode
from regroup.protocol.message import Message
from regroup.protocol.messages.delete_groups import DeleteGroupsResponse
from regroup.protocol.messages.describe_groups import DescribeGroupsResponse
from regroup.protocol.messages.find_coordinator import Coordinator, FindCoordinatorResponse
from regroup.protocol.messages.list_groups import ListGroupsResponse
from regroup.protocol.messages.offset_fetch import (
    OffsetFetchResponse,
    OffsetFetchResponsePartition,
    OffsetFetchResponseTopic,
)
from regroup.runtime.responses import (
    deletable_group_error,
    described_group_error,
    heartbeat_error,
    join_group_error,
    leave_group_error,
    offset_commit_error,
    offset_delete_error,
    offset_fetch_group_error,
    sync_group_error,
    txn_offset_commit_error,
)

if TYPE_CHECKING:
    from regroup.broker.server import BrokerServer

__all__ = ["Fault", "Faults", "api_key", "error_code", "error_response", "group_ids"]


def api_key(api: ApiKey | int | str) -> ApiKey:
    """An API by enum, key or name: ``ApiKey.OFFSET_COMMIT``, ``8``, ``"OffsetCommit"``."""
    if isinstance(api, str):
        wanted = re.sub(r"[^A-Za-z0-9]", "", api).upper()
        for key in ApiKey:
            if key.name.replace("_", "") == wanted:
                return key
        raise ValueError(f"unknown Kafka API {api!r}")
    return ApiKey(api)


def error_code(error: ErrorCode | int | str) -> ErrorCode:
    """An error code by enum, number or Kafka name (``"NOT_COORDINATOR"``)."""
    if isinstance(error, str):
        try:
            return ErrorCode[error.upper()]
        except KeyError:
            raise ValueError(f"unknown Kafka error {error!r}") from None
    return ErrorCode(error)


def group_ids(key: ApiKey, version: int, request: Any) -> list[str]:
    """The group ids a request is about (empty for APIs that name no group)."""
    if key is ApiKey.OFFSET_FETCH and version >= 8:
        return [g.group_id for g in request.groups]
    if key is ApiKey.DESCRIBE_GROUPS:
        return list(request.groups)
    if key is ApiKey.DELETE_GROUPS:
        return list(request.groups_names)
    if key is ApiKey.FIND_COORDINATOR:
        if version >= 1 and request.key_type != 0:
            return []
        return list(request.coordinator_keys) if version >= 4 else [request.key]
    group_id = getattr(request, "group_id", None)
    return [group_id] if isinstance(group_id, str) else []


def error_response(key: ApiKey, version: int, request: Any, code: ErrorCode) -> Message:
    """The response the broker gives ``request`` when it fails with ``code`` (errors at the level the API
    carries them)."""
    if key is ApiKey.JOIN_GROUP:
        return join_group_error(request, version, code)
    if key is ApiKey.SYNC_GROUP:
        return sync_group_error(code)
    if key is ApiKey.HEARTBEAT:
        return heartbeat_error(code)
    if key is ApiKey.LEAVE_GROUP:
        return leave_group_error(code)
    if key is ApiKey.OFFSET_COMMIT:
        return offset_commit_error(request, code)
    if key is ApiKey.TXN_OFFSET_COMMIT:
        return txn_offset_commit_error(request, version, code)
    if key is ApiKey.OFFSET_DELETE:
        return offset_delete_error(code)
    if key is ApiKey.OFFSET_FETCH:
        return _offset_fetch_error(version, request, code)
    if key is ApiKey.DESCRIBE_GROUPS:
        return DescribeGroupsResponse(groups=[described_group_error(g, code) for g in request.groups])
    if key is ApiKey.DELETE_GROUPS:
        return DeleteGroupsResponse(results=[deletable_group_error(g, code) for g in request.groups_names])
    if key is ApiKey.LIST_GROUPS:
        return ListGroupsResponse(error_code=code, groups=[])
    if key is ApiKey.FIND_COORDINATOR:
        if version >= 4:
            return FindCoordinatorResponse(
                coordinators=[
                    Coordinator(key=k, node_id=-1, host="", port=-1, error_code=code, error_message="")
                    for k in request.coordinator_keys
                ]
            )
        return FindCoordinatorResponse(
            error_code=code, error_message=code.message, node_id=-1, host="", port=-1
        )
    response = response_class(key)()
    if not hasattr(response, "error_code"):
        raise ValueError(
            f"{API_INFO[key].name} has no top-level error code; fail it with drop_next() or delay() instead"
        )
    response.error_code = code
    return response


def _offset_fetch_error(version: int, request: Any, code: ErrorCode) -> OffsetFetchResponse:
    if version >= 8:
        return OffsetFetchResponse(
            groups=[offset_fetch_group_error(g.group_id, code) for g in request.groups]
        )
    if version < 2:
        # v0-1 have no group-level error: every requested partition carries it.
        return OffsetFetchResponse(
            topics=[
                OffsetFetchResponseTopic(
                    name=t.name,
                    partitions=[
                        OffsetFetchResponsePartition(
                            partition_index=p, committed_offset=-1, metadata="", error_code=code
                        )
                        for p in t.partition_indexes
                    ],
                )
                for t in request.topics or []
            ]
        )
    return OffsetFetchResponse(error_code=code, topics=[])


@dataclass
class Fault:
    """One injected fault; ``fired`` counts the requests it has applied to so far."""

    api: ApiKey
    action: str  # "fail", "delay" or "drop"
    group_id: str | None
    remaining: int | None  # None: until removed
    error: ErrorCode | None = None
    seconds: float = 0.0
    fired: int = 0
    matches: Callable[[str], bool] | None = field(default=None, repr=False)

    @property
    def exhausted(self) -> bool:
        return self.remaining is not None and self.remaining <= 0

    def applies_to(self, key: ApiKey, groups: list[str]) -> bool:
        if key is not self.api or self.exhausted:
            return False
        if self.matches is not None:
            return any(self.matches(g) for g in groups)
        return self.group_id is None or self.group_id in groups


class Faults:
    """The interceptor: rules, plus which client id each connection last used."""

    def __init__(self) -> None:
        self.rules: list[Fault] = []
        self.client_ids: dict[tuple[str, int], str | None] = {}  # (host, port) -> client.id

    def add(self, fault: Fault) -> Fault:
        self.rules.append(fault)
        return fault

    def remove(self, fault: Fault) -> None:
        if fault in self.rules:
            self.rules.remove(fault)

    def clear(self) -> None:
        self.rules.clear()

    def __call__(self, ctx: RequestContext, request: Message, handler: Handler) -> HandlerResult:
        self.client_ids[(ctx.client_host, ctx.client_port)] = ctx.client_id
        if not self.rules:
            return handler(ctx, request)
        key = ApiKey(ctx.api_key)
        groups = group_ids(key, ctx.api_version, request)
        for fault in self.rules:
            if fault.applies_to(key, groups):
                break
        else:
            return handler(ctx, request)
        if fault.remaining is not None:
            fault.remaining -= 1
        fault.fired += 1
        if fault.action == "fail":
            assert fault.error is not None
            return error_response(key, ctx.api_version, request, fault.error)
        if fault.action == "drop":
            ctx.close_connection = True  # no response; the server closes the connection
            return None
        return _delayed(handler(ctx, request), fault.seconds)

    def drop_connections(self, server: BrokerServer, client_id: str | None = None) -> int:
        """Abort the connections of ``client_id`` (every connection when None); returns how many."""
        dropped = 0
        for conn in list(server.connections):
            if client_id is not None and self.client_ids.get(conn.peer) != client_id:
                continue
            if not conn.closed:
                conn.close(abort=True)
                dropped += 1
        return dropped


async def _delayed(result: HandlerResult, seconds: float) -> Message | None:
    # The handler runs now (a delayed commit is applied at once); only its response waits.
    response: Message | None
    if inspect.isawaitable(result):
        awaitable: Awaitable[Message | None] = result
        response = await awaitable
    else:
        response = result
    await asyncio.sleep(seconds)
    return response
