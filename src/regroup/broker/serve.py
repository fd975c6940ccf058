"""``regroup serve``: start a broker from a properties file, the environment and ``--override`` flags.

Exit codes: 0 after a clean shutdown (SIGTERM/SIGINT), 2 for a configuration error (the message names the
setting), 1 when the broker cannot start (e.g. the port is taken).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import textwrap
from collections.abc import Callable
from typing import Any

# asyncio, signal and the broker itself are imported when serving, so that ``regroup --help`` stays fast.

__all__ = ["add_serve_command", "run"]

log = logging.getLogger("regroup.broker")

DESCRIPTION = """\
Start a regroup broker: a single Kafka-compatible node that clients reach at its listeners.

Settings use Apache Kafka's names and defaults (listeners, log.dirs, num.partitions, log.retention.hours,
message.max.bytes, offsets.topic.num.partitions, group.initial.rebalance.delay.ms, ...). They are resolved
in this order, later sources winning:

  1. built-in defaults
  2. the properties file given as SERVER_PROPERTIES (Java .properties syntax)
  3. environment variables REGROUP_<KEY>: upper-case the key and replace '.' with '_'
     ('_' with '__', '-' with '___'), e.g. REGROUP_LOG_DIRS=/var/lib/regroup
  4. --override key=value (repeatable)

Unknown keys are logged as a warning and ignored, as Kafka does; an invalid value of a known setting stops
the broker with exit code 2 and a message naming the setting. The effective configuration is logged at
startup. `regroup serve --list-configs` prints every setting with its type, default and meaning.

Once listening, one line is printed to stdout:
  regroup <version> ready on <host:port> (node <id>, cluster <id>, data <dir>)
SIGTERM or SIGINT shuts down cleanly: stop accepting connections, finish in-flight requests (bounded),
flush and close the logs, exit 0. The cluster id is generated on first start and kept in
<log.dirs>/meta.properties (Kafka's format) unless cluster.id is set.

Single node, PLAINTEXT only, no transactions (transactional producers get COORDINATOR_NOT_AVAILABLE).
"""

EPILOG = """\
examples:
  regroup serve
  regroup serve config/server.properties --override log.dirs=/tmp/regroup --override num.partitions=6
  REGROUP_LISTENERS=PLAINTEXT://0.0.0.0:9092 regroup serve --log-level DEBUG

exit codes: 0 clean shutdown, 1 failed to start, 2 configuration error
"""


def add_serve_command(sub: Any, set_handler: Callable[[argparse.ArgumentParser], None]) -> None:
    """Add ``serve`` to the top-level subparsers (``sub``)."""
    parser: argparse.ArgumentParser = sub.add_parser(
        "serve",
        help="run a Kafka-compatible broker (server.properties + --override key=value)",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "properties",
        nargs="?",
        metavar="SERVER_PROPERTIES",
        help="a Kafka-style server.properties file (optional)",
    )
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set one property, taking precedence over the file and the environment (repeatable)",
    )
    parser.add_argument(
        "--log-level",
        default="INFO",
        type=str.upper,
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="stderr log level (default: INFO)",
    )
    parser.add_argument(
        "--list-configs",
        action="store_true",
        help="print every known setting with its type, default and description, then exit",
    )
    set_handler(parser)


def _fail(message: str) -> int:
    print(f"regroup serve: error: {message}", file=sys.stderr, flush=True)
    return 2


def _list_configs() -> int:
    from regroup.broker.config import BROKER_CONFIGS, render

    for name in sorted(BROKER_CONFIGS):
        spec = BROKER_CONFIGS[name]
        default = render(spec.default)
        print(f"{name}  ({spec.type.name}, default: {'null' if default is None else default})")
        doc = spec.doc if spec.applies else spec.doc + " [no effect in regroup]"
        print(textwrap.indent(textwrap.fill(doc, 96), "    "))
    return 0


def run(args: argparse.Namespace) -> int:
    if args.list_configs:
        return _list_configs()
    from regroup.broker.config import BrokerConfig, ConfigError, load_file
    from regroup.broker.logsetup import setup_logging

    setup_logging(args.log_level)
    overrides: list[tuple[str, str]] = []
    for item in args.override:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            return _fail(f"--override expects key=value, got {item!r}")
        overrides.append((key.strip(), value))
    try:
        entries = load_file(args.properties) if args.properties else []
    except OSError as exc:
        return _fail(f"cannot read {args.properties}: {exc.strerror or exc}")
    try:
        config = BrokerConfig.load(entries, os.environ, overrides)
    except ConfigError as exc:
        return _fail(str(exc))

    from regroup import __version__

    log.info("Starting regroup %s (Python %s)", __version__, sys.version.split()[0])
    log.info("RegroupConfig values:\n%s", "\n".join(config.dump()))
    for note in config.warnings():
        log.warning("%s", note)
    for name in config.inert():
        log.info("%s is accepted for compatibility but has no effect in regroup", name)

    try:
        return _run_loop(config)
    except ConfigError as exc:
        return _fail(str(exc))


def _raise_open_files_limit() -> None:
    """Let the broker use as many file descriptors as the hard limit allows (one per connection and per open
    segment and index), as the JVM does for Kafka at start-up (``-XX:+MaxFDLimit``, on by default)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not POSIX
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:
            log.warning("Cannot raise the open-files limit from %d to %d: %s", soft, target, exc)
            return
        log.info("Open-files limit raised from %d to %d", soft, target)


def _run_loop(config: Any) -> int:
    import asyncio

    _raise_open_files_limit()

    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on POSIX
        factory = None
    else:
        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(_serve(config))


def _tune_gc() -> None:
    """Keep the cyclic GC off the request path. Requests in flight (thousands at a time under load) live
    long enough to be promoted to the oldest generation, and each promotion wave triggers a full
    collection whose cost grows with everything the broker holds (members, connections, loaded offsets):
    with 5,000 members, pauses of 100-280 ms several times a second. A large first generation lets
    requests die young; freezing what start-up built (modules, configuration, the opened logs) keeps it out of
    every later collection (a cycle among those objects is then never reclaimed: at most what start-up
    built, once)."""
    import gc

    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 10)


async def _serve(config: Any) -> int:
    import asyncio
    import signal

    from regroup.broker.state import Broker

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    broker = Broker(config)

    def on_signal(signum: int) -> None:
        if stop.is_set():
            log.info("Received %s again; shutdown already in progress", signal.Signals(signum).name)
            return
        log.info("Received %s; shutting down", signal.Signals(signum).name)
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal, signum)
    try:
        await broker.start()
    except OSError as exc:
        log.error("Cannot start: %s", exc)
        await broker.stop()
        return 1
    _tune_gc()
    addresses = ", ".join(_hostport(host, port) for host, port in broker.bound_addresses().values())
    from regroup.build import describe

    log.info("[regroup node=%d] started (cluster %s, %s)", broker.node_id, broker.cluster_id, describe())
    print(
        f"regroup {broker.version} ready on {addresses} "
        f"(node {broker.node_id}, cluster {broker.cluster_id}, data {broker.data_dir})",
        flush=True,
    )
    await stop.wait()
    await broker.stop()
    log.info("[regroup node=%d] shut down completed", broker.node_id)
    return 0


def _hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
