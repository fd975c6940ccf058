"""ApiVersions (key 18) v0-4: the version ranges of every registered handler.

An unsupported ApiVersions version never reaches this module: the server answers it in v0 with
UNSUPPORTED_VERSION and the same ranges (Kafka's ``RequestContext`` behaviour) so clients can downgrade.
"""

from __future__ import annotations

import re
from typing import Final

from regroup.broker.context import RequestContext
from regroup.broker.handlers import HandlerRegistry
from regroup.protocol.api_keys import ApiKey
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages.api_versions import ApiVersion, ApiVersionsRequest, ApiVersionsResponse

# ApiVersionsRequest.isValid(): KIP-511 client software name/version pattern.
_SOFTWARE: Final = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


def register(registry: HandlerRegistry) -> None:
    def handle(ctx: RequestContext, request: ApiVersionsRequest) -> ApiVersionsResponse:
        if ctx.api_version >= 3 and not (
            _SOFTWARE.fullmatch(request.client_software_name)
            and _SOFTWARE.fullmatch(request.client_software_version)
        ):
            return ApiVersionsResponse(error_code=ErrorCode.INVALID_REQUEST, api_keys=[])
        return ApiVersionsResponse(
            error_code=ErrorCode.NONE,
            api_keys=[ApiVersion(k, lo, hi) for k, lo, hi in registry.ranges()],
            throttle_time_ms=0,
            supported_features=[],
            finalized_features_epoch=-1,
            finalized_features=[],
            zk_migration_ready=False,
        )

    registry.register(ApiKey.API_VERSIONS, 0, 4, handle)
