"""Java's String.hashCode and Kafka's group → partition mapping (``Utils.abs(hash) % n``)."""

from __future__ import annotations

import pytest

from regroup.protocol.javahash import group_partition, java_string_hash


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("a", 97),
        ("hello", 99162322),
        ("Hello World", -862545276),  # int32 overflow
        ("polygenelubricants", -(2**31)),  # Integer.MIN_VALUE
        ("\U0001f600", 0xD83D * 31 + 0xDE00),  # UTF-16 code units: a surrogate pair
        ("Aa", 2112),
        ("BB", 2112),
    ],
)
def test_java_string_hash(text: str, expected: int) -> None:
    assert java_string_hash(text) == expected


def test_group_partition() -> None:
    assert group_partition("polygenelubricants", 50) == 0  # abs(MIN_VALUE) is taken as 0
    assert group_partition("Hello World", 50) == 862545276 % 50
    assert group_partition("Aa", 50) == group_partition("BB", 50) == 2112 % 50
    assert group_partition("", 7) == 0


def test_java_string_hash_of_group_and_topic_names() -> None:
    assert java_string_hash("t1") == 3645
    assert java_string_hash("g-stable") == -488701087
