"""Tests for regroup.protocol.errors against known Kafka values and kafka-python's table."""

from __future__ import annotations

import inspect
import pickle
from typing import Any

import pytest

from regroup.protocol.errors import ErrorCode, KafkaError


def test_codes_are_unique_and_contiguous() -> None:
    values = [member.value for member in ErrorCode]
    assert len(values) == len(set(values))
    # IntEnum would silently turn a duplicated value into an alias; make sure none exist.
    assert len(ErrorCode.__members__) == len(values)
    assert sorted(values) == list(range(-1, max(values) + 1))


def test_every_member_has_a_message() -> None:
    for member in ErrorCode:
        if member is ErrorCode.NONE:
            assert member.message == ""
        else:
            assert member.message, member.name


@pytest.mark.parametrize(
    ("member", "code", "retriable"),
    [
        (ErrorCode.UNKNOWN_SERVER_ERROR, -1, False),
        (ErrorCode.NONE, 0, False),
        (ErrorCode.OFFSET_OUT_OF_RANGE, 1, False),
        (ErrorCode.CORRUPT_MESSAGE, 2, True),
        (ErrorCode.NOT_LEADER_OR_FOLLOWER, 6, True),
        (ErrorCode.REQUEST_TIMED_OUT, 7, True),
        (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, 14, True),
        (ErrorCode.COORDINATOR_NOT_AVAILABLE, 15, True),
        (ErrorCode.NOT_COORDINATOR, 16, True),
        (ErrorCode.ILLEGAL_GENERATION, 22, False),
        (ErrorCode.INCONSISTENT_GROUP_PROTOCOL, 23, False),
        (ErrorCode.INVALID_GROUP_ID, 24, False),
        (ErrorCode.UNKNOWN_MEMBER_ID, 25, False),
        (ErrorCode.INVALID_SESSION_TIMEOUT, 26, False),
        # RebalanceInProgressException extends ApiException, not RetriableException.
        (ErrorCode.REBALANCE_IN_PROGRESS, 27, False),
        (ErrorCode.GROUP_AUTHORIZATION_FAILED, 30, False),
        (ErrorCode.UNSUPPORTED_VERSION, 35, False),
        (ErrorCode.CONCURRENT_TRANSACTIONS, 51, True),
        (ErrorCode.NON_EMPTY_GROUP, 68, False),
        (ErrorCode.GROUP_ID_NOT_FOUND, 69, False),
        (ErrorCode.MEMBER_ID_REQUIRED, 79, False),
        (ErrorCode.GROUP_MAX_SIZE_REACHED, 81, False),
        (ErrorCode.FENCED_INSTANCE_ID, 82, False),
        (ErrorCode.UNSTABLE_OFFSET_COMMIT, 88, True),
        (ErrorCode.UNKNOWN_TOPIC_ID, 100, True),
        (ErrorCode.FENCED_MEMBER_EPOCH, 110, False),
        (ErrorCode.UNRELEASED_INSTANCE_ID, 111, False),
        (ErrorCode.UNSUPPORTED_ASSIGNOR, 112, False),
        (ErrorCode.STALE_MEMBER_EPOCH, 113, False),
        (ErrorCode.TRANSACTION_ABORTABLE, 120, False),
        (ErrorCode.INVALID_REGULAR_EXPRESSION, 128, False),
        (ErrorCode.REBOOTSTRAP_REQUIRED, 129, False),
        (ErrorCode.STREAMS_INVALID_TOPOLOGY, 130, False),
        (ErrorCode.STREAMS_INVALID_TOPOLOGY_EPOCH, 131, False),
        (ErrorCode.STREAMS_TOPOLOGY_FENCED, 132, False),
        (ErrorCode.SHARE_SESSION_LIMIT_REACHED, 133, True),
        (ErrorCode.CONTROLLER_ID_NOT_REGISTERED, 136, False),
    ],
)
def test_known_values(member: ErrorCode, code: int, retriable: bool) -> None:
    assert member == code
    assert ErrorCode(code) is member
    assert member.retriable is retriable


def test_messages() -> None:
    assert ErrorCode.REBALANCE_IN_PROGRESS.message == "The group is rebalancing, so a rejoin is needed."
    assert ErrorCode.UNKNOWN_MEMBER_ID.message == "The coordinator is not aware of this member."
    assert ErrorCode.UNKNOWN_SERVER_ERROR.message == (
        "The server experienced an unexpected error when processing the request."
    )


def test_from_code() -> None:
    assert ErrorCode.from_code(27) is ErrorCode.REBALANCE_IN_PROGRESS
    assert ErrorCode.from_code(0) is ErrorCode.NONE
    assert ErrorCode.from_code(-1) is ErrorCode.UNKNOWN_SERVER_ERROR
    assert ErrorCode.from_code(9999) is ErrorCode.UNKNOWN_SERVER_ERROR
    assert ErrorCode.from_code(-2) is ErrorCode.UNKNOWN_SERVER_ERROR


def test_kafka_error() -> None:
    err = KafkaError(ErrorCode.REBALANCE_IN_PROGRESS)
    assert str(err) == "REBALANCE_IN_PROGRESS (27): The group is rebalancing, so a rejoin is needed."
    assert err.code is ErrorCode.REBALANCE_IN_PROGRESS
    assert not err.retriable

    custom = KafkaError(ErrorCode.NOT_COORDINATOR, "coordinator moved")
    assert str(custom) == "NOT_COORDINATOR (16): coordinator moved"
    assert custom.message == "coordinator moved"
    assert custom.retriable

    with pytest.raises(KafkaError) as info:
        raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID)
    assert info.value.code == 25


def test_kafka_error_pickles() -> None:
    err = pickle.loads(pickle.dumps(KafkaError(ErrorCode.ILLEGAL_GENERATION, "gen 3 != 4")))
    assert err.code is ErrorCode.ILLEGAL_GENERATION
    assert str(err) == "ILLEGAL_GENERATION (22): gen 3 != 4"


def test_kafka_error_rejects_none() -> None:
    with pytest.raises(ValueError, match="NONE"):
        KafkaError(ErrorCode.NONE)


# kafka-python 3.0.12 still uses pre-rename names for a few codes; the Kafka names are ours.
KAFKA_PYTHON_NAMES = {
    -1: "UNKNOWN",  # Kafka: UNKNOWN_SERVER_ERROR
    0: "NO_ERROR",  # Kafka: NONE
    6: "NOT_LEADER_FOR_PARTITION",  # Kafka: NOT_LEADER_OR_FOLLOWER (renamed in 2.6)
    10: "MESSAGE_SIZE_TOO_LARGE",  # Kafka: MESSAGE_TOO_LARGE
    17: "INVALID_TOPIC",  # Kafka: INVALID_TOPIC_EXCEPTION
    39: "INVALID_REPLICATION_ASSIGNMENT",  # Kafka: INVALID_REPLICA_ASSIGNMENT
}

# Where kafka-python's retriable flag disagrees with Kafka's class hierarchy.
# CorruptRecordException extends RetriableException in Kafka; kafka-python marks it non-retriable.
KAFKA_PYTHON_RETRIABLE = {
    2: False,
}


def _kafka_python_errors() -> dict[int, list[Any]]:
    kafka_errors = pytest.importorskip("kafka.errors")
    by_code: dict[int, list[Any]] = {}
    for _, cls in inspect.getmembers(kafka_errors, inspect.isclass):
        errno = getattr(cls, "errno", None)
        if issubclass(cls, kafka_errors.BrokerResponseError) and isinstance(errno, int):
            by_code.setdefault(errno, []).append(cls)
    return by_code


def test_matches_kafka_python() -> None:
    by_code = _kafka_python_errors()
    assert by_code
    name_mismatches = []
    retriable_mismatches = []
    for code, classes in sorted(by_code.items()):
        assert ErrorCode.from_code(code) == code, f"kafka-python knows {code}, we do not"
        ours = ErrorCode(code)
        for cls in classes:
            theirs = cls.message
            if theirs != KAFKA_PYTHON_NAMES.get(code, ours.name):
                name_mismatches.append((code, theirs, ours.name))
            if bool(cls.retriable) != KAFKA_PYTHON_RETRIABLE.get(code, ours.retriable):
                retriable_mismatches.append((code, ours.name, cls.retriable, ours.retriable))
    assert name_mismatches == []
    assert retriable_mismatches == []


def test_documented_kafka_python_differences_still_exist() -> None:
    by_code = _kafka_python_errors()
    for code, name in KAFKA_PYTHON_NAMES.items():
        assert name in {cls.message for cls in by_code[code]}
        assert name != ErrorCode(code).name
    for code, retriable in KAFKA_PYTHON_RETRIABLE.items():
        assert {bool(cls.retriable) for cls in by_code[code]} == {retriable}
        assert retriable != ErrorCode(code).retriable
