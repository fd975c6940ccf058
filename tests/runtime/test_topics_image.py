"""The coordinator's topic image: rebuilt from the topic registry only when the registry changed."""

from __future__ import annotations

from pathlib import Path

from regroup.log import LogManager
from regroup.runtime.topics_image import TopicsImageSource, local_topics_image


def test_local_image_is_rebuilt_only_when_topics_change(tmp_path: Path) -> None:
    logs = LogManager(tmp_path)
    logs.load()
    logs.create_topic("__consumer_offsets", 1, internal=True)
    logs.create_topic("t", 2)
    source = local_topics_image(logs)
    image = source()
    assert image.names == {"t"}  # internal topics are left out
    t = image.by_name("t")
    assert t is not None
    assert t.num_partitions == 2
    assert source() is image
    assert source.builds == 1
    logs.create_partitions("t", 3)
    grown = source()
    assert grown is not image
    by_name = grown.by_name("t")
    assert by_name is not None
    assert (by_name.topic_id, by_name.num_partitions) == (t.topic_id, 3)
    logs.create_topic("u", 1)
    assert source().names == {"t", "u"}
    logs.delete_topic("t")
    assert source().names == {"u"}
    assert source() is source()
    assert source.builds == 4
    logs.close()


def test_an_equal_token_of_another_identity_does_not_rebuild() -> None:
    tokens = [{"t": 1}, {"t": 1}, {"t": 2}]
    current = [tokens[0]]
    source = TopicsImageSource(lambda: current[0], list)
    source()
    current[0] = tokens[1]
    source()
    source()
    assert source.builds == 1
    current[0] = tokens[2]
    source()
    assert source.builds == 2
