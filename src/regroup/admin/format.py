"""Text output of ``regroup groups``, laid out exactly as Kafka 4.x's kafka-consumer-groups.sh prints it.

Every table reproduces the tool's ``printf`` formats: minimum column widths (15 for names, 10 for the
partition, 20 for assignment columns), ``-`` for missing values, the leading blank line before each
table and the trailing padding some formats leave (the members table ends each line with a space).
Functions here are pure: rows in, text out.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from regroup.admin.javacompat import hashmap_order, topic_partition_hash
from regroup.client.types import TopicPartition, java_order
from regroup.protocol.javahash import java_string_hash

__all__ = [
    "MISSING",
    "GroupInformation",
    "MemberRow",
    "OffsetRow",
    "assignment_string",
    "format_delete_groups",
    "format_delete_offsets",
    "format_list_table",
    "format_members",
    "format_offsets",
    "format_reset_csv",
    "format_reset_plan",
    "format_state",
    "parse_reset_csv_line",
    "reset_plan_order",
]

MISSING = "-"


def _pad(value: object, width: int) -> str:
    # Java's %-Ns: left-aligned, padded to N, never truncated.
    return f"{value!s:<{width}}"


def _opt(value: object | None) -> str:
    return MISSING if value is None else str(value)


# ------------------------------------------------------------------------------------------ --list


def format_list_table(rows: Sequence[tuple[str, str, str]], include_type: bool, include_state: bool) -> str:
    """``--list --state/--type``: ``GROUP [TYPE] [STATE]``; rows are (group, type, state)."""
    group_width = max((max(15, len(g)) for g, _, _ in rows), default=15) + 10
    lines = []
    for group, group_type, state in [("GROUP", "TYPE", "STATE"), *rows]:
        line = _pad(group, group_width)
        if include_type:
            line += " " + _pad(group_type, 20)
        if include_state:
            line += " " + _pad(state, 20)
        lines.append(line + "\n")
    return "".join(lines)


# ------------------------------------------------------------------------------------------ --describe


@dataclass(frozen=True, slots=True)
class OffsetRow:
    """One line of the offsets view (Kafka's ``PartitionAssignmentState``)."""

    group: str
    topic: str | None
    partition: int | None
    leader_epoch: int | None
    offset: int | None
    log_end_offset: int | None
    consumer_id: str | None
    host: str | None
    client_id: str | None

    @property
    def lag(self) -> int | None:
        if self.offset is None or self.offset == -1 or self.log_end_offset is None:
            return None
        return self.log_end_offset - self.offset


def format_offsets(rows: Sequence[OffsetRow], verbose: bool) -> str:
    group_w = max([15, *(len(r.group) for r in rows)])
    topic_w = max([15, *(len(_opt(r.topic)) for r in rows)])
    consumer_w = max([15, *(len(_opt(r.consumer_id)) for r in rows)])
    host_w = max([15, *(len(_opt(r.host)) for r in rows)])

    def line(cells: Sequence[str]) -> str:
        group, topic, partition, *middle, consumer, host, client = cells
        out = f"\n{_pad(group, group_w)} {_pad(topic, topic_w)} {_pad(partition, 10)}"
        for cell in middle:
            out += " " + _pad(cell, 15)
        return out + f" {_pad(consumer, consumer_w)} {_pad(host, host_w)} {client}"

    header = ["GROUP", "TOPIC", "PARTITION"]
    if verbose:
        header.append("LEADER-EPOCH")
    header += ["CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]
    text = line(header)
    for r in rows:
        cells = [r.group, _opt(r.topic), _opt(r.partition)]
        if verbose:
            cells.append(_opt(r.leader_epoch))
        cells += [_opt(r.offset), _opt(r.log_end_offset), _opt(r.lag), _opt(r.consumer_id), _opt(r.host)]
        cells.append(_opt(r.client_id))
        text += line(cells)
    return text + "\n"


@dataclass(frozen=True, slots=True)
class MemberRow:
    """One line of the members view (Kafka's ``MemberAssignmentState``)."""

    group: str
    consumer_id: str
    host: str
    client_id: str
    group_instance_id: str
    assignment: tuple[TopicPartition, ...]
    target_assignment: tuple[TopicPartition, ...] = ()
    current_epoch: int | None = None
    target_epoch: int | None = None


def assignment_string(partitions: Iterable[TopicPartition]) -> str:
    """``topicA:0,1;topicB:0``: topics sorted, partitions sorted; ``-`` when empty."""
    grouped: dict[str, list[int]] = {}
    for tp in partitions:
        grouped.setdefault(tp.topic, []).append(tp.partition)
    if not grouped:
        return MISSING
    parts = [f"{t}:{','.join(str(p) for p in sorted(ps))}" for t, ps in grouped.items()]
    return ";".join(sorted(parts, key=java_order))


def format_members(rows: Sequence[MemberRow], verbose: bool, widths_from_rows: bool = True) -> str:
    """The members table. With ``widths_from_rows`` false (a group that has nothing to show) the header
    keeps its minimum widths, as Kafka prints it then."""
    sized = rows if widths_from_rows else []
    group_w = max([15, *(len(r.group) for r in sized)])
    consumer_w = max([15, *(len(r.consumer_id) for r in sized)])
    instance_w = max([17, *(len(r.group_instance_id) for r in sized)])
    host_w = max([15, *(len(r.host) for r in sized)])
    client_w = max([15, *(len(r.client_id) for r in sized)])
    current_w = max([20, *(len(assignment_string(r.assignment)) for r in sized)])
    target_w = max([20, *(len(assignment_string(r.target_assignment)) for r in sized)])
    with_instance = any(r.group_instance_id for r in sized)

    def base(group: str, consumer: str, instance: str, host: str, client: str, partitions: str) -> str:
        out = f"{_pad(group, group_w)} {_pad(consumer, consumer_w)} "
        if with_instance:
            out += f"{_pad(instance, instance_w)} "
        return out + f"{_pad(host, host_w)} {_pad(client, client_w)} {_pad(partitions, 15)} "

    def extra(current_epoch: str, current: str, target_epoch: str, target: str) -> str:
        return (
            f"{_pad(current_epoch, 15)} {_pad(current, current_w)} "
            f"{_pad(target_epoch, 15)} {_pad(target, target_w)}"
        )

    text = "\n" + base("GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS")
    if verbose:
        text += extra("CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT")
    text += "\n"
    for r in rows:
        text += base(r.group, r.consumer_id, r.group_instance_id, r.host, r.client_id, str(len(r.assignment)))
        if verbose:
            text += extra(
                _opt(r.current_epoch),
                assignment_string(r.assignment),
                _opt(r.target_epoch),
                assignment_string(r.target_assignment),
            )
        text += "\n"
    return text


@dataclass(frozen=True, slots=True)
class GroupInformation:
    """The state view of one group."""

    group: str
    coordinator_host: str
    coordinator_port: int
    coordinator_id: int
    assignment_strategy: str
    state: str
    num_members: int
    group_epoch: int | None = None
    target_assignment_epoch: int | None = None

    @property
    def coordinator(self) -> str:
        return f"{self.coordinator_host}:{self.coordinator_port}  ({self.coordinator_id})"


def format_state(info: GroupInformation, verbose: bool, health: str | None = None) -> str:
    """Kafka's state table; ``health`` (regroup's ``--health``) adds an ASSIGNMENT-HEALTH column last."""
    coordinator_w = max(25, len(info.coordinator))
    group_w = max(15, len(info.group))
    strategy = info.assignment_strategy or MISSING

    def line(cells: Sequence[str], extra: str | None = None) -> str:
        group, coordinator, assignor, state, *rest, members = cells
        out = f"\n{_pad(group, group_w)} {_pad(coordinator, coordinator_w)} "
        out += f"{_pad(assignor, 20)} {_pad(state, 20)}"
        if rest:
            out += f" {_pad(rest[0], 15)} {_pad(rest[1], 25)}"
        if extra is not None:
            return out + f" {_pad(members, 10)} {extra}"
        return out + f" {members}"

    if verbose:
        header = ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE"]
        header += ["GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS"]
        row = [info.group, info.coordinator, strategy, info.state]
        row += [_opt(info.group_epoch), _opt(info.target_assignment_epoch), str(info.num_members)]
    else:
        header = ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]
        row = [info.group, info.coordinator, strategy, info.state, str(info.num_members)]
    if health is not None:
        return line(header, "ASSIGNMENT-HEALTH") + line(row, health) + "\n"
    return line(header) + line(row) + "\n"


# ------------------------------------------------------------------------------------------ --reset-offsets


def reset_plan_order(
    plan: dict[str, dict[TopicPartition, int]],
) -> list[tuple[str, list[tuple[TopicPartition, int]]]]:
    """The plan in the order Kafka prints it: both levels are HashMaps (groups keyed by id, partitions
    by ``TopicPartition``), filled in the order the dicts were."""
    ordered = []
    for group in hashmap_order(plan, java_string_hash):
        offsets = plan[group]
        ordered.append((group, [(tp, offsets[tp]) for tp in hashmap_order(offsets, topic_partition_hash)]))
    return ordered


def format_reset_plan(plan: dict[str, dict[TopicPartition, int]]) -> str:
    """``GROUP TOPIC PARTITION NEW-OFFSET`` (the header only when at least one group was considered)."""
    ordered = reset_plan_order(plan)
    group_w = max([15, *(len(g) for g in plan)])
    topic_w = max([15, *(len(tp.topic) for offsets in plan.values() for tp in offsets)])

    def line(group: str, topic: str, partition: object, offset: object) -> str:
        return f"\n{_pad(group, group_w)} {_pad(topic, topic_w)} {_pad(partition, 10)} {offset}"

    text = line("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET") if plan else ""
    for group, offsets in ordered:
        for tp, offset in offsets:
            text += line(group, tp.topic, tp.partition, offset)
    return text + "\n"


def _csv_field(value: str) -> str:
    # Jackson's CsvEncoder quotes a value holding any character up to the largest of separator ',',
    # quote '"' and line feed (its "minimum safe character" is one above), doubling embedded quotes.
    if any(c <= "," for c in value):
        return '"' + value.replace('"', '""') + '"'
    return value


def format_reset_csv(plan: dict[str, dict[TopicPartition, int]], with_group: bool) -> str:
    """``--export``: one ``[group,]topic,partition,offset`` line per partition, then the blank line that
    Kafka's final ``println`` adds."""
    text = ""
    for group, offsets in reset_plan_order(plan):
        for tp, offset in offsets:
            fields = [_csv_field(tp.topic), str(tp.partition), str(offset)]
            if with_group:
                fields.insert(0, _csv_field(group))
            text += ",".join(fields) + "\n"
    return text + "\n"


def parse_reset_csv_line(line: str, with_group: bool) -> tuple[str, str, int, int]:
    """One line of a ``--from-file`` plan as (group, topic, partition, offset); ``group`` is ``""`` for
    the three-column form.

    Like Jackson's CSV reader behind Kafka's tool, missing trailing columns take their defaults (``""``,
    0) while extra columns or a non-numeric partition/offset raise ``ValueError``.
    """
    fields = next(csv.reader(io.StringIO(line)), [])
    expected = 4 if with_group else 3
    if len(fields) > expected:
        raise ValueError(f"too many entries: expected at most {expected}, found {len(fields)}")
    fields += [""] * (expected - len(fields))
    group = fields[0] if with_group else ""
    topic, partition, offset = fields[-3:]
    return group, topic, _csv_int(partition, 2**31), _csv_int(offset, 2**63)


def _csv_int(text: str, bound: int) -> int:
    if text == "":
        return 0
    if not re.fullmatch(r"[+-]?[0-9]+", text) or not -bound <= int(text) < bound:
        raise ValueError(f"'{text}' is not a number")
    return int(text)


# ------------------------------------------------------------------------------------------ --delete


def format_delete_groups(deleted: Sequence[str], failed: Sequence[tuple[str, str]]) -> str:
    """Kafka's deletion report; ``failed`` holds (group, Java exception string) pairs. Both lists must
    already be in HashMap order (see :func:`regroup.admin.javacompat.hashmap_order`)."""
    quoted = ", ".join(f"'{g}'" for g in deleted)
    if not failed:
        return f"Deletion of requested consumer groups ({quoted}) was successful.\n"
    text = "\nError: Deletion of some consumer groups failed:\n"
    for group, error in failed:
        text += f"* Group '{group}' could not be deleted due to: {error}\n"
    if deleted:
        text += f"\nThese consumer groups were deleted successfully: {quoted}\n"
    return text


def format_delete_offsets(rows: Sequence[tuple[str, int | None, str | None]]) -> str:
    """The ``TOPIC PARTITION STATUS`` table; rows are (topic, partition or None, error or None), sorted
    as Kafka sorts them (by the string topic + partition)."""
    topic_w = max([15, *(len(t) for t, _, _ in rows)])

    def key(row: tuple[str, int | None, str | None]) -> bytes:
        topic, partition, _ = row
        return java_order(topic + str(-1 if partition is None else partition))

    def line(topic: str, partition: str, status: str) -> str:
        return f"\n{_pad(topic, topic_w)} {_pad(partition, 10)} {_pad(status, 15)}"

    text = line("TOPIC", "PARTITION", "STATUS")
    for topic, partition, error in sorted(rows, key=key):
        text += line(topic, _opt(partition), "Successful" if error is None else f"Error: {error}")
    return text + "\n"
