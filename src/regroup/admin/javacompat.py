"""The Java behaviour kafka-consumer-groups.sh output depends on, reproduced exactly.

Kafka's tool prints several maps in ``java.util.HashMap`` iteration order (reset plans, CSV exports,
delete results), names exceptions by their Java class, parses ``--to-datetime`` with
``SimpleDateFormat`` and ``--by-duration`` with ``java.time.Duration.parse``. Matching its output means
matching those too.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Callable, Iterable
from typing import TypeVar

from regroup.client.types import TopicPartition
from regroup.protocol.errors import ErrorCode
from regroup.protocol.javahash import java_string_hash

__all__ = [
    "JavaParseError",
    "exception_class",
    "exception_string",
    "hashmap_order",
    "java_split",
    "parse_datetime",
    "parse_duration_ms",
    "topic_partition_hash",
]

K = TypeVar("K")

_ERRORS_PACKAGE = "org.apache.kafka.common.errors."

# Exception classes whose names are not the CamelCase of the error name + "Exception"
# (from org.apache.kafka.common.protocol.Errors, Kafka 4.3).
_EXCEPTION_NAMES: dict[ErrorCode, str] = {
    ErrorCode.UNKNOWN_SERVER_ERROR: "UnknownServerException",
    ErrorCode.CORRUPT_MESSAGE: "CorruptRecordException",
    ErrorCode.REQUEST_TIMED_OUT: "TimeoutException",
    ErrorCode.MESSAGE_TOO_LARGE: "RecordTooLargeException",
    ErrorCode.STALE_CONTROLLER_EPOCH: "ControllerMovedException",
    ErrorCode.OFFSET_METADATA_TOO_LARGE: "OffsetMetadataTooLarge",
    ErrorCode.NETWORK_EXCEPTION: "NetworkException",
    ErrorCode.INVALID_TOPIC_EXCEPTION: "InvalidTopicException",
    ErrorCode.RECORD_LIST_TOO_LARGE: "RecordBatchTooLargeException",
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: "TopicAuthorizationException",
    ErrorCode.GROUP_AUTHORIZATION_FAILED: "GroupAuthorizationException",
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: "ClusterAuthorizationException",
    ErrorCode.TOPIC_ALREADY_EXISTS: "TopicExistsException",
    ErrorCode.INVALID_CONFIG: "InvalidConfigurationException",
    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER: "OutOfOrderSequenceException",
    ErrorCode.DUPLICATE_SEQUENCE_NUMBER: "DuplicateSequenceException",
    ErrorCode.INVALID_PRODUCER_ID_MAPPING: "InvalidPidMappingException",
    ErrorCode.INVALID_TRANSACTION_TIMEOUT: "InvalidTxnTimeoutException",
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "TransactionalIdAuthorizationException",
    ErrorCode.KAFKA_STORAGE_ERROR: "KafkaStorageException",
    ErrorCode.SASL_AUTHENTICATION_FAILED: "SaslAuthenticationException",
    ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED: "DelegationTokenDisabledException",
    ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED: "UnsupportedByAuthenticationException",
    ErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED: "DelegationTokenAuthorizationException",
    ErrorCode.NON_EMPTY_GROUP: "GroupNotEmptyException",
    ErrorCode.PRINCIPAL_DESERIALIZATION_FAILURE: "PrincipalDeserializationException",
    ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR: "FetchSessionTopicIdException",
    ErrorCode.INVALID_REGULAR_EXPRESSION: "InvalidRegularExpression",
}


def exception_class(code: ErrorCode) -> str:
    """The fully qualified Java exception class Kafka's clients raise for ``code``."""
    name = _EXCEPTION_NAMES.get(code)
    if name is None:
        name = "".join(part.capitalize() for part in code.name.split("_")) + "Exception"
    return _ERRORS_PACKAGE + name


def exception_string(code: ErrorCode, message: str | None = None) -> str:
    """``Throwable.toString()`` of that exception: ``class: message``."""
    return f"{exception_class(code)}: {code.message if message is None else message}"


# ------------------------------------------------------------------------------------ hashing


def _int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - 0x1_0000_0000 if value & 0x8000_0000 else value


def topic_partition_hash(tp: TopicPartition) -> int:
    """``TopicPartition.hashCode()``."""
    return _int32(31 * (31 + tp.partition) + java_string_hash(tp.topic))


def hashmap_order(keys: Iterable[K], hash_of: Callable[[K], int], *, copied: bool = False) -> list[K]:
    """The iteration order of a ``java.util.HashMap`` filled by ``put`` in the order of ``keys``.

    Buckets are visited in index order; a bucket keeps insertion order (resizes split buckets without
    reordering them). A map filled by ``put`` starts with 16 slots and doubles whenever it is more than
    3/4 full; one made by the copy constructor (``copied``) is sized for its contents up front.
    """
    unique = list(dict.fromkeys(keys))
    if copied and unique:
        # HashMap(Map): tableSizeFor((int) (size / 0.75f + 1.0f))
        wanted = int(len(unique) / 0.75 + 1.0)
        capacity = 1
        while capacity < wanted:
            capacity *= 2
    else:
        capacity = 16
        while len(unique) > capacity * 3 // 4:
            capacity *= 2

    def bucket(key: K) -> int:
        h = hash_of(key) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (capacity - 1)

    return sorted(unique, key=bucket)


def java_split(s: str, sep: str) -> list[str]:
    """``String.split`` with a literal one-character separator: trailing empty strings are removed."""
    parts = s.split(sep)
    while parts and parts[-1] == "":
        parts.pop()
    return parts if s else [""]


# ------------------------------------------------------------------------------------ time parsing


class JavaParseError(ValueError):
    """A --to-datetime / --by-duration value Kafka's tool would reject, with Kafka's message."""


_DATETIME = re.compile(r"(\d+)-(\d+)-(\d+)T(\d+):(\d+):(\d+)\.(\d+)(Z|[+-]\d{2}(?::\d{2})?)")
# The day the Gregorian calendar replaced the Julian one in java.util.GregorianCalendar.
_GREGORIAN_CUTOVER = (1582, 10, 15)


def parse_datetime(text: str) -> int:
    """Milliseconds since the epoch for ``YYYY-MM-DDTHH:mm:SS.sss[zone]`` as Kafka's ``Utils.getDateTime``.

    Without a zone (no ``+``, ``-`` or ``Z`` after the ``T``) the time is UTC. The zone is ``Z``, ``±hh``
    or ``±hh:mm``. As with Java's non-lenient ``SimpleDateFormat``, the fraction is a count of
    milliseconds (``.5`` is 5 ms), out-of-range fields are errors, text after the zone is ignored (so
    ``+0130`` means ``+01``) and dates before 1582-10-15 are Julian.
    """
    parts = java_split(text, "T")
    if len(parts) < 2:
        raise JavaParseError("Error parsing timestamp. It does not contain a 'T' according to ISO8601 format")
    if not any(c in parts[1] for c in "+-Z"):
        text += "Z"
    error = JavaParseError(f'Unparseable date: "{text}"')
    m = _DATETIME.match(text)
    if m is None:
        raise error
    year, month, day, hour, minute, second, millis = (int(g) for g in m.groups()[:7])
    date = (year, month, day)
    julian = date < _GREGORIAN_CUTOVER
    if not (1 <= month <= 12 and 1 <= day <= _days_in_month(year, month, julian)):
        raise error
    if (1582, 10, 5) <= date < _GREGORIAN_CUTOVER or hour > 23 or minute > 59 or second > 59 or millis > 999:
        raise error
    zone = m.group(8)
    offset_minutes = 0
    if zone != "Z":
        zone_hours, zone_minutes = int(zone[1:3]), int(zone[4:6] or 0)
        if zone_minutes > 59:
            zone_minutes = 0  # "±hh:mm" failed; the one-letter pattern then reads "±hh" alone
        if zone_hours > 23:
            raise error
        offset_minutes = (zone_hours * 60 + zone_minutes) * (1 if zone[0] == "+" else -1)
    days = _julian_days(year, month, day) if julian else _gregorian_days(year, month, day)
    seconds = days * 86400 + hour * 3600 + minute * 60 + second - offset_minutes * 60
    return seconds * 1000 + millis


def _days_in_month(year: int, month: int, julian: bool) -> int:
    if month == 2:
        leap = year % 4 == 0 if julian else calendar.isleap(year)
        return 29 if leap else 28
    return 30 if month in (4, 6, 9, 11) else 31


def _gregorian_days(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 in the proleptic Gregorian calendar."""
    year -= month <= 2
    era = year // 400
    yoe = year - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def _julian_days(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 for a Julian-calendar date (via the Julian day number)."""
    a = (14 - month) // 12
    y = year + 4800 - a
    m = month + 12 * a - 3
    jdn = day + (153 * m + 2) // 5 + 365 * y + y // 4 - 32083
    return jdn - 2440588


_DURATION = re.compile(
    r"([-+]?)P(?:([-+]?[0-9]+)D)?"
    r"(T(?:([-+]?[0-9]+)H)?(?:([-+]?[0-9]+)M)?(?:([-+]?[0-9]+)(?:[.,]([0-9]{0,9}))?S)?)?",
    re.IGNORECASE,
)


def parse_duration_ms(text: str) -> int:
    """``java.time.Duration.parse(text).toMillis()`` for ``PnDTnHnMn.nS`` (signs allowed per part)."""
    m = _DURATION.fullmatch(text)
    has_time = m is not None and any(m.group(i) is not None for i in (4, 5, 6))
    if m is None or (m.group(3) is not None and not has_time) or (m.group(2) is None and not has_time):
        raise JavaParseError("Text cannot be parsed to a Duration")
    days, hours, minutes, seconds = (int(m.group(i) or 0) for i in (2, 4, 5, 6))
    fraction = m.group(7) or ""
    nanos = int(fraction.ljust(9, "0")) if fraction else 0
    if m.group(6) and m.group(6).startswith("-"):
        nanos = -nanos
    total_nanos = ((days * 86400 + hours * 3600 + minutes * 60 + seconds) * 1_000_000_000) + nanos
    if m.group(1) == "-":
        total_nanos = -total_nanos
    # Duration.toMillis() truncates toward zero.
    return -(-total_nanos // 1_000_000) if total_nanos < 0 else total_nanos // 1_000_000
