"""Prometheus metrics of the broker, named after Apache Kafka's JMX metrics (see docs/operations.md).

Counters that events drive (requests, offset commits, completed rebalances, expirations) are plain integers
updated by observers on the request path and the coordinator's Notify events; gauges (groups per state,
committed offsets, lag, assignment health, consumer-group epochs and reconciliation, connections, partition
load times) are read from the broker's state when ``/metrics`` is scraped. Lag, members and assignment
health cover classic and consumer (KIP-848) groups alike; the GroupMetadataManager state gauges count
classic groups, as Kafka's do. :class:`BrokerCollector` turns both into metric families, rendered by
prometheus-client without any registry (nothing is registered in its global one).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Final

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from regroup.broker.ops.looplag import LAG_BUCKETS, LoopLagMonitor
from regroup.broker.ops.request_stats import LATENCY_BUCKETS, RequestStats
from regroup.group.consumer_group import ConsumerGroupState
from regroup.group.consumer_group_events import ConsumerGroupEpochBumped
from regroup.group.history import GenerationCompleted, GenerationStable
from regroup.group.offset_manager import OffsetsExpired
from regroup.group.state import GroupState
from regroup.protocol.api_keys import API_INFO, ApiKey
from regroup.runtime.group_view import CLASSIC, CONSUMER, GroupView
from regroup.runtime.shard_runner import RunnerState

if TYPE_CHECKING:
    from regroup.broker.context import BrokerPort
    from regroup.broker.server import BrokerServer

__all__ = ["BrokerCollector", "CoordinatorStats", "Families", "RequestStats", "build_collector"]

log = logging.getLogger("regroup.broker.ops")

RATE_WINDOW_S: Final = 30.0
"""The window of the rates (Kafka's metrics sample window, ``metrics.sample.window.ms``)."""

_STATE_GAUGES: Final = (
    (GroupState.PREPARING_REBALANCE, "preparing_rebalance", "NumGroupsPreparingRebalance"),
    (GroupState.COMPLETING_REBALANCE, "completing_rebalance", "NumGroupsCompletingRebalance"),
    (GroupState.STABLE, "stable", "NumGroupsStable"),
    (GroupState.DEAD, "dead", "NumGroupsDead"),
    (GroupState.EMPTY, "empty", "NumGroupsEmpty"),
)


def _api_name(api_key: int) -> str:
    try:
        return API_INFO[ApiKey(api_key)].name
    except ValueError:
        return str(api_key)


class CoordinatorStats:
    """Counters driven by the coordinator's Notify events; also warns when a group becomes Stable with an
    unhealthy assignment (unowned or doubly assigned partitions)."""

    def __init__(self, broker: BrokerPort, now: Callable[[], float] = time.monotonic) -> None:
        self._broker = broker
        self._now = now
        self.consumer_rebalances = 0
        self._consumer_rebalance_times: deque[float] = deque()
        self.completed_rebalances = 0
        self.generations = 0
        self.offset_expirations = 0
        self.unhealthy_generations = 0

    def on_event(self, _partition: int, event: object) -> None:
        if isinstance(event, GenerationStable):
            self.completed_rebalances += 1
            self._check_health(event.record.group_id, event.record.generation_id)
        elif isinstance(event, GenerationCompleted):
            self.generations += 1
        elif isinstance(event, OffsetsExpired):
            self.offset_expirations += event.count
        elif isinstance(event, ConsumerGroupEpochBumped):
            self.consumer_rebalances += 1
            self._consumer_rebalance_times.append(self._now())

    def consumer_rebalance_rate(self) -> float:
        """Consumer-group rebalances (epoch bumps) per second over the last :data:`RATE_WINDOW_S` (Kafka's
        ``consumer-group-rebalance-rate``)."""
        times = self._consumer_rebalance_times
        horizon = self._now() - RATE_WINDOW_S
        while times and times[0] < horizon:
            times.popleft()
        return len(times) / RATE_WINDOW_S

    def _check_health(self, group_id: str, generation_id: int) -> None:
        view = self._broker.group_coordinator.group_view(group_id)
        if view is None or view.health is None or view.health.ok:
            return
        self.unhealthy_generations += 1
        log.warning(
            "Group %s generation %d is Stable with an unhealthy assignment (protocol %s): %s",
            group_id,
            generation_id,
            view.protocol_name,
            view.health.describe(),
        )


class Families:
    """Metric families already read, for rendering away from the event loop (``generate_latest`` takes
    anything with ``collect()``)."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


class BrokerCollector:
    """Every regroup metric family, read at scrape time: :meth:`live_families` on the event loop, then
    :meth:`view_families` (safe in a worker thread)."""

    def __init__(
        self,
        broker: BrokerPort,
        server: BrokerServer,
        requests: RequestStats,
        coordinator_stats: CoordinatorStats,
        loop_lag: LoopLagMonitor,
    ) -> None:
        self._broker = broker
        self._server = server
        self._requests = requests
        self._coordinator = coordinator_stats
        self._loop_lag = loop_lag

    def needs_views(self, names: frozenset[str] | None) -> bool:
        """Whether the families selected by ``names`` (Prometheus' ``name[]``; None: all) are read from the
        groups' views — the expensive part of a scrape, in proportion to the committed offsets (one lag
        series each)."""
        if names is None:
            return True
        free = self._view_free_names
        return any(not any(_matches(name, family) for family in free) for name in names)

    @functools.cached_property
    def _view_free_names(self) -> tuple[str, ...]:
        return tuple(family.name for family in self._view_free())

    def live_families(self, views: list[GroupView], names: frozenset[str] | None) -> list[Metric]:
        """The families that read the broker's live state (requests, connections, the loop, the
        coordinator's counters and partitions): to be read on the event loop."""
        produced: list[Metric] = [*self._view_free()]
        if self.needs_views(names):
            produced += self._group_gauges(views)
            produced += self._coordinator_metrics(views)
        return _select(produced, names)

    def view_families(self, views: list[GroupView], names: frozenset[str] | None) -> list[Metric]:
        """The families computed from ``views`` alone — a lag series per committed offset, so the bulk of a
        scrape — which read nothing that changes: safe in a worker thread."""
        produced: list[Metric] = []
        for make in (self._lag_metrics, self._health_metrics, self._consumer_group_metrics):
            produced += make(views)
        return _select(produced, names)

    def _view_free(self) -> list[Metric]:
        return [
            *self._request_metrics(),
            *self._connection_metrics(),
            *self._fetch_session_metrics(),
            self._loop_lag_metric(),
        ]

    def _fetch_session_metrics(self) -> Iterator[Metric]:
        cache = self._broker.fetch_sessions
        prefix = "kafka_server_fetchsessioncache"
        yield GaugeMetricFamily(
            f"{prefix}_numincrementalfetchsessions", "Incremental fetch sessions cached.", value=len(cache)
        )
        yield GaugeMetricFamily(
            f"{prefix}_numincrementalfetchpartitionscached",
            "Partitions cached across all incremental fetch sessions.",
            value=cache.partitions,
        )
        yield CounterMetricFamily(
            f"{prefix}_incrementalfetchsessionevictions",
            "Incremental fetch sessions evicted to make room for another.",
            value=cache.evictions,
        )

    def _loop_lag_metric(self) -> Metric:
        lag = self._loop_lag
        family = HistogramMetricFamily(
            "regroup_event_loop_lag_seconds",
            "How much later than due the broker's event loop ran a timer due every "
            f"{lag.interval * 1000:g} ms (the queueing delay every request saw).",
        )
        family.add_metric([], _cumulative(LAG_BUCKETS, lag.counts), sum_value=lag.total)
        return family

    def _group_gauges(self, views: list[GroupView]) -> Iterator[Metric]:
        prefix = "kafka_coordinator_group_groupmetadatamanager"
        classic = [v for v in views if v.group_type == CLASSIC]
        yield GaugeMetricFamily(
            f"{prefix}_num_groups", "Classic groups in every state (NumGroups).", value=len(classic)
        )
        for state, suffix, jmx in _STATE_GAUGES:
            count = sum(1 for v in classic if v.state == state.value)
            yield GaugeMetricFamily(
                f"{prefix}_num_groups_{suffix}",
                f"Classic groups in state {state.value} ({jmx}).",
                value=count,
            )
        yield GaugeMetricFamily(
            f"{prefix}_num_offsets",
            "Committed offsets held by the coordinator (NumOffsets).",
            value=sum(len(v.offsets) for v in views),
        )

    def _coordinator_metrics(self, views: list[GroupView]) -> Iterator[Metric]:
        prefix = "kafka_server_group_coordinator_metrics"
        stats = self._coordinator
        count = GaugeMetricFamily(
            f"{prefix}_group_count", "Groups by protocol (group-count).", labels=["protocol"]
        )
        coord = self._broker.group_coordinator
        consumer_states = coord.consumer_group_states() if coord.running else []
        count.add_metric(["classic"], sum(1 for v in views if v.group_type == CLASSIC))
        count.add_metric(["consumer"], len(consumer_states))
        yield count
        by_state = GaugeMetricFamily(
            f"{prefix}_consumer_group_count",
            "Consumer (KIP-848) groups by state (consumer-group-count).",
            labels=["state"],
        )
        for state in ConsumerGroupState:
            by_state.add_metric([state.value], consumer_states.count(state.value))
        yield by_state
        yield CounterMetricFamily(
            f"{prefix}_consumer_group_rebalance",
            "Consumer group rebalances: group epoch bumps (consumer-group-rebalance-count).",
            value=stats.consumer_rebalances,
        )
        yield GaugeMetricFamily(
            f"{prefix}_consumer_group_rebalance_rate",
            f"Consumer group rebalances per second over the last {RATE_WINDOW_S:g} s "
            "(consumer-group-rebalance-rate).",
            value=stats.consumer_rebalance_rate(),
        )
        for name, doc, value in (
            ("offset_commit", "Offsets committed (offset-commit-count).", self._requests.offset_commits),
            (
                "offset_expiration",
                "Offsets removed by retention (offset-expiration-count).",
                stats.offset_expirations,
            ),
            (
                "offset_deletion",
                "Offsets deleted by OffsetDelete (offset-deletion-count).",
                self._requests.offset_deletions,
            ),
            (
                "group_completed_rebalance",
                "Classic group rebalances completed: assignment stored, group Stable "
                "(group-completed-rebalance-count).",
                stats.completed_rebalances,
            ),
        ):
            yield CounterMetricFamily(f"{prefix}_{name}", doc, value=value)
        loads = self._load_times_ms()
        yield GaugeMetricFamily(
            f"{prefix}_partition_load_time_max",
            "Longest load of a __consumer_offsets partition, ms (partition-load-time-max).",
            value=max(loads, default=0.0),
        )
        yield GaugeMetricFamily(
            f"{prefix}_partition_load_time_avg",
            "Mean load time of the __consumer_offsets partitions, ms (partition-load-time-avg).",
            value=sum(loads) / len(loads) if loads else 0.0,
        )

    def _load_times_ms(self) -> list[float]:
        coord = self._broker.group_coordinator
        if not coord.running:
            return []
        times: list[float] = []
        for partition in range(coord.num_partitions):
            runner = coord.runner(partition)
            if runner is None or runner.state is not RunnerState.ACTIVE:
                continue
            loaded = runner.start()  # the load's future (the runner is already started)
            if loaded.done() and not loaded.cancelled() and loaded.exception() is None:
                stats = loaded.result()
                if stats is not None:
                    times.append(stats.seconds * 1000)
        return times

    def _request_metrics(self) -> Iterator[Metric]:
        prefix = "kafka_network_request_metrics"
        requests = CounterMetricFamily(
            f"{prefix}_requests",
            "Requests handled, by API and version (RequestsPerSec).",
            labels=["request", "version"],
        )
        for (api_key, version), n in sorted(self._requests.requests.items()):
            requests.add_metric([_api_name(api_key), str(version)], n)
        yield requests
        latency = HistogramMetricFamily(
            f"{prefix}_total_time_seconds",
            "Time from dispatch until the response is ready, by API (TotalTimeMs, in seconds).",
            labels=["request"],
        )
        for api_key, hist in sorted(self._requests.latency.items()):
            latency.add_metric(
                [_api_name(api_key)], _cumulative(LATENCY_BUCKETS, hist[:-1]), sum_value=hist[-1]
            )
        yield latency

    def _connection_metrics(self) -> Iterator[Metric]:
        per_listener: dict[str, int] = dict.fromkeys(self._broker.bound_addresses(), 0)
        for conn in list(self._server.connections):
            name = getattr(conn, "_listener", "?")
            per_listener[name] = per_listener.get(name, 0) + 1
        gauge = GaugeMetricFamily(
            "kafka_server_socket_server_metrics_connection_count",
            "Open client connections, by listener (connection-count).",
            labels=["listener"],
        )
        for name, n in sorted(per_listener.items()):
            gauge.add_metric([name], n)
        yield gauge

    def _lag_metrics(self, views: list[GroupView]) -> Iterator[Metric]:
        current = GaugeMetricFamily(
            "kafka_consumergroup_current_offset",
            "Committed offset of a group on a partition.",
            labels=["consumergroup", "topic", "partition"],
        )
        lag = GaugeMetricFamily(
            "kafka_consumergroup_lag",
            "Log end offset minus the committed offset.",
            labels=["consumergroup", "topic", "partition"],
        )
        lag_sum = GaugeMetricFamily(
            "kafka_consumergroup_lag_sum",
            "Lag of a group summed over a topic's partitions.",
            labels=["consumergroup", "topic"],
        )
        members = GaugeMetricFamily(
            "kafka_consumergroup_members", "Members of a group.", labels=["consumergroup"]
        )
        end = GaugeMetricFamily(
            "kafka_topic_partition_current_offset",
            "Log end offset of a partition some group has committed offsets for.",
            labels=["topic", "partition"],
        )
        ends: dict[tuple[str, int], int] = {}
        for view in views:
            members.add_metric([view.group_id], len(view.members))
            sums: dict[str, int] = {}
            for p in view.offsets:
                labels = [view.group_id, p.topic, str(p.partition)]
                current.add_metric(labels, p.current_offset)
                if p.lag is not None and p.log_end_offset is not None:
                    lag.add_metric(labels, p.lag)
                    sums[p.topic] = sums.get(p.topic, 0) + p.lag
                    ends[(p.topic, p.partition)] = p.log_end_offset
            for topic, total in sorted(sums.items()):
                lag_sum.add_metric([view.group_id, topic], total)
        for (topic, partition), offset in sorted(ends.items()):
            end.add_metric([topic, str(partition)], offset)
        yield from (current, lag, lag_sum, members, end)

    def _health_metrics(self, views: list[GroupView]) -> Iterator[Metric]:
        unowned = GaugeMetricFamily(
            "regroup_group_assignment_unowned_partitions",
            "Subscribed partitions no member owns, for Stable consumer-protocol groups.",
            labels=["consumergroup"],
        )
        duplicated = GaugeMetricFamily(
            "regroup_group_assignment_duplicated_partitions",
            "Partitions assigned to more than one member, for Stable consumer-protocol groups.",
            labels=["consumergroup"],
        )
        for view in views:
            if view.health is not None:
                unowned.add_metric([view.group_id], len(view.health.unowned))
                duplicated.add_metric([view.group_id], len(view.health.duplicated))
        yield unowned
        yield duplicated
        yield CounterMetricFamily(
            "regroup_group_unhealthy_assignments",
            "Generations that became Stable with unowned or doubly assigned partitions.",
            value=self._coordinator.unhealthy_generations,
        )

    def _consumer_group_metrics(self, views: list[GroupView]) -> Iterator[Metric]:
        epoch = GaugeMetricFamily(
            "regroup_consumer_group_epoch",
            "Group epoch of a consumer (KIP-848) group.",
            labels=["consumergroup"],
        )
        target = GaugeMetricFamily(
            "regroup_consumer_group_assignment_epoch",
            "Epoch of a consumer group's target assignment (below the group epoch while Assigning).",
            labels=["consumergroup"],
        )
        members = GaugeMetricFamily(
            "regroup_consumer_group_members",
            "Members of a consumer group by reconciliation state (stable, unrevoked_partitions, "
            "unreleased_partitions).",
            labels=["consumergroup", "state"],
        )
        for view in views:
            if view.group_type != CONSUMER:
                continue
            epoch.add_metric([view.group_id], view.group_epoch or 0)
            target.add_metric([view.group_id], view.assignment_epoch or 0)
            states: dict[str, int] = dict.fromkeys(_MEMBER_STATES, 0)
            for m in view.members:
                if m.member_state is not None:
                    states[m.member_state] = states.get(m.member_state, 0) + 1
            for state, n in states.items():
                members.add_metric([view.group_id, state], n)
        yield from (epoch, target, members)


_MEMBER_STATES: Final = ("stable", "unrevoked_partitions", "unreleased_partitions")


def _matches(name: str, family: str) -> bool:
    """``name`` selects the family itself or one of its sample series (``_bucket``, ``_sum``, ``_total``…)."""
    return name == family or (name.startswith(family) and name[len(family)] == "_")


def _select(families: list[Metric], names: frozenset[str] | None) -> list[Metric]:
    if names is None:
        return families
    selected = (_selected(family, names) for family in families)
    return [family for family in selected if family is not None]


def _selected(family: Metric, names: frozenset[str]) -> Metric | None:
    """``family`` as a ``name[]`` selection keeps it: whole when its name is selected, else only the
    samples named (prometheus-client's restricted registry does the same)."""
    if family.name in names:
        return family
    samples = [s for s in family.samples if s.name in names]
    if not samples:
        return None
    kept = Metric(family.name, family.documentation, family.type, family.unit)
    kept.samples = samples
    return kept


def _cumulative(bounds: Sequence[float], counts: Sequence[float]) -> list[tuple[str, float]]:
    """Prometheus buckets (``le`` bound, cumulative count) from per-bucket counts (the last one +Inf)."""
    out: list[tuple[str, float]] = []
    running = 0.0
    for bound, hits in zip((*map(str, bounds), "+Inf"), counts, strict=True):
        running += hits
        out.append((bound, running))
    return out


def build_collector(
    broker: BrokerPort, server: BrokerServer, loop_lag: LoopLagMonitor
) -> tuple[BrokerCollector, RequestStats, CoordinatorStats]:
    """regroup's collector (a prometheus-client ``Collector``; nothing is registered in the library's
    global registry); the stats objects are to be wired to their event sources."""
    loop = asyncio.get_running_loop()
    requests = RequestStats(loop.time)
    stats = CoordinatorStats(broker)
    return BrokerCollector(broker, server, requests, stats, loop_lag), requests, stats
