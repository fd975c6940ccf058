"""The consumer-group metadata hash is Kafka's (KIP-1101, Utils ``computeTopicHash``/``computeGroupHash``):
the expected values were computed with hash4j 0.22.0 (the jar Kafka 4.3.1 ships) feeding the same inputs as
Kafka's ``Utils``."""

from __future__ import annotations

import uuid

from regroup.group.topics_image import TopicImage, TopicsImage

ID = uuid.UUID("6f8e0bd2-3c1d-4d0e-9a7b-1234567890ab")


def test_topic_hash_is_kafkas() -> None:
    # non-ASCII name (a UTF-16 surrogate pair included), no racks
    assert TopicImage(ID, "tüpic-😀", 3).topic_hash() == -5893292778657936827
    # racks are sorted per partition and written as length + string
    assert TopicImage(ID, "t", 2, (("rb", "ra"), ("ra", "rb"))).topic_hash() == 6489285288263605606


def test_group_hash_is_kafkas() -> None:
    image = TopicsImage([TopicImage(ID, "tüpic-😀", 3)])
    assert image.group_hash(["tüpic-😀", "missing"]) == -5119079841204552166
    racks = TopicsImage([TopicImage(ID, "t", 2, (("rb", "ra"), ("ra", "rb")))])
    assert racks.group_hash(["t"]) == -3628606410495932908
    assert image.group_hash(["missing"]) == 0
    assert image.group_hash([]) == 0
