"""The records of ``__group_events``, regroup's rebalance timeline, and how a timeline is assembled from them.

``__group_events`` is an internal, append-only topic (``cleanup.policy=delete``, bounded by ``retention.ms``
and ``retention.bytes``) with one partition per ``__consumer_offsets`` partition: a group's events go to
partition ``abs(java_hash(group_id)) % partitions`` (Kafka's ``partitionFor``), the same index as its
coordinator partition whenever both topics have the same partition count.

Record key: the group id, UTF-8. Record value: one compact JSON object (UTF-8) with at least::

    {"version": 1, "type": <type>, "group_id": str, "time_ms": int, "generation_id": int}

Readers skip records whose ``version`` they do not know and ignore fields they do not know (fields are only
ever added within a version). Types of version 1:

``rebalance_started`` — the group entered PreparingRebalance and has to wait for members
    (``time_ms`` = ``rebalance_started_ms``; ``generation_id`` = the generation being replaced)::

        "cause": Cause, "events": [Cause], "rebalance_started_ms": int, "join_deadline_ms": int | null,
        "awaiting": [{"member_id", "group_instance_id", "deadline_ms": int | null, "evicted_by"}]

    ``deadline_ms`` is when that member is evicted if it has not rejoined (its session expiry, or the
    rebalance timeout for dynamic members, whichever is first); ``evicted_by`` says which.

``generation_completed`` — the join phase completed (``time_ms`` = ``join_completed_ms``)::

        "protocol_type", "protocol_name", "leader_id": str | null,
        "members": [{"member_id", "group_instance_id"}], "cause": Cause, "events": [Cause],
        "waited_for": [member_id], "joined": [Change], "left": [Change],
        "rebalance_started_ms": int, "join_completed_ms": int, "join_phase_ms": int

``generation_stable`` — the leader's assignment is durable (``time_ms`` = ``stable_ms``)::

        "join_completed_ms": int, "stable_ms": int, "sync_phase_ms": int

``static_member_replaced`` — a static member came back under a new member id in a Stable group and the
    selected protocol stays, so the generation goes on without a rebalance::

        "group_instance_id", "old_member_id", "new_member_id", "reason": str | null

``consumer_epoch_bumped`` — a consumer group (KIP-848) got a new group epoch (``generation_id`` = the new
    group epoch; ``time_ms`` = when; written once the bump is durable)::

        "group_type": "consumer", "group_epoch": int, "previous_group_epoch": int,
        "assignment_epoch": int, "state": str, "assignor": str | null, "cause": Cause, "events": [Cause],
        "joined": [Change], "left": [Change],
        "members": [{"member_id", "group_instance_id", "member_epoch": int,
                     "state": "STABLE" | "UNREVOKED_PARTITIONS" | "UNRELEASED_PARTITIONS",
                     "assigned": {topic: [partition]}, "pending_revocation": {topic: [partition]},
                     "target": {topic: [partition]}}],
        "members_listed": "changed", "member_count": int, "waiting_count": int

    ``assignment_epoch``, ``state`` and ``members`` are as the operation that bumped the epoch left the
    group (the target assignment may be deferred, members reconcile on their next heartbeats). ``members``
    lists only the members that operation changed (subscription, target or current assignment: the joining
    or resubscribing member, and those whose target a new target assignment changed), so an event's size
    does not grow with the group; ``member_count`` is how many members the group has and ``waiting_count``
    how many are not yet STABLE at the assignment epoch. Events without ``members_listed`` (written before
    these fields were added) list every member. Cause kinds:
    ``member_joined``, ``member_left``, ``member_fenced_session_timeout``,
    ``member_fenced_rebalance_timeout``, ``subscription_changed``, ``regex_resolution_changed``,
    ``topic_metadata_changed``, ``static_member_replaced``. Added within version 1: older readers skip it.

``Cause`` is ``{"kind": str, "description": str, ...}``: ``kind`` is one of ``member_joined``,
``member_left``, ``session_expired``, ``pending_member_expired``, ``leader_rejoined``,
``member_metadata_changed``, ``static_member_replaced``, ``pending_sync_expired``, ``join_deadline_evicted``,
``member_rejected``, ``loaded_over_capacity``, ``assignment_append_failed``; ``description`` is one readable
sentence; the other fields are the cause's own (member ids, timeouts, reasons). ``Change`` is
``{"member_id", "group_instance_id", "reason"}``.

Events are written at least once: a reader must tolerate duplicates (:func:`assemble_timeline` does).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Final

from regroup.protocol.javahash import group_partition

__all__ = [
    "FORMAT_VERSION",
    "GROUP_EVENTS_TOPIC",
    "EventFormatError",
    "assemble_timeline",
    "decode_event",
    "encode_event",
    "events_partition",
]

GROUP_EVENTS_TOPIC: Final = "__group_events"
FORMAT_VERSION: Final = 1
EVENT_TYPES: Final = frozenset(
    {
        "rebalance_started",
        "generation_completed",
        "generation_stable",
        "static_member_replaced",
        "consumer_epoch_bumped",
    }
)

Event = dict[str, Any]


class EventFormatError(ValueError):
    """A ``__group_events`` record that is not a valid event."""


def events_partition(group_id: str, partitions: int) -> int:
    """The partition of ``__group_events`` that holds ``group_id``'s events (Kafka's ``partitionFor``:
    ``Utils.abs(groupId.hashCode()) % partitions``)."""
    return group_partition(group_id, partitions)


def encode_event(event: Mapping[str, Any]) -> tuple[bytes, bytes]:
    """``(key, value)`` of the record for ``event`` (which must carry ``type`` and ``group_id``)."""
    if event.get("type") not in EVENT_TYPES or not isinstance(event.get("group_id"), str):
        raise EventFormatError(f"not a group event: {event!r}")
    doc = {"version": FORMAT_VERSION, **event}
    value = json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()
    return event["group_id"].encode(), value


def decode_event(key: bytes | None, value: bytes | None) -> Event | None:
    """The event of one record; None for a record of a newer format version (skip it). Raises
    :class:`EventFormatError` when the record is not an event."""
    if value is None:
        raise EventFormatError("a group event record has no value")
    try:
        doc = json.loads(value)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise EventFormatError(f"not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise EventFormatError("the value is not a JSON object")
    version = doc.get("version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise EventFormatError("no integer 'version'")
    if version > FORMAT_VERSION:
        return None
    group_id = doc.get("group_id")
    if not isinstance(group_id, str) or (key is not None and key != group_id.encode()):
        raise EventFormatError("'group_id' is missing or differs from the record key")
    if doc.get("type") not in EVENT_TYPES:
        return None  # a type added later within this version: nothing to show for it
    for name in ("time_ms", "generation_id"):
        if not isinstance(doc.get(name), int):
            raise EventFormatError(f"no integer {name!r}")
    return doc


def _same_generation(entry: Event, event: Event) -> bool:
    return bool(
        entry["generation_id"] == event["generation_id"]
        and entry["join_completed_ms"] == event.get("join_completed_ms", entry["join_completed_ms"])
    )


def assemble_timeline(
    group_id: str, events: Iterable[Mapping[str, Any]], now_ms: int, *, limit: int | None = None
) -> Event:
    """The timeline of ``group_id`` from its events in log order (other groups' events are ignored).

    Returns ``{"group_id", "now_ms", "generations": [Generation], "in_progress": InProgress | null}`` with
    generations oldest first (the last ``limit`` when given). A consumer group's generations are its epoch
    bumps (:func:`consumer_generation`). A Generation is a ``generation_completed``
    event's fields (without ``version``/``type``/``time_ms``) plus ``stable_ms`` and ``sync_phase_ms``
    (null until the ``generation_stable`` event) and ``static_replacements`` (``static_member_replaced``
    events during it). InProgress is the last ``rebalance_started`` event not followed by a completed
    generation, plus ``elapsed_ms`` and per awaited member ``time_left_ms`` (``deadline_ms - now_ms``,
    negative once overdue, null without a deadline).
    """
    generations: list[Event] = []
    pending: Event | None = None
    for raw in events:
        if raw.get("group_id") != group_id:
            continue
        event = dict(raw)
        kind = event.pop("type", None)
        event.pop("version", None)
        time_ms = event.pop("time_ms", None)
        if kind == "rebalance_started":
            pending = event
        elif kind == "generation_completed":
            if pending is not None and pending["rebalance_started_ms"] <= event["join_completed_ms"]:
                pending = None
            entry = {**event, "stable_ms": None, "sync_phase_ms": None, "static_replacements": []}
            if generations and _same_generation(generations[-1], event):
                entry["stable_ms"] = generations[-1]["stable_ms"]
                entry["sync_phase_ms"] = generations[-1]["sync_phase_ms"]
                entry["static_replacements"] = generations[-1]["static_replacements"]
                generations[-1] = entry  # a duplicate (events are written at least once)
            else:
                generations.append(entry)
        elif kind == "consumer_epoch_bumped":
            entry = consumer_generation(event, time_ms)
            if generations and _same_generation(generations[-1], entry):
                generations[-1] = entry
            else:
                generations.append(entry)
        elif kind == "generation_stable":
            for entry in reversed(generations):
                if _same_generation(entry, event):
                    entry["stable_ms"] = event["stable_ms"]
                    entry["sync_phase_ms"] = event["sync_phase_ms"]
                    break
        elif kind == "static_member_replaced":
            for entry in reversed(generations):
                if entry["generation_id"] == event["generation_id"]:
                    replacement = {"time_ms": time_ms, **event}
                    replacement.pop("group_id", None)
                    replacement.pop("generation_id", None)
                    if replacement not in entry["static_replacements"]:
                        entry["static_replacements"].append(replacement)
                    break
    if limit is not None:
        generations = generations[-limit:] if limit > 0 else []
    return {
        "group_id": group_id,
        "now_ms": now_ms,
        "generations": generations,
        "in_progress": None if pending is None else in_progress_view(pending, now_ms),
    }


def consumer_generation(event: Mapping[str, Any], time_ms: int) -> Event:
    """A ``consumer_epoch_bumped`` event as a timeline generation: the classic fields a reader shows (no
    join or sync phase: ``waited_for`` are the listed members not yet reconciled to the assignment epoch —
    ``waiting_count`` counts them all — and ``stable_ms`` is the bump's time when the group was Stable right
    after it) plus the event's own."""
    members = event.get("members", [])
    assignment_epoch = event.get("assignment_epoch")
    stable = event.get("state") == "Stable"
    return {
        **event,
        "protocol_type": "consumer",
        "protocol_name": event.get("assignor"),
        "leader_id": None,
        "waited_for": [
            m["member_id"]
            for m in members
            if m.get("state") != "STABLE" or m.get("member_epoch") != assignment_epoch
        ],
        "rebalance_started_ms": time_ms,
        "join_completed_ms": time_ms,
        "join_phase_ms": 0,
        "stable_ms": time_ms if stable else None,
        "sync_phase_ms": 0 if stable else None,
        "static_replacements": [],
    }


def in_progress_view(started: Mapping[str, Any], now_ms: int) -> Event:
    """A ``rebalance_started`` event's fields as the timeline's ``in_progress`` entry at ``now_ms``."""
    view = {k: v for k, v in started.items() if k not in ("version", "type", "time_ms")}
    view["elapsed_ms"] = now_ms - view["rebalance_started_ms"]
    view["awaiting"] = [
        {**m, "time_left_ms": None if m.get("deadline_ms") is None else m["deadline_ms"] - now_ms}
        for m in view.get("awaiting", ())
    ]
    return view
