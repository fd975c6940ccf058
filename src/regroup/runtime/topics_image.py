"""The :class:`~regroup.group.topics_image.TopicsImage` the coordinator hands the consumer-group core with
every ConsumerGroupHeartbeat and ConsumerGroupDescribe, kept current without rebuilding it per request.

:class:`TopicsImageSource` derives the image from a topic registry and a change token: the image is rebuilt
only when the token differs from the one it was built at (a :class:`~regroup.log.LogManager`'s
``topics_version`` on a single node, the metadata image's topic map in a cluster, which a topic change
replaces). Internal topics (``__consumer_offsets``, ``__group_events``) are left out: consumer groups neither
subscribe to them by regex nor get them assigned.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from regroup.group.topics_image import TopicImage, TopicsImage
from regroup.log import LogManager
from regroup.protocol.primitives import Uuid

__all__ = ["TopicsImageSource", "local_topics_image"]

TopicEntry = tuple[str, Uuid, int, bool]
"""name, topic id, partition count, internal."""


class TopicsImageSource:
    """Calling it gives the current image, rebuilt from ``topics()`` only when ``token()`` changed."""

    __slots__ = ("_image", "_token", "_token_of", "_topics", "builds")

    def __init__(self, token: Callable[[], object], topics: Callable[[], Iterable[TopicEntry]]) -> None:
        self._token_of = token
        self._topics = topics
        self._token: object = _UNSET
        self._image = TopicsImage()
        self.builds = 0
        """How many times the image was built (a test aid)."""

    def __call__(self) -> TopicsImage:
        token = self._token_of()
        if token is not self._token:
            if token != self._token:
                self._image = TopicsImage(
                    TopicImage(topic_id, name, partitions)
                    for name, topic_id, partitions, internal in self._topics()
                    if not internal
                )
                self.builds += 1
            # An equal token that is another object (a new metadata map with the same topics): remember it
            # so the next call is an identity check again.
            self._token = token
        return self._image


_UNSET = object()


def local_topics_image(logs: LogManager) -> TopicsImageSource:
    """The topics of a single node's logs."""
    return TopicsImageSource(
        lambda: logs.topics_version,
        lambda: ((t.name, t.topic_id, t.partitions, t.internal) for t in logs.topics()),
    )
