"""The contract between the pure group core and the runtime that drives it.

A core handler takes a decoded request and ``now_ms`` and returns a :class:`Result`:

* ``records`` — ``__consumer_offsets`` records (key bytes, value bytes or ``None`` for a tombstone) that the
  runtime appends to the shard's partition, in order;
* ``reply`` — the response to send, released only once ``records`` are durable; ``None`` when the request
  is *parked* (a JoinGroup or SyncGroup waiting for the rest of the group) — it is answered later by a
  :class:`Reply` effect carrying the request's ticket;
* ``effects`` — :class:`Reply` (answer a parked request), :class:`Schedule` / :class:`Cancel` (keyed timers),
  :class:`Notify` (an observation for logs, metrics and the rebalance timeline; never affects the reply);
* ``on_append`` — a continuation the runtime calls exactly once, right after it tried to append
  ``records`` and before it hands the shard any other event, with ``None`` on success or the
  :class:`~regroup.protocol.errors.ErrorCode` of the failure (already mapped the way Kafka maps append
  failures). Its :class:`Result` supersedes this one's ``reply``; its own records, if any, are appended in
  turn. This is how writes that must be undone on failure (static member replacement, the leader's
  assignment, group creation) restore the previous state.

Effects are applied in order. Replies inside ``effects`` are subject to the same durability rule as ``reply``:
they are released once the append attempt has finished, whether it succeeded or failed (what must change on
failure comes from ``on_append``). The core never returns ``on_append`` without records. Timers are keyed:
scheduling a key again replaces the previous deadline; a fired timer comes back to the shard as
``on_timer(key, now_ms)`` through the shard's serial lane, and the core ignores stale fires by comparing what
the key captured (ids and generation) with the current state.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, NamedTuple, TypeVar

from mypy_extensions import mypyc_attr

from regroup.protocol.errors import ErrorCode

__all__ = [
    "Cancel",
    "CoordinatorRecord",
    "Effect",
    "Notify",
    "Reply",
    "Result",
    "Schedule",
    "Ticket",
    "TimerKey",
    "TimerKind",
]

R = TypeVar("R")

Ticket = int
"""Identifies one parked request; allocated by the runtime and passed to the core with the request."""

Opaque = object
"""What the core hands the runtime untouched (a response, an event). A module-level name rather than
``object`` itself: the compiled build resolves a dataclass's field annotations in the module's globals."""


@dataclass(slots=True, unsafe_hash=True, init=False)
class CoordinatorRecord:
    """One ``__consumer_offsets`` record: serialized key and value (``None`` = tombstone)."""

    key: bytes
    value: bytes | None

    # Its own __init__: compiled, a dataclass's generated one runs as Python (~7x slower per object).
    def __init__(self, key: bytes, value: bytes | None) -> None:
        self.key = key
        self.value = value


class TimerKind(enum.Enum):
    HEARTBEAT = "heartbeat"  # member session / new-member join timeout / pending member
    JOIN = "join"  # join phase: initial delay or rebalance timeout
    SYNC = "sync"  # pending-sync eviction
    EXPIRATION = "expiration"  # offset and group expiration job (group_id and member_id empty)
    CONSUMER_SESSION = "consumer-session"  # KIP-848 member session (Kafka's session-timeout-<g>-<m>)
    CONSUMER_REBALANCE = "consumer-rebalance"  # KIP-848 revocation deadline (rebalance-timeout-<g>-<m>)
    CONSUMER_JOIN = "consumer-join"  # classic member of a consumer group must rejoin (join-<g>-<m>)
    CONSUMER_SYNC = "consumer-sync"  # classic member of a consumer group must sync (sync-<g>-<m>)

    # Members are singletons compared by identity: hashing by identity (C) instead of Enum's hash of the
    # name (Python) takes ~250 ns off every timer-key lookup, several per heartbeat.
    __hash__ = object.__hash__


class TimerKey(NamedTuple):
    """A typed timer key (never a concatenated string: ids may contain any character). A named tuple: the
    lanes hash and compare keys several times per heartbeat, which a tuple does in C."""

    kind: TimerKind
    group_id: str = ""
    member_id: str = ""


@dataclass(slots=True, unsafe_hash=True, init=False)
class Schedule:
    key: TimerKey
    deadline_ms: int

    # Its own __init__: compiled, a dataclass's generated one runs as Python (~7x slower per object).
    def __init__(self, key: TimerKey, deadline_ms: int) -> None:
        self.key = key
        self.deadline_ms = deadline_ms


@dataclass(slots=True, unsafe_hash=True)
class Cancel:
    key: TimerKey


@dataclass(slots=True, unsafe_hash=True)
class Reply:
    """Answer a parked request."""

    ticket: Ticket
    response: Opaque


@dataclass(slots=True, unsafe_hash=True)
class Notify:
    """Something worth telling operators (e.g. a completed generation with its cause); the runtime logs
    it and hands it to observers."""

    event: Opaque


Effect = Reply | Schedule | Cancel | Notify


@mypyc_attr(native_class=False)  # compiled, a generic dataclass stays a Python class
@dataclass(slots=True, unsafe_hash=True, init=False)
class Result(Generic[R]):
    records: tuple[CoordinatorRecord, ...] = ()
    reply: R | None = None
    effects: tuple[Effect, ...] = ()
    on_append: Callable[[ErrorCode | None], Result[R]] | None = None

    # Its own __init__: compiled, it runs as C where the dataclass's generated one would run as Python.
    def __init__(
        self,
        records: tuple[CoordinatorRecord, ...] = (),
        reply: R | None = None,
        effects: tuple[Effect, ...] = (),
        on_append: Callable[[ErrorCode | None], Result[R]] | None = None,
    ) -> None:
        self.records = records
        self.reply = reply
        self.effects = effects
        self.on_append = on_append
