"""Produce (key 0) v3-11: append each partition's record batch, honour the flush policy, acknowledge.

Checks in Kafka's order (``KafkaApis.handleProduceRequest`` / ``ProduceRequest.validateRecords`` /
``ReplicaManager.appendToLocalLog``): acks must be -1, 0 or 1; the topic and partition must exist (Produce
never creates topics in Kafka 4); internal topics are not writable by clients; each partition carries exactly
one magic-v2 batch, zstd only from v7. Transactional batches are refused with INVALID_TXN_STATE since
regroup has no transaction coordinator. The log validates the batch itself (CRC, sizes against
``max.message.bytes``, idempotent sequences and epochs; a duplicate is acknowledged with its original offset).

With acks=-1 there is a single replica, so "all in-sync replicas" is this node: a write is acknowledged once
appended and, if the partition's flush policy asks for it, fsynced. acks=1 waits for the fsync too when the
policy asks for one, as Kafka's append path flushes synchronously. acks=0 sends nothing back, but closes the
connection if a partition failed (Kafka's way to tell such a producer).
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Awaitable
from typing import Final

from regroup.broker.context import RequestContext
from regroup.broker.handlers import HandlerRegistry
from regroup.broker.topics import INTERNAL_TOPICS
from regroup.cluster.replica_manager import ReplicaManager
from regroup.log import AppendInfo, PartitionLog
from regroup.protocol.api_keys import ApiKey
from regroup.protocol.errors import ErrorCode, KafkaError
from regroup.protocol.messages.produce import (
    PartitionProduceResponse,
    ProduceRequest,
    ProduceResponse,
    TopicProduceResponse,
)
from regroup.protocol.record_batch import HEADER_SIZE, LOG_OVERHEAD, Compression

log = logging.getLogger("regroup.broker.produce")

_LENGTH_AND_MAGIC: Final = struct.Struct(">8xiib")  # batchLength, partitionLeaderEpoch, magic
_ATTRIBUTES: Final = struct.Struct(">h")
_ATTRIBUTES_OFFSET: Final = 21
_TRANSACTIONAL_BIT: Final = 0x10
_CODEC_MASK: Final = 0x07


def _check_records(data: bytes | None, version: int) -> tuple[ErrorCode, str | None]:
    """``ProduceRequest.validateRecords`` plus the transactional refusal, from the batch header alone."""
    if not data:
        return (
            ErrorCode.INVALID_RECORD,
            f"Produce requests with version {version} must have at least one record batch per partition",
        )
    if len(data) < HEADER_SIZE:
        return ErrorCode.CORRUPT_MESSAGE, "The record batch is truncated"
    batch_length, _, magic = _LENGTH_AND_MAGIC.unpack_from(data, 0)
    if magic != 2:
        return (
            ErrorCode.INVALID_RECORD,
            f"Produce requests with version {version} are only allowed to contain record batches with "
            "magic version 2",
        )
    size = batch_length + LOG_OVERHEAD
    if size > len(data) or batch_length < HEADER_SIZE - LOG_OVERHEAD:
        return ErrorCode.CORRUPT_MESSAGE, "The record batch is truncated"
    if size < len(data):
        return (
            ErrorCode.INVALID_RECORD,
            f"Produce requests with version {version} are only allowed to contain exactly one record batch "
            "per partition",
        )
    (attributes,) = _ATTRIBUTES.unpack_from(data, _ATTRIBUTES_OFFSET)
    if version < 7 and attributes & _CODEC_MASK == Compression.ZSTD:
        return (
            ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
            f"Produce requests with version {version} are not allowed to use ZStandard compression",
        )
    if attributes & _TRANSACTIONAL_BIT:
        return ErrorCode.INVALID_TXN_STATE, "Transactions are not supported by regroup"
    return ErrorCode.NONE, None


def _append(
    response: PartitionProduceResponse, plog: PartitionLog, data: bytes, now_ms: int
) -> AppendInfo | None:
    try:
        info = plog.append(data, now_ms=now_ms)
    except KafkaError as exc:
        response.error_code = exc.code
        response.error_message = exc.message
        return None
    except OSError as exc:
        log.error("Append failed: %s", exc)
        response.error_code = ErrorCode.KAFKA_STORAGE_ERROR
        response.error_message = str(exc)
        return None
    response.base_offset = info.base_offset
    response.log_append_time_ms = info.log_append_time
    response.log_start_offset = info.log_start_offset
    return info


def handle(
    ctx: RequestContext, request: ProduceRequest
) -> ProduceResponse | Awaitable[ProduceResponse | None] | None:
    broker = ctx.broker
    logs = broker.logs
    replicas = None if broker.cluster is None else broker.cluster.replicas
    version = ctx.api_version
    acks = request.acks
    now_ms = ctx.now_ms()
    valid_acks = acks in (-1, 0, 1)
    failed = False
    topics: list[TopicProduceResponse] = []
    deferred: list[tuple[PartitionProduceResponse, PartitionLog, bytes, asyncio.Future[None]]] = []
    flushes: list[tuple[PartitionProduceResponse, asyncio.Future[None]]] = []
    # acks=all in a cluster: the partition's reply waits until its high watermark passes the batch.
    replicated: list[tuple[PartitionProduceResponse, str, int, int]] = []
    plog_keys: dict[int, tuple[str, int]] = {}
    for topic in request.topic_data:
        info = logs.topic(topic.name)
        partitions: list[PartitionProduceResponse] = []
        topics.append(TopicProduceResponse(topic.name, partitions))
        for pdata in topic.partition_data:
            response = PartitionProduceResponse(index=pdata.index, base_offset=-1)
            partitions.append(response)
            if not valid_acks:
                code, message = ErrorCode.INVALID_REQUIRED_ACKS, None
            elif info is None or not 0 <= pdata.index < info.partitions:
                code, message = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
            elif topic.name in INTERNAL_TOPICS:
                code, message = (
                    ErrorCode.INVALID_TOPIC_EXCEPTION,
                    f"Cannot append to internal topic {topic.name}",
                )
            else:
                code, message = _check_records(pdata.records, version)
            if replicas is not None and not code:
                code = broker.topology.leader_error(topic.name, pdata.index)
                if not code and acks == -1:
                    code = replicas.check_enough_replicas(topic.name, pdata.index)
            plog = None if code else logs.partition(topic.name, pdata.index)
            if plog is None or pdata.records is None:
                response.error_code = code or ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                response.error_message = message  # v8+ (an ignorable field before)
                failed = True
                continue
            gate = broker.gate(plog)
            if gate.idle:
                appended = _append(response, plog, pdata.records, now_ms)
                if appended is None:
                    failed = True
                    continue
                if plog.needs_flush(now_ms):
                    flushes.append((response, gate.request_flush()))
                if replicas is not None and acks == -1:
                    replicated.append((response, topic.name, pdata.index, appended.last_offset))
            else:
                deferred.append((response, plog, pdata.records, gate.reserve()))
                plog_keys[id(plog)] = (topic.name, pdata.index)

    if not deferred and not flushes and not replicated:
        if acks == 0:
            ctx.close_connection = failed
            return None
        return ProduceResponse(responses=topics, throttle_time_ms=0)

    async def finish() -> ProduceResponse | None:
        nonlocal failed
        for i, (response, plog, data, turn) in enumerate(deferred):
            gate = broker.gate(plog)
            try:
                await gate.wait(turn)
            except asyncio.CancelledError:
                for _, later_plog, _, later_turn in deferred[i + 1 :]:
                    broker.gate(later_plog).abandon(later_turn)
                raise
            try:
                appended = _append(response, plog, data, ctx.now_ms())
            finally:
                gate.release()
            if appended is None:
                failed = True
                continue
            if plog.needs_flush(ctx.now_ms()):
                flushes.append((response, gate.request_flush()))
            if replicas is not None and acks == -1:
                topic_name, index = plog_keys[id(plog)]
                replicated.append((response, topic_name, index, appended.last_offset))
        if acks == 0:
            # Nobody waits for the fsync; the flush still happens.
            ctx.close_connection = failed
            return None
        for response, waiter in flushes:
            try:
                await waiter
            except Exception as exc:
                response.error_code = ErrorCode.KAFKA_STORAGE_ERROR
                response.error_message = f"fsync failed: {exc}"
        if replicated and replicas is not None:
            await _await_replication(replicas, replicated, request.timeout_ms)
        return ProduceResponse(responses=topics, throttle_time_ms=0)

    return finish()


async def _await_replication(
    replicas: ReplicaManager,
    waits: list[tuple[PartitionProduceResponse, str, int, int]],
    timeout_ms: int,
) -> None:
    """acks=all: each partition's answer once its ISR has the batch (``DelayedProduce``): NONE, or
    NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR fell under ``min.insync.replicas`` meanwhile,
    NOT_LEADER_OR_FOLLOWER if leadership moved, REQUEST_TIMED_OUT after the request's timeout."""
    pending = [
        (response, replicas.wait_replicated(topic, index, last))
        for response, topic, index, last in waits
        if response.error_code == ErrorCode.NONE
    ]
    if not pending:
        return
    await asyncio.wait([fut for _, fut in pending], timeout=max(timeout_ms, 0) / 1000)
    for response, fut in pending:
        if not fut.done():
            fut.cancel()
            response.error_code = ErrorCode.REQUEST_TIMED_OUT
        else:
            response.error_code = fut.result()
        if response.error_code not in (ErrorCode.NONE, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND):
            response.base_offset = -1


def register(registry: HandlerRegistry) -> None:
    registry.register(ApiKey.PRODUCE, 3, 11, handle)
