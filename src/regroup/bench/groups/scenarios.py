"""The group-coordinator scenarios of ``regroup bench``.

Each scenario is a coroutine that drives one broker and appends :class:`~regroup.bench.groups.report.Metric`
rows to a :class:`~regroup.bench.groups.report.RunResult`. :func:`run` starts the broker(s), runs the
scenario on each in turn (one broker alive at a time, so they never compete for CPU) on a uvloop event
loop when available, and prints the table or JSON.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Final

from regroup.bench.groups.brokers import (
    CONSUMER_SETTINGS,
    FAIR_CONFIG,
    REPORTED_SETTINGS,
    BenchTarget,
    BenchTargetError,
    ExternalBroker,
    LoopLag,
    RssReading,
    describe_settings,
    settled_rss,
    start_broker,
)
from regroup.bench.groups.consumer import ConsumerMember, describe_stable, settled
from regroup.bench.groups.load import (
    PhaseMeter,
    PhaseStats,
    Progress,
    SendFn,
    closed_loop,
    open_loop,
    percentile,
)
from regroup.bench.groups.members import TOPIC, Fleet, ObservedGeneration, SimMember, open_fleet
from regroup.bench.groups.report import RunResult, payload, render
from regroup.bench.groups.wire import Template, Wire, connect
from regroup.client.membership import MembershipConfig
from regroup.client.requests import (
    offset_commit_request,
    offset_fetch_request,
    read_offset_commit,
    read_offset_fetch,
)
from regroup.client.types import OffsetAndMetadata, TopicPartition
from regroup.protocol.api_keys import ApiKey
from regroup.protocol.errors import ErrorCode
from regroup.protocol.javahash import group_partition
from regroup.protocol.message import Message
from regroup.protocol.messages.consumer_group_heartbeat import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from regroup.protocol.messages.create_topics import CreatableTopic, CreateTopicsRequest, CreateTopicsResponse
from regroup.protocol.messages.heartbeat import HeartbeatRequest, HeartbeatResponse
from regroup.protocol.messages.metadata import MetadataRequest, MetadataRequestTopic, MetadataResponse
from regroup.protocol.messages.offset_commit import OffsetCommitResponse
from regroup.protocol.messages.offset_fetch import OffsetFetchResponse

__all__ = [
    "FAKE_SCENARIOS",
    "PROTOCOLS",
    "SCENARIOS",
    "Params",
    "ScenarioError",
    "consumer_broker_config",
    "params_from",
    "run",
    "run_scenario",
]

# The group protocols members can speak: classic (JoinGroup/SyncGroup/Heartbeat) and consumer (KIP-848).
PROTOCOLS: Final = ("classic", "consumer")

_LOADING = (
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
)


class ScenarioError(RuntimeError):
    """The scenario could not complete (e.g. a group did not form in time)."""


@dataclass(slots=True)
class Params:
    """Every knob of every scenario; each scenario reads the ones it needs."""

    # Nodes of the cluster the benchmark starts (1: a single broker); groups spread over their coordinators.
    nodes: int = 1
    # The members' group protocol: classic, or consumer (KIP-848 ConsumerGroupHeartbeat).
    protocol: str = "classic"
    members: int = 100
    groups: int = 1
    # Partitions of the subscribed topic per group (0: one per member); for commit, per committer.
    partitions: int = 0
    rates: list[float] = field(default_factory=list)
    duration: float = 5.0
    warmup: float = 2.0
    connections: int = 8
    session_timeout_ms: int = 45000
    heartbeat_interval_ms: int = 3000
    rebalance_timeout_ms: int = 300000
    offsets: int = 100_000
    rounds: int = 1
    churn_interval_ms: int = 1000
    baseline: bool = True  # failover: also restart with one offset, to separate the replay from startup
    bounce_ms: int = 0
    timeout: float = 300.0
    progress: bool = True

    def membership(self, group_id: str, topic: str, instance_id: str | None = None) -> MembershipConfig:
        return MembershipConfig(
            group_id=group_id,
            topics=frozenset({topic}),
            group_instance_id=instance_id,
            session_timeout_ms=self.session_timeout_ms,
            rebalance_timeout_ms=self.rebalance_timeout_ms,
            heartbeat_interval_ms=self.heartbeat_interval_ms,
        )


@dataclass(slots=True)
class Ctx:
    broker: BenchTarget
    params: Params
    result: RunResult
    progress: Progress
    prefix: str = field(default_factory=lambda: f"bench-{os.getpid()}-{time.time_ns() // 1_000_000 % 10**9}")

    def group_ids(self, count: int, tag: str) -> list[str]:
        return [f"{self.prefix}-{tag}-{g}" for g in range(count)]

    @property
    def offsets_partitions(self) -> int:
        """``offsets.topic.num.partitions`` of the broker under test."""
        return int(
            self.result.settings.get("offsets.topic.num.partitions")
            or {**FAIR_CONFIG, **self.broker.overrides}["offsets.topic.num.partitions"]
        )

    async def spread_group_ids(self, fleet: Fleet, count: int, tag: str) -> list[str]:
        """``count`` group ids of this run spread as many groups spread: evenly over the coordinators
        (round robin over the nodes), and over their ``__consumer_offsets`` partitions (a partition takes a
        second group only once every partition has one). Ids taken as they come would land a few groups
        7:3 on two nodes or two to a partition in one run and not in the next, and the figures — one
        node's batching, two nodes' split of the load — would change with the names."""
        partitions = self.offsets_partitions
        per_partition = -(-count // partitions)
        names: dict[int, list[str]] = {}
        k = 0
        while len(names) < partitions or any(len(ids) < per_partition for ids in names.values()):
            name = f"{self.prefix}-{tag}-{k}"
            k += 1
            ids = names.setdefault(group_partition(name, partitions), [])
            if len(ids) < per_partition:
                ids.append(name)
        found = await fleet.coordinators(ids[0] for ids in names.values())
        by_node: dict[int, list[int]] = {}
        for partition in sorted(names):
            by_node.setdefault(found[names[partition][0]].node_id, []).append(partition)
        order = [
            node_partitions[rank]
            for rank in range(max(len(v) for v in by_node.values()))
            for _, node_partitions in sorted(by_node.items())
            if rank < len(node_partitions)
        ]
        return [names[partition][c] for c in range(per_partition) for partition in order][:count]

    @property
    def topic(self) -> str:
        """A topic of this run's own, for the scenarios that must create one (Kafka refuses commits to
        unknown topics)."""
        return f"{self.prefix}-topic"


def _check(params: Params) -> None:
    if params.members < 1 or params.groups < 1 or params.groups > params.members:
        raise ScenarioError("need 1 ≤ groups ≤ members")
    if params.connections < 1:
        raise ScenarioError("need at least one connection")


def _spread(count: int, groups: Sequence[str]) -> list[str]:
    """Member index → group, round-robin."""
    return [groups[i % len(groups)] for i in range(count)]


async def _fleet(ctx: Ctx, join_lanes: int) -> Fleet:
    ctx.progress.note(
        f"connecting {ctx.params.connections} pipelined connections and {join_lanes} join lanes"
    )
    fleet = await open_fleet(ctx.broker.bootstrap, ctx.params.connections, join_lanes)
    keys = REPORTED_SETTINGS + (CONSUMER_SETTINGS if ctx.params.protocol == "consumer" else ())
    ctx.result.settings = await describe_settings(fleet.fast[0], keys)
    return fleet


def _members(
    ctx: Ctx, fleet: Fleet, group_of: Sequence[str], instance: str | None = None, topic: str = TOPIC
) -> list[SimMember]:
    sizes: dict[str, int] = {}
    for g in group_of:
        sizes[g] = sizes.get(g, 0) + 1
    partitions = ctx.params.partitions
    out = []
    for i, group_id in enumerate(group_of):
        config = ctx.params.membership(group_id, topic, f"{instance}-{i}" if instance else None)
        out.append(SimMember(fleet, len(fleet.members), config, partitions or sizes[group_id]))
    return out


async def _form(
    ctx: Ctx, fleet: Fleet, members: Sequence[SimMember], what: str
) -> dict[str, ObservedGeneration]:
    """Start ``members`` at once and wait until every group has completed a generation holding all of
    its members; returns that generation per group."""
    sizes: dict[str, int] = {}
    for m in members:
        sizes[m.group_id] = sizes.get(m.group_id, 0) + 1
    formed: dict[str, ObservedGeneration] = {}
    done = asyncio.Event()

    def listener(rec: ObservedGeneration) -> None:
        if rec.group_id in sizes and rec.size == sizes[rec.group_id] and rec.group_id not in formed:
            formed[rec.group_id] = rec
            if len(formed) == len(sizes):
                done.set()

    fleet.tracker.listeners.append(listener)
    await fleet.find_coordinators(sizes)
    for m in members:
        m.start()

    def status() -> str:
        stable = sum(1 for m in members if m.stable)
        return (
            f"{what}: {stable}/{len(members)} members stable, {len(formed)}/{len(sizes)} groups formed, "
            f"{len(fleet.tracker.generations)} generations"
        )

    async def all_stable() -> None:
        while not all(m.stable for m in members):
            await asyncio.sleep(0.01)

    try:
        async with ctx.progress.watch(status):
            # The fake responder keeps no groups: each member leads a group of its own.
            waiting = all_stable() if ctx.broker.kind == "fake" else done.wait()
            await asyncio.wait_for(waiting, ctx.params.timeout)
    except TimeoutError:
        raise ScenarioError(f"{status()} after {ctx.params.timeout:g} s") from None
    finally:
        fleet.tracker.listeners.remove(listener)
    return formed


def _errors(ctx: Ctx, fleet: Fleet, stage: str) -> None:
    """Move the error responses counted so far into the result, under ``stage``."""
    for name, count in sorted(fleet.errors.items()):
        key = f"{stage}: {name}"
        ctx.result.errors[key] = ctx.result.errors.get(key, 0) + count
    fleet.errors.clear()


def _phase_metrics(
    ctx: Ctx,
    phase: str,
    stats: PhaseStats,
    unit: str,
    offered: float | None,
    per_request: tuple[str, int] | None,
) -> None:
    r = ctx.result
    if offered is not None:
        r.add(phase, "offered", offered, unit, compare=False)
    r.add(phase, "achieved", stats.rate, unit)
    if per_request is not None:
        what, n = per_request
        r.add(phase, f"achieved ({what})", stats.rate * n, f"{what}/s")
    r.add(phase, "latency p50", stats.latency_ms(0.50), "ms")
    r.add(phase, "latency p99", stats.latency_ms(0.99), "ms")
    if stats.failed:
        r.add(phase, "failed requests", stats.failed, "count", compare=False)
    if stats.skipped:
        r.add(phase, "skipped (member still waiting)", stats.skipped, "count", compare=False)
    r.add(phase, "generator CPU", stats.generator_cpu_pct, "% of a core", compare=False)
    r.add(phase, "broker CPU", stats.broker_cpu_pct, "% of a core")
    # CPU time per answered request does not depend on how busy the machine is: 10^6 / (generator µs per
    # request) is the most this generator could drive on one core.
    generator_us = stats.cpu_us_per_request(stats.generator_cpu_seconds)
    r.add(phase, "generator CPU per request", generator_us, "µs", compare=False)
    r.add(phase, "broker CPU per request", stats.cpu_us_per_request(stats.broker_cpu_seconds), "µs")
    _loop_lag_metrics(ctx, phase, stats.loop_lag)


def _loop_lag_metrics(ctx: Ctx, phase: str, lag: LoopLag | None) -> None:
    """The broker's event-loop lag over the phase: how long anything that became ready waited for the loop
    (regroup only; Kafka has no single loop)."""
    if lag is None or not lag.samples:
        return
    ctx.result.add(phase, "broker event-loop lag mean", lag.mean_ms, "ms", compare=False)
    ctx.result.add(
        phase, "broker event-loop lag p99 (bucket bound)", lag.quantile_ms(0.99), "ms", compare=False
    )


async def _phases(
    ctx: Ctx, slots: int, send: SendFn, unit: str, what: str, per_request: tuple[str, int] | None = None
) -> None:
    """Warm-up at saturation (not reported), then each fixed rate, then saturation."""
    p = ctx.params
    broker = ctx.broker
    if p.warmup > 0:
        ctx.progress.note(f"warm-up: {p.warmup:g} s at saturation")
        await closed_loop(slots, p.warmup, send, broker)
    for rate in p.rates:
        ctx.progress.note(f"{what} at {rate:g}/s for {p.duration:g} s")
        stats = await open_loop(slots, rate, p.duration, send, broker)
        _phase_metrics(ctx, f"{rate:g}/s", stats, unit, rate, per_request)
    ctx.progress.note(f"{what} at saturation for {p.duration:g} s")
    stats = await closed_loop(slots, p.duration, send, broker)
    _phase_metrics(ctx, "saturation", stats, unit, None, per_request)


# ---------------------------------------------------------------------------- consumer protocol (KIP-848)


def consumer_broker_config(params: Params) -> dict[str, str]:
    """The consumer-protocol settings given to every started broker when members speak KIP-848: the
    broker, not the member, decides session and heartbeat interval, so the members' --session-timeout-ms
    and --heartbeat-interval-ms become ``group.consumer.*`` (with bounds that admit them). The target
    assignment is recomputed at most once a second, Kafka 4.3's default (KIP-1263), on both brokers."""
    session, interval = params.session_timeout_ms, params.heartbeat_interval_ms
    return {
        "group.consumer.session.timeout.ms": str(session),
        "group.consumer.min.session.timeout.ms": str(min(1000, session)),
        "group.consumer.max.session.timeout.ms": str(max(60000, session)),
        "group.consumer.heartbeat.interval.ms": str(interval),
        "group.consumer.min.heartbeat.interval.ms": str(min(500, interval)),
        "group.consumer.max.heartbeat.interval.ms": str(max(15000, interval)),
        "group.consumer.assignment.interval.ms": "1000",
    }


def _consumers(ctx: Ctx, fleet: Fleet, group_of: Sequence[str], topic: str) -> list[ConsumerMember]:
    return [
        ConsumerMember(fleet, len(fleet.members), group_id, topic, ctx.params.rebalance_timeout_ms)
        for group_id in group_of
    ]


async def _consumer_topic(ctx: Ctx, fleet: Fleet, partitions: int) -> None:
    """The topic the consumer-protocol members subscribe to: the coordinator assigns the partitions of
    topics that exist."""
    ctx.progress.note(f"creating topic {ctx.topic} with {partitions} partitions")
    await _create_topic(fleet.fast[0], ctx.topic, partitions, ctx.params.timeout)


async def _until_stable(
    ctx: Ctx,
    fleet: Fleet,
    groups: Mapping[str, Sequence[ConsumerMember]],
    partitions: int,
    what: str,
    extra: Callable[[], bool] | None = None,
) -> float:
    """Wait until every group in ``groups`` is stable: first as its members see it (:func:`settled`),
    then confirmed by the coordinator (ConsumerGroupDescribe, not timed: at most every 0.2 s per group).
    Returns the time of the last member response that changed a member's epoch, assignment or
    acknowledgement, the moment the slowest group became stable. ``extra`` must hold too."""
    stable: dict[str, float] = {}
    checked: dict[str, float] = {}
    why: dict[str, str] = {}
    every = [m for ms in groups.values() for m in ms]

    def status() -> str:
        reconciled = sum(1 for m in every if m.reconciled)
        epochs = {m.epoch for m in every}
        detail = f"; {next(iter(why.values()))}" if why else ""
        return (
            f"{what}: {reconciled}/{len(every)} members reconciled, epochs {min(epochs)}..{max(epochs)}, "
            f"{len(stable)}/{len(groups)} groups stable{detail}"
        )

    async def wait() -> None:
        seen: dict[str, int] = {}
        candidate: dict[str, bool] = {}
        while len(stable) < len(groups) or (extra is not None and not extra()):
            fatal = next((m.fatal for m in every if m.fatal is not None), None)
            if fatal is not None:
                raise ScenarioError(f"a member failed: {fatal.name}")
            now = time.perf_counter()
            for group_id, members in groups.items():
                changes = fleet.changes[group_id]
                if group_id in stable:
                    continue
                # The members' view is re-evaluated only when one of them changed.
                if seen.get(group_id) != changes:
                    seen[group_id] = changes
                    candidate[group_id] = settled(members, partitions)
                if not candidate[group_id]:
                    continue
                if now - checked.get(group_id, 0.0) < 0.2:
                    continue
                checked[group_id] = now
                ok, reason = await describe_stable(fleet, group_id, len(members))
                if ok and fleet.changes[group_id] == changes:
                    stable[group_id] = max(m.changed_at for m in members)
                    why.pop(group_id, None)
                else:
                    why[group_id] = reason
            await asyncio.sleep(0.01)

    try:
        async with ctx.progress.watch(status):
            await asyncio.wait_for(wait(), ctx.params.timeout)
    except TimeoutError:
        raise ScenarioError(f"{status()} after {ctx.params.timeout:g} s") from None
    return max(stable.values())


def _by_group(members: Iterable[ConsumerMember]) -> dict[str, list[ConsumerMember]]:
    out: dict[str, list[ConsumerMember]] = {}
    for m in members:
        out.setdefault(m.group_id, []).append(m)
    return out


async def _form_consumers(
    ctx: Ctx, fleet: Fleet, members: Sequence[ConsumerMember], partitions: int, what: str
) -> tuple[float, float]:
    """Start ``members`` at once (their first heartbeats leave together) and wait until every group is
    stable; returns (first heartbeat sent, stable)."""
    groups = _by_group(members)
    await fleet.find_coordinators(groups)
    for m in members:
        m.start()
    first = min(m.first_sent or math.inf for m in members)
    end = await _until_stable(ctx, fleet, groups, partitions, what)
    return first, end


def _group_partitions(p: Params, per_member: int = 1) -> int:
    """Partitions of the subscribed topic: --partitions, else ``per_member`` per member of a group."""
    return p.partitions or per_member * math.ceil(p.members / p.groups)


async def _consumer_formation(ctx: Ctx) -> None:
    p = ctx.params
    partitions = _group_partitions(p)
    fleet = await _fleet(ctx, 0)
    try:
        await _consumer_topic(ctx, fleet, partitions)
        group_ids = await ctx.spread_group_ids(fleet, p.groups, "formation")
        members = _consumers(ctx, fleet, _spread(p.members, group_ids), ctx.topic)
        with PhaseMeter(ctx.broker) as cpu:
            first, end = await _form_consumers(ctx, fleet, members, partitions, "formation")
        assigned = [m.first_assigned_at for m in members if m.first_assigned_at is not None]
        r = ctx.result
        r.add("formation", "first heartbeat → group stable", end - first, "s")
        if len(assigned) == len(members):
            r.add("formation", "first heartbeat → last member's first partitions", max(assigned) - first, "s")
        r.add("formation", "member epoch at the end (max)", max(m.epoch for m in members), "count")
        r.add("formation", "heartbeats (mean)", statistics.fmean(m.sent for m in members), "per member")
        r.add(
            "formation",
            "revocations (mean)",
            statistics.fmean(m.revocations for m in members),
            "per member",
        )
        r.add(
            "formation",
            "heartbeat interval (from the broker)",
            members[0].interval * 1000,
            "ms",
            compare=False,
        )
        r.add("formation", "partitions per group", partitions, "count", compare=False)
        r.add("formation", "generator CPU", cpu.generator_pct, "% of a core", compare=False)
        r.add("formation", "broker CPU", cpu.broker_pct, "% of a core")
        if cpu.broker_seconds is not None:
            r.add("formation", "broker CPU time", cpu.broker_seconds, "s")
        _loop_lag_metrics(ctx, "formation", cpu.loop_lag)
        _errors(ctx, fleet, "formation")
    finally:
        fleet.close()


async def _consumer_heartbeat(ctx: Ctx) -> None:
    p = ctx.params
    partitions = _group_partitions(p)
    fleet = await _fleet(ctx, 0)
    try:
        await _consumer_topic(ctx, fleet, partitions)
        group_ids = await ctx.spread_group_ids(fleet, p.groups, "heartbeat")
        members = _consumers(ctx, fleet, _spread(p.members, group_ids), ctx.topic)
        await _form_consumers(ctx, fleet, members, partitions, "forming groups")
        _errors(ctx, fleet, "setup")
        for m in members:
            m.set_heartbeats(False)
        await asyncio.sleep(0.2)
        # Steady state: the member's epoch and nothing else (Java sends the rest only when it changes).
        requests = [
            ConsumerGroupHeartbeatRequest(group_id=m.group_id, member_id=m.member_id, member_epoch=m.epoch)
            for m in members
        ]
        wires = [m.wire for m in members]
        await _heartbeats_at_saturation(ctx, fleet, wires, requests, ConsumerGroupHeartbeatResponse)
    finally:
        fleet.close()


# ------------------------------------------------------------------------------------------ formation


async def formation(ctx: Ctx) -> None:
    """N members start at once; time from the first JoinGroup sent to the last SyncGroup response of the
    generation that holds every member (per group; the slowest group counts)."""
    p = ctx.params
    _check(p)
    if p.protocol == "consumer":
        await _consumer_formation(ctx)
        return
    fleet = await _fleet(ctx, p.members)
    try:
        members = _members(
            ctx, fleet, _spread(p.members, await ctx.spread_group_ids(fleet, p.groups, "formation"))
        )
        with PhaseMeter(ctx.broker) as cpu:
            formed = await _form(ctx, fleet, members, "formation")
        assert fleet.first_join_sent is not None
        end = max(rec.completed_at or 0.0 for rec in formed.values())
        elapsed = end - fleet.first_join_sent
        per_group = [
            sum(1 for (g, _gen) in fleet.tracker.generations if g == group_id) for group_id in formed
        ]
        r = ctx.result
        r.add("formation", "first JoinGroup → last SyncGroup", elapsed, "s")
        # The slowest group's final generation, split at the leader's JoinGroup response.
        last = max(formed.values(), key=lambda rec: rec.completed_at or 0.0)
        if last.leader_joined_at is not None and last.completed_at is not None:
            r.add(
                "formation",
                "first JoinGroup → leader's last JoinGroup response",
                last.leader_joined_at - fleet.first_join_sent,
                "s",
            )
            r.add(
                "formation",
                "leader's last JoinGroup response → last SyncGroup",
                last.completed_at - last.leader_joined_at,
                "s",
            )
        r.add("formation", "generations per group (mean)", statistics.fmean(per_group), "count")
        r.add("formation", "generations per group (max)", max(per_group), "count")
        r.add("formation", "generator CPU", cpu.generator_pct, "% of a core", compare=False)
        r.add("formation", "broker CPU", cpu.broker_pct, "% of a core")
        _loop_lag_metrics(ctx, "formation", cpu.loop_lag)
        _errors(ctx, fleet, "formation")
    finally:
        fleet.close()


# ------------------------------------------------------------------------------------------ heartbeat


def _heartbeat_lanes(p: Params) -> int:
    """Join lanes for the heartbeat scenario: one per member, so that every group forms at once, unless the
    open-files hard limit cannot hold a connection per member in this process and in the broker; then as
    many as the largest group needs, and the groups form a wave at a time (:func:`_waves`). Formation is
    not timed here; the heartbeats that follow go over the shared connections either way."""
    largest = math.ceil(p.members / p.groups)
    hard = _open_files_hard_limit()
    if hard is None or p.members + _SPARE_FILES <= hard:
        return p.members
    return largest


def _waves(members: Sequence[SimMember], lanes: int) -> list[list[SimMember]]:
    """Whole groups, in order of first appearance, packed into waves of at most ``lanes`` members."""
    by_group: dict[str, list[SimMember]] = {}
    for m in members:
        by_group.setdefault(m.group_id, []).append(m)
    waves: list[list[SimMember]] = [[]]
    for group in by_group.values():
        if waves[-1] and len(waves[-1]) + len(group) > lanes:
            waves.append([])
        waves[-1].extend(group)
    return waves


async def heartbeat(ctx: Ctx) -> None:
    """N members in G groups, formed first; then heartbeats at each fixed rate and at saturation, sent by
    the benchmark on behalf of the members (their own heartbeat timers are stopped)."""
    p = ctx.params
    _check(p)
    for rate in p.rates:
        # Each member is heartbeated every members/rate seconds; keep that well inside the session.
        if p.members / rate > p.session_timeout_ms / 2000:
            raise ScenarioError(
                f"rate {rate:g}/s heartbeats each of {p.members} members every {p.members / rate:.1f} s, "
                f"more than half the session timeout ({p.session_timeout_ms} ms)"
            )
    if p.protocol == "consumer":
        await _consumer_heartbeat(ctx)
        return
    lanes = _heartbeat_lanes(p)
    fleet = await _fleet(ctx, lanes)
    fleet.lane_limit = lanes
    try:
        members = _members(
            ctx, fleet, _spread(p.members, await ctx.spread_group_ids(fleet, p.groups, "heartbeat"))
        )
        waves = _waves(members, lanes)
        for n, wave in enumerate(waves, 1):
            await _form(
                ctx, fleet, wave, "forming groups" + (f" ({n}/{len(waves)})" if len(waves) > 1 else "")
            )
        _errors(ctx, fleet, "setup")
        for m in members:
            m.set_heartbeats(False)
        await asyncio.sleep(0.2)
        requests = [
            HeartbeatRequest(
                group_id=m.group_id,
                generation_id=m.generation_id,
                member_id=m.member_id,
                group_instance_id=m.membership.config.group_instance_id,
            )
            for m in members
        ]
        await _heartbeats_at_saturation(ctx, fleet, [m.wire for m in members], requests, HeartbeatResponse)
    finally:
        fleet.close()


# --------------------------------------------------------------------------------------------- commit


async def _create_topic(wire: Wire, name: str, partitions: int, timeout: float = 120.0) -> None:
    """Create ``name`` and wait until every partition has a leader (Kafka refuses commits to topics it
    does not know)."""
    # Replication factor −1: the broker's default.replication.factor (1 on a single node).
    request = CreateTopicsRequest(
        topics=[CreatableTopic(name=name, num_partitions=partitions, replication_factor=-1)], timeout_ms=60000
    )
    resp = await wire.call(request, CreateTopicsResponse)
    for topic in resp.topics:
        if topic.error_code not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
            raise ScenarioError(
                f"creating {name}: {ErrorCode.from_code(topic.error_code).name} {topic.error_message or ''}"
            )
    if wire.versions.get(ApiKey.METADATA) is None:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        meta = await wire.call(
            MetadataRequest(topics=[MetadataRequestTopic(name=name)], allow_auto_topic_creation=False),
            MetadataResponse,
        )
        ready = [
            t
            for t in meta.topics
            if t.name == name
            and t.error_code == ErrorCode.NONE
            and len(t.partitions) == partitions
            and all(pt.leader_id >= 0 for pt in t.partitions)
        ]
        if ready:
            return
        await asyncio.sleep(0.1)
    raise ScenarioError(f"topic {name} got no leaders within {timeout:g} s")


# The committed offsets a committer's request is first built with, each partition its own (see commit()).
_OFFSET_SENTINEL: Final = 0x5E47_0000_0000_0000


async def commit(ctx: Ctx) -> None:
    """C committers (members of G groups) each commit offsets for their P partitions: commits/s and
    latency at each fixed rate and at saturation. Members keep heartbeating on their own meanwhile."""
    p = ctx.params
    _check(p)
    per_committer = p.partitions or 10
    group_size = math.ceil(p.members / p.groups)
    fleet = await _fleet(ctx, p.members)
    try:
        topic_partitions = group_size * per_committer
        ctx.progress.note(f"creating topic {ctx.topic} with {topic_partitions} partitions")
        await _create_topic(fleet.fast[0], ctx.topic, topic_partitions, p.timeout)
        saved, p.partitions = p.partitions, topic_partitions
        try:
            group_ids = await ctx.spread_group_ids(fleet, p.groups, "commit")
            members = _members(ctx, fleet, _spread(p.members, group_ids), topic=ctx.topic)
        finally:
            p.partitions = saved
        await _form(ctx, fleet, members, "forming groups")
        _errors(ctx, fleet, "setup")
        version = fleet.versions[ApiKey.OFFSET_COMMIT]
        # One request per committer, encoded once; each send only bumps its offsets in place (wire.Template).
        # The offsets are built as distinct sentinels to find where each one sits. (The fake responder
        # hands every member all partitions, hence the cut to P.)
        requests: list[Template] = []
        positions: list[list[int]] = []
        for m in members:
            gen = m.membership.generation
            owned = sorted(m.membership.assigned, key=TopicPartition.sort_key)[:per_committer]
            sentinels = {tp: OffsetAndMetadata(_OFFSET_SENTINEL + k) for k, tp in enumerate(owned)}
            template = Template(
                offset_commit_request(
                    version,
                    m.group_id,
                    gen.generation_id,
                    gen.member_id,
                    m.membership.config.group_instance_id,
                    sentinels,
                ),
                version,
            )
            positions.append([template.find(om.offset) for om in sentinels.values()])
            requests.append(template)
        sent = [0] * len(requests)
        errors = fleet.errors

        def send(i: int, done: Callable[[bool, float], None]) -> None:
            sent[i] += 1
            request = requests[i]
            request.set(positions[i], sent[i])

            def answered(result: Message | BaseException, rtt: float) -> None:
                if isinstance(result, OffsetCommitResponse):
                    ok = True
                    for topic in result.topics:
                        for partition in topic.partitions:
                            if partition.error_code:
                                ok = False
                                errors[ErrorCode.from_code(partition.error_code).name] += 1
                    done(ok, rtt)
                    return
                errors[type(result).__name__] += 1
                done(False, rtt)

            members[i].wire.send_template(request, answered)

        await _phases(ctx, len(members), send, "commits/s", "commits", per_request=("offsets", per_committer))
        _errors(ctx, fleet, "measured")
    finally:
        fleet.close()


# ------------------------------------------------------------------------------------------- failover


async def failover(ctx: Ctx) -> None:
    """Commit Y offsets for X groups that all live in ``__consumer_offsets`` partition 0, restart the broker
    on the same data, and time the first successful OffsetFetch of one of those groups.

    The broker is restarted twice: first with a single offset in the partition (the baseline: process
    start, listeners, metadata), then with all of them; the difference is the replay, which gives the
    replay rate without relying on when each broker starts answering other requests."""
    p = ctx.params
    broker = ctx.broker
    if not broker.restartable:
        raise ScenarioError(
            f"failover restarts the broker, which the benchmark cannot do for a {broker.kind} broker"
        )
    fleet = await _fleet(ctx, 0)
    num_partitions = ctx.offsets_partitions
    groups: list[str] = []
    n = 0
    while len(groups) < p.groups:
        candidate = f"{ctx.prefix}-failover-{n}"
        n += 1
        if group_partition(candidate, num_partitions) == 0:
            groups.append(candidate)
    per_group = max(1, math.ceil(p.offsets / p.groups))
    probe = groups[0]
    topic = ctx.topic
    try:
        ctx.progress.note(f"creating topic {topic} with {per_group} partitions")
        await _create_topic(fleet.fast[0], topic, per_group, p.timeout)
        await fleet.find_coordinators([probe])
        await _commit_simple(fleet, probe, {TopicPartition(topic, 0): 7})
    finally:
        fleet.close()
    base = None
    if p.baseline:
        base = await _restart(ctx, probe, {TopicPartition(topic, 0): 7}, "baseline restart (one offset)")

    fleet = await open_fleet(broker.bootstrap, p.connections, 0)
    try:
        await fleet.find_coordinators(groups)
        written = 0
        sem = asyncio.Semaphore(64 * len(fleet.fast))

        async def commit_one(i: int, group_id: str, round_: int) -> None:
            nonlocal written
            offsets = {TopicPartition(topic, q): round_ * 1_000_000 + q for q in range(per_group)}
            async with sem:
                await _commit_simple(fleet, group_id, offsets, i)
            written += per_group

        total = per_group * len(groups) * p.rounds
        with PhaseMeter(broker) as cpu:
            async with ctx.progress.watch(lambda: f"committing: {written}/{total} offsets"):
                for round_ in range(p.rounds):
                    await asyncio.gather(*(commit_one(i, g, round_) for i, g in enumerate(groups)))
    finally:
        fleet.close()
    expect = {TopicPartition(topic, q): (p.rounds - 1) * 1_000_000 + q for q in range(per_group)}
    full = await _restart(ctx, probe, expect, f"restart with {written} offsets", sized=True)
    size = full.size_bytes
    r = ctx.result
    r.add("load", "groups in the partition", len(groups), "count", compare=False)
    r.add("load", "offset commit records in the partition", written + 1, "count", compare=False)
    if size is not None:
        r.add("load", "__consumer_offsets-0 size", size / 1e6, "MB", compare=False)
    r.add(
        "load", "commit throughput (offsets)", written / cpu.wall if cpu.wall else None, "1/s", compare=False
    )
    if base is not None:
        r.add("baseline restart", "launch → first response", base.first_answer, "s")
        r.add("baseline restart", "launch → first OffsetFetch", base.fetched, "s")
    r.add("full restart", "launch → first response", full.first_answer, "s")
    r.add("full restart", "launch → first OffsetFetch", full.fetched, "s")
    r.add("full restart", "first response → first OffsetFetch", full.fetched - full.first_answer, "s")
    if base is not None:
        replay = full.fetched - base.fetched
        r.add("replay", "time (full − baseline)", replay, "s")
        r.add("replay", "rate (offset records)", written / replay if replay > 0 else None, "1/s")


async def _commit_simple(
    fleet: Fleet, group_id: str, offsets: Mapping[TopicPartition, int], i: int = 0
) -> None:
    """OffsetCommit outside any generation (as an admin client or a standalone consumer does)."""
    version = fleet.versions[ApiKey.OFFSET_COMMIT]
    request = offset_commit_request(
        version, group_id, -1, "", None, {tp: OffsetAndMetadata(o) for tp, o in offsets.items()}
    )
    resp = await fleet.bootstrap_route.wire_for(i).call(request, OffsetCommitResponse)
    bad = {c for c in read_offset_commit(resp).values() if c is not ErrorCode.NONE}
    if bad:
        raise ScenarioError(f"commit for {group_id} failed: {sorted(c.name for c in bad)}")


@dataclass(frozen=True, slots=True)
class _Restart:
    first_answer: float  # seconds from the process launch
    fetched: float
    size_bytes: int | None


async def _restart(
    ctx: Ctx, group_id: str, expect: Mapping[TopicPartition, int], what: str, *, sized: bool = False
) -> _Restart:
    broker = ctx.broker
    ctx.progress.note(what)
    await asyncio.to_thread(broker.stop)
    size = broker.offsets_partition_bytes(0) if sized else None
    launched = await broker.relaunch()
    first_answer, fetched = await _poll_offsets(broker, group_id, expect, ctx.params.timeout)
    await broker.wait_serving(ctx.params.timeout)
    return _Restart(first_answer - launched, fetched - launched, size)


async def _poll_offsets(
    broker: BenchTarget, group_id: str, expect: Mapping[TopicPartition, int], timeout: float
) -> tuple[float, float]:
    """(first time the restarted broker answered anything, first time OffsetFetch returned ``expect``)."""
    deadline = time.monotonic() + timeout
    first_answer: float | None = None
    wire: Wire | None = None
    while time.monotonic() < deadline:
        if wire is None or wire.closed:
            try:
                host, _, port = broker.bootstrap.rpartition(":")
                wire = await connect(host, int(port), timeout=2.0)
            except (OSError, TimeoutError, ValueError):
                await asyncio.sleep(0.005)
                continue
            if first_answer is None:
                first_answer = time.perf_counter()
        version = wire.versions[ApiKey.OFFSET_FETCH]
        try:
            resp = await wire.call(
                offset_fetch_request(version, group_id, expect, False), OffsetFetchResponse
            )
        except ConnectionError:
            continue
        error, results = read_offset_fetch(version, resp, group_id)
        if error is ErrorCode.NONE and all(
            (f := results.get(tp)) is not None and f.offset is not None and f.offset.offset == o
            for tp, o in expect.items()
        ):
            now = time.perf_counter()
            wire.close()
            assert first_answer is not None
            return first_answer, now
        if error is not ErrorCode.NONE and error not in _LOADING:
            raise ScenarioError(f"OffsetFetch after restart: {error.name}")
        await asyncio.sleep(0.005)
    raise ScenarioError(f"no successful OffsetFetch within {timeout:g} s of the restart")


async def _heartbeats_at_saturation(
    ctx: Ctx,
    fleet: Fleet,
    wires: Sequence[Wire],
    requests: Sequence[Message],
    response_type: type[HeartbeatResponse] | type[ConsumerGroupHeartbeatResponse],
) -> None:
    """The heartbeat phases (fixed rates, then saturation): member ``i`` sends ``requests[i]``; a response
    without an error counts as answered, anything else is tallied by its error. A member's heartbeat is
    the same request every time: encoded once (:class:`~regroup.bench.groups.wire.Template`)."""
    errors = fleet.errors
    templates = [Template(r, wire.versions[r.API_KEY]) for r, wire in zip(requests, wires, strict=True)]

    def send(i: int, done: Callable[[bool, float], None]) -> None:
        def answered(result: Message | BaseException, rtt: float) -> None:
            if isinstance(result, response_type):
                if result.error_code == 0:
                    done(True, rtt)
                    return
                errors[ErrorCode.from_code(result.error_code).name] += 1
            else:
                errors[type(result).__name__] += 1
            done(False, rtt)

        wires[i].send_template(templates[i], answered)

    await _phases(ctx, len(requests), send, "heartbeats/s", "heartbeats")
    _errors(ctx, fleet, "measured")


# ---------------------------------------------------------------------------------------------- churn


def _settled(members: Iterable[SimMember]) -> bool:
    ms = list(members)
    return bool(ms) and all(m.stable for m in ms) and len({m.generation_id for m in ms}) == 1


async def churn(ctx: Ctx) -> None:
    """A group of M members; every churn interval one new member joins and the oldest leaves (LeaveGroup),
    for ``duration`` seconds, then the group settles. Reports the rebalances completed and their
    durations (first JoinGroup answered with the generation → its last SyncGroup response)."""
    p = ctx.params
    _check(p)
    fleet = await _fleet(ctx, p.members * 2 + 16)
    group_id = ctx.group_ids(1, "churn")[0]
    try:
        live = _members(ctx, fleet, [group_id] * p.members)
        formed = await _form(ctx, fleet, live, "forming the group")
        _errors(ctx, fleet, "setup")
        start_gen = formed[group_id].generation_id
        completed: list[ObservedGeneration] = []
        fleet.tracker.listeners.append(
            lambda rec: completed.append(rec) if rec.generation_id > start_gen else None
        )
        joins = leaves = 0
        interval = p.churn_interval_ms / 1000
        with PhaseMeter(ctx.broker) as cpu:
            async with ctx.progress.watch(
                lambda: f"churn: {joins} joins, {leaves} leaves, {len(completed)} rebalances"
            ):
                t0 = time.perf_counter()
                tick = 0
                while True:
                    newcomer = SimMember(
                        fleet, len(fleet.members), p.membership(group_id, TOPIC), p.partitions or p.members
                    )
                    newcomer.start()
                    joins += 1
                    leaver = live.pop(0)
                    live.append(newcomer)
                    await leaver.leave()
                    leaves += 1
                    tick += 1
                    if tick * interval >= p.duration:
                        break
                    await asyncio.sleep(max(0.0, t0 + tick * interval - time.perf_counter()))
                churn_end = time.perf_counter()
                deadline = churn_end + p.timeout
                while not _settled(live) and time.perf_counter() < deadline:
                    await asyncio.sleep(0.01)
                settled = time.perf_counter()
        if not _settled(live):
            raise ScenarioError(f"the group did not settle within {p.timeout:g} s after the churn")
        durations = [rec.duration for rec in completed if rec.duration is not None]
        generations = {g for (gid, g) in fleet.tracker.generations if gid == group_id and g > start_gen}
        r = ctx.result
        r.add("churn", "joins", joins, "count", compare=False)
        r.add("churn", "leaves", leaves, "count", compare=False)
        r.add("churn", "rebalances completed", len(completed), "count")
        r.add("churn", "generations abandoned", len(generations) - len(completed), "count")
        r.add("churn", "rebalances completed per second", len(completed) / (settled - t0), "1/s")
        r.add("churn", "rebalance duration p50", _ms(percentile(durations, 0.5)), "ms")
        r.add("churn", "rebalance duration p99", _ms(percentile(durations, 0.99)), "ms")
        r.add("churn", "rebalance duration max", _ms(max(durations, default=None)), "ms")
        r.add("churn", "settle time after the last change", settled - churn_end, "s")
        r.add("churn", "generator CPU", cpu.generator_pct, "% of a core", compare=False)
        r.add("churn", "broker CPU", cpu.broker_pct, "% of a core")
        _loop_lag_metrics(ctx, "churn", cpu.loop_lag)
        _errors(ctx, fleet, "churn")
    finally:
        fleet.close()


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


# ---------------------------------------------------------------------------------------- static-roll


async def static_roll(ctx: Ctx) -> None:
    """A group of S static members (group.instance.id); restart them one by one — the old incarnation
    vanishes without LeaveGroup, as a static member's shutdown does, and the new one joins with the same
    instance id — and count the rebalances the roll caused (a faithful coordinator causes none)."""
    p = ctx.params
    _check(p)
    fleet = await _fleet(ctx, p.members + 1)
    group_id = ctx.group_ids(1, "static")[0]
    try:
        live = _members(ctx, fleet, [group_id] * p.members, instance="inst")
        formed = await _form(ctx, fleet, live, "forming the group")
        _errors(ctx, fleet, "setup")
        start_gen = formed[group_id].generation_id
        restarts: list[float] = []
        async with ctx.progress.watch(lambda: f"static roll: {len(restarts)}/{p.members} members restarted"):
            with PhaseMeter(ctx.broker) as cpu:
                t0 = time.perf_counter()
                for i in range(p.members):
                    old = live[i]
                    old.stop()
                    if p.bounce_ms:
                        await asyncio.sleep(p.bounce_ms / 1000)
                    new = SimMember(fleet, old.index, old.membership.config, old.partition_count)
                    live[i] = new
                    # A restarted consumer looks its coordinator up again; that round trip is not timed.
                    new.know_coordinator(old)
                    began = time.perf_counter()
                    new.start()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(new.synced.wait(), p.timeout)
                    if not new.stable:
                        raise ScenarioError(f"restarted member {i} did not rejoin: {new.fatal}")
                    restarts.append(time.perf_counter() - began)
                rolled = time.perf_counter() - t0
        ctx.progress.note("waiting one heartbeat round for any rebalance the roll caused")
        await asyncio.sleep(p.heartbeat_interval_ms / 1000 * 1.5)
        deadline = time.perf_counter() + p.timeout
        while not _settled(live) and time.perf_counter() < deadline:
            await asyncio.sleep(0.01)
        end_gen = max(m.generation_id for m in live)
        r = ctx.result
        r.add("static-roll", "members restarted", len(restarts), "count", compare=False)
        r.add("static-roll", "rebalances caused", end_gen - start_gen, "count")
        r.add("static-roll", "roll duration", rolled, "s")
        r.add("static-roll", "rejoin (JoinGroup → SyncGroup) p50", _ms(percentile(restarts, 0.5)), "ms")
        r.add("static-roll", "rejoin (JoinGroup → SyncGroup) p99", _ms(percentile(restarts, 0.99)), "ms")
        r.add("static-roll", "generator CPU", cpu.generator_pct, "% of a core", compare=False)
        r.add("static-roll", "broker CPU", cpu.broker_pct, "% of a core")
        _errors(ctx, fleet, "roll")
    finally:
        fleet.close()


# --------------------------------------------------------------------------------------- join latency


def _join_rows(ctx: Ctx, assigned: list[float], stable: list[float], cpu: list[PhaseMeter]) -> None:
    r = ctx.result
    phase = "join"
    r.add(phase, "members added", len(assigned), "count", compare=False)
    r.add(phase, "join → its partitions p50", _ms(percentile(assigned, 0.5)), "ms")
    r.add(phase, "join → its partitions max", _ms(max(assigned)), "ms")
    r.add(phase, "join → group stable p50", _ms(percentile(stable, 0.5)), "ms")
    r.add(phase, "join → group stable max", _ms(max(stable)), "ms")
    seconds = [c.broker_seconds for c in cpu]
    if all(x is not None for x in seconds):
        r.add(phase, "broker CPU per join", statistics.fmean(x or 0.0 for x in seconds) * 1000, "ms")
    wall = sum(c.wall for c in cpu)
    if wall > 0:
        r.add(
            phase,
            "generator CPU",
            100 * sum(c.generator_seconds for c in cpu) / wall,
            "% of a core",
            compare=False,
        )


async def join_latency(ctx: Ctx) -> None:
    """A group of N members formed; then, ``rounds`` times, one member more joins: time from its first
    request until it holds a non-empty assignment, and until the group is stable again. The subscribed
    topic has two partitions per member unless --partitions says otherwise, so the newcomer's partitions
    come from members that must give them up first."""
    p = ctx.params
    if p.members < 1 or p.rounds < 1:
        raise ScenarioError("need at least one member and one round")
    partitions = p.partitions or 2 * p.members
    if partitions < p.members + p.rounds:
        raise ScenarioError(f"{partitions} partitions leave the last newcomer without one")
    group_id = ctx.group_ids(1, "join")[0]
    if p.protocol == "consumer":
        await _consumer_join_latency(ctx, group_id, partitions)
    else:
        await _classic_join_latency(ctx, group_id, partitions)


async def _consumer_join_latency(ctx: Ctx, group_id: str, partitions: int) -> None:
    p = ctx.params
    fleet = await _fleet(ctx, 0)
    try:
        await _consumer_topic(ctx, fleet, partitions)
        live = _consumers(ctx, fleet, [group_id] * p.members, ctx.topic)
        await _form_consumers(ctx, fleet, live, partitions, f"forming a group of {p.members}")
        _errors(ctx, fleet, "setup")
        assigned: list[float] = []
        stable: list[float] = []
        meters: list[PhaseMeter] = []
        for n in range(p.rounds):
            await fleet.find_coordinators([group_id])  # untimed: a real consumer's lookup is not the join
            newcomer = ConsumerMember(fleet, len(fleet.members), group_id, ctx.topic, p.rebalance_timeout_ms)
            live.append(newcomer)
            with PhaseMeter(ctx.broker) as cpu:
                newcomer.start()
                end = await _until_stable(
                    ctx,
                    fleet,
                    {group_id: live},
                    partitions,
                    f"member {len(live)} joining ({n + 1}/{p.rounds})",
                    extra=functools.partial(_has_partitions, newcomer),
                )
            assert newcomer.first_sent is not None
            assert newcomer.first_assigned_at is not None
            assigned.append(newcomer.first_assigned_at - newcomer.first_sent)
            stable.append(end - newcomer.first_sent)
            meters.append(cpu)
        _join_rows(ctx, assigned, stable, meters)
        ctx.result.add("join", "member epoch at the end", max(m.epoch for m in live), "count", compare=False)
        _errors(ctx, fleet, "join")
    finally:
        fleet.close()


def _has_partitions(member: ConsumerMember) -> bool:
    return member.first_assigned_at is not None


async def _classic_join_latency(ctx: Ctx, group_id: str, partitions: int) -> None:
    p = ctx.params
    fleet = await _fleet(ctx, p.members + p.rounds)
    try:
        saved, p.partitions = p.partitions, partitions
        try:
            live = _members(ctx, fleet, [group_id] * p.members)
        finally:
            p.partitions = saved
        await _form(ctx, fleet, live, f"forming a group of {p.members}")
        _errors(ctx, fleet, "setup")
        assigned: list[float] = []
        stable: list[float] = []
        meters: list[PhaseMeter] = []
        for n in range(p.rounds):
            newcomer = SimMember(fleet, len(fleet.members), p.membership(group_id, TOPIC), partitions)
            newcomer.know_coordinator(live[0])
            live.append(newcomer)
            size = len(live)
            done: asyncio.Future[ObservedGeneration] = asyncio.get_running_loop().create_future()

            def listener(rec: ObservedGeneration, size: int = size, done: Any = done) -> None:
                if rec.group_id == group_id and rec.size == size and not done.done():
                    done.set_result(rec)

            fleet.tracker.listeners.append(listener)
            try:
                with PhaseMeter(ctx.broker) as cpu:
                    began = time.perf_counter()
                    newcomer.start()
                    what = f"member {size} joining ({n + 1}/{p.rounds})"
                    async with ctx.progress.watch(functools.partial(str, what)):
                        rec = await asyncio.wait_for(done, p.timeout)
            except TimeoutError:
                raise ScenarioError(f"member {size} did not join within {p.timeout:g} s") from None
            finally:
                fleet.tracker.listeners.remove(listener)
            if not newcomer.membership.assigned:
                raise ScenarioError(f"member {size} joined with no partitions")
            assert rec.completed_at is not None
            assigned.append(rec.synced[newcomer.member_id] - began)
            stable.append(rec.completed_at - began)
            meters.append(cpu)
        _join_rows(ctx, assigned, stable, meters)
        _errors(ctx, fleet, "join")
    finally:
        fleet.close()


# --------------------------------------------------------------------------------------------- memory

MEMORY_NOTE = (
    "memory rows: regroup counts the broker process's RSS (VmRSS once steady for 1 s); Kafka counts heap "
    "in use right after a full GC (jcmd GC.run, GC.heap_info); the RSS rows are each process's resident "
    "memory."
)


@dataclass(frozen=True, slots=True)
class _Memory:
    rss: RssReading
    heap: int | None
    has_heap: bool

    @property
    def counted(self) -> int | None:
        """What the headline rows count: heap after GC for a broker with a heap of its own, else RSS."""
        return self.heap if self.has_heap else self.rss.rss


async def _measure(ctx: Ctx, what: str) -> _Memory:
    broker = ctx.broker
    pid = broker.pid
    assert pid is not None
    ctx.progress.note(f"measuring {what}: waiting for the broker's RSS to settle")
    reading = await settled_rss(pid)
    if reading is None:
        raise ScenarioError(f"cannot read the broker's RSS from /proc/{pid}/status")
    if not reading.settled:
        ctx.progress.note(f"RSS still moving after {reading.waited:.0f} s; taking the last reading")
    try:
        heap = await asyncio.to_thread(broker.heap_after_gc)
    except BenchTargetError as exc:
        # The RSS rows still stand; the run is marked failed.
        ctx.progress.note(f"no heap reading: {exc}")
        ctx.result.error = ctx.result.error or f"heap after GC: {exc}"
        return _Memory(reading, None, True)
    return _Memory(reading, heap, heap is not None)


def _mb(value: int | None) -> float | None:
    return None if value is None else value / 1e6


def _each(before: int | None, after: int | None, count: int) -> float | None:
    return None if before is None or after is None else (after - before) / count


async def memory(ctx: Ctx) -> None:
    """Memory per connection, per idle member and per committed offset. After start-up and a warm-up (the
    topic created, a small group formed and left, a commit), the broker's memory is read; again once every
    member has its own connection (a join lane, as each real consumer has a connection to its
    coordinator; the lanes of the first group were opened before the warm-up); again after the M idle
    members formed in G groups, one group at a time (they only heartbeat); and again after Y offsets
    committed for simple groups (generation −1, no members), P partitions each. Each step's growth
    divided by what it added is the cost of one, so an idle member's figure holds its group state and not
    its connection. regroup counts RSS; Kafka, heap in use after a full GC (RSS for reference)."""
    p = ctx.params
    _check(p)
    broker = ctx.broker
    if broker.pid is None or len(broker.pids) != 1:
        raise ScenarioError(
            "memory reads the broker's process: it needs a single broker the benchmark started"
        )
    if p.offsets < 1:
        raise ScenarioError("need at least one offset")
    group_ids = ctx.group_ids(p.groups, "memory")
    group_of = _spread(p.members, group_ids)
    sizes = collections.Counter(group_of)
    group_size = max(sizes.values())
    partitions = p.partitions or min(p.offsets, 1000)
    offset_groups = ctx.group_ids(math.ceil(p.offsets / partitions), "offsets")
    topic = ctx.topic
    fleet = await _fleet(ctx, group_size)
    try:
        ctx.progress.note(f"warm-up: creating topic {topic} with {partitions} partitions")
        await _create_topic(fleet.fast[0], topic, partitions, p.timeout)
        warm_group, warm_simple = ctx.group_ids(2, "warmup")
        # A small group: what its members free on leaving would be reused by the first measured ones.
        warm_size = min(group_size, 10)
        warm = [
            SimMember(fleet, len(fleet.members), p.membership(warm_group, TOPIC), warm_size)
            for _ in range(warm_size)
        ]
        await _form(ctx, fleet, warm, f"warm-up: a group of {warm_size}")
        await asyncio.gather(*(m.leave() for m in warm))
        await fleet.find_coordinators([warm_simple])
        await _commit_simple(fleet, warm_simple, {TopicPartition(topic, q): 1 for q in range(partitions)})
        _errors(ctx, fleet, "warm-up")
        base = await _measure(ctx, "the baseline")

        members = [
            SimMember(fleet, len(fleet.members), p.membership(group_id, TOPIC), sizes[group_id])
            for group_id in group_of
        ]
        lanes = fleet.join_lanes
        await fleet.find_coordinators(group_ids)  # routing the members opens a lane for each
        opened = fleet.join_lanes - lanes
        connected = await _measure(ctx, f"{opened} more connections")
        for n, group_id in enumerate(group_ids):
            await _form(
                ctx, fleet, [m for m in members if m.group_id == group_id], f"group {n + 1}/{len(group_ids)}"
            )
        _errors(ctx, fleet, "forming")
        idle = await _measure(ctx, f"{p.members} idle members")

        await fleet.find_coordinators(offset_groups)
        committed = 0
        sem = asyncio.Semaphore(4 * len(fleet.fast))

        async def commit_one(i: int, group_id: str, count: int) -> None:
            nonlocal committed
            async with sem:
                offsets = {TopicPartition(topic, q): q + 1 for q in range(count)}
                await _commit_simple(fleet, group_id, offsets, i)
            committed += count

        counts = [min(partitions, p.offsets - i * partitions) for i in range(len(offset_groups))]
        async with ctx.progress.watch(lambda: f"committing: {committed}/{p.offsets} offsets"):
            await asyncio.gather(
                *(commit_one(i, g, c) for i, (g, c) in enumerate(zip(offset_groups, counts, strict=True)))
            )
        _errors(ctx, fleet, "committing")
        full = await _measure(ctx, f"{p.offsets} committed offsets")
        stable = sum(1 for m in members if m.stable)
        _errors(ctx, fleet, "idle")
    finally:
        fleet.close()
    r = ctx.result
    _memory_totals(r, "baseline", base)
    phase = "connections"
    r.add(phase, "connections opened", opened, "count", compare=False)
    if opened:
        _memory_step(r, phase, "connection", base, connected, opened)
    phase = "idle members"
    r.add(phase, "members", p.members, "count", compare=False)
    r.add(phase, "groups", p.groups, "count", compare=False)
    _memory_step(r, phase, "idle member", connected, idle, p.members)
    r.add(phase, "members still stable at the end", stable, "count", compare=False)
    phase = "committed offsets"
    r.add(phase, "offsets", p.offsets, "count", compare=False)
    r.add(phase, "groups (no members)", len(offset_groups), "count", compare=False)
    r.add(phase, "partitions per group", partitions, "count", compare=False)
    _memory_step(r, phase, "committed offset", idle, full, p.offsets)


def _memory_step(r: RunResult, phase: str, each: str, before: _Memory, after: _Memory, count: int) -> None:
    r.add(phase, each, _each(before.counted, after.counted, count), "bytes each")
    r.add(phase, f"{each} by RSS", _each(before.rss.rss, after.rss.rss, count), "bytes each")
    _memory_totals(r, phase, after)


def _memory_totals(r: RunResult, phase: str, m: _Memory) -> None:
    r.add(phase, "memory total", _mb(m.counted), "MB")
    r.add(phase, "RSS total", _mb(m.rss.rss), "MB")
    r.add(phase, "RSS settled after", m.rss.waited, "s", compare=False)


# ------------------------------------------------------------------------------------------------ run

SCENARIOS: dict[str, Callable[[Ctx], Coroutine[Any, Any, None]]] = {
    "formation": formation,
    "heartbeat": heartbeat,
    "commit": commit,
    "failover": failover,
    "churn": churn,
    "static-roll": static_roll,
    "memory": memory,
    "join-latency": join_latency,
}

_MEMBERS = ("session_timeout_ms", "heartbeat_interval_ms", "rebalance_timeout_ms", "connections")
# The parameters each scenario reads (and so reports).
SCENARIO_PARAMS: dict[str, tuple[str, ...]] = {
    "formation": ("nodes", "protocol", "members", "groups", "partitions", *_MEMBERS),
    "heartbeat": ("nodes", "protocol", "members", "groups", "rates", "duration", "warmup", *_MEMBERS),
    "commit": ("nodes", "members", "groups", "partitions", "rates", "duration", "warmup", *_MEMBERS),
    "failover": ("groups", "offsets", "rounds", "baseline", "connections"),
    "churn": ("nodes", "members", "duration", "churn_interval_ms", "partitions", *_MEMBERS),
    "static-roll": ("nodes", "members", "bounce_ms", "partitions", *_MEMBERS),
    "memory": ("members", "groups", "offsets", "partitions", *_MEMBERS),
    "join-latency": ("nodes", "protocol", "members", "partitions", "rounds", *_MEMBERS),
}

# The scenarios whose members can speak the consumer protocol (--protocol consumer).
CONSUMER_SCENARIOS = ("formation", "heartbeat", "join-latency")

# Printed under the table (and put in the JSON) for the scenarios whose rows need a word on what they count.
_NOTES: dict[str, str] = {"memory": MEMORY_NOTE}

# What the fake responder can stand in for: the throughput scenarios, to measure the load generator.
FAKE_SCENARIOS = ("heartbeat", "commit")


def _runner(use_uvloop: bool) -> asyncio.Runner:
    if use_uvloop:
        try:
            import uvloop
        except ImportError:  # pragma: no cover - uvloop is a dependency on POSIX
            pass
        else:
            return asyncio.Runner(loop_factory=uvloop.new_event_loop)
    return asyncio.Runner()


def run_scenario(scenario: str, broker: BenchTarget, params: Params, *, use_uvloop: bool = True) -> RunResult:
    """Run ``scenario`` against a started ``broker``; failures are reported in the result."""
    result = RunResult(broker.kind, broker.version, broker.bootstrap, nodes=params.nodes)
    if broker.kind == "fake" and (scenario not in FAKE_SCENARIOS or params.protocol != "classic"):
        result.error = f"the fake responder keeps no groups; {scenario} needs a real coordinator"
        return result
    if params.protocol not in PROTOCOLS or (
        params.protocol != "classic" and scenario not in CONSUMER_SCENARIOS
    ):
        result.error = f"{scenario} does not run with --protocol {params.protocol}"
        return result
    ctx = Ctx(broker, params, result, Progress(f"{scenario} on {broker.kind}", params.progress))
    with _runner(use_uvloop) as runner:
        try:
            runner.run(SCENARIOS[scenario](ctx))
        except (ScenarioError, BenchTargetError, ConnectionError, TimeoutError, ValueError) as exc:
            result.error = f"{type(exc).__name__}: {exc}"
    return result


_SPARE_FILES: Final = 768  # beyond one connection per member: the fleet's lanes, logs, a JVM's jars


def _open_files_hard_limit() -> int | None:
    """This process's open-files hard limit (None: unlimited, or not POSIX)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not POSIX
        return None
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    return None if hard == resource.RLIM_INFINITY else hard


def _open_files_needed(scenario: str, params: Params) -> int:
    """Files a run holds in this process and in a broker it starts: the classic scenarios give each
    member that may rebalance a join lane (heartbeat: one wave of groups, :func:`_heartbeat_lanes`);
    consumer-protocol members only heartbeat, over the shared connections."""
    if params.protocol == "consumer" and scenario in CONSUMER_SCENARIOS:
        return params.connections * max(1, params.nodes) + _SPARE_FILES
    if scenario == "heartbeat":
        return _heartbeat_lanes(params) + _SPARE_FILES
    return params.members + _SPARE_FILES


def _ensure_open_files(needed: int) -> None:
    """Each member joins on its own connection (Kafka serves one request per connection at a time, so
    parked JoinGroups cannot share one), in this process and in the broker it starts, which inherits the
    limits: raise the open-files limit to ``needed`` (the hard one too, where permitted)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not POSIX
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= needed or soft == resource.RLIM_INFINITY:
        return
    if hard != resource.RLIM_INFINITY and hard < needed:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (needed, needed))
            return
        except (ValueError, OSError):
            raise ScenarioError(
                f"{needed} open files are needed and the hard limit is {hard}: raise it (ulimit -Hn)"
            ) from None
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


def run(
    scenario: str,
    params: Params,
    *,
    broker: str = "regroup",
    bootstrap_server: str | None = None,
    against: str | None = None,
    against_nodes: int | None = None,
    broker_config: Mapping[str, str] | None = None,
    json_output: bool = False,
    use_uvloop: bool = True,
) -> int:
    """``regroup bench <scenario>``: run on ``broker`` (or ``bootstrap_server``) and, with ``against``, on
    a second broker (a cluster of ``against_nodes``, default ``params.nodes``); print the table or JSON.
    Exit code 1 if any run failed."""
    kinds = [broker] + ([against] if against and against != broker else [])
    second = replace(params, nodes=against_nodes) if against_nodes else params
    plans = [(kind, params if n == 0 else second) for n, kind in enumerate(kinds)]
    try:
        _ensure_open_files(max(_open_files_needed(scenario, p) for _, p in plans))
    except ScenarioError as exc:
        print(f"regroup bench {scenario}: {exc}", file=sys.stderr)
        return 1
    runs: list[RunResult] = []
    progress = Progress(scenario, params.progress)
    if params.protocol == "consumer":
        broker_config = {**consumer_broker_config(params), **(broker_config or {})}
    applied = {**FAIR_CONFIG, **(broker_config or {})}
    for n, (kind, run_params) in enumerate(plans):
        target: BenchTarget
        if n == 0 and bootstrap_server:
            target = ExternalBroker(bootstrap_server)
        else:
            nodes = run_params.nodes
            what = f"a {kind} cluster of {nodes}" if nodes > 1 else f"a {kind} broker"
            progress.note(f"starting {what}")
            try:
                target = start_broker(kind, broker_config or {}, nodes)
            except (BenchTargetError, ValueError) as exc:
                runs.append(RunResult(kind, "", "", nodes=nodes, error=f"{type(exc).__name__}: {exc}"))
                continue
            applied = target.overrides or applied
        try:
            runs.append(run_scenario(scenario, target, run_params, use_uvloop=use_uvloop))
        finally:
            target.close()
    shown = {k: v for k, v in asdict(params).items() if k in SCENARIO_PARAMS[scenario]}
    if json_output:
        doc = payload(scenario, shown, runs)
        doc["broker_config"] = applied
        doc["python"] = sys.version.split()[0]
        if scenario in _NOTES:
            doc["note"] = _NOTES[scenario]
        print(json.dumps(doc, indent=2))
    else:
        fair = ", ".join(f"{k}={v}" for k, v in applied.items())
        print(render(f"regroup bench {scenario}", shown, runs))
        print(f"\nbroker settings applied to started brokers: {fair}")
        if scenario in _NOTES:
            print(_NOTES[scenario])
    return 1 if any(r.error for r in runs) else 0


def params_from(values: Mapping[str, Any]) -> Params:
    known = set(Params.__dataclass_fields__)
    return Params(**{k: v for k, v in values.items() if k in known and v is not None})
