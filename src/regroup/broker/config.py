"""Broker settings: a typed registry with Kafka's names and defaults, and how they are resolved.

Sources, lowest precedence first: built-in defaults < ``server.properties`` < ``REGROUP_*`` environment
variables < ``--override key=value``. The environment mapping follows Kafka's Docker image: strip the
prefix, lower-case, then ``___`` → ``-``, ``__`` → ``_``, ``_`` → ``.`` (``REGROUP_LOG_DIRS`` → ``log.dirs``).
Unknown keys are warned about and ignored (as Kafka does); an invalid value of a known key is a
:class:`ConfigError` naming the key. Topic-level settings (``retention.ms`` …) live in a second registry
whose entries name the broker setting that supplies their default.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from regroup.properties import parse_properties

__all__ = [
    "BROKER_CONFIGS",
    "TOPIC_CONFIGS",
    "BrokerConfig",
    "ConfigDef",
    "ConfigError",
    "ConfigSource",
    "ConfigType",
    "Listener",
    "TopicConfigInfo",
    "broker_synonyms",
    "env_to_key",
    "key_to_env",
    "load_file",
    "render",
]

INT32_MAX: Final = 2**31 - 1
INT64_MAX: Final = 2**63 - 1
ENV_PREFIX: Final = "REGROUP_"
# Environment variables with the prefix that belong to regroup's tooling, not to the broker's settings.
_ENV_RESERVED: Final = ("REGROUP_KAFKA_", "REGROUP_TEST_")


class ConfigError(ValueError):
    """An invalid value for a known setting (the message names the key), or an impossible combination."""


class ConfigType(enum.IntEnum):
    """Kafka's ``ConfigDef.Type``, numbered as DescribeConfigs v3+ reports it (``config_type``)."""

    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class ConfigSource(enum.IntEnum):
    """``DescribeConfigsResponse`` config sources."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


Validator = Callable[[Any], str | None]  # returns an error message, or None when valid


@dataclass(frozen=True, slots=True)
class ConfigDef:
    """One setting: its name, type, default (already parsed; ``None`` = no default), validator and doc.

    ``applies`` is False for settings accepted for compatibility with Kafka's ``server.properties`` that have
    no effect on a single-node regroup broker.
    """

    name: str
    type: ConfigType
    default: Any
    doc: str
    validator: Validator | None = None
    applies: bool = True
    sensitive: bool = False

    def parse(self, raw: str) -> Any:
        """Parse and validate a textual value; raises :class:`ConfigError` naming the key."""
        value = _parse_typed(self.name, self.type, raw)
        self.validate(value, raw)
        return value

    def validate(self, value: Any, raw: object = None) -> None:
        if self.validator is not None and value is not None:
            problem = self.validator(value)
            if problem is not None:
                shown = raw if raw is not None else render(value)
                raise ConfigError(f"Invalid value {shown} for configuration {self.name}: {problem}")


def _parse_typed(name: str, typ: ConfigType, raw: str) -> Any:
    text = raw.strip()

    def bad(what: str) -> ConfigError:
        return ConfigError(f"Invalid value {raw} for configuration {name}: {what}")

    if typ is ConfigType.BOOLEAN:
        lowered = text.lower()
        if lowered == "true":
            return True
        if lowered == "false":
            return False
        raise bad("Expected value to be either true or false")
    if typ in (ConfigType.INT, ConfigType.SHORT, ConfigType.LONG):
        try:
            number = int(text, 10)
        except ValueError:
            raise bad(f"Not a number of type {typ.name}") from None
        bits = {ConfigType.SHORT: 15, ConfigType.INT: 31, ConfigType.LONG: 63}[typ]
        if not -(2**bits) <= number < 2**bits:
            raise bad(f"Not a number of type {typ.name}")
        return number
    if typ is ConfigType.DOUBLE:
        try:
            return float(text)
        except ValueError:
            raise bad("Not a number of type DOUBLE") from None
    if typ is ConfigType.LIST:
        return [item.strip() for item in text.split(",")] if text else []
    return text


def render(value: Any) -> str | None:
    """A parsed value as Kafka shows it in DescribeConfigs and logs."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


# ---------------------------------------------------------------------------------------------- validators


def at_least(minimum: float) -> Validator:
    def check(value: Any) -> str | None:
        return None if value >= minimum else f"Value must be at least {_num(minimum)}"

    return check


def between(low: float, high: float) -> Validator:
    def check(value: Any) -> str | None:
        return None if low <= value <= high else f"Value must be between {_num(low)} and {_num(high)}"

    return check


def one_of(*choices: str, case_sensitive: bool = True) -> Validator:
    def check(value: Any) -> str | None:
        items = value if isinstance(value, list) else [value]
        for item in items:
            ok = item in choices if case_sensitive else item.lower() in {c.lower() for c in choices}
            if not ok:
                return f"String must be one of: {', '.join(choices)}"
        return None

    return check


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _non_empty_list(value: Any) -> str | None:
    return None if value else "Empty list"


_LISTENER_RE: Final = re.compile(r"^([A-Za-z0-9_.-]+)://(\[[0-9A-Fa-f:.]+\]|[^:/\[\]]*):(-?\d+)$")


@dataclass(frozen=True, slots=True)
class Listener:
    """One ``NAME://host:port`` endpoint; an empty host binds every interface."""

    name: str
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


def parse_listeners(key: str, items: Iterable[str]) -> list[Listener]:
    listeners: list[Listener] = []
    for item in items:
        match = _LISTENER_RE.match(item.strip())
        if match is None:
            raise ConfigError(
                f"Invalid value {item} for configuration {key}: expected NAME://host:port, "
                "e.g. PLAINTEXT://127.0.0.1:9092"
            )
        name, host, port = match.group(1).upper(), match.group(2).strip("[]"), int(match.group(3))
        if not 0 <= port <= 65535:
            raise ConfigError(f"Invalid value {item} for configuration {key}: port out of range")
        if any(existing.name == name for existing in listeners):
            raise ConfigError(f"Invalid value {item} for configuration {key}: listener {name} repeats")
        listeners.append(Listener(name, host, port))
    return listeners


def _listeners_validator(value: Any) -> str | None:
    try:
        parse_listeners("listeners", value)
    except ConfigError as exc:
        return str(exc).split(": ", 1)[-1]
    return None


def parse_admin_listener(value: str) -> tuple[str, int] | None:
    """``admin.listener``: ``host:port`` (``[v6]:port``), or None when empty (disabled)."""
    text = value.strip()
    if not text:
        return None
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError("expected host:port (e.g. 127.0.0.1:9644), or an empty value to disable")
    return host.strip("[]"), int(port)


def _admin_listener_validator(value: Any) -> str | None:
    try:
        parse_admin_listener(str(value))
    except ValueError as exc:
        return str(exc)
    return None


# ---------------------------------------------------------------------------------------------- registries

_B = ConfigType
_DELETE_COMPACT = one_of("delete", "compact")
_COMPRESSION = one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
_TIMESTAMP_TYPE = one_of("CreateTime", "LogAppendTime")


def _defs(*defs: ConfigDef) -> dict[str, ConfigDef]:
    table: dict[str, ConfigDef] = {}
    for d in defs:
        if d.name in table:
            raise RuntimeError(f"duplicate config definition {d.name}")
        if d.default is not None:
            d.validate(d.default)
        table[d.name] = d
    return table


BROKER_CONFIGS: Final[dict[str, ConfigDef]] = _defs(
    # -------------------------------------------------------------------------------- server basics
    ConfigDef(
        "node.id",
        _B.INT,
        1,
        "The node id of this broker, stored in meta.properties; it must match the data directory.",
        at_least(0),
    ),
    ConfigDef(
        "cluster.id",
        _B.STRING,
        None,
        "The cluster id. When unset it is generated once and persisted in <log.dirs>/meta.properties; "
        "when set it must match the stored one.",
    ),
    ConfigDef(
        "listeners",
        _B.LIST,
        ["PLAINTEXT://127.0.0.1:9092"],
        "Comma-separated NAME://host:port endpoints to listen on. An empty host binds all interfaces; "
        "port 0 picks a free port. Only PLAINTEXT listeners are supported.",
        _listeners_validator,
    ),
    ConfigDef(
        "advertised.listeners",
        _B.LIST,
        None,
        "Endpoints given to clients in Metadata, matched to listeners by name. Defaults to the listener "
        "itself; a listener bound to all interfaces advertises the address the client connected to.",
        _listeners_validator,
    ),
    ConfigDef(
        "listener.security.protocol.map",
        _B.STRING,
        "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
        "Listener name to security protocol. regroup serves PLAINTEXT only.",
    ),
    ConfigDef(
        "controller.listener.names",
        _B.LIST,
        None,
        "Listeners used by a KRaft controller. regroup has no controller quorum: these listeners are "
        "skipped.",
    ),
    ConfigDef(
        "log.dirs",
        _B.LIST,
        None,
        "The data directory (regroup uses a single one). Takes precedence over log.dir.",
        _non_empty_list,
    ),
    ConfigDef("log.dir", _B.STRING, "./regroup-data", "The data directory, used when log.dirs is unset."),
    ConfigDef(
        "delete.topic.enable",
        _B.BOOLEAN,
        True,
        "Whether DeleteTopics may delete topics.",
    ),
    ConfigDef(
        "auto.create.topics.enable",
        _B.BOOLEAN,
        True,
        "Create a topic with num.partitions partitions when a client asks Metadata for an unknown topic "
        "and allows auto-creation (Produce never creates topics, as in Kafka 4).",
    ),
    ConfigDef("num.partitions", _B.INT, 1, "Default number of partitions of a new topic.", at_least(1)),
    ConfigDef(
        "default.replication.factor",
        _B.INT,
        1,
        "Default replication factor of a new topic. A single node keeps one copy (other values are ignored "
        "with a warning); a cluster places this many replicas.",
        at_least(1),
    ),
    ConfigDef("message.max.bytes", _B.INT, 1048588, "Largest record batch size allowed.", at_least(0)),
    ConfigDef(
        "fetch.max.bytes",
        _B.INT,
        57671680,
        "Maximum bytes returned by one Fetch request (also capped by the request's max_bytes).",
        at_least(1024),
    ),
    ConfigDef(
        "max.incremental.fetch.session.cache.slots",
        _B.INT,
        1000,
        "Incremental fetch sessions (KIP-227) this node keeps; 0 answers every fetch sessionless.",
        at_least(0),
    ),
    ConfigDef(
        "socket.request.max.bytes",
        _B.INT,
        104857600,
        "Largest request frame accepted; a larger size prefix closes the connection before any allocation.",
        at_least(1),
    ),
    ConfigDef(
        "connections.max.idle.ms",
        _B.LONG,
        600000,
        "Close connections idle for this many milliseconds.",
    ),
    ConfigDef(
        "queued.max.requests",
        _B.INT,
        500,
        "Requests a single connection may have in flight before regroup stops reading from it.",
        at_least(1),
    ),
    ConfigDef(
        "max.connections",
        _B.INT,
        INT32_MAX,
        "Maximum number of client connections; further connections are closed on accept.",
        at_least(0),
    ),
    ConfigDef(
        "producer.id.expiration.ms",
        _B.INT,
        86400000,
        "How long idempotent producer state is kept after the producer's last write.",
        at_least(1),
    ),
    ConfigDef(
        "min.insync.replicas",
        _B.INT,
        1,
        "Fewest in-sync replicas an acks=all write needs (NOT_ENOUGH_REPLICAS otherwise); a single node "
        "always has one.",
        at_least(1),
    ),
    ConfigDef(
        "compression.type",
        _B.STRING,
        "producer",
        "Final compression of topic data; regroup stores batches as the producer sent them.",
        _COMPRESSION,
    ),
    # -------------------------------------------------------------------------------- log settings
    ConfigDef(
        "log.segment.bytes",
        _B.INT,
        1073741824,
        "Maximum size of a single log segment file.",
        at_least(1024 * 1024),
    ),
    ConfigDef("log.roll.ms", _B.LONG, None, "Roll a new segment after this many milliseconds.", at_least(1)),
    ConfigDef("log.roll.hours", _B.INT, 168, "Roll a new segment after this many hours.", at_least(1)),
    ConfigDef(
        "log.roll.jitter.ms",
        _B.LONG,
        0,
        "Maximum random jitter subtracted from the segment roll time.",
        at_least(0),
    ),
    ConfigDef(
        "log.retention.ms",
        _B.LONG,
        None,
        "Delete segments older than this (ms); -1 keeps them forever. Takes precedence over "
        "log.retention.minutes and log.retention.hours.",
    ),
    ConfigDef(
        "log.retention.minutes", _B.INT, None, "Retention in minutes, used if log.retention.ms is unset."
    ),
    ConfigDef("log.retention.hours", _B.INT, 168, "Retention in hours, used if the two above are unset."),
    ConfigDef(
        "log.retention.bytes",
        _B.LONG,
        -1,
        "Delete old segments while a partition is larger than this; -1 means no size limit.",
    ),
    ConfigDef(
        "log.retention.check.interval.ms",
        _B.LONG,
        300000,
        "How often retention is applied.",
        at_least(1),
    ),
    ConfigDef(
        "log.cleanup.policy",
        _B.LIST,
        ["delete"],
        "Default cleanup policy of topics: delete and/or compact.",
        _DELETE_COMPACT,
    ),
    ConfigDef("log.cleaner.enable", _B.BOOLEAN, True, "Whether compacted topics are compacted."),
    ConfigDef(
        "log.cleaner.backoff.ms",
        _B.LONG,
        15000,
        "How often compaction looks for work.",
        at_least(0),
    ),
    ConfigDef(
        "log.cleaner.min.cleanable.ratio",
        _B.DOUBLE,
        0.5,
        "Minimum dirty ratio for a log to be compacted.",
        between(0, 1),
    ),
    ConfigDef(
        "log.cleaner.delete.retention.ms",
        _B.LONG,
        86400000,
        "How long tombstones are kept in compacted topics.",
        at_least(0),
    ),
    ConfigDef(
        "log.cleaner.min.compaction.lag.ms",
        _B.LONG,
        0,
        "Minimum time a record stays uncompacted.",
        at_least(0),
    ),
    ConfigDef(
        "log.cleaner.max.compaction.lag.ms",
        _B.LONG,
        INT64_MAX,
        "Maximum time a record stays uncompacted.",
        at_least(1),
    ),
    ConfigDef(
        "log.flush.interval.messages",
        _B.LONG,
        INT64_MAX,
        "fsync a partition once this many records are unflushed (1 = before acknowledging every write).",
        at_least(1),
    ),
    ConfigDef(
        "log.flush.interval.ms",
        _B.LONG,
        None,
        "fsync a partition once its last flush is this old (checked at this interval); defaults to "
        "log.flush.scheduler.interval.ms.",
    ),
    ConfigDef(
        "log.flush.scheduler.interval.ms",
        _B.LONG,
        INT64_MAX,
        "How often the time-based flush policy is checked.",
    ),
    ConfigDef(
        "log.index.interval.bytes",
        _B.INT,
        4096,
        "Bytes between offset-index entries.",
        at_least(0),
    ),
    ConfigDef(
        "log.index.size.max.bytes",
        _B.INT,
        10485760,
        "Maximum size of an offset index file.",
        at_least(4),
    ),
    ConfigDef(
        "log.message.timestamp.type",
        _B.STRING,
        "CreateTime",
        "Whether record timestamps are the producer's (CreateTime) or the broker's (LogAppendTime).",
        _TIMESTAMP_TYPE,
    ),
    ConfigDef(
        "log.message.timestamp.after.max.ms",
        _B.LONG,
        3600000,
        "How far ahead of the broker's clock a CreateTime timestamp may be.",
        at_least(0),
    ),
    ConfigDef(
        "log.message.timestamp.before.max.ms",
        _B.LONG,
        INT64_MAX,
        "How far behind the broker's clock a CreateTime timestamp may be.",
        at_least(0),
    ),
    ConfigDef("compression.gzip.level", _B.INT, -1, "gzip level for compression.type=gzip."),
    ConfigDef("compression.lz4.level", _B.INT, 9, "lz4 level for compression.type=lz4.", between(1, 17)),
    ConfigDef(
        "compression.zstd.level", _B.INT, 3, "zstd level for compression.type=zstd.", between(-131072, 22)
    ),
    ConfigDef(
        "log.local.retention.ms",
        _B.LONG,
        -2,
        "Accepted for compatibility (no tiered storage).",
        applies=False,
    ),
    ConfigDef(
        "log.local.retention.bytes",
        _B.LONG,
        -2,
        "Accepted for compatibility (no tiered storage).",
        applies=False,
    ),
    ConfigDef(
        "log.segment.delete.delay.ms",
        _B.LONG,
        60000,
        "Delay before a deleted segment's file is removed.",
        at_least(0),
    ),
    ConfigDef(
        "log.preallocate",
        _B.BOOLEAN,
        False,
        "Accepted for compatibility; segments are not preallocated.",
        applies=False,
    ),
    # -------------------------------------------------------------------------------- group coordinator
    ConfigDef(
        "group.min.session.timeout.ms",
        _B.INT,
        6000,
        "Smallest session timeout a classic group member may ask for.",
    ),
    ConfigDef(
        "group.max.session.timeout.ms",
        _B.INT,
        1800000,
        "Largest session timeout a classic group member may ask for.",
    ),
    ConfigDef(
        "group.initial.rebalance.delay.ms",
        _B.INT,
        3000,
        "How long the first rebalance of an empty group waits for more members (0 disables).",
    ),
    ConfigDef(
        "group.max.size",
        _B.INT,
        INT32_MAX,
        "Maximum number of members of a classic group.",
        at_least(1),
    ),
    ConfigDef(
        "group.coordinator.rebalance.protocols",
        _B.LIST,
        ["classic", "consumer"],
        "Enabled rebalance protocols.",
        one_of("classic", "consumer", "share", "streams"),
    ),
    ConfigDef("group.coordinator.threads", _B.INT, 1, "Coordinator threads.", at_least(1), applies=False),
    ConfigDef(
        "group.coordinator.append.linger.ms",
        _B.INT,
        -1,
        "How long Kafka's coordinator waits to batch writes to __consumer_offsets (-1: adaptive, until its "
        "event queue is empty). regroup batches adaptively whatever the value: the writes of one "
        "connection read share one append (one node), writes that wait for a flush or for the in-sync "
        "replicas share one per event-loop step, and those that arrive behind a running fsync go "
        "together once it ends.",
        at_least(-1),
        applies=False,
    ),
    ConfigDef(
        "group.consumer.session.timeout.ms",
        _B.INT,
        45000,
        "Session timeout of consumer-protocol (KIP-848) members.",
        at_least(1),
    ),
    ConfigDef(
        "group.consumer.min.session.timeout.ms",
        _B.INT,
        45000,
        "Smallest session timeout of consumer-protocol members.",
        at_least(1),
    ),
    ConfigDef(
        "group.consumer.max.session.timeout.ms",
        _B.INT,
        60000,
        "Largest session timeout of consumer-protocol members.",
        at_least(1),
    ),
    ConfigDef(
        "group.consumer.heartbeat.interval.ms",
        _B.INT,
        5000,
        "Heartbeat interval of consumer-protocol members.",
        at_least(1),
    ),
    ConfigDef(
        "group.consumer.min.heartbeat.interval.ms",
        _B.INT,
        5000,
        "Smallest heartbeat interval of consumer-protocol members.",
        at_least(1),
    ),
    ConfigDef(
        "group.consumer.max.heartbeat.interval.ms",
        _B.INT,
        15000,
        "Largest heartbeat interval of consumer-protocol members.",
        at_least(1),
    ),
    ConfigDef(
        "group.consumer.max.size",
        _B.INT,
        INT32_MAX,
        "Maximum number of members of a consumer-protocol group.",
        at_least(1),
    ),
    ConfigDef(
        "group.consumer.assignors",
        _B.LIST,
        ["uniform", "range"],
        "Server-side assignors of consumer-protocol groups; the first is the default.",
        _non_empty_list,
    ),
    ConfigDef(
        "group.consumer.assignment.interval.ms",
        _B.INT,
        1000,
        "Kafka 4.3 (KIP-1263): a consumer group's target assignment is recomputed at most this often; the "
        "members' epochs move with it (0: on every group epoch bump).",
        at_least(0),
    ),
    ConfigDef(
        "group.consumer.migration.policy",
        _B.STRING,
        "bidirectional",
        "Conversion between classic and consumer groups.",
        one_of("disabled", "downgrade", "upgrade", "bidirectional", case_sensitive=False),
    ),
    ConfigDef(
        "offsets.topic.num.partitions",
        _B.INT,
        50,
        "Partitions of __consumer_offsets (fixed once the topic exists).",
        at_least(1),
    ),
    ConfigDef(
        "offsets.topic.replication.factor",
        _B.SHORT,
        3,
        "Replication factor of __consumer_offsets. A cluster creates the topic on the first FindCoordinator "
        "for a group, over the nodes running then, once at least this many are (until then FindCoordinator "
        "answers COORDINATOR_NOT_AVAILABLE); a single node keeps one copy.",
        at_least(1),
    ),
    ConfigDef(
        "offsets.topic.segment.bytes",
        _B.INT,
        104857600,
        "Segment size of __consumer_offsets.",
        at_least(1),
    ),
    ConfigDef(
        "offsets.topic.compression.codec",
        _B.INT,
        0,
        "Compression of __consumer_offsets writes (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd).",
        between(0, 4),
    ),
    ConfigDef(
        "offsets.load.buffer.size",
        _B.INT,
        5242880,
        "Read size used when loading __consumer_offsets.",
        at_least(1),
    ),
    ConfigDef(
        "offsets.retention.minutes",
        _B.INT,
        10080,
        "How long committed offsets of an empty group are kept.",
        at_least(1),
    ),
    ConfigDef(
        "offsets.retention.check.interval.ms",
        _B.LONG,
        600000,
        "How often stale offsets are looked for.",
        at_least(1),
    ),
    ConfigDef(
        "offset.metadata.max.bytes",
        _B.INT,
        4096,
        "Maximum size of the metadata string of an offset commit.",
    ),
    ConfigDef(
        "offsets.commit.timeout.ms",
        _B.INT,
        5000,
        "How long an offset commit may wait for its write.",
        at_least(1),
    ),
    ConfigDef(
        "offsets.commit.value.version",
        _B.INT,
        4,
        "regroup-only: OffsetCommitValue version written to __consumer_offsets. 4 (with the topic id) as "
        "Apache Kafka 4.3; 3 as Kafka up to 4.2, for tools that read the topic themselves and skip v4 "
        "(e.g. Burrow 1.2.1).",
        between(3, 4),
    ),
    ConfigDef(
        "group.events.enable",
        _B.BOOLEAN,
        True,
        "regroup-only: record every group's rebalance timeline in the internal topic __group_events "
        "(regroup groups --history).",
    ),
    ConfigDef(
        "group.events.retention.ms",
        _B.LONG,
        604800000,
        "regroup-only: retention.ms of __group_events when the broker creates it (7 days).",
        at_least(1),
    ),
    ConfigDef(
        "group.events.retention.bytes",
        _B.LONG,
        16777216,
        "regroup-only: retention.bytes (per partition) of __group_events when the broker creates it.",
        at_least(1),
    ),
    ConfigDef(
        "admin.listener",
        _B.STRING,
        "127.0.0.1:9644",
        "regroup-only: host:port of the operator HTTP port (/metrics in Prometheus format, a web view of the "
        "groups at /, JSON under /api/). Port 0 picks a free port; an empty value disables it. When the "
        "default port is taken the broker logs a warning and runs without it; an explicitly configured "
        "port that cannot be bound stops the start-up.",
        _admin_listener_validator,
    ),
    # -------------------------------------------------------------------------------- cluster
    ConfigDef(
        "cluster.metadata.endpoints",
        _B.STRING,
        None,
        "regroup-only: etcd://host:port[,host:port...][/prefix] of the etcd cluster that holds the "
        "cluster's metadata (nodes, controller, topics, partition leadership). Unset: a single node with "
        "nothing else to run.",
    ),
    ConfigDef("broker.rack", _B.STRING, None, "The rack of this node (reported in Metadata)."),
    ConfigDef(
        "inter.broker.listener.name",
        _B.STRING,
        None,
        "The listener other nodes use to reach this one (replica fetching); default: the first listener.",
    ),
    ConfigDef(
        "broker.session.timeout.ms",
        _B.INT,
        9000,
        "A node whose etcd lease is not kept alive for this long loses its registration: its leaderships "
        "move to other in-sync replicas.",
        at_least(1000),
    ),
    ConfigDef(
        "broker.heartbeat.interval.ms",
        _B.INT,
        2000,
        "How often a node keeps its etcd lease alive.",
        at_least(100),
    ),
    ConfigDef(
        "replica.lag.time.max.ms",
        _B.LONG,
        30000,
        "A follower that has not caught up to the leader's log end for this long leaves the ISR.",
        at_least(1),
    ),
    ConfigDef(
        "replica.fetch.wait.max.ms",
        _B.INT,
        500,
        "Longest time a follower's fetch waits at the leader for new data.",
        at_least(0),
    ),
    ConfigDef("replica.fetch.min.bytes", _B.INT, 1, "Bytes a follower's fetch waits for.", at_least(1)),
    ConfigDef(
        "replica.fetch.max.bytes",
        _B.INT,
        1048576,
        "Bytes a follower fetches per partition (at least one batch is always returned).",
        at_least(0),
    ),
    ConfigDef(
        "replica.fetch.response.max.bytes",
        _B.INT,
        10485760,
        "Bytes a follower fetches per request.",
        at_least(0),
    ),
    ConfigDef(
        "replica.fetch.backoff.ms",
        _B.INT,
        1000,
        "How long a follower waits after a failed fetch before trying again.",
        at_least(0),
    ),
    ConfigDef(
        "num.replica.fetchers",
        _B.INT,
        1,
        "Fetcher connections per leader node.",
        at_least(1),
    ),
    ConfigDef(
        "unclean.leader.election.enable",
        _B.BOOLEAN,
        False,
        "Elect a replica outside the ISR when no in-sync replica is alive (data loss possible).",
    ),
    ConfigDef(
        "controlled.shutdown.enable",
        _B.BOOLEAN,
        True,
        "On SIGTERM, move this node's leaderships to other in-sync replicas before stopping.",
    ),
    ConfigDef(
        "controlled.shutdown.max.wait.ms",
        _B.LONG,
        30000,
        "regroup-only: longest a controlled shutdown waits for leaderships to move away.",
        at_least(0),
    ),
    ConfigDef(
        "replica.high.watermark.checkpoint.interval.ms",
        _B.LONG,
        5000,
        "How often high watermarks are written to replication-offset-checkpoint.",
        at_least(1),
    ),
    # -------------------------------------------------------------------------------- accepted, no effect
    *(
        ConfigDef(
            name, typ, default, "Accepted for compatibility with Kafka; no effect in regroup.", applies=False
        )
        for name, typ, default in (
            ("process.roles", _B.LIST, None),
            ("controller.quorum.voters", _B.LIST, None),
            ("controller.quorum.bootstrap.servers", _B.LIST, None),
            ("num.network.threads", _B.INT, 3),
            ("num.io.threads", _B.INT, 8),
            ("num.recovery.threads.per.data.dir", _B.INT, 2),
            ("socket.send.buffer.bytes", _B.INT, 102400),
            ("socket.receive.buffer.bytes", _B.INT, 102400),
            ("transaction.state.log.replication.factor", _B.SHORT, 3),
            ("transaction.state.log.min.isr", _B.INT, 2),
            ("share.coordinator.state.topic.replication.factor", _B.SHORT, 3),
            ("share.coordinator.state.topic.min.isr", _B.INT, 2),
            ("auto.leader.rebalance.enable", _B.BOOLEAN, True),
        )
    ),
)


@dataclass(frozen=True, slots=True)
class TopicConfigInfo:
    """What DescribeConfigs reports about a topic setting besides its value: type, meaning, and the broker
    settings that supply its default, finest unit first (Kafka's ``ALL_TOPIC_CONFIG_SYNONYMS``).
    Values and validation come from the log layer (``regroup.log.config``)."""

    name: str
    type: ConfigType
    doc: str
    broker_synonyms: tuple[str, ...] = ()


def _t(name: str, typ: ConfigType, doc: str, *synonyms: str) -> TopicConfigInfo:
    return TopicConfigInfo(name, typ, doc, synonyms)


_NOOP: Final = "Accepted for compatibility; no effect on a single node without tiered storage."

TOPIC_CONFIGS: Final[dict[str, TopicConfigInfo]] = {
    t.name: t
    for t in (
        _t(
            "cleanup.policy",
            _B.LIST,
            "delete removes old segments; compact keeps the latest record per key.",
            "log.cleanup.policy",
        ),
        _t("compression.type", _B.STRING, "Final compression of the topic's data.", "compression.type"),
        _t(
            "compression.gzip.level",
            _B.INT,
            "gzip level for compression.type=gzip.",
            "compression.gzip.level",
        ),
        _t("compression.lz4.level", _B.INT, "lz4 level for compression.type=lz4.", "compression.lz4.level"),
        _t(
            "compression.zstd.level",
            _B.INT,
            "zstd level for compression.type=zstd.",
            "compression.zstd.level",
        ),
        _t(
            "delete.retention.ms",
            _B.LONG,
            "How long tombstones are kept in a compacted topic.",
            "log.cleaner.delete.retention.ms",
        ),
        _t(
            "file.delete.delay.ms",
            _B.LONG,
            "Delay before a deleted segment's file is removed.",
            "log.segment.delete.delay.ms",
        ),
        _t(
            "flush.messages",
            _B.LONG,
            "fsync once this many records are unflushed.",
            "log.flush.interval.messages",
        ),
        _t(
            "flush.ms",
            _B.LONG,
            "fsync once the last flush is this old.",
            "log.flush.interval.ms",
            "log.flush.scheduler.interval.ms",
        ),
        _t("follower.replication.throttled.replicas", _B.LIST, _NOOP),
        _t("index.interval.bytes", _B.INT, "Bytes between offset-index entries.", "log.index.interval.bytes"),
        _t("leader.replication.throttled.replicas", _B.LIST, _NOOP),
        _t("local.retention.bytes", _B.LONG, _NOOP, "log.local.retention.bytes"),
        _t("local.retention.ms", _B.LONG, _NOOP, "log.local.retention.ms"),
        _t(
            "max.compaction.lag.ms",
            _B.LONG,
            "Maximum time a record stays uncompacted.",
            "log.cleaner.max.compaction.lag.ms",
        ),
        _t(
            "max.message.bytes",
            _B.INT,
            "Largest record batch size allowed in this topic.",
            "message.max.bytes",
        ),
        _t(
            "message.timestamp.after.max.ms",
            _B.LONG,
            "How far a CreateTime timestamp may lie ahead of the broker's clock.",
            "log.message.timestamp.after.max.ms",
        ),
        _t(
            "message.timestamp.before.max.ms",
            _B.LONG,
            "How far a CreateTime timestamp may lie behind the broker's clock.",
            "log.message.timestamp.before.max.ms",
        ),
        _t("message.timestamp.type", _B.STRING, "CreateTime or LogAppendTime.", "log.message.timestamp.type"),
        _t(
            "min.cleanable.dirty.ratio",
            _B.DOUBLE,
            "Minimum dirty ratio for compaction.",
            "log.cleaner.min.cleanable.ratio",
        ),
        _t(
            "min.compaction.lag.ms",
            _B.LONG,
            "Minimum time a record stays uncompacted.",
            "log.cleaner.min.compaction.lag.ms",
        ),
        _t("min.insync.replicas", _B.INT, _NOOP, "min.insync.replicas"),
        _t("preallocate", _B.BOOLEAN, _NOOP, "log.preallocate"),
        _t("remote.log.copy.disable", _B.BOOLEAN, _NOOP),
        _t("remote.log.delete.on.disable", _B.BOOLEAN, _NOOP),
        _t("remote.storage.enable", _B.BOOLEAN, _NOOP),
        _t(
            "retention.bytes",
            _B.LONG,
            "Delete old segments while a partition is larger than this; -1 means no limit.",
            "log.retention.bytes",
        ),
        _t(
            "retention.ms",
            _B.LONG,
            "Delete segments older than this; -1 keeps them forever.",
            "log.retention.ms",
            "log.retention.minutes",
            "log.retention.hours",
        ),
        _t("segment.bytes", _B.INT, "Maximum size of one segment file.", "log.segment.bytes"),
        _t(
            "segment.index.bytes", _B.INT, "Maximum size of an offset index file.", "log.index.size.max.bytes"
        ),
        _t("segment.jitter.ms", _B.LONG, "Random jitter subtracted from segment.ms.", "log.roll.jitter.ms"),
        _t(
            "segment.ms",
            _B.LONG,
            "Roll a new segment after this many milliseconds.",
            "log.roll.ms",
            "log.roll.hours",
        ),
        _t("unclean.leader.election.enable", _B.BOOLEAN, _NOOP, "unclean.leader.election.enable"),
    )
}

# Broker settings that describe the same thing in different units (Kafka's ``brokerConfigSynonyms``).
BROKER_SYNONYMS: Final[tuple[tuple[str, ...], ...]] = (
    ("log.roll.ms", "log.roll.hours"),
    ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
)


def broker_synonyms(name: str) -> tuple[str, ...]:
    for group in BROKER_SYNONYMS:
        if name in group:
            return group
    return (name,)


# ---------------------------------------------------------------------------------------------- sources


def env_to_key(name: str) -> str:
    """``REGROUP_LOG_DIRS`` → ``log.dirs`` (Kafka Docker's mapping: ``___``→-, ``__``→_, ``_``→.)."""
    body = name[len(ENV_PREFIX) :].lower()
    return (
        body.replace("___", "\0").replace("__", "\1").replace("_", ".").replace("\0", "-").replace("\1", "_")
    )


def key_to_env(key: str) -> str:
    """``log.dirs`` → ``REGROUP_LOG_DIRS``."""
    return ENV_PREFIX + key.replace("-", "___").replace("_", "__").replace(".", "_").upper()


class Origin(enum.Enum):
    DEFAULT = "default"
    FILE = "file"
    ENV = "environment"
    OVERRIDE = "override"


@dataclass(slots=True)
class BrokerConfig:
    """The effective broker settings with where each came from."""

    values: dict[str, Any]
    origins: dict[str, Origin]
    unknown: dict[str, tuple[str, str]] = field(default_factory=dict)  # key -> (value, where)
    raw: dict[str, str] = field(default_factory=dict)  # the textual value of every non-default setting

    @classmethod
    def load(
        cls,
        file_entries: Iterable[tuple[str, str, str]] = (),
        environ: Mapping[str, str] | None = None,
        overrides: Iterable[tuple[str, str]] = (),
    ) -> BrokerConfig:
        """Resolve settings. ``file_entries`` are ``(key, value, where)``; ``environ`` defaults to none.

        Raises :class:`ConfigError` for an invalid value of a known key or an impossible combination.
        """
        values = {name: d.default for name, d in BROKER_CONFIGS.items()}
        origins = dict.fromkeys(BROKER_CONFIGS, Origin.DEFAULT)
        config = cls(values, origins)
        for key, value, where in file_entries:
            config._set(key, value, Origin.FILE, where)
        for env_name, value in sorted((environ or {}).items()):
            if not env_name.startswith(ENV_PREFIX) or env_name.startswith(_ENV_RESERVED):
                continue
            config._set(env_to_key(env_name), value, Origin.ENV, f"environment variable {env_name}")
        for key, value in overrides:
            config._set(key, value, Origin.OVERRIDE, "--override")
        config._check()
        return config

    def _set(self, key: str, value: str, origin: Origin, where: str) -> None:
        key = key.strip()
        spec = BROKER_CONFIGS.get(key)
        if spec is None:
            self.unknown[key] = (value, where)
            return
        try:
            self.values[key] = spec.parse(value)
        except ConfigError as exc:
            raise ConfigError(f"{exc} (from {where})") from None
        self.origins[key] = origin
        self.raw[key] = value

    def _check(self) -> None:
        if len(self.get("log.dirs") or [None]) > 1:
            raise ConfigError(
                f"Invalid value {render(self.get('log.dirs'))} for configuration log.dirs: "
                "regroup supports a single log directory"
            )
        self.listeners()  # validates the combination of listeners, names and protocols
        self.advertised_listeners()
        if self.get("group.min.session.timeout.ms") > self.get("group.max.session.timeout.ms"):
            raise ConfigError(
                "group.min.session.timeout.ms must not be greater than group.max.session.timeout.ms"
            )

    # ------------------------------------------------------------------------------------ accessors

    def get(self, name: str) -> Any:
        return self.values[name]

    def get_int(self, name: str) -> int:
        value = self.values[name]
        assert isinstance(value, int)
        return value

    def is_default(self, name: str) -> bool:
        return self.origins[name] is Origin.DEFAULT

    def source(self, name: str) -> ConfigSource:
        return ConfigSource.DEFAULT_CONFIG if self.is_default(name) else ConfigSource.STATIC_BROKER_CONFIG

    @property
    def node_id(self) -> int:
        return self.get_int("node.id")

    @property
    def log_dir(self) -> str:
        dirs = self.get("log.dirs")
        return str(dirs[0]) if dirs else str(self.get("log.dir"))

    @property
    def retention_ms(self) -> int:
        """Kafka's rule: log.retention.ms, else minutes, else hours; negative means unlimited (-1)."""
        if self.get("log.retention.ms") is not None:
            ms = self.get_int("log.retention.ms")
        elif self.get("log.retention.minutes") is not None:
            ms = self.get_int("log.retention.minutes") * 60_000
        else:
            ms = self.get_int("log.retention.hours") * 3_600_000
        return -1 if ms < 0 else ms

    @property
    def segment_ms(self) -> int:
        if self.get("log.roll.ms") is not None:
            return self.get_int("log.roll.ms")
        return self.get_int("log.roll.hours") * 3_600_000

    @property
    def flush_interval_ms(self) -> int:
        value = self.get("log.flush.interval.ms")
        return self.get_int("log.flush.scheduler.interval.ms") if value is None else int(value)

    def listeners(self) -> list[Listener]:
        """The PLAINTEXT listeners to bind (controller listeners skipped)."""
        protocol_map = self._protocol_map()
        controller = {n.upper() for n in self.get("controller.listener.names") or []}
        result: list[Listener] = []
        for listener in parse_listeners("listeners", self.get("listeners")):
            if listener.name in controller:
                continue
            protocol = protocol_map.get(listener.name)
            if protocol is None:
                raise ConfigError(
                    f"Invalid value {render(self.get('listeners'))} for configuration listeners: "
                    f"no security protocol mapped for listener {listener.name} "
                    "(see listener.security.protocol.map)"
                )
            if protocol != "PLAINTEXT":
                raise ConfigError(
                    f"Invalid value {render(self.get('listeners'))} for configuration listeners: "
                    f"listener {listener.name} uses {protocol}; regroup supports PLAINTEXT only"
                )
            result.append(listener)
        if not result:
            raise ConfigError("Invalid value for configuration listeners: no PLAINTEXT listener")
        return result

    def advertised_listeners(self) -> dict[str, Listener]:
        """Advertised endpoint per listener name (falls back to the listener itself)."""
        bound = {listener.name: listener for listener in self.listeners()}
        advertised = dict(bound)
        configured = self.get("advertised.listeners")
        if configured:
            for listener in parse_listeners("advertised.listeners", configured):
                if listener.name not in bound:
                    continue
                advertised[listener.name] = listener
        return advertised

    def _protocol_map(self) -> dict[str, str]:
        mapping: dict[str, str] = {}
        for item in str(self.get("listener.security.protocol.map")).split(","):
            if not item.strip():
                continue
            name, sep, protocol = item.partition(":")
            if not sep:
                raise ConfigError(
                    f"Invalid value {self.get('listener.security.protocol.map')} for configuration "
                    "listener.security.protocol.map: expected NAME:PROTOCOL pairs"
                )
            mapping[name.strip().upper()] = protocol.strip().upper()
        return mapping

    def warnings(self) -> list[str]:
        """Human-readable warnings about the effective configuration (logged at start)."""
        notes = [
            f"Unknown configuration '{key}' (from {where}) was supplied but is not used by regroup"
            for key, (_, where) in self.unknown.items()
        ]
        if self.get("cluster.metadata.endpoints"):
            return notes
        if self.get_int("default.replication.factor") != 1:
            notes.append(
                f"default.replication.factor={self.get('default.replication.factor')}: regroup is a "
                "single node and keeps one copy of every partition"
            )
        if (
            not self.is_default("offsets.topic.replication.factor")
            and self.get_int("offsets.topic.replication.factor") != 1
        ):
            notes.append(
                "offsets.topic.replication.factor is not 1: regroup is a single node and keeps one copy"
            )
        return notes

    def inert(self) -> list[str]:
        """Settings set explicitly that have no effect in regroup."""
        return [name for name, d in BROKER_CONFIGS.items() if not d.applies and not self.is_default(name)]

    def dump(self) -> list[str]:
        """``name = value`` lines of every setting, sorted (Kafka's "KafkaConfig values:" block)."""
        lines = []
        for name in sorted(BROKER_CONFIGS):
            spec = BROKER_CONFIGS[name]
            value = (
                "[hidden]" if spec.sensitive and self.values[name] is not None else render(self.values[name])
            )
            lines.append(f"\t{name} = {'null' if value is None else value}")
        return lines


def load_file(path: str) -> list[tuple[str, str, str]]:
    """Read a properties file into ``(key, value, "path:line")`` entries."""
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    return [(k, v, f"{path}:{line}") for k, v, line in parse_properties(text)]
