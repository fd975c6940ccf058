"""``regroup cluster …``: a whole cluster on this machine in one command, and what a cluster looks like.

``regroup cluster up --nodes 3 [--data-dir DIR] [--etcd URL] [--json] [--override key=value]...`` starts a
private etcd on loopback (unless ``--etcd`` names one) and N ``regroup serve`` nodes with free ports, waits
until every node is registered and ``__consumer_offsets`` has leaders, prints the bootstrap servers (with
``--json``, one line per node: node id, pid, listener, admin port, data dir), shows the nodes' logs
prefixed with their id, and on Ctrl-C (or SIGTERM) stops the nodes with a controlled shutdown each, then
etcd. ``regroup cluster status --etcd URL`` prints the nodes, the controller and the partitions that are
under-replicated or offline.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from pathlib import Path
from typing import Any

__all__ = ["add_parser"]


def add_parser(sub: Any) -> None:
    cluster = sub.add_parser("cluster", help="a regroup cluster on this machine: start one, describe one")
    cluster_sub = cluster.add_subparsers(dest="cluster_command", metavar="COMMAND", required=True)
    up = cluster_sub.add_parser(
        "up", help="start a private etcd and N regroup nodes on loopback; Ctrl-C stops them"
    )
    up.add_argument("--nodes", type=int, default=3, help="number of nodes (default: 3)")
    up.add_argument("--data-dir", type=Path, default=None, help="keep the data here (default: a temp dir)")
    up.add_argument("--etcd", default=None, help="use this etcd (etcd://host:port) instead of a private one")
    up.add_argument("--json", action="store_true", help="print one JSON line per node")
    up.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting for every node (repeatable), e.g. min.insync.replicas=2",
    )
    up.add_argument("--quiet", action="store_true", help="do not show the nodes' logs")
    up.set_defaults(handler=_up)
    status = cluster_sub.add_parser(
        "status", help="nodes, controller, under-replicated and offline partitions"
    )
    status.add_argument("--etcd", required=True, help="the cluster's etcd (cluster.metadata.endpoints)")
    status.add_argument("--json", action="store_true", help="print JSON")
    status.set_defaults(handler=_status)


def _up(args: argparse.Namespace) -> int:
    from regroup.cluster.local import LocalCluster

    overrides: dict[str, object] = {}
    for item in args.override:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            print(f"regroup cluster up: --override expects key=value, got {item!r}", file=sys.stderr)
            return 2
        overrides[key.strip()] = value
    lock = threading.Lock()

    def echo(line: str) -> None:
        with lock:
            print(line, file=sys.stderr, flush=True)

    cluster = LocalCluster(
        args.nodes,
        data_dir=args.data_dir,
        etcd=args.etcd,
        overrides=overrides,
        echo=None if args.quiet else echo,
    )
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        cluster.start()
    except (OSError, RuntimeError, TimeoutError) as exc:
        print(f"regroup cluster up: {exc}", file=sys.stderr)
        return 1
    try:
        if args.json:
            print(cluster.json_lines(), flush=True)
        else:
            print(f"bootstrap servers: {cluster.bootstrap_servers}", flush=True)
            print(f"metadata: {cluster.etcd_url}", flush=True)
            for node in cluster.describe():
                print(
                    f"node {node['node_id']}: {node['listener']} (pid {node['pid']}, admin {node['admin']}, "
                    f"data {node['data_dir']})",
                    flush=True,
                )
        while not stop.wait(0.5):
            pass
    finally:
        echo("stopping the cluster (controlled shutdown of each node)")
        cluster.close()
    return 0


def _status(args: argparse.Namespace) -> int:
    from regroup.cluster.local import read_image

    image = read_image(args.etcd)
    under: list[str] = []
    offline: list[str] = []
    for topic, partition, state in image.all_partitions():
        name = f"{topic.name}-{partition}"
        if state is None or state.leader < 0:
            offline.append(name)
        elif len(state.isr) < len(topic.replicas[partition]):
            under.append(name)
    controller = None if image.controller is None else image.controller.node_id
    if args.json:
        report = {
            "cluster_id": image.cluster_id,
            "controller": controller,
            "nodes": [
                {"node_id": n, "listeners": dict(reg.listeners), "state": reg.state.value, "rack": reg.rack}
                for n, reg in sorted(image.nodes.items())
            ],
            "topics": len(image.topics),
            "under_replicated": under,
            "offline": offline,
        }
        print(json.dumps(report))
        return 0
    print(f"cluster {image.cluster_id}, controller {controller}")
    for n, reg in sorted(image.nodes.items()):
        listeners = ", ".join(f"{k} {h}:{p}" for k, (h, p) in reg.listeners.items())
        print(f"  node {n}: {listeners} ({reg.state.value})")
    print(f"{len(image.topics)} topics; {len(under)} under-replicated partitions; {len(offline)} offline")
    for name in under:
        print(f"  under-replicated: {name}")
    for name in offline:
        print(f"  offline: {name}")
    return 0
