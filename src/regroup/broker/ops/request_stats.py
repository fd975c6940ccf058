"""What the request path counts for the metrics: requests per API and version, their latency
histograms, and the offset commits and deletions their answers report. It runs once per request, so it
is compiled with the hot path (setup.py); :mod:`regroup.broker.ops.metrics` renders it."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from typing import Final

from regroup.protocol.message import Message
from regroup.protocol.messages.offset_commit import OffsetCommitResponse, OffsetCommitResponseTopic
from regroup.protocol.messages.offset_delete import OffsetDeleteResponse, OffsetDeleteResponseTopic

__all__ = ["LATENCY_BUCKETS", "RequestStats"]

# Upper bounds (seconds) of the request latency histogram: sub-millisecond answers up to long polls.
LATENCY_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


def _succeeded(topics: Sequence[OffsetCommitResponseTopic] | Sequence[OffsetDeleteResponseTopic]) -> int:
    """The partitions of a commit's or an offset deletion's answer that succeeded."""
    count = 0
    for topic in topics:
        for partition in topic.partitions:
            if not partition.error_code:
                count += 1
    return count


class RequestStats:
    """Per-API request counts (by version) and latency histograms, plus the offset commits and deletions
    the responses report; fed by :class:`~regroup.broker.server.BrokerServer`'s request observer."""

    def __init__(self, now: Callable[[], float]) -> None:
        self._now = now
        self.requests: dict[tuple[int, int], int] = {}
        self.latency: dict[int, list[float]] = {}  # api key -> bucket counts (+Inf last), then the sum
        self.offset_commits = 0
        self.offset_deletions = 0

    def observe(self, api_key: int, api_version: int, started: float, response: Message | None) -> None:
        elapsed = max(0.0, self._now() - started)
        key = (api_key, api_version)
        self.requests[key] = self.requests.get(key, 0) + 1
        hist = self.latency.get(api_key)
        if hist is None:
            hist = self.latency[api_key] = [0.0] * (len(LATENCY_BUCKETS) + 2)
        hist[bisect.bisect_left(LATENCY_BUCKETS, elapsed)] += 1
        hist[-1] += elapsed
        if isinstance(response, OffsetCommitResponse):
            self.offset_commits += _succeeded(response.topics)
        elif isinstance(response, OffsetDeleteResponse) and response.error_code == 0:
            self.offset_deletions += _succeeded(response.topics)
