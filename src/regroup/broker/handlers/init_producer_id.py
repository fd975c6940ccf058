"""InitProducerId (key 22) v0-5: producer ids for idempotent, non-transactional producers.

A null transactional id gets a fresh producer id (never reused, even across restarts) with epoch 0, as
Kafka's ``TransactionCoordinator`` does whatever id and epoch the request carries. regroup has no
transaction coordinator, so a transactional id gets COORDINATOR_NOT_AVAILABLE, which is what a Kafka client
sees when no transaction coordinator can be found; transactions are unsupported.
"""

from __future__ import annotations

from collections.abc import Awaitable

from regroup.broker.context import BrokerPort, RequestContext
from regroup.broker.handlers import HandlerRegistry
from regroup.cluster.store import StoreError
from regroup.protocol.api_keys import ApiKey
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages.init_producer_id import InitProducerIdRequest, InitProducerIdResponse


def handle(
    ctx: RequestContext, request: InitProducerIdRequest
) -> InitProducerIdResponse | Awaitable[InitProducerIdResponse]:
    if request.transactional_id is not None:
        return InitProducerIdResponse(
            error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, producer_id=-1, producer_epoch=-1
        )
    broker = ctx.broker
    if broker.cluster is None:
        producer_id = broker.producer_ids.next_id()
        return InitProducerIdResponse(error_code=ErrorCode.NONE, producer_id=producer_id, producer_epoch=0)
    return _from_cluster(broker)


async def _from_cluster(broker: BrokerPort) -> InitProducerIdResponse:
    """Ids come in blocks reserved in the cluster's metadata store (KIP-730), unique across nodes."""
    try:
        producer_id = await broker.allocate_producer_id()
    except StoreError:
        return InitProducerIdResponse(
            error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, producer_id=-1, producer_epoch=-1
        )
    return InitProducerIdResponse(error_code=ErrorCode.NONE, producer_id=producer_id, producer_epoch=0)


def register(registry: HandlerRegistry) -> None:
    registry.register(ApiKey.INIT_PRODUCER_ID, 0, 5, handle)
