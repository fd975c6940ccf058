"""API version negotiation shared by regroup's asyncio and blocking broker connections.

After the ApiVersions handshake a connection sends each API at the highest version both the broker and the
codecs support. The handshake starts at the codecs' highest ApiVersions version and steps down when the
broker answers UNSUPPORTED_VERSION, whose reply (a v0 body, as Kafka sends it) lists the ApiVersions
versions it does serve. The steps are sans-I/O here; each connection does its own reads and writes.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Mapping

from regroup.client.errors import UnsupportedApiVersionError
from regroup.protocol.api_keys import API_INFO, ApiKey
from regroup.protocol.errors import ErrorCode, KafkaError
from regroup.protocol.framing import decode_response
from regroup.protocol.message import Message
from regroup.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from regroup.protocol.primitives import DecodeError
from regroup.protocol.versions import highest_common_versions

__all__ = ["NegotiatedVersions", "decode_reply"]


def _software_version() -> str:
    try:
        return importlib.metadata.version("regroup")
    except importlib.metadata.PackageNotFoundError:
        return "0"


def decode_reply(frame: bytes, api_key: int, version: int) -> tuple[int, Message]:
    """``decode_response``, except that an ApiVersions reply the broker wrote as v0 (its answer to a
    version it does not serve) is read as v0."""
    try:
        return decode_response(frame, api_key, version)
    except DecodeError:
        if api_key != ApiKey.API_VERSIONS or version == 0:
            raise
        return decode_response(frame, api_key, 0)


class NegotiatedVersions:
    """The version table of one broker connection. Subclasses set ``host`` and ``port``."""

    host: str
    port: int

    def __init__(self) -> None:
        self._versions: dict[ApiKey, int] = {}
        self._broker_ranges: dict[int, tuple[int, int]] = {}

    @property
    def broker_api_versions(self) -> Mapping[int, tuple[int, int]]:
        """The (min, max) version of every API the broker advertised (empty before negotiation)."""
        return dict(self._broker_ranges)

    def set_api_versions(self, ranges: Mapping[int, tuple[int, int]]) -> None:
        """Record the broker's ranges and pick, per API, the highest version both sides support."""
        self._broker_ranges = dict(ranges)
        self._versions = highest_common_versions(ranges)

    def version(self, api_key: ApiKey) -> int:
        """The version requests of ``api_key`` are sent at (the codecs' highest before negotiation);
        raises :class:`UnsupportedApiVersionError` when the broker shares none."""
        try:
            return self._versions[api_key]
        except KeyError:
            if not self._broker_ranges:
                return API_INFO[api_key].max_version
            raise UnsupportedApiVersionError(
                f"broker {self.host}:{self.port} shares no {API_INFO[api_key].name} version with this client"
            ) from None

    def supports(self, api_key: ApiKey, version: int = 0) -> bool:
        try:
            return self.version(api_key) >= version
        except UnsupportedApiVersionError:
            return False

    # ------------------------------------------------------------------------------------ handshake

    @staticmethod
    def first_handshake_version() -> int:
        return API_INFO[ApiKey.API_VERSIONS].max_version

    @staticmethod
    def api_versions_request() -> ApiVersionsRequest:
        return ApiVersionsRequest(client_software_name="regroup", client_software_version=_software_version())

    def accept(self, reply: ApiVersionsResponse, version: int) -> int | None:
        """Take the reply to an ApiVersions request sent at ``version``: None once the table is set, or the
        lower version to ask at next. Raises when the broker refuses the handshake."""
        ranges = {k.api_key: (k.min_version, k.max_version) for k in reply.api_keys}
        if reply.error_code == ErrorCode.UNSUPPORTED_VERSION:
            lo, hi = ranges.get(ApiKey.API_VERSIONS, (0, 0))
            lower = min(hi, version - 1)
            if lower < max(lo, 0):
                raise UnsupportedApiVersionError(
                    f"broker {self.host}:{self.port} rejected every ApiVersions version"
                )
            return lower
        if reply.error_code != ErrorCode.NONE:
            raise KafkaError(ErrorCode.from_code(reply.error_code), "ApiVersions failed")
        self.set_api_versions(ranges)
        return None
