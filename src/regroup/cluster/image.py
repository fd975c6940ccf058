"""Building the :class:`~regroup.cluster.model.ClusterImage` from the metadata store: from one range read of
the whole prefix at a revision, then from each batch of watch events (one revision, one store transaction,
applied together, as KRaft applies one record batch to its image).

Pure: key-values in, a new image out. A key that cannot be decoded is skipped with a warning (a newer node
may have written it); nothing here raises on bad data.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from regroup.cluster.model import (
    ClusterImage,
    ControllerRecord,
    Keys,
    NodeRegistration,
    PartitionRecord,
    TopicRecord,
    decode_cluster_id,
)

__all__ = ["ImageBuilder", "StoredEntry"]

log = logging.getLogger("regroup.cluster")


@dataclass(frozen=True, slots=True)
class StoredEntry:
    """One key of the store as the image needs it: ``value`` None for a deleted key."""

    key: bytes
    value: bytes | None
    create_revision: int = 0


class ImageBuilder:
    """Turns store contents under one prefix into images."""

    def __init__(self, keys: Keys) -> None:
        self.keys = keys
        self._root = keys.root.decode()

    def build(self, revision: int, entries: Iterable[StoredEntry]) -> ClusterImage:
        """The image of a whole-prefix read at ``revision``."""
        return self.apply(ClusterImage(), revision, entries)

    def apply(self, image: ClusterImage, revision: int, entries: Iterable[StoredEntry]) -> ClusterImage:
        """``image`` with the changes of one revision applied (puts and deletes)."""
        cluster_id = image.cluster_id
        nodes = dict(image.nodes)
        controller = image.controller
        topics = dict(image.topics)
        partitions = dict(image.partitions)
        for entry in entries:
            path = entry.key.decode(errors="replace")
            if not path.startswith(self._root):
                continue
            parts = path[len(self._root) :].split("/")
            try:
                kind = parts[0]
                if kind == "cluster" and len(parts) == 1:
                    cluster_id = None if entry.value is None else decode_cluster_id(entry.value)
                elif kind == "controller" and len(parts) == 1:
                    controller = (
                        None
                        if entry.value is None
                        else ControllerRecord.decode(entry.value, entry.create_revision)
                    )
                elif kind == "nodes" and len(parts) == 2:
                    node_id = int(parts[1])
                    if entry.value is None:
                        nodes.pop(node_id, None)
                    else:
                        nodes[node_id] = NodeRegistration.decode(node_id, entry.value, entry.create_revision)
                elif kind == "topics" and len(parts) == 2:
                    if entry.value is None:
                        gone = topics.pop(parts[1], None)
                        if gone is not None:
                            for p in range(gone.partitions):
                                partitions.pop((gone.topic_id, p), None)
                    else:
                        topics[parts[1]] = TopicRecord.decode(parts[1], entry.value)
                elif kind == "partitions" and len(parts) == 3:
                    key = (uuid.UUID(parts[1]), int(parts[2]))
                    if entry.value is None:
                        partitions.pop(key, None)
                    else:
                        partitions[key] = PartitionRecord.decode(entry.value)
            except (ValueError, KeyError, TypeError, IndexError) as exc:
                log.warning("Ignoring metadata key %s: %s", path, exc)
        return ClusterImage(
            revision=revision,
            cluster_id=cluster_id,
            nodes=nodes,
            controller=controller,
            topics=topics,
            partitions=partitions,
        )
