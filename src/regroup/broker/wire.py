"""Response encoding for the connection layer, avoiding copies of large record data.

A response is encoded into one ``bytearray`` (size prefix, header, body) that goes to the transport as is.
Fetch responses carry megabytes of record batches read from the logs; copying them into the encoded body
costs more than everything else a fetch does, so each large ``records`` field is swapped for a unique
16-byte marker, the small remainder is encoded, and the markers are replaced by the original buffers in a
list handed to ``transport.writelines`` (scatter/gather with uvloop).
"""

from __future__ import annotations

import os
import struct
from typing import Final

from regroup.protocol.framing import response_header_version
from regroup.protocol.message import Message
from regroup.protocol.messages.fetch import FetchResponse, PartitionData
from regroup.protocol.primitives import uvarint_bytes

__all__ = ["encode_response_chunks"]

Chunk = bytes | bytearray | memoryview

_I32: Final = struct.Struct(">i")
_SIZE_AND_CORRELATION: Final = struct.Struct(">ii")
_MARKER_LEN: Final = 16
_ZERO_COPY_MIN: Final = 16 * 1024  # smaller record sets are cheaper to copy than to splice
_FLEXIBLE_FETCH: Final = 12


def _encode(message: Message, version: int, correlation_id: int) -> bytearray:
    # Both response header versions are the correlation id, v1 then an empty tagged-field section.
    buf = bytearray(_SIZE_AND_CORRELATION.pack(0, correlation_id))
    if response_header_version(message.API_KEY, version):
        buf.append(0)
    message.write(buf, version)
    _I32.pack_into(buf, 0, len(buf) - 4)
    return buf


def encode_response_chunks(message: Message, version: int, correlation_id: int) -> list[Chunk]:
    """The size-prefixed response frame as a list of buffers to write in order."""
    if not isinstance(message, FetchResponse):
        return [_encode(message, version, correlation_id)]
    swapped: list[tuple[bytes, bytes, PartitionData]] = []  # (marker, records, partition)
    base = os.urandom(_MARKER_LEN - 4)
    for topic in message.responses:
        for partition in topic.partitions:
            records = partition.records
            if records is not None and len(records) >= _ZERO_COPY_MIN:
                marker = base + _I32.pack(len(swapped))
                swapped.append((marker, records, partition))
                partition.records = marker
    if not swapped:
        return [_encode(message, version, correlation_id)]
    try:
        skeleton = _encode(message, version, correlation_id)
    finally:
        for _, records, partition in swapped:
            partition.records = records
    flexible = version >= _FLEXIBLE_FETCH
    old_prefix = uvarint_bytes(_MARKER_LEN + 1) if flexible else _I32.pack(_MARKER_LEN)
    chunks: list[Chunk] = []
    view = memoryview(skeleton)
    pos = 4
    size = len(skeleton) - 4
    for marker, records, _ in swapped:
        at = skeleton.find(marker, pos)
        start = at - len(old_prefix)
        if at < 0 or skeleton[start:at] != old_prefix:
            return [_encode(message, version, correlation_id)]  # cannot happen short of a marker clash
        prefix = uvarint_bytes(len(records) + 1) if flexible else _I32.pack(len(records))
        chunks.append(view[pos:start])
        chunks.append(prefix)
        chunks.append(records)
        pos = at + _MARKER_LEN
        size += len(prefix) - len(old_prefix) + len(records) - _MARKER_LEN
    chunks.append(view[pos:])
    chunks.insert(0, _I32.pack(size))
    return chunks
