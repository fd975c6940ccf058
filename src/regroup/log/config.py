"""Log configuration: Kafka's topic-level config names, their broker-level defaults, parsing and validation.

A topic's effective config is the broker defaults (``LogDefaults``, built from ``server.properties`` names
such as ``log.segment.bytes``) overridden by the topic's own configs (``segment.bytes``), exactly as
Kafka's ``LogConfig`` merges ``KafkaConfig.extractLogConfigMap`` with the topic overrides.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Final

from regroup.protocol.errors import ErrorCode, KafkaError

__all__ = [
    "LONG_MAX",
    "TOPIC_CONFIG_NAMES",
    "FlushPolicy",
    "LogConfig",
    "LogDefaults",
    "validate_topic_configs",
]

LONG_MAX: Final = 2**63 - 1
_INT_MAX: Final = 2**31 - 1

CREATE_TIME: Final = "CreateTime"
LOG_APPEND_TIME: Final = "LogAppendTime"
_COMPRESSION_TYPES: Final = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")


# ---------------------------------------------------------------------------------------------- specs


@dataclass(frozen=True, slots=True)
class _Spec:
    kind: str  # INT, LONG, DOUBLE, BOOLEAN, STRING, LIST
    default: str
    check: Callable[[str, object], str | None] | None = None  # returns an error message or None
    broker: str | None = None  # server.properties name that supplies the default


def _at_least(low: float) -> Callable[[str, object], str | None]:
    def check(_name: str, v: object) -> str | None:
        assert isinstance(v, int | float)
        return None if v >= low else f"Value must be at least {_fmt_num(low)}"

    return check


def _between(low: float, high: float) -> Callable[[str, object], str | None]:
    def check(_name: str, v: object) -> str | None:
        assert isinstance(v, int | float)
        if v < low:
            return f"Value must be at least {_fmt_num(low)}"
        if v > high:
            return f"Value must be no more than {_fmt_num(high)}"
        return None

    return check


def _one_of(*allowed: str) -> Callable[[str, object], str | None]:
    def check(_name: str, v: object) -> str | None:
        items = v if isinstance(v, list) else [v]
        for item in items:
            if item not in allowed:
                return f"String must be one of: {', '.join(allowed)}"
        return None

    return check


def _gzip_level(_name: str, v: object) -> str | None:
    assert isinstance(v, int)
    return None if v == -1 or 1 <= v <= 9 else "Value must be between 1 and 9, or -1"


def _fmt_num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else str(v)


# Kafka 4.x topic configs (LogConfig.CONFIG) with their defaults and server.properties counterparts.
_SPECS: Final[dict[str, _Spec]] = {
    "cleanup.policy": _Spec("LIST", "delete", _one_of("compact", "delete"), "log.cleanup.policy"),
    "compression.type": _Spec("STRING", "producer", _one_of(*_COMPRESSION_TYPES), "compression.type"),
    "compression.gzip.level": _Spec("INT", "-1", _gzip_level, "compression.gzip.level"),
    "compression.lz4.level": _Spec("INT", "9", _between(1, 17), "compression.lz4.level"),
    "compression.zstd.level": _Spec("INT", "3", _between(-131072, 22), "compression.zstd.level"),
    "delete.retention.ms": _Spec("LONG", "86400000", _at_least(0), "log.cleaner.delete.retention.ms"),
    "file.delete.delay.ms": _Spec("LONG", "60000", _at_least(0), "log.segment.delete.delay.ms"),
    "flush.messages": _Spec("LONG", str(LONG_MAX), _at_least(1), "log.flush.interval.messages"),
    "flush.ms": _Spec("LONG", str(LONG_MAX), _at_least(0), None),
    "follower.replication.throttled.replicas": _Spec("LIST", ""),
    "index.interval.bytes": _Spec("INT", "4096", _at_least(0), "log.index.interval.bytes"),
    "leader.replication.throttled.replicas": _Spec("LIST", ""),
    "local.retention.bytes": _Spec("LONG", "-2", _at_least(-2)),
    "local.retention.ms": _Spec("LONG", "-2", _at_least(-2)),
    "max.compaction.lag.ms": _Spec("LONG", str(LONG_MAX), _at_least(1), "log.cleaner.max.compaction.lag.ms"),
    "max.message.bytes": _Spec("INT", "1048588", _at_least(0), "message.max.bytes"),
    "message.timestamp.after.max.ms": _Spec(
        "LONG", "3600000", _at_least(0), "log.message.timestamp.after.max.ms"
    ),
    "message.timestamp.before.max.ms": _Spec(
        "LONG", str(LONG_MAX), _at_least(0), "log.message.timestamp.before.max.ms"
    ),
    "message.timestamp.type": _Spec(
        "STRING", CREATE_TIME, _one_of(CREATE_TIME, LOG_APPEND_TIME), "log.message.timestamp.type"
    ),
    "min.cleanable.dirty.ratio": _Spec("DOUBLE", "0.5", _between(0, 1), "log.cleaner.min.cleanable.ratio"),
    "min.compaction.lag.ms": _Spec("LONG", "0", _at_least(0), "log.cleaner.min.compaction.lag.ms"),
    "min.insync.replicas": _Spec("INT", "1", _at_least(1), "min.insync.replicas"),
    "preallocate": _Spec("BOOLEAN", "false", None, "log.preallocate"),
    "remote.log.copy.disable": _Spec("BOOLEAN", "false"),
    "remote.log.delete.on.disable": _Spec("BOOLEAN", "false"),
    "remote.storage.enable": _Spec("BOOLEAN", "false"),
    "retention.bytes": _Spec("LONG", "-1", None, "log.retention.bytes"),
    "retention.ms": _Spec("LONG", "604800000", _at_least(-1), None),
    "segment.bytes": _Spec("INT", "1073741824", _at_least(1024 * 1024), "log.segment.bytes"),
    "segment.index.bytes": _Spec("INT", "10485760", _at_least(4), "log.index.size.max.bytes"),
    "segment.jitter.ms": _Spec("LONG", "0", _at_least(0), None),
    "segment.ms": _Spec("LONG", "604800000", _at_least(1), None),
    "unclean.leader.election.enable": _Spec("BOOLEAN", "false", None, "unclean.leader.election.enable"),
}
# Kafka's test-only segment.bytes override below the 1 MiB minimum (LogConfig.INTERNAL_SEGMENT_BYTES_CONFIG).
_INTERNAL_SEGMENT_BYTES: Final = "internal.segment.bytes"

TOPIC_CONFIG_NAMES: Final = frozenset(_SPECS)


def _parse(name: str, kind: str, raw: str) -> object:
    """Parse ``raw`` as Kafka's ConfigDef would; raises ValueError with Kafka's message."""
    text = raw.strip()
    if kind in ("INT", "LONG"):
        try:
            v = int(text)
        except ValueError:
            raise ValueError(f"Not a number of type {kind}") from None
        limit = _INT_MAX if kind == "INT" else LONG_MAX
        if not -limit - 1 <= v <= limit:
            raise ValueError(f"Not a number of type {kind}")
        return v
    if kind == "DOUBLE":
        try:
            d = float(text)
        except ValueError:
            raise ValueError("Not a number of type DOUBLE") from None
        if math.isnan(d):
            raise ValueError("Not a number of type DOUBLE")
        return d
    if kind == "BOOLEAN":
        if text.lower() in ("true", "false"):
            return text.lower() == "true"
        raise ValueError("Expected value to be either true or false")
    if kind == "LIST":
        return [item.strip() for item in text.split(",") if item.strip()]
    return text


def _check(name: str, raw: str) -> object:
    spec = _SPECS.get(name)
    if spec is None:
        if name == _INTERNAL_SEGMENT_BYTES:
            return _check_value(name, "INT", raw, _at_least(0))
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {name}")
    return _check_value(name, spec.kind, raw, spec.check)


def _check_value(name: str, kind: str, raw: str, check: Callable[[str, object], str | None] | None) -> object:
    try:
        value = _parse(name, kind, raw)
    except ValueError as exc:
        raise KafkaError(
            ErrorCode.INVALID_CONFIG, f"Invalid value {raw} for configuration {name}: {exc}"
        ) from None
    if check is not None and (problem := check(name, value)) is not None:
        raise KafkaError(ErrorCode.INVALID_CONFIG, f"Invalid value {raw} for configuration {name}: {problem}")
    return value


def validate_topic_configs(configs: Mapping[str, str | None]) -> dict[str, str]:
    """Check topic config overrides (names and values) as Kafka's ``LogConfig.validate`` does and return
    them without null values; raises ``KafkaError(INVALID_CONFIG)`` with Kafka's message."""
    out: dict[str, str] = {}
    for name, raw in configs.items():
        if raw is None:
            if name not in _SPECS and name != _INTERNAL_SEGMENT_BYTES:
                raise KafkaError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {name}")
            continue
        _check(name, raw)
        out[name] = raw
    return out


# ---------------------------------------------------------------------------------------------- typed configs


@dataclass(frozen=True, slots=True)
class FlushPolicy:
    """``flush.messages`` / ``flush.ms``: a partition needs an fsync once this many messages are unflushed or
    this long has passed since its last flush (Kafka's ``UnifiedLog.append`` and ``LogManager.flushDirtyLogs``
    checks). Kafka's defaults (Long.MAX for both) leave durability to replication and the page cache."""

    messages: int = LONG_MAX
    ms: int = LONG_MAX

    def due(self, unflushed_messages: int, last_flush_ms: int, now_ms: int) -> bool:
        if unflushed_messages <= 0:
            return False
        return unflushed_messages >= self.messages or now_ms - last_flush_ms >= self.ms


@dataclass(frozen=True, slots=True)
class LogConfig:
    """The typed, effective config of one partition log."""

    cleanup_policy: frozenset[str] = frozenset({"delete"})
    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    segment_index_bytes: int = 10485760
    retention_ms: int = 604800000
    retention_bytes: int = -1
    max_message_bytes: int = 1048588
    message_timestamp_type: str = CREATE_TIME
    message_timestamp_after_max_ms: int = 3600000
    index_interval_bytes: int = 4096
    delete_retention_ms: int = 86400000
    min_compaction_lag_ms: int = 0
    min_cleanable_dirty_ratio: float = 0.5
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    compression_type: str = "producer"
    producer_id_expiration_ms: int = 86400000  # broker-level producer.id.expiration.ms

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def flush_policy(self) -> FlushPolicy:
        return FlushPolicy(self.flush_messages, self.flush_ms)

    def with_overrides(self, overrides: Mapping[str, str]) -> LogConfig:
        """This config with validated topic config ``overrides`` (Kafka names) applied."""
        changes: dict[str, object] = {}
        for name, raw in overrides.items():
            target = _TOPIC_TO_FIELD.get(name)
            if target is None:
                continue
            kind = "INT" if name == _INTERNAL_SEGMENT_BYTES else _SPECS[name].kind
            value = _parse(name, kind, raw)
            changes[target] = frozenset(value) if isinstance(value, list) else value
        if _INTERNAL_SEGMENT_BYTES in overrides:
            changes["segment_bytes"] = int(overrides[_INTERNAL_SEGMENT_BYTES])
        return replace(self, **changes) if changes else self  # type: ignore[arg-type]


# Topic config name -> LogConfig field.
_TOPIC_TO_FIELD: Final[dict[str, str]] = {
    "cleanup.policy": "cleanup_policy",
    "segment.bytes": "segment_bytes",
    "segment.ms": "segment_ms",
    "segment.index.bytes": "segment_index_bytes",
    "retention.ms": "retention_ms",
    "retention.bytes": "retention_bytes",
    "max.message.bytes": "max_message_bytes",
    "message.timestamp.type": "message_timestamp_type",
    "message.timestamp.after.max.ms": "message_timestamp_after_max_ms",
    "index.interval.bytes": "index_interval_bytes",
    "delete.retention.ms": "delete_retention_ms",
    "min.compaction.lag.ms": "min_compaction_lag_ms",
    "min.cleanable.dirty.ratio": "min_cleanable_dirty_ratio",
    "flush.messages": "flush_messages",
    "flush.ms": "flush_ms",
    "compression.type": "compression_type",
}


@dataclass(frozen=True, slots=True)
class LogDefaults:
    """Broker-level log defaults (``server.properties`` names in :meth:`from_properties`). Constructing it
    directly skips Kafka's range checks, which lets tests use tiny segments."""

    segment_bytes: int = 1073741824  # log.segment.bytes
    segment_ms: int = 604800000  # log.roll.ms / log.roll.hours (168)
    retention_ms: int = 604800000  # log.retention.ms / .minutes / .hours (168); -1 = unlimited
    retention_bytes: int = -1  # log.retention.bytes
    flush_messages: int = LONG_MAX  # log.flush.interval.messages
    flush_ms: int | None = None  # log.flush.interval.ms (None: log.flush.scheduler.interval.ms, Long.MAX)
    max_message_bytes: int = 1048588  # message.max.bytes
    message_timestamp_type: str = CREATE_TIME  # log.message.timestamp.type
    message_timestamp_after_max_ms: int = 3600000  # log.message.timestamp.after.max.ms (4.0 default)
    cleanup_policy: tuple[str, ...] = ("delete",)  # log.cleanup.policy
    index_interval_bytes: int = 4096  # log.index.interval.bytes
    segment_index_bytes: int = 10485760  # log.index.size.max.bytes
    delete_retention_ms: int = 86400000  # log.cleaner.delete.retention.ms
    min_compaction_lag_ms: int = 0  # log.cleaner.min.compaction.lag.ms
    min_cleanable_dirty_ratio: float = 0.5  # log.cleaner.min.cleanable.ratio
    compression_type: str = "producer"  # compression.type
    num_partitions: int = 1  # num.partitions
    producer_id_expiration_ms: int = 86400000  # producer.id.expiration.ms
    other: Mapping[str, str] = field(
        default_factory=dict
    )  # other topic configs' broker defaults, by topic name

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> LogDefaults:
        """Read Kafka broker properties; missing ones take Kafka's defaults. Raises ``ValueError`` for values
        Kafka would refuse at startup."""

        def num(name: str) -> int | None:
            raw = props.get(name)
            if raw is None or raw.strip() == "":
                return None
            try:
                return int(raw.strip())
            except ValueError:
                raise ValueError(f"Invalid value {raw} for configuration {name}: Not a number") from None

        def pick(*candidates: tuple[str, int]) -> int | None:
            # Kafka prefers the finest unit given: log.retention.ms over .minutes over .hours.
            for name, scale in candidates:
                v = num(name)
                if v is not None:
                    return v if v < 0 else v * scale
            return None

        d = cls()
        policy = props.get("log.cleanup.policy")
        ratio = props.get("log.cleaner.min.cleanable.ratio")
        other = {
            topic_name: props[spec.broker]
            for topic_name, spec in _SPECS.items()
            if spec.broker is not None and spec.broker in props and topic_name not in _TOPIC_TO_FIELD
        }
        out = cls(
            segment_bytes=_or(num("log.segment.bytes"), d.segment_bytes),
            segment_ms=_or(pick(("log.roll.ms", 1), ("log.roll.hours", 3_600_000)), d.segment_ms),
            retention_ms=_or(
                pick(
                    ("log.retention.ms", 1),
                    ("log.retention.minutes", 60_000),
                    ("log.retention.hours", 3_600_000),
                ),
                d.retention_ms,
            ),
            retention_bytes=_or(num("log.retention.bytes"), d.retention_bytes),
            flush_messages=_or(num("log.flush.interval.messages"), d.flush_messages),
            flush_ms=num("log.flush.interval.ms"),
            max_message_bytes=_or(num("message.max.bytes"), d.max_message_bytes),
            message_timestamp_type=props.get("log.message.timestamp.type", d.message_timestamp_type).strip(),
            message_timestamp_after_max_ms=_or(
                num("log.message.timestamp.after.max.ms"), d.message_timestamp_after_max_ms
            ),
            cleanup_policy=(
                tuple(p.strip() for p in policy.split(",") if p.strip())
                if policy is not None
                else d.cleanup_policy
            ),
            index_interval_bytes=_or(num("log.index.interval.bytes"), d.index_interval_bytes),
            segment_index_bytes=_or(num("log.index.size.max.bytes"), d.segment_index_bytes),
            delete_retention_ms=_or(num("log.cleaner.delete.retention.ms"), d.delete_retention_ms),
            min_compaction_lag_ms=_or(num("log.cleaner.min.compaction.lag.ms"), d.min_compaction_lag_ms),
            min_cleanable_dirty_ratio=float(ratio) if ratio else d.min_cleanable_dirty_ratio,
            compression_type=props.get("compression.type", d.compression_type).strip(),
            num_partitions=_or(num("num.partitions"), d.num_partitions),
            producer_id_expiration_ms=_or(num("producer.id.expiration.ms"), d.producer_id_expiration_ms),
            other=other,
        )
        if out.num_partitions < 1:
            raise ValueError(f"Invalid value {out.num_partitions} for configuration num.partitions")
        for name, raw in out.topic_defaults().items():
            try:
                _check(name, raw)
            except KafkaError as exc:
                broker_name = _SPECS[name].broker or _BROKER_NAMES.get(name, name)
                raise ValueError(
                    exc.message.replace(f"configuration {name}", f"configuration {broker_name}")
                ) from None
        return out

    def topic_defaults(self) -> dict[str, str]:
        """The default value of every topic config, as strings keyed by topic config name."""
        values = {name: spec.default for name, spec in _SPECS.items()}
        values.update(self.other)
        base = self.log_config()
        for name, attr in _TOPIC_TO_FIELD.items():
            v = getattr(base, attr)
            values[name] = ",".join(sorted(v)) if isinstance(v, frozenset) else str(v)
        values["cleanup.policy"] = ",".join(self.cleanup_policy)
        return values

    def log_config(self, overrides: Mapping[str, str] | None = None) -> LogConfig:
        """The effective typed config for a topic with these (validated) ``overrides``. Broker defaults
        below Kafka's topic-level minimums (e.g. tiny test segments) are honoured as given."""
        base = LogConfig(
            cleanup_policy=frozenset(self.cleanup_policy),
            segment_bytes=self.segment_bytes,
            segment_ms=self.segment_ms,
            segment_index_bytes=self.segment_index_bytes,
            retention_ms=self.retention_ms,
            retention_bytes=self.retention_bytes,
            max_message_bytes=self.max_message_bytes,
            message_timestamp_type=self.message_timestamp_type,
            message_timestamp_after_max_ms=self.message_timestamp_after_max_ms,
            index_interval_bytes=self.index_interval_bytes,
            delete_retention_ms=self.delete_retention_ms,
            min_compaction_lag_ms=self.min_compaction_lag_ms,
            min_cleanable_dirty_ratio=self.min_cleanable_dirty_ratio,
            flush_messages=self.flush_messages,
            flush_ms=LONG_MAX if self.flush_ms is None else self.flush_ms,
            compression_type=self.compression_type,
            producer_id_expiration_ms=self.producer_id_expiration_ms,
        )
        return base.with_overrides(overrides) if overrides else base


# Topic configs whose broker default comes from a differently shaped property.
_BROKER_NAMES: Final = {
    "retention.ms": "log.retention.ms",
    "segment.ms": "log.roll.ms",
    "segment.jitter.ms": "log.roll.jitter.ms",
    "flush.ms": "log.flush.interval.ms",
}


def _or(value: int | None, default: int) -> int:
    return default if value is None else value
