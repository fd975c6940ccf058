"""The actions of ``regroup groups`` (Kafka's ``ConsumerGroupService``): list, describe, delete, reset
offsets, delete offsets.

Output goes where Kafka's tool puts it: tables and ``Error:`` lines on stdout, state notices and
warnings on stderr. Failures Kafka reports as "Executing consumer group command failed due to ..." raise
:class:`CommandFailed` (exit code 0, as in Kafka); command-line mistakes found while running raise
:class:`~regroup.admin.options.UsageError` (exit code 1).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from regroup.admin import jsonout
from regroup.admin.client import (
    EARLIEST,
    LATEST,
    AdminClient,
    AdminError,
    CommittedOffset,
    GroupDescription,
    GroupListing,
    PartitionMetadata,
    canonical_state,
)
from regroup.admin.format import (
    GroupInformation,
    MemberRow,
    OffsetRow,
    format_delete_groups,
    format_delete_offsets,
    format_list_table,
    format_members,
    format_offsets,
    format_reset_csv,
    format_reset_plan,
    format_state,
    parse_reset_csv_line,
    reset_plan_order,
)
from regroup.admin.javacompat import (
    JavaParseError,
    exception_string,
    hashmap_order,
    java_split,
    parse_datetime,
    parse_duration_ms,
    topic_partition_hash,
)
from regroup.admin.options import Options, UsageError
from regroup.client.types import TopicPartition, java_order
from regroup.properties import load_properties
from regroup.protocol.assignment_health import CONSUMER_PROTOCOL_TYPE, check_assignment, decode_member
from regroup.protocol.errors import ErrorCode
from regroup.protocol.javahash import java_string_hash

__all__ = [
    "CONSUMER_GROUP_STATES",
    "CommandFailed",
    "GroupsCommand",
    "Settings",
    "UnsupportedSecurityError",
    "settings_from",
]

# GroupState.groupStatesForType(CONSUMER), in the order Kafka 4.3's message happens to list them.
CONSUMER_GROUP_STATES = (
    "Empty",
    "Assigning",
    "Stable",
    "CompletingRebalance",
    "Dead",
    "Reconciling",
    "PreparingRebalance",
)
_GROUP_TYPES = {"classic": "Classic", "consumer": "Consumer", "share": "Share", "streams": "Streams"}
_REBALANCING = ("PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling")
_CONSUMER_PROTOCOL_TYPES = ("", "consumer")
_LONG = re.compile(r"[+-]?[0-9]+")
# Errors an admin commit gets when the group has (again) active members.
_GROUP_ACTIVE_ERRORS = frozenset(
    {
        ErrorCode.UNKNOWN_MEMBER_ID,
        ErrorCode.ILLEGAL_GENERATION,
        ErrorCode.REBALANCE_IN_PROGRESS,
        ErrorCode.STALE_MEMBER_EPOCH,
        ErrorCode.FENCED_MEMBER_EPOCH,
    }
)


class CommandFailed(Exception):
    """Kafka's ``Error: Executing consumer group command failed due to <detail>`` (stdout, exit 0)."""


class UnsupportedSecurityError(Exception):
    """The command config asks for TLS or SASL, which this tool does not speak."""


# ------------------------------------------------------------------------------------ settings


@dataclass(frozen=True, slots=True)
class Settings:
    bootstrap_servers: str
    timeout_ms: int
    client_id: str = "regroup-admin"
    request_timeout_ms: int | None = None
    retry_backoff_ms: int = 100


def _single(values: Sequence[str], option: str) -> str | None:
    if len(values) > 1:
        raise CommandFailed(f"Found multiple arguments for option {option}, but you asked for only one")
    return values[0] if values else None


def _long(text: str, option: str) -> int:
    if _LONG.fullmatch(text) is None or not -(2**63) <= int(text) < 2**63:
        raise CommandFailed(f"Cannot parse argument '{text}' of option {option}")
    return int(text)


def settings_from(opts: Options, warnings: TextIO) -> Settings:
    """Connection settings from the options and ``--command-config`` (raises :class:`CommandFailed` for
    what Kafka's tool reports at start-up, :class:`UnsupportedSecurityError` for TLS/SASL)."""
    bootstrap = _single(opts.bootstrap_server, "bootstrap-server") or ""
    timeout_text = _single(opts.timeout, "timeout")
    timeout_ms = 30000 if timeout_text is None else _long(timeout_text, "timeout")
    for option, values in (("to-offset", opts.to_offset), ("shift-by", opts.shift_by)):
        for v in values:
            _long(v, option)
    _single(opts.shift_by, "shift-by")
    _single(opts.by_duration, "by-duration")
    _single(opts.command_config, "command-config")

    props: dict[str, str] = {}
    if opts.command_config:
        path = opts.command_config[0]
        try:
            props = load_properties(Path(path).read_text(encoding="latin-1"))
        except OSError as exc:
            raise CommandFailed(
                f"cannot read the --command-config file {path}: {exc.strerror or exc}"
            ) from exc
    protocol = props.get("security.protocol", "PLAINTEXT").strip().upper()
    if protocol != "PLAINTEXT":
        raise UnsupportedSecurityError(
            f"security.protocol={props['security.protocol'].strip()} (from --command-config) is not "
            "supported: regroup groups connects over PLAINTEXT only; use Kafka's kafka-consumer-groups.sh "
            "for TLS/SASL listeners"
        )
    ignored = sorted(k for k in props if k.startswith(("ssl.", "sasl.")))
    if ignored:
        print(f"WARN: ignoring security settings from --command-config: {', '.join(ignored)}", file=warnings)

    def int_prop(name: str) -> int | None:
        value = props.get(name)
        if value is None:
            return None
        if _LONG.fullmatch(value.strip()) is None:
            raise CommandFailed(f"Invalid value {value} for configuration {name}: Not a number of type INT")
        return int(value)

    return Settings(
        bootstrap_servers=bootstrap,
        timeout_ms=max(0, timeout_ms),
        client_id=props.get("client.id", "").strip() or "regroup-admin",
        request_timeout_ms=int_prop("request.timeout.ms"),
        retry_backoff_ms=int_prop("retry.backoff.ms") or 100,
    )


# ------------------------------------------------------------------------------------ topic arguments


def parse_topic_with_partitions(arg: str) -> list[TopicPartition]:
    """``topic:0,1,2`` as Kafka parses it (``IllegalArgumentException`` → :class:`UsageError`)."""
    parts = java_split(arg, ":")
    if len(parts) != 2:
        raise UsageError(f"Invalid topic arg '{arg}', expected topic name and partitions")
    topic, partitions = parts
    out = []
    for p in java_split(partitions, ","):
        if _LONG.fullmatch(p) is None or not -(2**31) <= int(p) < 2**31:
            raise UsageError(f"Invalid partition '{p}' specified in topic arg '{arg}''")
        out.append(TopicPartition(topic, int(p)))
    return out


# ------------------------------------------------------------------------------------ the command


class GroupsCommand:
    """Runs one action against a cluster through an :class:`AdminClient`."""

    def __init__(
        self,
        opts: Options,
        admin: AdminClient,
        out: TextIO,
        err: TextIO,
        *,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        self.opts = opts
        self.admin = admin
        self.out = out
        self.err = err
        self.json = bool(opts.output) and opts.output[-1] == "json"
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))

    async def run(self) -> None:
        action = self.opts.action
        if action == "list":
            await self.list_groups()
        elif action == "describe":
            await self.describe()
        elif action == "delete":
            await self.delete()
        elif action == "reset-offsets":
            await self.reset_offsets()
        elif action == "history":
            from regroup.admin.history import show_history

            await show_history(self.admin, self.opts.group, self.out, json=self.json, now_ms=self._clock_ms)
        else:
            await self.delete_offsets()

    # -------------------------------------------------------------------------------- helpers

    def _print_error(self, message: str) -> None:
        """Kafka's ``printError``: a blank line, then ``Error: message``, on stdout."""
        self.out.write(f"\nError: {message}\n")

    def _emit(self, doc: dict[str, Any]) -> None:
        self.out.write(jsonout.dumps(doc))

    async def _consumer_group_ids(self) -> list[str]:
        listings = await self.admin.list_groups(
            types=("Classic", "Consumer"), protocol_types=_CONSUMER_PROTOCOL_TYPES
        )
        return [g.group_id for g in listings]

    async def _groups_in_scope(self) -> list[str]:
        if self.opts.all_groups:
            return await self._consumer_group_ids()
        return list(dict.fromkeys(self.opts.group))

    # -------------------------------------------------------------------------------- --list

    async def list_groups(self) -> None:
        include_type, include_state = bool(self.opts.type), bool(self.opts.state)
        if not include_type and not include_state:
            listings = await self.admin.list_groups(
                types=("Classic", "Consumer"), protocol_types=_CONSUMER_PROTOCOL_TYPES
            )
            if self.json:
                self._emit(jsonout.document("list", groups=[_listing_json(g) for g in listings]))
            else:
                self.out.write("".join(f"{g.group_id}\n" for g in listings))
            return
        # Repeating a value-less --state/--type is harmless: joptsimple only counts the values.
        states = _parse_states(_single([v for v in self.opts.state if v], "state") or "")
        types = _parse_types(_single([v for v in self.opts.type if v], "type") or "")
        listings = await self.admin.list_groups(
            states=states, types=types, protocol_types=_CONSUMER_PROTOCOL_TYPES
        )
        if self.json:
            self._emit(jsonout.document("list", groups=[_listing_json(g) for g in listings]))
            return
        rows = [(g.group_id, _type_name(g.type), g.state or "Unknown") for g in listings]
        self.out.write(format_list_table(rows, include_type, include_state))

    # -------------------------------------------------------------------------------- --describe

    async def _describe_all(self) -> list[tuple[str, GroupDescription | str | AdminError]]:
        """Each group in scope (sorted, as Kafka's TreeMap) with its description or an error text for
        groups that cannot be described as consumer groups.

        A group the broker reports as not found (DescribeGroups v6+, KIP-1043) fails the command as in
        Kafka's tool, which reads every future of ``describedGroups()`` (a HashMap copy) and stops at the
        first failed one; older brokers describe it as Dead instead, printed per group. ``--output json``
        keeps a per-group entry for it (the AdminError; the JSON of a Dead group)."""
        group_ids = await self._groups_in_scope()
        described = await self.admin.describe_groups(group_ids)
        if not self.json:
            for group in hashmap_order(list(described), java_string_hash, copied=True):
                d = described[group]
                if isinstance(d, AdminError):
                    raise CommandFailed(d.java)
        out: list[tuple[str, GroupDescription | str | AdminError]] = []
        for group in sorted(described, key=java_order):
            d = described[group]
            if isinstance(d, AdminError):
                if d.code is ErrorCode.GROUP_ID_NOT_FOUND:
                    out.append((group, d))
                    continue
                raise CommandFailed(d.java)
            if d.protocol_type not in _CONSUMER_PROTOCOL_TYPES and d.state != "Dead":
                out.append(
                    (group, f"Group '{group}' is not a consumer group (protocol type '{d.protocol_type}').")
                )
                continue
            out.append((group, d))
        return out

    def _should_print(self, group: str, state: str, rows: int) -> bool:
        """Kafka's ``shouldPrintMemberState``: the notice for the group's state, and whether to print."""
        if state == "Dead":
            self._print_error(f"Consumer group '{group}' does not exist.")
            return False
        if state == "Empty":
            self.err.write(f"\nConsumer group '{group}' has no active members.\n")
        elif state in _REBALANCING:
            self.err.write(f"\nWarning: Consumer group '{group}' is rebalancing.\n")
        elif state != "Stable":
            raise CommandFailed(f"Expected a valid consumer group state, but found '{state}'.")
        return rows > 0

    async def describe(self) -> None:
        o = self.opts
        groups = await self._describe_all()
        if o.members:
            view = "members"
        elif o.state:
            view = "state"
        else:
            view = "offsets"
        docs: list[dict[str, Any]] = []
        if view == "offsets":
            rows_by_group = await self._offset_rows([d for _, d in groups if isinstance(d, GroupDescription)])
        for group, d in groups:
            if isinstance(d, AdminError):  # not found (JSON only): as a Dead group
                docs.append(_missing_json(group, view))
                continue
            if isinstance(d, str):
                if self.json:
                    docs.append({"group": group, "state": None, "error": d})
                else:
                    self._print_error(d)
                continue
            if view == "offsets":
                rows = rows_by_group.get(group, [])
                if self.json:
                    docs.append(self._offsets_json(d, rows))
                elif self._should_print(group, d.state, len(rows)):
                    self.out.write(format_offsets(rows, o.verbose))
            elif view == "members":
                members = _member_rows(d)
                if self.json:
                    docs.append(self._members_json(d, members))
                    continue
                show = self._should_print(group, d.state, len(members))
                if d.state != "Dead":
                    self.out.write(format_members(members, o.verbose, widths_from_rows=show))
            else:
                info = GroupInformation(
                    group=group,
                    coordinator_host=d.coordinator.host,
                    coordinator_port=d.coordinator.port,
                    coordinator_id=d.coordinator.node_id,
                    assignment_strategy=d.assignor,
                    state=d.state,
                    num_members=len(d.members),
                    group_epoch=d.group_epoch,
                    target_assignment_epoch=d.target_assignment_epoch,
                )
                health = await self._assignment_health(d) if o.health else None
                if self.json:
                    doc = _state_json(d, info)
                    if health is not None:
                        doc["assignment_health"] = health
                    docs.append(doc)
                elif self._should_print(group, d.state, 1):
                    self.out.write(format_state(info, o.verbose, health))
        if self.json:
            self._emit(jsonout.document("describe", view=view, groups=docs))

    async def _assignment_health(self, d: GroupDescription) -> str:
        """regroup's ``--health``, judged here from DescribeGroups and Metadata (so it works against any
        Kafka broker): ``-`` unless the group is a Stable consumer-protocol group."""
        if d.state != "Stable" or d.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return "-"
        members = [decode_member(m.member_id, m.metadata, m.raw_assignment) for m in d.members]
        topics = sorted({t for m in members for t in m.topics})
        described = await self.admin.describe_topics(topics) if topics else {}
        counts = {t: len(ps) for t, ps in described.items() if not isinstance(ps, AdminError)}
        return check_assignment(members, counts).summary()

    async def _offset_rows(self, descriptions: Sequence[GroupDescription]) -> dict[str, list[OffsetRow]]:
        """Kafka's ``collectGroupsOffsets``: assigned partitions (members with the most partitions first),
        then committed partitions nobody owns; each block sorted by topic and partition."""
        live = [d for d in descriptions if d.state != "Dead"]
        committed_by_group = await self.admin.committed_offsets_of([d.group_id for d in live])
        committed: dict[str, dict[TopicPartition, CommittedOffset | None]] = {}
        for d in live:
            c = committed_by_group[d.group_id]
            if isinstance(c, AdminError):
                raise CommandFailed(c.java)
            committed[d.group_id] = c
        wanted: set[TopicPartition] = set()
        for d in live:
            wanted.update(tp for m in d.members for tp in m.assignment)
            wanted.update(committed[d.group_id])
        end_offsets = await self._log_end_offsets(wanted)

        def rows_for(
            group: str, tps: Iterable[TopicPartition], owner: tuple[str, str, str]
        ) -> list[OffsetRow]:
            offsets = committed[group]
            rows = []
            for tp in sorted(set(tps), key=TopicPartition.sort_key):
                c = offsets.get(tp)
                rows.append(
                    OffsetRow(
                        group=group,
                        topic=tp.topic,
                        partition=tp.partition,
                        leader_epoch=c.leader_epoch if c is not None else None,
                        offset=c.offset if c is not None else None,
                        log_end_offset=end_offsets.get(tp),
                        consumer_id=owner[0],
                        host=owner[1],
                        client_id=owner[2],
                    )
                )
            return rows

        out: dict[str, list[OffsetRow]] = {}
        for d in live:
            rows: list[OffsetRow] = []
            assigned: set[TopicPartition] = set()
            members = sorted((m for m in d.members if m.assignment), key=lambda m: -len(set(m.assignment)))
            for m in members:
                assigned.update(m.assignment)
                rows += rows_for(d.group_id, m.assignment, (m.member_id, m.host, m.client_id))
            unowned = [tp for tp in committed[d.group_id] if tp not in assigned]
            rows += rows_for(d.group_id, unowned, ("-", "-", "-"))
            out[d.group_id] = rows
        return out

    async def _log_end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Log end offsets of partitions that exist and have a leader; the others show ``-``."""
        wanted = set(partitions)
        topics = await self.admin.describe_topics(sorted({tp.topic for tp in wanted}))
        with_leader = [
            tp
            for tp in wanted
            if isinstance(meta := topics.get(tp.topic), list)
            and any(p.partition == tp.partition and p.leader >= 0 for p in meta)
        ]
        offsets = await self.admin.list_log_offsets(with_leader, LATEST)
        return {tp: v for tp, v in offsets.items() if isinstance(v, int)}

    def _offsets_json(self, d: GroupDescription, rows: Sequence[OffsetRow]) -> dict[str, Any]:
        return {
            "group": d.group_id,
            "state": d.state,
            "error": _dead(d),
            "partitions": [
                {
                    "topic": r.topic,
                    "partition": r.partition,
                    "leader_epoch": r.leader_epoch,
                    "current_offset": r.offset,
                    "log_end_offset": r.log_end_offset,
                    "lag": r.lag,
                    "consumer_id": None if r.consumer_id == "-" else r.consumer_id,
                    "host": None if r.host == "-" else r.host,
                    "client_id": None if r.client_id == "-" else r.client_id,
                }
                for r in rows
            ],
        }

    def _members_json(self, d: GroupDescription, members: Sequence[MemberRow]) -> dict[str, Any]:
        return {
            "group": d.group_id,
            "state": d.state,
            "error": _dead(d),
            "members": [
                {
                    "consumer_id": m.consumer_id,
                    "group_instance_id": m.group_instance_id or None,
                    "host": m.host,
                    "client_id": m.client_id,
                    "partitions": len(m.assignment),
                    "current_epoch": m.current_epoch,
                    "assignment": jsonout.assignment_json(m.assignment),
                    "target_epoch": m.target_epoch,
                    "target_assignment": jsonout.assignment_json(m.target_assignment),
                }
                for m in members
            ],
        }

    # -------------------------------------------------------------------------------- --delete

    async def delete(self) -> None:
        group_ids = await self._groups_in_scope()
        results = await self.admin.delete_groups(group_ids)
        deleted = [g for g, r in results.items() if r is ErrorCode.NONE]
        failed: dict[str, str] = {}
        for g, r in results.items():
            if isinstance(r, AdminError):
                failed[g] = r.java
            elif r is not ErrorCode.NONE:
                failed[g] = exception_string(r)
        deleted = hashmap_order(deleted, java_string_hash)
        failed_rows = [(g, failed[g]) for g in hashmap_order(failed, java_string_hash)]
        if self.json:
            self._emit(
                jsonout.document(
                    "delete", deleted=deleted, failed=[{"group": g, "error": e} for g, e in failed_rows]
                )
            )
            return
        self.out.write(format_delete_groups(deleted, failed_rows))

    # -------------------------------------------------------------------------------- --delete-offsets

    async def delete_offsets(self) -> None:
        group = _single(self.opts.group, "group") or ""
        known: list[TopicPartition] = []
        plain: list[str] = []
        for topic in self.opts.topic:
            if ":" in topic:
                known += parse_topic_with_partitions(topic)
            else:
                plain.append(topic)
        results: dict[TopicPartition, str | None] = {}
        partitions: dict[TopicPartition, None] = dict.fromkeys(known)
        for topic, meta in (await self.admin.describe_topics(plain)).items():
            if isinstance(meta, AdminError):
                results[TopicPartition(topic, -1)] = meta.java
            else:
                partitions.update(dict.fromkeys(TopicPartition(topic, p.partition) for p in meta))
        top, per_partition = await self.admin.delete_offsets(group, partitions)
        first_partition_error = next(
            (
                per_partition[tp]
                for tp in partitions
                if per_partition.get(tp, ErrorCode.NONE) is not ErrorCode.NONE
            ),
            ErrorCode.NONE,
        )
        overall = top if top is not ErrorCode.NONE else first_partition_error
        for tp in partitions:
            code = top if top is not ErrorCode.NONE else per_partition.get(tp, ErrorCode.NONE)
            results[tp] = None if code is ErrorCode.NONE else exception_string(code)

        if overall is ErrorCode.NONE:
            summary = None
        elif overall in (
            ErrorCode.INVALID_GROUP_ID,
            ErrorCode.GROUP_ID_NOT_FOUND,
            ErrorCode.GROUP_AUTHORIZATION_FAILED,
            ErrorCode.NON_EMPTY_GROUP,
        ):
            summary = overall.message
        elif overall in (
            ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC,
            ErrorCode.TOPIC_AUTHORIZATION_FAILED,
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ):
            summary = "Encountered some partition-level error, see the follow-up details."
        else:
            summary = f"Encountered some unknown error: {overall.name}"
        rows = [(tp.topic, tp.partition if tp.partition >= 0 else None, e) for tp, e in results.items()]
        if self.json:
            self._emit(
                jsonout.document(
                    "delete-offsets",
                    group=group,
                    error=summary,
                    partitions=[
                        {"topic": t, "partition": p, "error": e}
                        for t, p, e in sorted(
                            rows, key=lambda r: (java_order(r[0]), -1 if r[1] is None else r[1])
                        )
                    ],
                )
            )
            return
        if summary is None:
            self.out.write(f"Request succeeded for deleting offsets from group {group}.\n")
        else:
            self._print_error(summary)
        self.out.write(format_delete_offsets(rows))

    # -------------------------------------------------------------------------------- --reset-offsets

    async def reset_offsets(self) -> None:
        o = self.opts
        self._validate_reset_values()
        group_ids = await self._groups_in_scope()
        described = await self.admin.describe_groups(group_ids)
        plan: dict[str, dict[TopicPartition, int]] = {}
        errors: dict[str, str] = {}
        # Kafka walks describeConsumerGroups(...).describedGroups(), a HashMap copy keyed by group id.
        for group in hashmap_order(group_ids, java_string_hash, copied=True):
            d = described[group]
            if isinstance(d, AdminError):
                if d.code is not ErrorCode.GROUP_ID_NOT_FOUND:
                    raise CommandFailed(d.java)
                state = "Dead"
            else:
                state = d.state
            if state in ("Empty", "Dead"):
                plan[group] = await self._reset_inactive(group)
            else:
                message = (
                    f"Assignments can only be reset if the group '{group}' is inactive, but the current "
                    f"state is {state}."
                )
                errors[group] = message
                if not self.json:
                    self._print_error(message)
                plan[group] = {}
        if self.json:
            self._emit(
                jsonout.document(
                    "reset-offsets",
                    executed=o.execute,
                    groups=[
                        {
                            "group": g,
                            "error": errors.get(g),
                            "partitions": [
                                {"topic": tp.topic, "partition": tp.partition, "new_offset": off}
                                for tp, off in offs
                            ],
                        }
                        for g, offs in reset_plan_order(plan)
                    ],
                )
            )
        elif o.export:
            self.out.write(format_reset_csv(plan, with_group=len(o.group) != 1))
        else:
            self.out.write(format_reset_plan(plan))

    def _validate_reset_values(self) -> None:
        """Reject a malformed --to-datetime / --by-duration before touching the cluster."""
        o = self.opts
        try:
            if o.to_datetime:
                parse_datetime(o.to_datetime[0])
            if o.by_duration:
                parse_duration_ms(o.by_duration[0])
        except JavaParseError as exc:
            if o.to_datetime:
                hint = (
                    "--to-datetime expects YYYY-MM-DDTHH:mm:SS.sss with an optional zone (Z, +hh or +hh:mm; "
                    "UTC without one), e.g. 2024-01-31T09:30:00.000 or 2024-01-31T09:30:00.000+01:00"
                )
            else:
                hint = "--by-duration expects an ISO-8601 duration PnDTnHnMnS, e.g. PT1H30M or P2D"
            raise CommandFailed(f"{exc} ({hint})") from exc

    async def _reset_inactive(self, group: str) -> dict[TopicPartition, int]:
        o = self.opts
        partitions = await self._partitions_to_reset(group)
        await self._check_partitions_valid(partitions)
        if o.to_offset:
            target = int(o.to_offset[0])
            plan = await self._clamped(dict.fromkeys(partitions, target))
        elif o.to_earliest:
            plan = await self._log_offsets(partitions, EARLIEST, "starting")
        elif o.to_latest:
            plan = await self._log_offsets(partitions, LATEST, "ending")
        elif o.shift_by:
            shift = int(o.shift_by[0])
            current = await self.admin.committed_offsets(group)
            requested: dict[TopicPartition, int] = {}
            for tp in partitions:
                c = current.get(tp)
                if c is None:
                    raise UsageError(
                        f"Cannot shift offset for partition {tp} since there is no current committed offset"
                    )
                requested[tp] = c.offset + shift
            plan = await self._clamped(requested)
        elif o.to_datetime:
            plan = await self._offsets_for_time(partitions, parse_datetime(o.to_datetime[0]))
        elif o.by_duration:
            plan = await self._offsets_for_time(
                partitions, self._clock_ms() - parse_duration_ms(o.by_duration[0])
            )
        elif o.from_file:
            from_file = self._plan_from_file().get(group)
            if from_file is None:
                self._print_error(f"No reset plan for group {group} found")
                return {}
            plan = await self._clamped(from_file)
        elif o.to_current:
            current = await self.admin.committed_offsets(group)
            plan = {tp: c.offset for tp in partitions if (c := current.get(tp)) is not None}
            missing = [tp for tp in partitions if tp not in plan]
            plan.update(await self._log_offsets(missing, LATEST, "ending"))
        else:
            scenarios = ", ".join(
                f"[{s}]"
                for s in (
                    "to-latest",
                    "by-duration",
                    "to-datetime",
                    "from-file",
                    "shift-by",
                    "to-offset",
                    "to-earliest",
                )
            )
            raise UsageError(
                "Option '[reset-offsets]' requires one of the following scenarios: "
                f"[{scenarios}, [to-current]]"
            )
        if o.execute and plan:
            await self._commit(group, plan)
        return plan

    async def _commit(self, group: str, plan: dict[TopicPartition, int]) -> None:
        errors = await self.admin.commit_offsets(group, plan)
        failure = next((e for e in errors.values() if e is not ErrorCode.NONE), None)
        if failure is None:
            return
        message = failure.message
        if failure in _GROUP_ACTIVE_ERRORS:
            message += (
                f" The group '{group}' has active members again, so its offsets cannot be reset; stop its "
                "consumers and retry."
            )
        raise CommandFailed(message)

    async def _partitions_to_reset(self, group: str) -> list[TopicPartition]:
        o = self.opts
        if o.all_topics:
            return list(await self.admin.committed_offsets(group))
        if o.topic:
            specified: list[TopicPartition] = []
            plain: list[str] = []
            for arg in o.topic:
                if ":" in arg:
                    specified += parse_topic_with_partitions(arg)
                else:
                    plain.append(arg)
            described = await self.admin.describe_topics(plain)
            unknown = [t for t, m in described.items() if isinstance(m, AdminError)]
            if unknown:
                first = described[unknown[0]]
                assert isinstance(first, AdminError)
                raise CommandFailed(
                    f"{first.message} (topic{'s' if len(unknown) > 1 else ''}: {', '.join(unknown)})"
                )
            for topic, meta in described.items():
                assert isinstance(meta, list)
                specified += [TopicPartition(topic, p.partition) for p in meta]
            return specified
        if not o.from_file:
            raise UsageError("One of the reset scopes should be defined: --all-topics, --topic.")
        return []

    async def _check_partitions_valid(self, partitions: Sequence[TopicPartition]) -> None:
        """Kafka's ``checkAllTopicPartitionsValid``: every partition exists and has a leader."""
        if not partitions:
            return
        described = await self.admin.describe_topics(sorted({tp.topic for tp in partitions}))

        def meta(tp: TopicPartition) -> PartitionMetadata | None:
            m = described.get(tp.topic)
            if not isinstance(m, list):
                return None
            return next((p for p in m if p.partition == tp.partition), None)

        missing = [tp for tp in dict.fromkeys(partitions) if meta(tp) is None]
        if missing:
            raise CommandFailed(f'The partitions "{",".join(str(tp) for tp in missing)}" do not exist')
        leaderless = [tp for tp in dict.fromkeys(partitions) if (m := meta(tp)) is not None and m.leader < 0]
        if leaderless:
            raise CommandFailed(f'The partitions "{",".join(str(tp) for tp in leaderless)}" have no leader')

    async def _log_offsets(
        self, partitions: Sequence[TopicPartition], spec: int, which: str
    ) -> dict[TopicPartition, int]:
        offsets = await self.admin.list_log_offsets(partitions, spec)
        plan: dict[TopicPartition, int] = {}
        for tp in partitions:
            value = offsets.get(tp)
            if not isinstance(value, int):
                raise CommandFailed(f"Error getting {which} offset of topic partition: {tp}")
            plan[tp] = value
        return plan

    async def _clamped(self, requested: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Kafka's ``checkOffsetsRange``: offsets beyond the log end or before the log start are moved to
        it, with a warning per partition."""
        starts = await self.admin.list_log_offsets(requested, EARLIEST)
        ends = await self.admin.list_log_offsets(requested, LATEST)
        for tp in requested:
            failure = next((r for r in (starts.get(tp), ends.get(tp)) if isinstance(r, AdminError)), None)
            if failure is None:
                continue
            if failure.code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                raise CommandFailed(
                    exception_string(
                        failure.code,
                        f"Failed to fetch metadata for partition {tp} because metadata for topic "
                        f"`{tp.topic}` could not be found",
                    )
                )
            raise CommandFailed(failure.java)
        out: dict[TopicPartition, int] = {}
        for tp in hashmap_order(requested, topic_partition_hash):
            offset = requested[tp]
            end, start = ends.get(tp), starts.get(tp)
            if isinstance(end, int) and offset > end:
                self.err.write(
                    f"WARN New offset ({offset}) is higher than latest offset for topic partition {tp}. "
                    f"Value will be set to {end}\n"
                )
                out[tp] = end
            elif isinstance(start, int) and offset < start:
                self.err.write(
                    f"WARN New offset ({offset}) is lower than earliest offset for topic partition {tp}. "
                    f"Value will be set to {start}\n"
                )
                out[tp] = start
            else:
                out[tp] = offset
        return {tp: out[tp] for tp in requested}

    async def _offsets_for_time(
        self, partitions: Sequence[TopicPartition], timestamp: int
    ) -> dict[TopicPartition, int]:
        found = await self.admin.list_log_offsets(partitions, timestamp)
        plan: dict[TopicPartition, int] = {}
        empty: list[TopicPartition] = []
        for tp in partitions:
            value = found.get(tp)
            if isinstance(value, AdminError) or value is None:
                raise CommandFailed(f"Error getting offset by timestamp of topic partition: {tp}")
            if value < 0:
                empty.append(tp)
            else:
                plan[tp] = value
        notices = self.err if self.json else self.out
        for tp in hashmap_order(empty, topic_partition_hash):
            notices.write(
                f"\nWarn: Partition {tp.partition} from topic {tp.topic} is empty. "
                "Falling back to latest known offset.\n"
            )
        plan.update(await self._log_offsets(empty, LATEST, "ending"))
        return {tp: plan[tp] for tp in partitions}

    def _plan_from_file(self) -> dict[str, dict[TopicPartition, int]]:
        """Kafka's ``parseResetPlan``: ``topic,partition,offset`` lines for a single ``--group``, otherwise
        ``group,topic,partition,offset`` lines."""
        path = self.opts.from_file[0]
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise CommandFailed(f"cannot read the --from-file plan {path}: {exc.strerror or exc}") from exc
        lines = [line.rstrip("\r") for line in java_split(text, "\n")]
        lines = [line for line in lines if line.strip()]
        single = len(self.opts.group) == 1
        three_columns = False
        if lines:
            try:
                parse_reset_csv_line(lines[0], with_group=False)
                three_columns = True
            except ValueError:
                pass
        with_group = not (single and three_columns)
        plan: dict[str, dict[TopicPartition, int]] = {}
        for number, line in enumerate(lines, 1):
            try:
                group, topic, partition, offset = parse_reset_csv_line(line, with_group=with_group)
            except ValueError as exc:
                shape = "group,topic,partition,offset" if with_group else "topic,partition,offset"
                raise CommandFailed(f"line {number} of {path} is not {shape}: {exc}") from exc
            if not with_group:
                group = self.opts.group[0]
            plan.setdefault(group, {})[TopicPartition(topic, partition)] = offset
        return plan


# ------------------------------------------------------------------------------------ small helpers


def _parse_states(text: str) -> list[str]:
    """Kafka's ``groupStatesFromString``; empty text means no filter."""
    if not text:
        return []
    parsed = [canonical_state(s.strip()) for s in java_split(text, ",")]
    if any(s not in CONSUMER_GROUP_STATES for s in parsed):
        raise UsageError(f"Invalid state list '{text}'. Valid states are: {', '.join(CONSUMER_GROUP_STATES)}")
    return list(dict.fromkeys(parsed))


def _parse_types(text: str) -> list[str]:
    """Kafka's ``consumerGroupTypesFromString``; empty text means no filter."""
    if not text:
        return []
    parsed = [_GROUP_TYPES.get(s.strip(), "Unknown") for s in java_split(text.lower(), ",")]
    if any(t not in ("Classic", "Consumer") for t in parsed):
        raise UsageError(f"Invalid types list '{text}'. Valid types are: Consumer, Classic")
    return list(dict.fromkeys(parsed))


def _type_name(group_type: str | None) -> str:
    return _GROUP_TYPES.get((group_type or "").lower(), "Unknown")


def _listing_json(g: GroupListing) -> dict[str, Any]:
    return {
        "group": g.group_id,
        "protocol_type": g.protocol_type,
        "type": _type_name(g.type) if g.type else None,
        "state": g.state,
    }


def _member_rows(d: GroupDescription) -> list[MemberRow]:
    return [
        MemberRow(
            group=d.group_id,
            consumer_id=m.member_id,
            host=m.host,
            client_id=m.client_id,
            group_instance_id=m.group_instance_id or "",
            assignment=m.assignment,
            target_assignment=m.target_assignment or (),
            current_epoch=m.member_epoch,
            target_epoch=d.target_assignment_epoch,
        )
        for m in d.members
    ]


def _dead(d: GroupDescription) -> str | None:
    return f"Consumer group '{d.group_id}' does not exist." if d.state == "Dead" else None


def _missing_json(group: str, view: str) -> dict[str, Any]:
    """The JSON of a group the broker reports as not found: what a Dead group (an older broker's answer)
    gives, with no coordinator."""
    doc: dict[str, Any] = {
        "group": group,
        "state": "Dead",
        "error": f"Consumer group '{group}' does not exist.",
    }
    if view == "offsets":
        doc["partitions"] = []
    elif view == "members":
        doc["members"] = []
    else:
        doc |= {
            "coordinator": None,
            "assignment_strategy": None,
            "members": 0,
            "group_epoch": None,
            "target_assignment_epoch": None,
        }
    return doc


def _state_json(d: GroupDescription, info: GroupInformation) -> dict[str, Any]:
    return {
        "group": d.group_id,
        "state": d.state,
        "error": _dead(d),
        "coordinator": {
            "id": info.coordinator_id,
            "host": info.coordinator_host,
            "port": info.coordinator_port,
        },
        "assignment_strategy": info.assignment_strategy or None,
        "members": info.num_members,
        "group_epoch": info.group_epoch,
        "target_assignment_epoch": info.target_assignment_epoch,
    }
