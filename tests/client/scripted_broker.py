"""A scripted stand-in for a broker on loopback: answers ApiVersions with fixed ranges and Heartbeats by
member id (``slow`` late, ``never`` not at all), each from its own task so that answers can overtake."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

from regroup.protocol.api_keys import ApiKey
from regroup.protocol.errors import ErrorCode
from regroup.protocol.framing import FrameReader, RequestHeaderInfo, decode_request, encode_response
from regroup.protocol.message import Message
from regroup.protocol.messages.api_versions import ApiVersion, ApiVersionsResponse
from regroup.protocol.messages.heartbeat import HeartbeatRequest, HeartbeatResponse

Handler = Callable[[RequestHeaderInfo, Message], Awaitable[bytes | None]]

BROKER_RANGES = {
    ApiKey.API_VERSIONS: (0, 4),
    ApiKey.HEARTBEAT: (0, 3),
    ApiKey.JOIN_GROUP: (2, 99),
    ApiKey.SYNC_GROUP: (7, 9),  # nothing in common with our 0-5
}


def api_versions_response(
    ranges: dict[ApiKey, tuple[int, int]], error: ErrorCode = ErrorCode.NONE
) -> ApiVersionsResponse:
    keys = [ApiVersion(api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in ranges.items()]
    keys.append(ApiVersion(api_key=9999, min_version=0, max_version=3))  # an API we do not know
    return ApiVersionsResponse(error_code=error, api_keys=keys)


async def default_handler(header: RequestHeaderInfo, request: Message) -> bytes | None:
    if header.api_key == ApiKey.API_VERSIONS:
        return encode_response(
            api_versions_response(BROKER_RANGES), header.api_version, header.correlation_id
        )
    if isinstance(request, HeartbeatRequest):
        # Answer with the member id's length as an error code so responses can be told apart.
        delay = 0.2 if request.member_id == "slow" else 0
        await asyncio.sleep(delay)
        if request.member_id == "never":
            return None
        reply = HeartbeatResponse(error_code=len(request.member_id))
        return encode_response(reply, header.api_version, header.correlation_id)
    raise AssertionError(f"unexpected request {request}")


@contextlib.asynccontextmanager
async def server(handler: Handler = default_handler) -> AsyncIterator[tuple[str, int, list[int]]]:
    """A broker stand-in answering each request from its own task (so answers can overtake)."""
    versions_seen: list[int] = []
    writers: list[asyncio.StreamWriter] = []
    tasks: set[asyncio.Task[None]] = set()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        frames = FrameReader(1 << 20)

        async def answer(frame: bytes) -> None:
            header, request = decode_request(frame)
            if header.api_key == ApiKey.API_VERSIONS:
                versions_seen.append(header.api_version)
            data = await handler(header, request)
            if data is not None:
                writer.write(data)

        with contextlib.suppress(ConnectionError):
            while data := await reader.read(65536):
                for frame in frames.feed(data):
                    task = asyncio.create_task(answer(frame))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)

    srv = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    try:
        yield "127.0.0.1", port, versions_seen
    finally:
        for task in list(tasks):
            task.cancel()
        for w in writers:
            w.close()
        srv.close()
        await srv.wait_closed()
