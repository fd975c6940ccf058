"""Java behaviour reproduced for output fidelity; expected values come from a JVM (Java 17, Kafka 4.3.1
jars)."""

from __future__ import annotations

import pytest

from regroup.admin.javacompat import (
    JavaParseError,
    exception_class,
    exception_string,
    hashmap_order,
    java_split,
    parse_datetime,
    parse_duration_ms,
    topic_partition_hash,
)
from regroup.client.types import TopicPartition
from regroup.protocol.errors import ErrorCode
from regroup.protocol.javahash import java_string_hash


def test_topic_partition_hash_matches_java() -> None:
    assert topic_partition_hash(TopicPartition("t1", 0)) == 4606
    assert topic_partition_hash(TopicPartition("t1", 2)) == 4668


def test_hashmap_order_matches_what_kafka_printed() -> None:
    # kafka-consumer-groups.sh --reset-offsets printed t1-2, t1-1, t1-0 and, for two topics, t1-1, t1-0, t2-0.
    tps = [TopicPartition("t1", p) for p in range(3)]
    assert hashmap_order(tps, topic_partition_hash) == tps[::-1]
    mixed = [TopicPartition("t2", 0), TopicPartition("t1", 0), TopicPartition("t1", 1)]
    assert hashmap_order(mixed, topic_partition_hash) == [mixed[2], mixed[1], mixed[0]]
    # --list of these groups, and --delete's success and failure lists.
    listed = ["g-empty", "a-group", "my group", "g-848", "g-stable"]
    assert hashmap_order(listed, java_string_hash) == ["a-group", "my group", "g-848", "g-empty", "g-stable"]
    assert hashmap_order(["g-stable", "nope"], java_string_hash) == ["nope", "g-stable"]


def test_hashmap_copy_is_sized_for_its_contents() -> None:
    # describedGroups() is a HashMap copy: 5 groups fit a table of 8, which changes the order
    # (Kafka reset g-empty first for these groups).
    groups = ["a-group", "my group", "g-848", "g-empty", "g-stable"]
    assert hashmap_order(groups, java_string_hash, copied=True)[0] == "g-empty"
    assert hashmap_order([], java_string_hash, copied=True) == []


def test_hashmap_grows_past_three_quarters() -> None:
    keys = [f"k{i}" for i in range(13)]  # 13 > 12 = 16 * 3/4: a 32-slot table
    order = hashmap_order(keys, java_string_hash)
    assert order == sorted(keys, key=lambda k: ((h := java_string_hash(k) & 0xFFFFFFFF) ^ (h >> 16)) & 31)


def test_java_split_drops_trailing_empty_strings() -> None:
    assert java_split("t1:", ":") == ["t1"]
    assert java_split(":0", ":") == ["", "0"]
    assert java_split("0,,1,,", ",") == ["0", "", "1"]
    assert java_split("", ",") == [""]


# (input, Utils.getDateTime result or the ParseException message), from Java 17.
DATETIMES = [
    ("2023-11-14T22:13:25.000", 1700000005000),
    ("2023-11-14T22:13:25.5", 1700000005005),
    ("2023-11-14T22:13:25.000+01:00", 1699996405000),
    ("2023-11-14T22:13:25.000+0130", 1699996405000),
    ("2023-11-14T22:13:25.000-05", 1700018005000),
    ("2023-11-14T22:13:25.000Z", 1700000005000),
    ("2023-11-14T22:13:25", 'Unparseable date: "2023-11-14T22:13:25Z"'),
    ("2023-11-14", "Error parsing timestamp. It does not contain a 'T' according to ISO8601 format"),
    ("2023-13-14T22:13:25.000", 'Unparseable date: "2023-13-14T22:13:25.000Z"'),
    ("2023-02-29T00:00:00.000", 'Unparseable date: "2023-02-29T00:00:00.000Z"'),
    ("2024-02-29T00:00:00.000", 1709164800000),
    ("2023-11-14T24:00:00.000", 'Unparseable date: "2023-11-14T24:00:00.000Z"'),
    ("2023-1-4T2:3:4.005", 1672797784005),
    ("2023-11-14T22:13:25.1234", 'Unparseable date: "2023-11-14T22:13:25.1234Z"'),
    ("1969-12-31T23:59:59.999", -1),
    ("0001-01-01T00:00:00.000", -62135769600000),
    ("2023-11-14T22:13:25.000+25:00", 'Unparseable date: "2023-11-14T22:13:25.000+25:00"'),
    ("2023-11-14Tfoo", 'Unparseable date: "2023-11-14TfooZ"'),
    ("2023-11-14T22:13:25.000+01:00:00", 1699996405000),
]


@pytest.mark.parametrize(("text", "expected"), DATETIMES)
def test_parse_datetime_like_kafka(text: str, expected: int | str) -> None:
    if isinstance(expected, int):
        assert parse_datetime(text) == expected
    else:
        with pytest.raises(JavaParseError) as info:
            parse_datetime(text)
        assert str(info.value) == expected


# (input, Duration.parse(input).toMillis() or None for DateTimeParseException), from Java 17.
DURATIONS = [
    ("PT1H", 3600000),
    ("P1D", 86400000),
    ("PT-1.5S", -1500),
    ("-PT1M", -60000),
    ("P1DT2H3M4.005S", 93784005),
    ("PT", None),
    ("P", None),
    ("PT1.S", 1000),
    ("pt1h", 3600000),
    ("PT0.0001S", 0),
    ("-PT0.0001S", 0),
    ("P-1D", -86400000),
    ("1H", None),
]


@pytest.mark.parametrize(("text", "expected"), DURATIONS)
def test_parse_duration_like_java(text: str, expected: int | None) -> None:
    if expected is None:
        with pytest.raises(JavaParseError, match="Text cannot be parsed to a Duration"):
            parse_duration_ms(text)
    else:
        assert parse_duration_ms(text) == expected


def test_exception_names() -> None:
    assert (
        exception_class(ErrorCode.GROUP_ID_NOT_FOUND)
        == "org.apache.kafka.common.errors.GroupIdNotFoundException"
    )
    assert exception_string(ErrorCode.NON_EMPTY_GROUP) == (
        "org.apache.kafka.common.errors.GroupNotEmptyException: The group is not empty."
    )
    assert exception_string(ErrorCode.REQUEST_TIMED_OUT, "late").startswith(
        "org.apache.kafka.common.errors.TimeoutException: late"
    )
    assert exception_class(ErrorCode.GROUP_AUTHORIZATION_FAILED).endswith(".GroupAuthorizationException")
