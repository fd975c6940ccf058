"""Command-line wiring of the group-coordinator benchmarks: ``regroup bench formation|heartbeat|commit|
failover|churn|static-roll|memory|join-latency``; formation, heartbeat and join-latency also with
``--protocol consumer`` (KIP-848 members). Scenario code is imported only when a scenario runs."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["add_scenarios"]

_COMMON_EPILOG = """\
Without --bootstrap-server a broker is started for the run (--broker: regroup serve, the Apache Kafka
reference broker, or the fake responder that measures the load generator itself) on a free port with
its data in a temporary directory. --against kafka also runs the scenario on the reference Kafka broker
(one broker alive at a time) and adds a ratio column, first broker / second broker. Started brokers get
group.initial.rebalance.delay.ms=0, group.min.session.timeout.ms=1000, group.max.session.timeout.ms=
1800000, offsets.topic.num.partitions=50 (change with --broker-config). Progress goes to stderr.
"""

_CONSUMER_EPILOG = """
--protocol consumer: members speak KIP-848 (ConsumerGroupHeartbeat; join with epoch 0, reconcile
at once, acknowledge with their owned partitions) on a topic the run creates, and a group is stable when
every member is at the group epoch with its target assignment (confirmed by ConsumerGroupDescribe). The
broker decides session and heartbeat interval in this protocol, so started brokers also get
group.consumer.session.timeout.ms=--session-timeout-ms, group.consumer.heartbeat.interval.ms=
--heartbeat-interval-ms (min/max bounds widened to admit them) and group.consumer.assignment.interval.ms=
1000 (Kafka 4.3's default).
"""

_SCENARIOS: dict[str, tuple[str, dict[str, Any]]] = {
    "formation": (
        "N members start at once: time from the first JoinGroup to the last SyncGroup response",
        {"members": 100, "groups": 1},
    ),
    "heartbeat": (
        "N members in G groups: achieved heartbeats/s and p50/p99 latency at fixed rates and at saturation",
        {"members": 1000, "groups": 10, "rates": "1000,5000"},
    ),
    "commit": (
        "C committers x P partitions: commits/s and p50/p99 latency at fixed rates and at saturation",
        {"members": 100, "groups": 10, "partitions": 10, "rates": "1000"},
    ),
    "failover": (
        "restart the broker on its data: time to the first OffsetFetch of a __consumer_offsets partition "
        "holding X groups / Y offsets, and the replay rate",
        {"groups": 1000, "offsets": 100_000},
    ),
    "churn": (
        "members joining and leaving continuously: rebalances completed and their durations",
        {"members": 100, "duration": 30.0},
    ),
    "static-roll": (
        "roll S static members (group.instance.id) one by one: rebalances caused and restart latency",
        {"members": 100},
    ),
    "join-latency": (
        "a group of N members formed, then one more member joins (R times): time until it holds "
        "partitions and until the group is stable again",
        {"members": 1000, "groups": 1},
    ),
    "memory": (
        "broker memory per connection (one per member), per idle member (M members in G groups, only "
        "heartbeating) and per committed offset (Y offsets of simple groups, P partitions each): RSS for "
        "regroup, heap after a full GC for Kafka",
        {"members": 10_000, "groups": 10, "offsets": 200_000, "partitions": 1000},
    ),
}


_PROTOCOL_SCENARIOS = ("formation", "heartbeat", "join-latency")


def _rates(text: str) -> list[float]:
    try:
        rates = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated rates, got {text!r}") from None
    if any(r <= 0 for r in rates):
        raise argparse.ArgumentTypeError("rates must be positive")
    return rates


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    return key.strip(), value


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--bootstrap-server", metavar="HOST:PORT", help="run against this broker instead of starting one"
    )
    p.add_argument(
        "--broker",
        choices=["regroup", "kafka", "fake"],
        default="regroup",
        help="the broker to start when no --bootstrap-server is given (default: regroup)",
    )
    p.add_argument("--against", choices=["kafka", "regroup"], help="also run on this broker and print ratios")
    p.add_argument(
        "--broker-config",
        type=_key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra setting for every started broker (repeatable)",
    )
    p.add_argument("--connections", type=int, default=8, help="shared pipelined connections (default: 8)")
    p.add_argument(
        "--session-timeout-ms", type=int, default=45000, help="members' session.timeout.ms (45000)"
    )
    p.add_argument(
        "--heartbeat-interval-ms", type=int, default=3000, help="members' heartbeat.interval.ms (3000)"
    )
    p.add_argument(
        "--rebalance-timeout-ms", type=int, default=300000, help="members' max.poll.interval.ms (300000)"
    )
    p.add_argument(
        "--timeout", type=float, default=300.0, help="give up a setup step after this many s (300)"
    )
    p.add_argument("--no-uvloop", action="store_true", help="use the default asyncio event loop")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON instead of a table")


def add_scenarios(bench_subparsers: Any) -> None:
    """Add the group-coordinator scenarios to ``regroup bench``'s subparsers."""
    for name, (summary, defaults) in _SCENARIOS.items():
        p: argparse.ArgumentParser = bench_subparsers.add_parser(
            name,
            help=summary,
            description=summary[0].upper() + summary[1:] + ".",
            epilog=_COMMON_EPILOG + (_CONSUMER_EPILOG if name in _PROTOCOL_SCENARIOS else ""),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        _add_common(p)
        if name not in ("failover", "memory"):
            p.add_argument(
                "--nodes",
                type=int,
                default=1,
                help="start a cluster of this many nodes (regroup: plus a private etcd; Kafka: plus one "
                "KRaft controller) instead of one broker; internal topics get min(3, nodes) replicas "
                "(default: 1)",
            )
            p.add_argument(
                "--against-nodes",
                type=int,
                default=None,
                metavar="NODES",
                help="nodes of the --against broker's cluster (default: --nodes); e.g. --nodes 2 --against "
                "kafka --against-nodes 1: regroup's one node per core beside Kafka's one broker, whose "
                "threads use every core",
            )
        if name != "failover":
            p.add_argument(
                "--members",
                type=int,
                default=defaults["members"],
                help=f"members (default: {defaults['members']})",
            )
        if name in _PROTOCOL_SCENARIOS:
            p.add_argument(
                "--protocol",
                choices=["classic", "consumer"],
                default="classic",
                help="the members' group protocol: classic (JoinGroup/SyncGroup) or consumer (KIP-848) "
                "(default: classic)",
            )
        if name in ("formation", "join-latency"):
            p.add_argument(
                "--partitions",
                type=int,
                default=0,
                help="partitions of the subscribed topic per group (default: one per member; join-latency: "
                "two per member)",
            )
        if name == "join-latency":
            p.add_argument("--rounds", type=int, default=3, help="members added one after the other (3)")
        if name in ("formation", "heartbeat", "commit", "failover", "memory"):
            p.add_argument(
                "--groups",
                type=int,
                default=defaults["groups"],
                help=f"groups (default: {defaults['groups']})",
            )
        if name in ("heartbeat", "commit"):
            p.add_argument(
                "--rates",
                type=_rates,
                default=_rates(defaults["rates"]),
                help=f"fixed offered rates per second, comma-separated (default: {defaults['rates']})",
            )
            p.add_argument("--duration", type=float, default=5.0, help="seconds per phase (default: 5)")
            p.add_argument(
                "--warmup", type=float, default=2.0, help="warm-up seconds at saturation (default: 2)"
            )
        if name == "commit":
            p.add_argument(
                "--partitions", type=int, default=10, help="partitions each committer commits (default: 10)"
            )
        if name in ("failover", "memory"):
            p.add_argument(
                "--offsets",
                type=int,
                default=defaults["offsets"],
                help=f"offsets in all (default: {defaults['offsets']})",
            )
        if name == "memory":
            p.add_argument(
                "--partitions",
                type=int,
                default=defaults["partitions"],
                help="partitions of the committed topic: offsets per simple group (default: 1000)",
            )
        if name == "failover":
            p.add_argument(
                "--rounds", type=int, default=1, help="times each offset is committed (default: 1)"
            )
            p.add_argument(
                "--no-baseline",
                dest="baseline",
                action="store_false",
                help="skip the baseline restart with one offset (then no replay rate is reported)",
            )
        if name == "churn":
            p.add_argument(
                "--duration", type=float, default=defaults["duration"], help="seconds of churn (30)"
            )
            p.add_argument(
                "--churn-interval-ms", type=int, default=1000, help="one join + one leave every … ms (1000)"
            )
        if name == "static-roll":
            p.add_argument(
                "--bounce-ms", type=int, default=0, help="pause between a member's stop and restart (0)"
            )
        p.set_defaults(handler=_handler(name))


def _handler(scenario: str) -> Any:
    def handle(args: argparse.Namespace) -> int:
        from regroup.bench.groups.scenarios import params_from, run

        values = dict(vars(args))
        values["progress"] = not args.quiet
        return run(
            scenario,
            params_from(values),
            broker=args.broker,
            bootstrap_server=args.bootstrap_server,
            against=args.against,
            against_nodes=getattr(args, "against_nodes", None),
            broker_config=dict(args.broker_config),
            json_output=args.json,
            use_uvloop=not args.no_uvloop,
        )

    return handle
