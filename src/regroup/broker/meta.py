"""Broker identity and counters persisted in the data directory.

``meta.properties`` uses Kafka's format (``version=1``, ``cluster.id``, ``node.id``) so the directory reads
like a KRaft log dir. Producer ids are handed out from blocks whose end is persisted (write, fsync,
rename) before any id of the block is used, like Kafka's ``ProducerIdManager``: after a restart, allocation
resumes after the last persisted block, so an id is never handed out twice.
"""

from __future__ import annotations

import base64
import os
import time
import uuid
from pathlib import Path
from typing import Final

from regroup.broker.config import ConfigError
from regroup.properties import parse_properties

__all__ = [
    "META_FILE",
    "PRODUCER_ID_FILE",
    "ProducerIdAllocator",
    "generate_cluster_id",
    "load_identity",
    "stored_cluster_id",
]

META_FILE: Final = "meta.properties"
PRODUCER_ID_FILE: Final = "producer-id-block.properties"
PRODUCER_ID_BLOCK: Final = 1000


def generate_cluster_id() -> str:
    """A random id rendered like Kafka's ``Uuid.randomUuid().toString()`` (URL-safe base64, 22 chars)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")
        if not text.startswith("-"):  # Kafka avoids ids that look like command-line flags
            return text


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _read_properties(path: Path) -> dict[str, str]:
    return {k: v for k, v, _ in parse_properties(path.read_text(encoding="utf-8"))}


def stored_cluster_id(data_dir: Path) -> str | None:
    """The cluster id ``meta.properties`` records, if any."""
    path = data_dir / META_FILE
    if not path.exists():
        return None
    return _read_properties(path).get("cluster.id") or None


def load_identity(data_dir: Path, node_id: int, configured_cluster_id: str | None) -> str:
    """The cluster id of ``data_dir``, creating ``meta.properties`` on first start.

    Raises :class:`ConfigError` when the stored node id or cluster id contradicts the configuration.
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / META_FILE
    if path.exists():
        props = _read_properties(path)
        stored_cluster = props.get("cluster.id")
        stored_node = props.get("node.id")
        if stored_node is not None and stored_node.strip() != str(node_id):
            raise ConfigError(
                f"Stored node id {stored_node} in {path} doesn't match node.id={node_id}; "
                "point log.dirs at this node's own data directory"
            )
        if stored_cluster:
            if configured_cluster_id and configured_cluster_id != stored_cluster:
                raise ConfigError(
                    f"Invalid value {configured_cluster_id} for configuration cluster.id: the data "
                    f"directory {data_dir} belongs to cluster {stored_cluster}"
                )
            return stored_cluster
    cluster_id = configured_cluster_id or generate_cluster_id()
    stamp = time.strftime("%a %b %d %H:%M:%S %Z %Y")
    _atomic_write(
        path,
        f"#\n#{stamp}\nnode.id={node_id}\nversion=1\ncluster.id={cluster_id}\n",
    )
    return cluster_id


class ProducerIdAllocator:
    """Producer ids that never repeat, persisted a block at a time."""

    def __init__(self, data_dir: Path, block_size: int = PRODUCER_ID_BLOCK) -> None:
        self._path = data_dir / PRODUCER_ID_FILE
        self._block_size = block_size
        start = 0
        if self._path.exists():
            props = _read_properties(self._path)
            try:
                start = int(props["next.block.start"])
            except (KeyError, ValueError):
                raise ConfigError(f"{self._path} is damaged: no valid next.block.start") from None
        self._next = start
        self._block_end = start  # exclusive; nothing reserved yet

    def next_id(self) -> int:
        if self._next >= self._block_end:
            end = self._next + self._block_size
            _atomic_write(self._path, f"version=1\nnext.block.start={end}\n")
            self._block_end = end
        producer_id = self._next
        self._next += 1
        return producer_id
