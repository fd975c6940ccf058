"""``regroup groups --history --group g``: a group's rebalance timeline, read from ``__group_events``.

A regroup extension. It speaks only the Kafka protocol: Metadata (is there a ``__group_events`` topic, how
many partitions), ListOffsets (earliest and latest offsets of the group's partition) and Fetch; the records
are decoded and assembled by :mod:`regroup.protocol.group_events`, so the JSON document (``--output
json``: ``{"version": 1, "action": "history", "groups": [timeline]}``) has the same timeline shape as the
broker's ``GroupCoordinator.history_view``. A broker without ``__group_events`` (e.g. Apache Kafka) gets a
one-line error and exit code 1.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from regroup.admin import jsonout
from regroup.admin.client import EARLIEST, LATEST, AdminClient, AdminError
from regroup.client.types import TopicPartition
from regroup.protocol.errors import ErrorCode
from regroup.protocol.group_events import (
    GROUP_EVENTS_TOPIC,
    EventFormatError,
    assemble_timeline,
    decode_event,
    events_partition,
)
from regroup.protocol.primitives import DecodeError
from regroup.protocol.record_batch import decode_batches

__all__ = ["HistoryUnavailable", "format_history", "read_timeline", "show_history"]


class HistoryUnavailable(Exception):
    """The cluster keeps no rebalance timeline (no ``__group_events`` topic)."""


async def read_timeline(admin: AdminClient, group_id: str, now_ms: int) -> dict[str, Any]:
    """``group_id``'s timeline assembled from its ``__group_events`` partition."""
    topics = await admin.describe_topics([GROUP_EVENTS_TOPIC])
    meta = topics[GROUP_EVENTS_TOPIC]
    if isinstance(meta, AdminError):
        if meta.code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            raise HistoryUnavailable(
                f"the cluster has no {GROUP_EVENTS_TOPIC} topic, so it keeps no rebalance history "
                "(--history needs a regroup broker)"
            )
        raise meta
    tp = TopicPartition(GROUP_EVENTS_TOPIC, events_partition(group_id, len(meta)))
    start = (await admin.list_log_offsets([tp], EARLIEST))[tp]
    end = (await admin.list_log_offsets([tp], LATEST))[tp]
    if isinstance(start, AdminError):
        raise start
    if isinstance(end, AdminError):
        raise end
    data = await admin.fetch_log(tp, start, end) if start < end else b""
    key = group_id.encode()
    events: list[dict[str, Any]] = []
    try:
        batches = decode_batches(data, allow_partial_tail=True)
    except DecodeError as exc:
        raise AdminError(ErrorCode.CORRUPT_MESSAGE, f"cannot decode {GROUP_EVENTS_TOPIC}: {exc}") from exc
    for batch in batches:
        if batch.is_control:
            continue
        for rec in batch.records:
            if rec.key != key or not start <= rec.offset < end:
                continue
            try:
                event = decode_event(rec.key, rec.value)
            except EventFormatError:
                continue
            if event is not None:
                events.append(event)
    return assemble_timeline(group_id, events, now_ms)


async def show_history(
    admin: AdminClient, groups: Sequence[str], out: TextIO, *, json: bool, now_ms: Callable[[], int]
) -> None:
    timelines = [await read_timeline(admin, g, now_ms()) for g in dict.fromkeys(groups)]
    if json:
        out.write(jsonout.dumps(jsonout.document("history", groups=timelines)))
        return
    out.write("\n".join(format_history(t) for t in timelines))


# ------------------------------------------------------------------------------------ text


def _time(ms: int | None) -> str:
    if ms is None:
        return "-"
    moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d}"


def _ms(ms: int | None) -> str:
    return "-" if ms is None else str(ms)


def _seconds(ms: int) -> str:
    return f"{ms / 1000:.1f} s"


def _who(member_id: str, instance: str | None) -> str:
    return member_id if instance is None else f"{member_id} (instance {instance})"


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def _partitions(by_topic: dict[str, list[int]]) -> str:
    return ", ".join(f"{t}-{p}" for t, ps in sorted(by_topic.items()) for p in ps)


def _consumer_detail(g: dict[str, Any]) -> list[str]:
    """A consumer group's epoch bump: the epochs and where each listed member stood in its reconciliation
    (the members the bump's operation changed; events written before ``members_listed`` list them all)."""
    lines = [
        f"  group epoch {g.get('previous_group_epoch')} -> {g['group_epoch']}, assignment epoch "
        f"{g.get('assignment_epoch')}, {g.get('state')}"
    ]
    if g.get("waiting_count") is not None:
        lines.append(f"  members not yet reconciled: {g['waiting_count']} of {g.get('member_count')}")
    for m in g["members"]:
        line = (
            f"  member {_who(m['member_id'], m.get('group_instance_id'))}: epoch {m.get('member_epoch')}, "
            f"{m.get('state')}"
        )
        pending = m.get("pending_revocation") or {}
        if pending:
            line += f", revoking {_partitions(pending)}"
        lines.append(line)
    return lines


def format_history(timeline: dict[str, Any]) -> str:
    """The readable form: a summary row per generation followed by its details, then the rebalance in
    progress (if any)."""
    group_id = timeline["group_id"]
    generations = timeline["generations"]
    lines = [f"\nGROUP {group_id}: rebalance history, {len(generations)} generation(s), oldest first (UTC)\n"]
    if not generations and timeline["in_progress"] is None:
        lines.append(f"No rebalance of group '{group_id}' is recorded.\n")
        return "".join(lines)
    rows = [["GENERATION", "REBALANCE-START", "CAUSE", "PROTOCOL", "MEMBERS", "JOIN-MS", "SYNC-MS", "LEADER"]]
    details: list[list[str]] = []
    for g in generations:
        rows.append(
            [
                str(g["generation_id"]),
                _time(g["rebalance_started_ms"]),
                g["cause"]["kind"].replace("_", "-"),
                g["protocol_name"] or "-",
                str(g["member_count"] if g.get("member_count") is not None else len(g["members"])),
                _ms(g["join_phase_ms"]),
                _ms(g["sync_phase_ms"]) if g["members"] else "-",
                g["leader_id"] or "-",
            ]
        )
        detail = [f"  cause: {g['cause']['description']}"]
        detail += [f"  also: {e['description']}" for e in g["events"]]
        detail += [
            f"  joined: {_who(m['member_id'], m['group_instance_id'])}: {m['reason']}" for m in g["joined"]
        ]
        detail += [
            f"  left: {_who(m['member_id'], m['group_instance_id'])}: {m['reason']}" for m in g["left"]
        ]
        consumer = g.get("group_type") == "consumer"
        if consumer:
            detail += _consumer_detail(g)
        elif g["waited_for"]:
            detail.append(f"  waited for: {', '.join(g['waited_for'])}")
        if g["members"] and g["stable_ms"] is None and not consumer:
            detail.append("  not stable: no assignment was stored for this generation")
        for r in g["static_replacements"]:
            detail.append(
                f"  then at {_time(r['time_ms'])}: static member {r['group_instance_id']} replaced "
                f"({r['old_member_id']} -> {r['new_member_id']}) without a rebalance"
            )
        details.append(detail)
    if generations:
        table = _table(rows)
        lines.append(table[0] + "\n")
        for row, detail in zip(table[1:], details, strict=True):
            lines.append(row + "\n")
            lines.extend(d + "\n" for d in detail)
    progress = timeline["in_progress"]
    if progress is not None:
        lines.append(
            f"\nREBALANCE IN PROGRESS since {_time(progress['rebalance_started_ms'])} "
            f"({_seconds(progress['elapsed_ms'])}), replacing generation {progress['generation_id']}\n"
        )
        lines.append(f"  cause: {progress['cause']['description']}\n")
        lines.extend(f"  also: {e['description']}\n" for e in progress.get("events", ()))
        if progress["awaiting"] and not timeline.get("live", False):
            lines.append("  members it had to wait for when it started:\n")
        for m in progress["awaiting"]:
            who = _who(m["member_id"], m["group_instance_id"])
            left = m["time_left_ms"]
            if left is None:
                when = "no eviction deadline"
            elif left >= 0:
                when = f"evicted by {m['evicted_by']} in {_seconds(left)}"
            else:
                when = f"{m['evicted_by']} deadline passed {_seconds(-left)} ago"
            lines.append(f"  waiting for {who}: {when}\n")
    return "".join(lines)
