"""Making Structured Streaming jobs visible to consumer-group tooling.

Spark's Kafka source keeps its offsets in the checkpoint and never commits them to Kafka, so lag tools (and
this pipeline) cannot see a Spark job. :func:`commit_progress_to_group` registers a
``StreamingQueryListener`` that, after every micro-batch, commits the offsets the query has processed —
``progress.sources[*].endOffset``, the next offsets to read, exactly what a consumer commits — to a named
consumer group with an admin-form OffsetCommit (generation −1, empty member id). Any source whose offsets
have the Kafka source's shape ``{"topic": {"partition": offset}}`` works, including ``format("regroup")``.

The coordinator accepts admin-form commits only while the group has no members, so the group must be
dedicated to the query (no consumer joins it). The commit is best effort: a failure is logged and retried at
the next micro-batch, never raised into the query.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Collection
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
    StreamingQueryListener,
)
from pyspark.sql.streaming.query import StreamingQuery

from regroup_pipeline.kafka_client import KafkaClientError, SimpleKafkaClient

__all__ = ["GroupProgressCommitter", "commit_progress_to_group", "offsets_from_progress"]

log = logging.getLogger("regroup_pipeline.progress")


def offsets_from_progress(
    end_offsets: Collection[str], topics: Collection[str] | None = None
) -> dict[tuple[str, int], int]:
    """``{(topic, partition): offset}`` from the ``endOffset`` JSON strings of a query's sources; sources
    with other offset shapes are ignored."""
    out: dict[tuple[str, int], int] = {}
    for text in end_offsets:
        try:
            doc = json.loads(text)
        except (TypeError, ValueError):
            continue
        if not isinstance(doc, dict):
            continue
        for topic, parts in doc.items():
            if not isinstance(topic, str) or not isinstance(parts, dict):
                continue
            if topics is not None and topic not in topics:
                continue
            for partition, offset in parts.items():
                if isinstance(offset, int) and offset >= 0 and str(partition).lstrip("-").isdigit():
                    out[(topic, int(partition))] = offset
    return out


class GroupProgressCommitter(StreamingQueryListener):
    """Commits a query's processed offsets to ``group_id`` after each micro-batch (see the module)."""

    def __init__(
        self,
        bootstrap_servers: str,
        group_id: str,
        *,
        query_id: str | None = None,
        topics: Collection[str] | None = None,
        metadata: str = "",
        client_factory: Callable[[str], SimpleKafkaClient] = SimpleKafkaClient,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.group_id = group_id
        self.query_id = query_id
        self.topics = topics
        self.metadata = metadata
        self._client_factory = client_factory
        self._client: SimpleKafkaClient | None = None
        self.committed: dict[tuple[str, int], int] = {}
        self._lock = threading.Lock()  # the listener bus thread and the registering thread may both commit
        self.last_error: Exception | None = None

    def _ours(self, query_id: Any) -> bool:
        return self.query_id is None or str(query_id) == self.query_id

    def onQueryStarted(self, event: QueryStartedEvent) -> None:  # pyspark's method name
        pass

    def onQueryProgress(self, event: QueryProgressEvent) -> None:  # pyspark's method name
        self.commit_progress(event.progress)

    def commit_progress(self, progress: Any) -> None:
        """Commit the end offsets of one ``StreamingQueryProgress`` (if it is this listener's query)."""
        if progress is None or not self._ours(progress.id):
            return
        with self._lock:
            self._commit(progress)

    def _commit(self, progress: Any) -> None:
        offsets = offsets_from_progress([s.endOffset for s in progress.sources], self.topics)
        changed = {tp: o for tp, o in offsets.items() if self.committed.get(tp) != o}
        if not changed:
            return
        try:
            if self._client is None:
                self._client = self._client_factory(self.bootstrap_servers)
            self._client.commit_offsets(self.group_id, changed, metadata=self.metadata)
        except (OSError, KafkaClientError) as exc:
            self.last_error = exc
            log.warning(
                "committing progress of query %s to group %s failed: %s", progress.id, self.group_id, exc
            )
            self._close()
            return
        self.committed.update(changed)
        self.last_error = None

    def onQueryIdle(self, event: QueryIdleEvent) -> None:  # pyspark's method name
        pass

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:  # pyspark's method name
        if self._ours(event.id):
            self._close()

    def _close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


def commit_progress_to_group(
    query_or_session: StreamingQuery | SparkSession,
    bootstrap_servers: str,
    group_id: str,
    *,
    topics: Collection[str] | None = None,
    metadata: str = "",
) -> GroupProgressCommitter:
    """Register (and return) a :class:`GroupProgressCommitter` committing the progress of a running
    ``StreamingQuery`` — or, given a ``SparkSession``, of every query it runs — to ``group_id`` on the
    cluster at ``bootstrap_servers``. For a query that already made progress, its last progress is
    committed at once. Remove the listener with ``spark.streams.removeListener(listener)``."""
    if isinstance(query_or_session, StreamingQuery):
        spark = SparkSession.getActiveSession() or SparkSession.builder.getOrCreate()
        query_id: str | None = str(query_or_session.id)
    else:
        spark = query_or_session
        query_id = None
    listener = GroupProgressCommitter(
        bootstrap_servers, group_id, query_id=query_id, topics=topics, metadata=metadata
    )
    spark.streams.addListener(listener)
    if isinstance(query_or_session, StreamingQuery):
        listener.commit_progress(query_or_session.lastProgress)
    return listener
