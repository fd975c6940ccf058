"""BlockingConnection against the scripted broker: negotiation (shared with the asyncio connection),
in-order pipelining, what a timeout does in receive() and in request(), and a broker that misbehaves."""

from __future__ import annotations

import asyncio
import contextlib
import struct
import threading
from collections.abc import Iterator

import pytest

from client.scripted_broker import Handler, api_versions_response, default_handler, server
from regroup.client.blocking import BlockingConnection, connect
from regroup.client.errors import (
    ConnectionClosedError,
    KafkaConnectionError,
    RequestTimedOutError,
    UnsupportedApiVersionError,
)
from regroup.protocol.api_keys import API_INFO, ApiKey
from regroup.protocol.errors import ErrorCode
from regroup.protocol.framing import RequestHeaderInfo, encode_response
from regroup.protocol.message import Message
from regroup.protocol.messages.heartbeat import HeartbeatRequest, HeartbeatResponse
from regroup.protocol.messages.produce import ProduceRequest


@contextlib.contextmanager
def scripted(handler: Handler = default_handler) -> Iterator[tuple[tuple[str, int], list[int]]]:
    """The scripted broker served from an event loop on a background thread."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="scripted-broker", daemon=True)
    thread.start()
    context = server(handler)
    try:
        host, port, seen = asyncio.run_coroutine_threadsafe(context.__aenter__(), loop).result(10)
        try:
            yield (host, port), seen
        finally:
            asyncio.run_coroutine_threadsafe(context.__aexit__(None, None, None), loop).result(10)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def heartbeat(member_id: str) -> HeartbeatRequest:
    return HeartbeatRequest(group_id="g", generation_id=1, member_id=member_id)


def test_negotiates_the_highest_common_version() -> None:
    with scripted() as (address, _), connect(address) as conn:
        assert conn.version(ApiKey.HEARTBEAT) == 3
        assert conn.version(ApiKey.JOIN_GROUP) == API_INFO[ApiKey.JOIN_GROUP].max_version
        with pytest.raises(UnsupportedApiVersionError):
            conn.version(ApiKey.SYNC_GROUP)
        assert conn.supports(ApiKey.HEARTBEAT, 3)
        assert not conn.supports(ApiKey.HEARTBEAT, 4)
        assert conn.broker_api_versions[9999] == (0, 3)
        assert conn.request(heartbeat("abc"), HeartbeatResponse).error_code == 3


def test_api_versions_steps_down_when_the_broker_is_older() -> None:
    async def old_broker(header: RequestHeaderInfo, request: Message) -> bytes | None:
        ranges = {ApiKey.API_VERSIONS: (0, 2)}
        if header.api_version > 2:
            reply = api_versions_response(ranges, ErrorCode.UNSUPPORTED_VERSION)
            return encode_response(reply, 0, header.correlation_id)
        return encode_response(api_versions_response(ranges), header.api_version, header.correlation_id)

    with scripted(old_broker) as (address, seen), connect(address) as conn:
        assert seen == [API_INFO[ApiKey.API_VERSIONS].max_version, 2]
        assert conn.version(ApiKey.API_VERSIONS) == 2


def test_pipelined_answers_come_back_in_request_order() -> None:
    with scripted() as (address, _), connect(address) as conn:
        for member in ("a", "bb", "ccc"):
            conn.send(heartbeat(member))
        assert conn.in_flight == 3
        replies = [conn.receive() for _ in range(3)]
        assert [r.error_code for r in replies if isinstance(r, HeartbeatResponse)] == [1, 2, 3]
        with pytest.raises(RuntimeError, match="no request in flight"):
            conn.receive()


def test_a_receive_timeout_leaves_the_request_in_flight() -> None:
    with scripted() as (address, _), connect(address) as conn:
        conn.send(heartbeat("slow"))
        with pytest.raises(TimeoutError):
            conn.receive(timeout=0.01)
        assert conn.in_flight == 1
        assert not conn.closed
        reply = conn.receive(timeout=10)
        assert isinstance(reply, HeartbeatResponse)
        assert reply.error_code == 4


def test_a_request_timeout_closes_the_connection() -> None:
    with scripted() as (address, _), connect(address) as conn:
        with pytest.raises(RequestTimedOutError, match="Heartbeat"):
            conn.request(heartbeat("never"), HeartbeatResponse, timeout=0.2)
        assert conn.closed
        with pytest.raises(ConnectionClosedError):
            conn.send(heartbeat("x"))


def test_an_answer_out_of_order_closes_the_connection() -> None:
    # The scripted broker answers "quick" before "slow"; a Kafka broker never does.
    with scripted() as (address, _), connect(address) as conn:
        conn.send(heartbeat("slow"))
        conn.send(heartbeat("quick"))
        with pytest.raises(ConnectionClosedError, match="correlation id"):
            conn.receive()
        assert conn.closed


def test_a_broker_that_goes_away_or_sends_a_huge_frame() -> None:
    async def hostile(header: RequestHeaderInfo, request: Message) -> bytes | None:
        if isinstance(request, HeartbeatRequest) and request.member_id == "huge":
            return struct.pack(">i", 2**31 - 1)
        return await default_handler(header, request)

    with scripted(hostile) as (address, _):
        with connect(address) as conn, pytest.raises(ConnectionClosedError, match="bad frame"):
            conn.request(heartbeat("huge"), HeartbeatResponse)
        conn = connect(address)
        conn.send(heartbeat("never"))
    with pytest.raises(ConnectionClosedError):
        conn.receive(timeout=10)
    with pytest.raises(KafkaConnectionError, match="cannot connect"):
        BlockingConnection(address, timeout=2)


def test_acks_zero_produce_is_not_awaited() -> None:
    async def sink(header: RequestHeaderInfo, request: Message) -> bytes | None:
        if isinstance(request, ProduceRequest):
            return None
        return await default_handler(header, request)

    with scripted(sink) as (address, _), connect(address) as conn:
        fire_and_forget = ProduceRequest(acks=0, timeout_ms=1000, topic_data=[])
        with pytest.raises(ValueError, match="acks=0"):
            conn.request(fire_and_forget, HeartbeatResponse, version=9)
        assert conn.send(fire_and_forget, 9) is None
        assert conn.in_flight == 0
        assert conn.request(heartbeat("ab"), HeartbeatResponse).error_code == 2
