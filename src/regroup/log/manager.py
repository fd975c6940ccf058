"""``LogManager``: the data directory. Owns the topic registry (names, topic ids, partition counts and
config overrides in ``__regroup_topics.json``; each partition directory also carries Kafka's
``partition.metadata``), topic creation and deletion with Kafka's validation, startup loading and recovery
of every partition, the Kafka-format offset checkpoint files, the clean-shutdown marker, and the periodic
retention, compaction and flush passes over all partitions.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import shutil
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Final

from regroup.log._io import fsync_dir, write_file_atomically
from regroup.log.config import LogConfig, LogDefaults, validate_topic_configs
from regroup.log.partition import PartitionLog
from regroup.protocol.errors import ErrorCode, KafkaError

__all__ = [
    "CLEAN_SHUTDOWN_FILE",
    "INTERNAL_TOPICS",
    "TOPICS_FILE",
    "LogManager",
    "LogRecoverySummary",
    "TopicInfo",
    "topic_id_to_str",
    "validate_topic_name",
]

log = logging.getLogger("regroup.log")

TOPICS_FILE: Final = "__regroup_topics.json"
CLEAN_SHUTDOWN_FILE: Final = ".clean_shutdown"
PARTITION_METADATA_FILE: Final = "partition.metadata"
RECOVERY_POINT_CHECKPOINT: Final = "recovery-point-offset-checkpoint"
LOG_START_CHECKPOINT: Final = "log-start-offset-checkpoint"
REPLICATION_CHECKPOINT: Final = "replication-offset-checkpoint"
"""High watermarks (a replicated partition's HW is not its log end; a restarted follower starts from it)."""
CLEANER_CHECKPOINT: Final = "cleaner-offset-checkpoint"
INTERNAL_TOPICS: Final = frozenset(
    {"__consumer_offsets", "__transaction_state", "__share_group_state", "__group_events"}
)
MAX_NAME_LENGTH: Final = 249
_LEGAL_NAME: Final = re.compile(r"[a-zA-Z0-9._-]+")
_PARTITION_DIR: Final = re.compile(r"(.+)-(0|[1-9][0-9]*)")
_DELETE_SUFFIX: Final = "-delete"
_STRAY_SUFFIX: Final = "-stray"
_METADATA_TOPIC_ID: Final = uuid.UUID(int=1)  # Kafka's reserved Uuid.METADATA_TOPIC_ID


def topic_id_to_str(topic_id: uuid.UUID) -> str:
    """Kafka's ``Uuid.toString``: URL-safe base64 of the 16 bytes, without padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode()


def _topic_id_from_str(text: str) -> uuid.UUID:
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    return uuid.UUID(bytes=raw)


def _random_topic_id() -> uuid.UUID:
    # Kafka's Uuid.randomUuid avoids the two reserved ids and string forms starting with '-'.
    while True:
        u = uuid.uuid4()
        if u.int not in (0, 1) and not topic_id_to_str(u).startswith("-"):
            return u


def validate_topic_name(name: str) -> None:
    """Kafka's ``Topic.validate``; raises ``KafkaError(INVALID_TOPIC_EXCEPTION)``."""
    if not name:
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, "Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, 'Topic name cannot be "." or ".."')
    if len(name) > MAX_NAME_LENGTH:
        raise KafkaError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"Topic name is illegal, it can't be longer than {MAX_NAME_LENGTH} characters, "
            f"topic name: {name}",
        )
    if not _LEGAL_NAME.fullmatch(name):
        raise KafkaError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f'Topic name "{name}" is illegal, it contains a character other than ASCII alphanumerics, '
            "'.', '_' and '-'",
        )


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A topic as stored: identity, partition count and config (broker defaults + overrides)."""

    name: str
    topic_id: uuid.UUID
    partitions: int
    internal: bool
    overrides: Mapping[str, str]
    log_config: LogConfig
    defaults: Mapping[str, str] = field(repr=False, compare=False)

    def config(self, name: str) -> str | None:
        """Effective value of a topic config (Kafka name), or None for an unknown name."""
        value = self.overrides.get(name)
        return value if value is not None else self.defaults.get(name)

    def is_override(self, name: str) -> bool:
        """True when the topic sets ``name`` itself (DescribeConfigs source DYNAMIC_TOPIC_CONFIG)."""
        return name in self.overrides

    def effective_configs(self) -> dict[str, str]:
        return {**self.defaults, **self.overrides}

    @property
    def topic_id_str(self) -> str:
        return topic_id_to_str(self.topic_id)


@dataclass(frozen=True, slots=True)
class LogRecoverySummary:
    """What :meth:`LogManager.load` found and repaired in the data directory."""

    partitions: int
    segments: int
    bytes: int
    seconds: float
    recovered_segments: int
    truncated_bytes: int
    clean_shutdown: bool


class _Topic:
    __slots__ = ("info", "logs")

    def __init__(self, info: TopicInfo, logs: list[PartitionLog]) -> None:
        self.info = info
        self.logs = logs


class LogManager:
    """The broker's data directory. Single-threaded like :class:`PartitionLog` (see its ``flush`` note)."""

    def __init__(self, data_dir: Path, defaults: LogDefaults | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.defaults = defaults or LogDefaults()
        self._topics: dict[str, _Topic] = {}
        self._by_id: dict[uuid.UUID, _Topic] = {}
        self.topics_version = 0
        """Bumped whenever a topic is added or deleted or gains partitions: callers that derive something
        from :meth:`topics` (the group coordinator's topic image) rebuild it only when this changed."""
        self._topic_defaults = MappingProxyType(self.defaults.topic_defaults())
        self._loaded = False
        self._closed = False

    # ------------------------------------------------------------------------------------------ startup

    def load(self, now_ms: int | None = None) -> LogRecoverySummary:
        """Read the topic registry and open (recovering as needed) every partition. Directories of unknown
        or deleted topics are removed, as Kafka removes stray logs."""
        if self._loaded:
            raise RuntimeError("LogManager.load() already ran")
        started = time.monotonic()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        marker = self.data_dir / CLEAN_SHUTDOWN_FILE
        clean = marker.exists()
        if clean:
            # Removed before anything is opened: a crash from here on means an unclean shutdown.
            marker.unlink()
            fsync_dir(self.data_dir)
        recovery_points = self._read_checkpoint(RECOVERY_POINT_CHECKPOINT)
        log_starts = self._read_checkpoint(LOG_START_CHECKPOINT)
        cleaner_points = self._read_checkpoint(CLEANER_CHECKPOINT)
        high_watermarks = self._read_checkpoint(REPLICATION_CHECKPOINT)
        registry = self._read_registry()
        wanted: dict[str, uuid.UUID] = {}
        for info in registry:
            for p in range(info.partitions):
                wanted[f"{info.name}-{p}"] = info.topic_id
        self._remove_strays(wanted)
        partitions = segments = size = recovered = truncated = 0
        for info in registry:
            logs: list[PartitionLog] = []
            for p in range(info.partitions):
                key = (info.name, p)
                plog = self._open_partition(
                    info,
                    p,
                    clean_shutdown=clean,
                    recovery_point=recovery_points.get(key, 0),
                    log_start_offset=log_starts.get(key, 0),
                    cleaner_checkpoint=cleaner_points.get(key),
                    now_ms=now_ms,
                )
                hw = high_watermarks.get(key)
                if hw is not None:
                    plog.set_high_watermark(hw)
                logs.append(plog)
                partitions += 1
                segments += plog.segment_count
                size += plog.size_bytes
                recovered += plog.recovered_segments
                truncated += sum(t.truncated_bytes for t in plog.truncations)
            topic = _Topic(info, logs)
            self._topics[info.name] = topic
            self._by_id[info.topic_id] = topic
        self._loaded = True
        self.topics_version += 1
        stats = LogRecoverySummary(
            partitions, segments, size, time.monotonic() - started, recovered, truncated, clean_shutdown=clean
        )
        log.info(
            "loaded %d partitions (%d segments, %d bytes) in %.3fs; %s shutdown, %d segments recovered",
            stats.partitions,
            stats.segments,
            stats.bytes,
            stats.seconds,
            "clean" if clean else "unclean",
            stats.recovered_segments,
        )
        return stats

    def _open_partition(
        self,
        info: TopicInfo,
        index: int,
        *,
        clean_shutdown: bool,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        cleaner_checkpoint: int | None = None,
        now_ms: int | None = None,
    ) -> PartitionLog:
        directory = self.data_dir / f"{info.name}-{index}"
        fresh = not directory.exists()
        plog = PartitionLog.open(
            directory,
            info.log_config,
            clean_shutdown=clean_shutdown or fresh,
            recovery_point=recovery_point,
            log_start_offset=log_start_offset,
            cleaner_checkpoint=cleaner_checkpoint,
            now_ms=now_ms,
        )
        metadata = directory / PARTITION_METADATA_FILE
        if _read_partition_metadata(directory) != info.topic_id:
            write_file_atomically(
                metadata, f"version: 0\ntopic_id: {topic_id_to_str(info.topic_id)}\n".encode(), sync=True
            )
        if fresh:
            fsync_dir(self.data_dir)
        return plog

    def _remove_strays(self, wanted: Mapping[str, uuid.UUID]) -> None:
        for entry in sorted(os.listdir(self.data_dir)):
            path = self.data_dir / entry
            if not path.is_dir():
                continue
            if entry.endswith(_DELETE_SUFFIX):
                shutil.rmtree(path, ignore_errors=True)
                continue
            if not _PARTITION_DIR.fullmatch(entry):
                continue
            owner = _read_partition_metadata(path)
            expected = wanted.get(entry)
            if expected is not None and owner in (None, expected):
                continue
            if owner is None and expected is None:
                log.warning(
                    "leaving %s alone: not a partition of any known topic and no %s",
                    path,
                    PARTITION_METADATA_FILE,
                )
                continue
            log.warning(
                "removing stray partition directory %s (topic id %s, expected %s)",
                path,
                topic_id_to_str(owner) if owner else None,
                topic_id_to_str(expected) if expected else None,
            )
            self._delete_dir(path)

    def _delete_dir(self, path: Path) -> None:
        """Kafka's two-step delete: rename to ``<name>.<uuid>-delete`` (atomic), then remove."""
        suffix = f".{uuid.uuid4().hex}{_DELETE_SUFFIX}"
        target = self.data_dir / (path.name[: 255 - len(suffix)] + suffix)
        os.replace(path, target)
        fsync_dir(self.data_dir)
        shutil.rmtree(target, ignore_errors=True)

    # ------------------------------------------------------------------------------------------ registry

    def _read_registry(self) -> list[TopicInfo]:
        path = self.data_dir / TOPICS_FILE
        try:
            doc = json.loads(path.read_bytes())
            topics = [self._info_from_json(t) for t in doc["topics"]]
        except FileNotFoundError:
            return self._registry_from_dirs()
        except (ValueError, KeyError, TypeError) as exc:
            log.error(
                "%s is unreadable (%s); rebuilding the topic list from partition directories", path, exc
            )
            return self._registry_from_dirs()
        return topics

    def _info_from_json(self, t: Mapping[str, object]) -> TopicInfo:
        name = t["name"]
        topic_id = t["topic_id"]
        partitions = t["partitions"]
        configs = t.get("configs", {})
        if not (isinstance(name, str) and isinstance(topic_id, str) and isinstance(partitions, int)):
            raise TypeError(f"bad topic entry {t!r}")
        if not isinstance(configs, dict):
            raise TypeError(f"bad configs in {t!r}")
        return self._make_info(
            name,
            _topic_id_from_str(topic_id),
            partitions,
            {str(k): str(v) for k, v in configs.items()},
            internal=bool(t.get("internal", False)),
        )

    def _registry_from_dirs(self) -> list[TopicInfo]:
        found: dict[str, tuple[uuid.UUID, int]] = {}
        for entry in os.listdir(self.data_dir):
            m = _PARTITION_DIR.fullmatch(entry)
            if not m or not (self.data_dir / entry).is_dir():
                continue
            owner = _read_partition_metadata(self.data_dir / entry)
            if owner is None:
                continue
            name, index = m.group(1), int(m.group(2))
            prev = found.get(name)
            if prev is None or prev[0] == owner:
                found[name] = (owner, max(index + 1, prev[1] if prev else 0))
        if found:
            log.warning(
                "recovered %d topics from partition directories; their config overrides are lost", len(found)
            )
        return [
            self._make_info(n, tid, count, {}, internal=n in INTERNAL_TOPICS)
            for n, (tid, count) in found.items()
        ]

    def _make_info(
        self, name: str, topic_id: uuid.UUID, partitions: int, overrides: Mapping[str, str], *, internal: bool
    ) -> TopicInfo:
        return TopicInfo(
            name=name,
            topic_id=topic_id,
            partitions=partitions,
            internal=internal,
            overrides=MappingProxyType(dict(overrides)),
            log_config=self.defaults.log_config(overrides),
            defaults=self._topic_defaults,
        )

    def _save_registry(self) -> None:
        doc = {
            "version": 1,
            "topics": [
                {
                    "name": t.info.name,
                    "topic_id": topic_id_to_str(t.info.topic_id),
                    "partitions": t.info.partitions,
                    "internal": t.info.internal,
                    "configs": dict(t.info.overrides),
                }
                for t in self._topics.values()
            ],
        }
        write_file_atomically(self.data_dir / TOPICS_FILE, json.dumps(doc, indent=1).encode(), sync=True)

    # ------------------------------------------------------------------------------------------ topics

    def create_topic(
        self,
        name: str,
        partitions: int = -1,
        configs: Mapping[str, str | None] | None = None,
        *,
        internal: bool = False,
        validate_only: bool = False,
        topic_id: uuid.UUID | None = None,
        now_ms: int | None = None,
    ) -> TopicInfo:
        """Create a topic with ``partitions`` partitions (-1: ``num.partitions``) and config overrides.
        Raises ``KafkaError`` TOPIC_ALREADY_EXISTS, INVALID_TOPIC_EXCEPTION, INVALID_PARTITIONS or
        INVALID_CONFIG with Kafka's messages. ``validate_only`` checks without creating anything."""
        self._check_open()
        validate_topic_name(name)
        if name in self._topics:
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        unified = name.replace(".", "_")
        for existing in self._topics:
            if existing.replace(".", "_") == unified:
                raise KafkaError(
                    ErrorCode.INVALID_TOPIC_EXCEPTION,
                    f"Topic '{name}' collides with existing topic: {existing}",
                )
        if partitions == -1:
            partitions = self.defaults.num_partitions
        if partitions <= 0:
            raise KafkaError(
                ErrorCode.INVALID_PARTITIONS, "Number of partitions was set to an invalid non-positive value."
            )
        overrides = validate_topic_configs(configs or {})
        if topic_id is None:
            topic_id = _random_topic_id()
            while topic_id in self._by_id:
                topic_id = _random_topic_id()
        elif topic_id in self._by_id:
            raise KafkaError(
                ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic id {topic_id_to_str(topic_id)} is in use."
            )
        info = self._make_info(name, topic_id, partitions, overrides, internal=internal)
        if validate_only:
            return info
        logs = self._open_new_partitions(info, range(partitions), now_ms)
        topic = _Topic(info, logs)
        self._topics[name] = topic
        self._by_id[topic_id] = topic
        self.topics_version += 1
        self._save_registry()
        return info

    def _open_new_partitions(self, info: TopicInfo, indexes: range, now_ms: int | None) -> list[PartitionLog]:
        logs: list[PartitionLog] = []
        for p in indexes:
            directory = self.data_dir / f"{info.name}-{p}"
            if directory.exists():
                log.warning("removing leftover directory %s before creating the partition", directory)
                self._delete_dir(directory)
            logs.append(self._open_partition(info, p, clean_shutdown=True, now_ms=now_ms))
        return logs

    def delete_topic(self, name: str) -> TopicInfo:
        """Delete a topic: drop it from the registry, then rename each partition directory to
        ``<topic>-<p>.<uuid>-delete`` and remove it (Kafka's order, so a crash never resurrects it)."""
        self._check_open()
        topic = self._topics.get(name)
        if topic is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
        del self._topics[name]
        del self._by_id[topic.info.topic_id]
        self.topics_version += 1
        self._save_registry()
        for p, plog in enumerate(topic.logs):
            plog.close_handles()
            directory = self.data_dir / f"{name}-{p}"
            if directory.exists():
                self._delete_dir(directory)
        return topic.info

    def alter_topic_configs(self, name: str, configs: Mapping[str, str | None]) -> TopicInfo:
        """Replace the topic's config overrides (AlterConfigs semantics; the broker merges incremental
        changes itself)."""
        self._check_open()
        topic = self._require(name)
        overrides = validate_topic_configs(configs)
        info = self._make_info(
            name, topic.info.topic_id, topic.info.partitions, overrides, internal=topic.info.internal
        )
        topic.info = info
        for plog in topic.logs:
            plog.update_config(info.log_config)
        self._save_registry()
        return info

    def create_partitions(self, name: str, total: int, *, now_ms: int | None = None) -> TopicInfo:
        """Grow the topic to ``total`` partitions (CreatePartitions)."""
        self._check_open()
        topic = self._require(name)
        current = topic.info.partitions
        if total < current:
            raise KafkaError(
                ErrorCode.INVALID_PARTITIONS,
                f"Topic currently has {current} partitions, which is higher than the requested {total}.",
            )
        if total == current:
            raise KafkaError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partitions.")
        info = self._make_info(
            name, topic.info.topic_id, total, topic.info.overrides, internal=topic.info.internal
        )
        topic.logs.extend(self._open_new_partitions(info, range(current, total), now_ms))
        topic.info = info
        self.topics_version += 1
        self._save_registry()
        return info

    def _require(self, name: str) -> _Topic:
        topic = self._topics.get(name)
        if topic is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{name}' does not exist.")
        return topic

    def _check_open(self) -> None:
        if self._closed:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, "The log manager is closed")
        if not self._loaded:
            # Writing the registry before reading it would drop every existing topic.
            raise RuntimeError("LogManager.load() must run before topics are changed")

    def topics(self) -> list[TopicInfo]:
        return [t.info for t in self._topics.values()]

    def topic(self, name: str) -> TopicInfo | None:
        topic = self._topics.get(name)
        return None if topic is None else topic.info

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        topic = self._by_id.get(topic_id)
        return None if topic is None else topic.info

    def partition(self, topic: str, index: int) -> PartitionLog | None:
        t = self._topics.get(topic)
        if t is None or not 0 <= index < len(t.logs):
            return None
        return t.logs[index]

    def partitions(self) -> Iterator[tuple[str, int, PartitionLog]]:
        for name, topic in list(self._topics.items()):
            for p, plog in enumerate(topic.logs):
                yield name, p, plog

    # ------------------------------------------------------------------------------------------ upkeep

    def run_retention(self, now_ms: int) -> int:
        """Apply retention to every partition; returns the number of segments deleted."""
        deleted = 0
        for _, _, plog in self.partitions():
            deleted += plog.apply_retention(now_ms)
        if deleted:
            self.checkpoint()
        return deleted

    def run_compaction(self, now_ms: int) -> int:
        """Compact every ``cleanup.policy=compact`` partition that is due; returns how many were compacted.
        A failing partition is logged and skipped."""
        compacted = 0
        for name, p, plog in self.partitions():
            if not plog.config.compact:
                continue
            try:
                if plog.compact(now_ms) is not None:
                    compacted += 1
            except (OSError, KafkaError):
                log.exception("compaction of %s-%d failed", name, p)
        if compacted:
            self.checkpoint()
        return compacted

    def flush_due(self, now_ms: int) -> list[PartitionLog]:
        """Partitions whose flush policy (or a roll) calls for :meth:`PartitionLog.flush`."""
        return [plog for _, _, plog in self.partitions() if plog.needs_flush(now_ms)]

    def flush_all(self, now_ms: int | None = None) -> None:
        for _, _, plog in self.partitions():
            plog.flush(now_ms)
        self.checkpoint()

    def checkpoint(self) -> None:
        """Write Kafka's recovery-point, log-start-offset and cleaner offset checkpoint files."""
        entries = list(self.partitions())
        self._write_checkpoint(
            RECOVERY_POINT_CHECKPOINT, [(n, p, plog.recovery_point) for n, p, plog in entries]
        )
        self._write_checkpoint(
            LOG_START_CHECKPOINT, [(n, p, plog.log_start_offset) for n, p, plog in entries]
        )
        self._write_checkpoint(
            CLEANER_CHECKPOINT,
            [(n, p, plog.cleaner_checkpoint) for n, p, plog in entries if plog.config.compact],
        )
        self.checkpoint_high_watermarks(entries)

    def checkpoint_high_watermarks(self, entries: list[tuple[str, int, PartitionLog]] | None = None) -> None:
        """Write ``replication-offset-checkpoint`` (Kafka's high watermark checkpoint)."""
        if entries is None:
            entries = list(self.partitions())
        self._write_checkpoint(
            REPLICATION_CHECKPOINT, [(n, p, plog.high_watermark) for n, p, plog in entries]
        )

    def close(self) -> None:
        """Flush and close every partition, write the checkpoints and the clean-shutdown marker."""
        if self._closed:
            return
        for _, _, plog in self.partitions():
            plog.close()
        self.checkpoint()
        self._closed = True
        write_file_atomically(self.data_dir / CLEAN_SHUTDOWN_FILE, b"", sync=True)

    # ------------------------------------------------------------------------------------------ checkpoints

    def _write_checkpoint(self, name: str, entries: list[tuple[str, int, int]]) -> None:
        lines = ["0", str(len(entries)), *(f"{t} {p} {o}" for t, p, o in entries)]
        write_file_atomically(self.data_dir / name, ("\n".join(lines) + "\n").encode(), sync=True)

    def _read_checkpoint(self, name: str) -> dict[tuple[str, int], int]:
        path = self.data_dir / name
        try:
            lines = path.read_text().splitlines()
        except FileNotFoundError:
            return {}
        except (OSError, UnicodeDecodeError) as exc:
            log.warning("ignoring unreadable checkpoint %s: %s", path, exc)
            return {}
        out: dict[tuple[str, int], int] = {}
        try:
            if lines[0].strip() != "0":
                raise ValueError(f"unknown version {lines[0]!r}")
            count = int(lines[1])
            for line in lines[2 : 2 + count]:
                topic, partition, offset = line.split()
                out[(topic, int(partition))] = int(offset)
        except (ValueError, IndexError) as exc:
            log.warning("ignoring malformed checkpoint %s: %s", path, exc)
            return {}
        return out


def _read_partition_metadata(directory: Path) -> uuid.UUID | None:
    try:
        text = (directory / PARTITION_METADATA_FILE).read_text()
    except (OSError, UnicodeDecodeError):
        return None
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    try:
        return _topic_id_from_str(fields["topic_id"].strip())
    except (KeyError, ValueError):
        return None
