"""Connection against a scripted local server: version negotiation, pipelining, timeouts, closing."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from client.scripted_broker import api_versions_response, server
from regroup.client.connection import open_connection, parse_bootstrap_servers
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


def test_negotiates_the_highest_common_version(run: asyncio.Runner) -> None:
    async def scenario() -> None:
        async with server() as (host, port, _):
            conn = await open_connection(host, port)
            try:
                assert conn.version(ApiKey.HEARTBEAT) == 3
                assert conn.version(ApiKey.JOIN_GROUP) == API_INFO[ApiKey.JOIN_GROUP].max_version
                assert conn.version(ApiKey.API_VERSIONS) == 4
                with pytest.raises(UnsupportedApiVersionError):
                    conn.version(ApiKey.SYNC_GROUP)
                with pytest.raises(UnsupportedApiVersionError):
                    conn.version(ApiKey.LEAVE_GROUP)  # not advertised at all
                assert conn.supports(ApiKey.HEARTBEAT, 3)
                assert not conn.supports(ApiKey.HEARTBEAT, 4)
                assert conn.broker_api_versions[9999] == (0, 3)
            finally:
                await conn.close()

    run.run(scenario())


def test_api_versions_steps_down_when_the_broker_is_older(run: asyncio.Runner) -> None:
    async def old_broker(header: RequestHeaderInfo, request: Message) -> bytes | None:
        assert header.api_key == ApiKey.API_VERSIONS
        if header.api_version > 2:
            # What a broker does for an ApiVersions version it does not know: a v0 body.
            reply = api_versions_response({ApiKey.API_VERSIONS: (0, 2)}, ErrorCode.UNSUPPORTED_VERSION)
            return encode_response(reply, 0, header.correlation_id)
        return encode_response(
            api_versions_response({ApiKey.API_VERSIONS: (0, 2)}), header.api_version, header.correlation_id
        )

    async def scenario() -> None:
        async with server(old_broker) as (host, port, seen):
            conn = await open_connection(host, port)
            assert seen == [4, 2]
            assert conn.version(ApiKey.API_VERSIONS) == 2
            await conn.close()

    run.run(scenario())


def test_pipelined_requests_are_matched_by_correlation_id(run: asyncio.Runner) -> None:
    async def scenario() -> None:
        async with server() as (host, port, _):
            conn = await open_connection(host, port)
            try:
                slow = asyncio.create_task(
                    conn.request(HeartbeatRequest(member_id="slow"), HeartbeatResponse)
                )
                fast = asyncio.create_task(
                    conn.request(HeartbeatRequest(member_id="quick"), HeartbeatResponse)
                )
                done, _ = await asyncio.wait({slow, fast}, return_when=asyncio.FIRST_COMPLETED)
                assert done == {fast}
                assert (await fast).error_code == 5
                assert (await slow).error_code == 4
            finally:
                await conn.close()

    run.run(scenario())


def test_a_timed_out_request_closes_the_connection(run: asyncio.Runner) -> None:
    async def scenario() -> None:
        async with server() as (host, port, _):
            conn = await open_connection(host, port, request_timeout_ms=300)
            other = asyncio.create_task(
                conn.request(HeartbeatRequest(member_id="never"), HeartbeatResponse, timeout_ms=5000)
            )
            with pytest.raises(RequestTimedOutError):
                await conn.request(HeartbeatRequest(member_id="never"), HeartbeatResponse)
            assert conn.closed
            # Everything else in flight fails too: later answers could not be trusted.
            with pytest.raises(RequestTimedOutError):
                await other
            with pytest.raises(ConnectionClosedError):
                await conn.request(HeartbeatRequest(member_id="x"), HeartbeatResponse)
            await conn.close()

    run.run(scenario())


def test_close_and_broker_disconnect_fail_outstanding_requests(run: asyncio.Runner) -> None:
    async def scenario() -> None:
        async with server() as (host, port, _):
            conn = await open_connection(host, port)
            pending = asyncio.create_task(
                conn.request(HeartbeatRequest(member_id="never"), HeartbeatResponse)
            )
            await asyncio.sleep(0.05)
            await conn.close()
            with pytest.raises(ConnectionClosedError):
                await pending

        async with server() as (host, port, _):
            conn = await open_connection(host, port)
            pending = asyncio.create_task(
                conn.request(HeartbeatRequest(member_id="never"), HeartbeatResponse)
            )
            await asyncio.sleep(0.05)
        # The server is gone now.
        with pytest.raises(ConnectionClosedError):
            await pending
        assert conn.closed
        await conn.close()

    run.run(scenario())


def test_unreachable_broker(run: asyncio.Runner) -> None:
    async def scenario() -> None:
        async with server() as (host, port, _):
            pass
        with pytest.raises(KafkaConnectionError):
            await open_connection(host, port, connect_timeout_ms=2000)

    run.run(scenario())


def test_cancelled_caller_does_not_break_the_connection(run: asyncio.Runner) -> None:
    async def scenario() -> None:
        async with server() as (host, port, _):
            conn = await open_connection(host, port)
            slow = asyncio.create_task(conn.request(HeartbeatRequest(member_id="slow"), HeartbeatResponse))
            await asyncio.sleep(0.05)
            slow.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await slow
            reply = await conn.request(HeartbeatRequest(member_id="ab"), HeartbeatResponse)
            assert reply.error_code == 2
            await asyncio.sleep(0.3)  # the slow answer arrives and is dropped
            assert not conn.closed
            await conn.close()

    run.run(scenario())


def test_parse_bootstrap_servers() -> None:
    assert parse_bootstrap_servers("a:1, b:2") == [("a", 1), ("b", 2)]
    assert parse_bootstrap_servers(["[::1]:9092"]) == [("::1", 9092)]
    with pytest.raises(ValueError, match="host:port"):
        parse_bootstrap_servers("nohost")
    with pytest.raises(ValueError, match="no bootstrap"):
        parse_bootstrap_servers("")
