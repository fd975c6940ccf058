"""The brokers a group benchmark runs against: ``regroup serve`` in a subprocess, the Apache Kafka reference
broker, the trivially fast fake responder, or a broker someone else started.

Brokers the benchmark starts get the same coordinator settings (:data:`FAIR_CONFIG` plus any
``--broker-config``), keep their data in a temporary directory, and can be restarted on that data for the
failover scenario. Their CPU time is read from ``/proc`` so every phase reports how busy the broker and
the load generator were; their resident memory too, and a Kafka broker's heap after a full collection
(``jcmd``), for the memory scenario.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from regroup.bench.groups.wire import Wire
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages.describe_configs import (
    DescribeConfigsRequest,
    DescribeConfigsResource,
    DescribeConfigsResponse,
)
from regroup.protocol.messages.metadata import MetadataRequest, MetadataResponse
from regroup.runtime.ports import free_ports

__all__ = [
    "CONSUMER_SETTINGS",
    "FAIR_CONFIG",
    "REPORTED_SETTINGS",
    "BenchTarget",
    "BenchTargetError",
    "ClusterTarget",
    "ExternalBroker",
    "FakeBroker",
    "KafkaBroker",
    "KafkaCluster",
    "LoopLag",
    "RegroupBroker",
    "RegroupCluster",
    "RssReading",
    "cpu_seconds",
    "describe_settings",
    "heap_used_bytes",
    "read_loop_lag",
    "rss_bytes",
    "settled_rss",
    "start_broker",
]

# Applied to every broker the benchmark starts, regroup and Kafka alike.
FAIR_CONFIG: Final[dict[str, str]] = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "group.max.session.timeout.ms": "1800000",
    "offsets.topic.num.partitions": "50",
    "offsets.topic.replication.factor": "1",
    "num.partitions": "1",
    "auto.create.topics.enable": "false",
}

# What the report shows of each broker's effective configuration (as DescribeConfigs returns it).
REPORTED_SETTINGS: Final = (
    "group.initial.rebalance.delay.ms",
    "group.min.session.timeout.ms",
    "group.max.session.timeout.ms",
    "offsets.topic.num.partitions",
    "group.coordinator.append.linger.ms",
    "log.flush.interval.messages",
)

# Reported besides, when members speak the consumer protocol (KIP-848).
CONSUMER_SETTINGS: Final = (
    "group.coordinator.rebalance.protocols",
    "group.consumer.max.size",
    "group.consumer.session.timeout.ms",
    "group.consumer.heartbeat.interval.ms",
    "group.consumer.assignment.interval.ms",
    "group.consumer.assignors",
)

_READY = re.compile(r"ready on (\S+):(\d+) ")
_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class BenchTargetError(RuntimeError):
    """A broker could not be started or restarted; the message carries its log tail."""


def cpu_seconds(pids: Sequence[int]) -> float | None:
    """User + system CPU seconds of the processes ``pids`` together (all their threads), or None when
    there are none or one cannot be read."""
    total = 0.0
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return None
        fields = stat[stat.rindex(")") + 2 :].split()
        total += (int(fields[11]) + int(fields[12])) / _CLK_TCK
    return total if pids else None


def rss_bytes(pid: int) -> int | None:
    """Resident set size of process ``pid`` (``VmRSS`` in ``/proc/<pid>/status``), None when unreadable."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return None


@dataclass(frozen=True, slots=True)
class RssReading:
    """A process's RSS once it stopped moving, or the last one read when it did not within the bound."""

    rss: int
    waited: float  # seconds from the first sample to the reading
    settled: bool


async def settled_rss(
    pid: int, window: float = 1.0, bound: float = 30.0, interval: float = 0.1
) -> RssReading | None:
    """Sample ``pid``'s RSS every ``interval`` s until it has stayed within max(256 KiB, 0.1 %) for
    ``window`` s, or ``bound`` s have passed; None when the process cannot be read. Async, so that the
    simulated members keep heartbeating meanwhile."""
    samples: list[tuple[float, int]] = []
    start = time.monotonic()
    while True:
        rss = rss_bytes(pid)
        if rss is None:
            return None
        now = time.monotonic()
        samples.append((now, rss))
        recent = [r for t, r in samples if now - t <= window]
        if now - start >= window and max(recent) - min(recent) <= max(256 * 1024, rss // 1000):
            return RssReading(rss, now - start, True)
        if now - start >= bound:
            return RssReading(rss, now - start, False)
        await asyncio.sleep(interval)


_HEAP_USED = re.compile(r"\btotal \d+K, used (\d+)K")


def heap_used_bytes(heap_info: str) -> int | None:
    """Heap in use from ``jcmd <pid> GC.heap_info``: the ``used`` of every ``… total NK, used NK`` line (one
    for G1; young and old generation for the serial and parallel collectors). Metaspace lines have no
    ``total`` and are not counted."""
    used = [int(k) * 1024 for k in _HEAP_USED.findall(heap_info)]
    return sum(used) if used else None


def _java() -> str:
    """The ``java`` that runs the Kafka reference broker, as :mod:`regroup.refkafka` finds it."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and os.access(Path(java_home) / "bin" / "java", os.X_OK):
        return str(Path(java_home) / "bin" / "java")
    return shutil.which("java") or "java"


def _jdk_tool(name: str) -> str | None:
    """A JDK tool (``jcmd``) beside the ``java`` that runs Kafka, so both are of one JDK."""
    java = shutil.which(_java())
    if java is None:
        return None
    tool = Path(os.path.realpath(java)).parent / name
    return str(tool) if os.access(tool, os.X_OK) else None


@dataclass(frozen=True, slots=True)
class LoopLag:
    """A regroup broker's ``regroup_event_loop_lag_seconds`` histogram: cumulative counts per ``le`` bound
    (the last one +Inf) since the broker started; :meth:`since` gives one phase's share."""

    bounds: tuple[float, ...]
    cumulative: tuple[float, ...]
    total: float

    @property
    def samples(self) -> float:
        return self.cumulative[-1] if self.cumulative else 0.0

    def since(self, earlier: LoopLag) -> LoopLag:
        if earlier.bounds != self.bounds:
            return self
        return LoopLag(
            self.bounds,
            tuple(a - b for a, b in zip(self.cumulative, earlier.cumulative, strict=True)),
            self.total - earlier.total,
        )

    def __add__(self, other: LoopLag) -> LoopLag:
        if other.bounds != self.bounds:
            raise ValueError("loop-lag histograms with different buckets")
        return LoopLag(
            self.bounds,
            tuple(a + b for a, b in zip(self.cumulative, other.cumulative, strict=True)),
            self.total + other.total,
        )

    def quantile_ms(self, q: float) -> float | None:
        """The upper bound of the bucket holding the ``q`` quantile, in ms (None without samples; the
        highest finite bound when it lies above every bound)."""
        if not self.samples:
            return None
        wanted = q * self.samples
        for bound, count in zip(self.bounds, self.cumulative, strict=True):
            if count >= wanted:
                return (bound if bound != float("inf") else self.bounds[-2]) * 1000
        return None

    @property
    def mean_ms(self) -> float | None:
        return self.total / self.samples * 1000 if self.samples else None


_LAG_METRIC = "regroup_event_loop_lag_seconds"
_LAG_LINE = re.compile(rf'^{_LAG_METRIC}_(bucket|sum)(?:{{le="([^"]+)"}})? (\S+)$')


def read_loop_lag(admin: tuple[str, int], timeout: float = 2.0) -> LoopLag | None:
    """The loop-lag histogram from a regroup broker's admin port, or None when it cannot be read."""
    host, port = admin
    try:
        with urllib.request.urlopen(
            f"http://{host}:{port}/metrics?name[]={_LAG_METRIC}", timeout=timeout
        ) as reply:
            text = reply.read().decode()
    except (OSError, ValueError):
        return None
    buckets: list[tuple[float, float]] = []
    total = 0.0
    for line in text.splitlines():
        match = _LAG_LINE.match(line)
        if match is None:
            continue
        kind, le, value = match.groups()
        if kind == "sum":
            total = float(value)
        elif le is not None:
            buckets.append((float(le), float(value)))
    if not buckets:
        return None
    buckets.sort()
    return LoopLag(tuple(b for b, _ in buckets), tuple(c for _, c in buckets), total)


def _die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` giving the child SIGKILL when this process dies, so that even a killed benchmark
    leaves no broker behind (Linux, main thread only: the signal follows the thread that forked)."""
    if not sys.platform.startswith("linux") or threading.current_thread() is not threading.main_thread():
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1

    def preexec() -> None:
        prctl(pr_set_pdeathsig, signal.SIGKILL)

    return preexec


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


class BenchTarget:
    """A broker to run a scenario against."""

    kind = "external"
    restartable = False

    def __init__(self) -> None:
        self.bootstrap = ""
        self.version = ""
        # Settings the benchmark gave the broker (empty for one it did not start).
        self.overrides: dict[str, str] = {}

    @property
    def pid(self) -> int | None:
        return None

    @property
    def pids(self) -> list[int]:
        """The processes whose CPU time counts as the broker's (every node of a cluster, and its metadata
        quorum)."""
        pid = self.pid
        return [] if pid is None else [pid]

    def start(self) -> None:
        """Start the broker and set :attr:`bootstrap` (nothing to do for one someone else started)."""

    def loop_lag(self) -> LoopLag | None:
        """The broker's event-loop lag histogram so far (regroup brokers the benchmark started; None for
        others, which have no event loop to measure or were not started with an admin port)."""
        return None

    def offsets_partition_bytes(self, partition: int) -> int | None:
        """On-disk size of ``__consumer_offsets-<partition>`` when the benchmark owns the data."""
        return None

    def heap_after_gc(self) -> int | None:
        """Bytes of heap in use right after a full garbage collection, for brokers with a heap of their
        own (Kafka's JVM); None for the others. Blocking; raises :class:`BenchTargetError` if it cannot
        be read."""
        return None

    def stop(self) -> None:
        """Stop the broker (gracefully) and keep its data for :meth:`relaunch`."""

    async def relaunch(self) -> float:
        """Start the stopped broker again on the same data; returns the ``perf_counter`` time its process
        was launched, possibly before it serves requests."""
        raise BenchTargetError(f"a {self.kind} broker cannot be restarted by the benchmark")

    async def wait_serving(self, timeout: float) -> None:
        """After :meth:`relaunch`: wait until the broker is ready by its own standard."""

    def close(self) -> None:
        """Stop the broker and remove its data."""


class ExternalBroker(BenchTarget):
    def __init__(self, bootstrap: str) -> None:
        super().__init__()
        self.bootstrap = bootstrap


class _SubprocessBroker(BenchTarget):
    """A Python subprocess printing a readiness line ``… ready on host:port …`` on stdout."""

    def __init__(self, workdir: Path) -> None:
        super().__init__()
        self.workdir = workdir
        self._proc: subprocess.Popen[str] | None = None
        self.port = 0

    def _command(self) -> list[str]:
        raise NotImplementedError

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def log_path(self) -> Path:
        return self.workdir / "broker.log"

    def _launch(self) -> float:
        env = {k: v for k, v in os.environ.items() if not k.startswith("REGROUP_")}
        launched = time.perf_counter()
        with self.log_path.open("a") as log:
            self._proc = subprocess.Popen(
                self._command(),
                stdout=subprocess.PIPE,
                stderr=log,
                stdin=subprocess.DEVNULL,
                text=True,
                env=env,
                start_new_session=True,
                # Only a prctl call: safe despite the general preexec_fn caveats.
                preexec_fn=_die_with_parent(),  # noqa: PLW1509
            )
        return launched

    def _read_ready(self, timeout: float = 60.0) -> None:
        proc = self._proc
        if proc is None or proc.stdout is None:
            raise BenchTargetError(f"{self.kind} is not running")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            match = _READY.search(line)
            if match is not None:
                self.bootstrap = f"{match.group(1)}:{match.group(2)}"
                self.port = int(match.group(2))
                return
        self._kill()
        raise BenchTargetError(f"{self.kind} did not start:\n{_tail(self.log_path)}")

    def start(self) -> None:
        self._launch()
        self._read_ready()

    def _kill(self, timeout: float = 30.0) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()

    def stop(self) -> None:
        self._kill()

    async def relaunch(self) -> float:
        return self._launch()

    async def wait_serving(self, timeout: float) -> None:
        await asyncio.to_thread(self._read_ready, timeout)

    def close(self) -> None:
        self._kill()
        shutil.rmtree(self.workdir, ignore_errors=True)


class RegroupBroker(_SubprocessBroker):
    """``regroup serve`` on 127.0.0.1 with its data in a temporary directory."""

    kind = "regroup"
    restartable = True

    def __init__(self, overrides: Mapping[str, str]) -> None:
        super().__init__(Path(tempfile.mkdtemp(prefix="regroup-bench-")))
        self.overrides = {**FAIR_CONFIG, **overrides}
        from regroup import __version__

        self.version = __version__
        # Both kept across the failover scenario's restarts, so none from the ephemeral range.
        self.port, admin = free_ports(2, lasting=True)
        self._admin = ("127.0.0.1", admin)

    def loop_lag(self) -> LoopLag | None:
        return read_loop_lag(self._admin)

    def _command(self) -> list[str]:
        settings = {
            **self.overrides,
            # The same port after a restart, so clients (and the failover poller) find it again.
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "log.dirs": str(self.workdir / "data"),
            "admin.listener": f"{self._admin[0]}:{self._admin[1]}",
        }
        cmd = [sys.executable, "-m", "regroup.cli", "serve", "--log-level", "WARNING"]
        for key, value in settings.items():
            cmd += ["--override", f"{key}={value}"]
        return cmd

    def offsets_partition_bytes(self, partition: int) -> int | None:
        return _dir_bytes(self.workdir / "data" / f"__consumer_offsets-{partition}")


class FakeBroker(_SubprocessBroker):
    """:mod:`regroup.bench.groups.fake`: answers at once, to measure the load generator's own ceiling."""

    kind = "fake"

    def __init__(self) -> None:
        super().__init__(Path(tempfile.mkdtemp(prefix="regroup-bench-fake-")))
        self.version = "fake"

    def _command(self) -> list[str]:
        return [sys.executable, "-m", "regroup.bench.groups.fake", "--port", str(self.port)]


class KafkaBroker(BenchTarget):
    """The Apache Kafka reference broker (:mod:`regroup.refkafka`), its log dirs kept across restarts.

    The first start goes through :class:`~regroup.refkafka.KafkaReference`, which formats fresh KRaft
    storage. A restart must not format again (a new cluster and directory id would leave the partitions
    without a leader), so it runs the same JVM command on the same ``server.properties``: same ports, same
    log dirs, same ids — what an operator's restart does.
    """

    kind = "kafka"
    restartable = True
    # As regroup.refkafka runs the broker, with the heap Kafka's own start script sets.
    HEAP = "1g"
    JVM_OPTIONS = ("-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:+ExitOnOutOfMemoryError")

    def __init__(self, overrides: Mapping[str, str]) -> None:
        super().__init__()
        from regroup import refkafka

        reason = refkafka.skip_reason()
        if reason is not None:
            raise BenchTargetError(reason)
        self.workdir = Path(tempfile.mkdtemp(prefix="regroup-bench-kafka-"))
        self.logs = self.workdir / "logs"
        self.overrides = {**FAIR_CONFIG, **overrides, "log.dirs": str(self.logs)}
        self.ref = refkafka.KafkaReference(self.overrides, self.workdir / "work", heap=self.HEAP)
        self.version = f"Apache Kafka {self.ref.version}"
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        from regroup.refkafka import RefKafkaError

        try:
            self.ref.start()
        except RefKafkaError as exc:
            raise BenchTargetError(str(exc)) from exc
        self.bootstrap = self.ref.bootstrap_servers

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else self.ref.pid

    def offsets_partition_bytes(self, partition: int) -> int | None:
        return _dir_bytes(self.logs / f"__consumer_offsets-{partition}")

    def heap_after_gc(self) -> int | None:
        """``jcmd <pid> GC.run`` (a full, stop-the-world collection with G1), then ``GC.heap_info``."""
        pid = self.pid
        jcmd = _jdk_tool("jcmd")
        if pid is None:
            raise BenchTargetError("the Kafka broker is not running")
        if jcmd is None:
            raise BenchTargetError(f"no jcmd beside {_java()} (a JRE without the JDK tools?)")
        outputs = []
        for command in ("GC.run", "GC.heap_info"):
            try:
                done = subprocess.run(
                    [jcmd, str(pid), command], capture_output=True, text=True, timeout=120, check=False
                )
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise BenchTargetError(f"jcmd {command}: {exc}") from exc
            if done.returncode != 0:
                raise BenchTargetError(f"jcmd {command} failed: {(done.stdout + done.stderr).strip()[-500:]}")
            outputs.append(done.stdout)
        used = heap_used_bytes(outputs[-1])
        if used is None:
            raise BenchTargetError(f"no heap usage in jcmd GC.heap_info output:\n{outputs[-1][-500:]}")
        return used

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            self.ref.stop()
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def _command(self) -> list[str]:
        from regroup.refkafka import resolve_jars

        java = _java()
        work = self.ref.workdir
        return [
            java, f"-Xms{self.HEAP}", f"-Xmx{self.HEAP}", *self.JVM_OPTIONS, "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={work / 'log4j2.xml'}", f"-Dkafka.logs.dir={work}",
            "-cp", str(resolve_jars(self.ref.version) / "*"), "kafka.Kafka", str(work / "server.properties"),
        ]  # fmt: skip

    async def relaunch(self) -> float:
        command = self._command()
        launched = time.perf_counter()
        with (self.ref.workdir / "kafka-restart.log").open("ab") as log:
            self._proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.ref.workdir,
                start_new_session=True,
                preexec_fn=_die_with_parent(),  # noqa: PLW1509
            )
        return launched

    async def wait_serving(self, timeout: float) -> None:
        from regroup.refkafka import api_versions

        host, _, port = self.bootstrap.rpartition(":")
        deadline = time.monotonic() + timeout
        while True:
            if self._proc is not None and self._proc.poll() is not None:
                raise BenchTargetError(
                    f"the restarted Kafka broker exited:\n{_tail(self.ref.workdir / 'kafka-restart.log')}"
                )
            try:
                await asyncio.to_thread(api_versions, host, int(port), 2.0)
            except OSError:
                if time.monotonic() > deadline:
                    raise BenchTargetError("the restarted Kafka broker does not answer") from None
                await asyncio.sleep(0.05)
            else:
                return

    def close(self) -> None:
        self.stop()
        self.ref.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)


class ClusterTarget(BenchTarget):
    """Several nodes and the service that keeps their metadata; nodes can be killed and started again."""

    nodes = 1

    @property
    def node_ids(self) -> list[int]:
        raise NotImplementedError

    def node_pid(self, node_id: int) -> int | None:
        raise NotImplementedError

    def node_address(self, node_id: int) -> tuple[str, int]:
        raise NotImplementedError

    def signal_node(self, node_id: int, sig: int) -> None:
        """Send ``sig`` to node ``node_id`` (SIGKILL: a crash)."""
        raise NotImplementedError

    def start_node(self, node_id: int) -> None:
        """Start node ``node_id`` again on its data (returns once it runs, maybe before it serves)."""
        raise NotImplementedError


def _replicated(nodes: int, overrides: Mapping[str, str]) -> dict[str, str]:
    """The benchmark's fair settings for a cluster: internal topics get min(3, nodes) replicas, as Kafka's
    default of 3 would on a cluster of that size, unless ``overrides`` say otherwise."""
    replicas = str(min(3, nodes))
    return {
        **FAIR_CONFIG,
        "offsets.topic.replication.factor": replicas,
        "default.replication.factor": replicas,
        **overrides,
    }


class RegroupCluster(ClusterTarget):
    """A private etcd and ``nodes`` ``regroup serve`` processes
    (:class:`regroup.cluster.local.LocalCluster`)."""

    kind = "regroup"

    def __init__(self, nodes: int, overrides: Mapping[str, str]) -> None:
        super().__init__()
        from regroup import __version__
        from regroup.cluster.local import LocalCluster

        self.nodes = nodes
        self.workdir = Path(tempfile.mkdtemp(prefix="regroup-bench-cluster-"))
        self.overrides = _replicated(nodes, overrides)
        self.version = f"{__version__}, {nodes} nodes + etcd"
        try:
            self.local = LocalCluster(nodes, data_dir=self.workdir, overrides=self.overrides)
        except FileNotFoundError as exc:
            raise BenchTargetError(str(exc)) from exc

    def start(self) -> None:
        try:
            self.local.start()
        except (RuntimeError, OSError, TimeoutError) as exc:
            raise BenchTargetError(f"the regroup cluster did not start: {exc}") from exc
        self.bootstrap = self.local.bootstrap_servers

    @property
    def pids(self) -> list[int]:
        pids = [n.pid for n in self.local.nodes.values() if n.running and n.pid is not None]
        etcd = self.local.etcd
        if etcd is not None and etcd.pid is not None:
            pids.append(etcd.pid)
        return pids

    def loop_lag(self) -> LoopLag | None:
        """Every running node's samples together."""
        readings = [
            read_loop_lag(("127.0.0.1", n.admin_port)) for n in self.local.nodes.values() if n.running
        ]
        present = [r for r in readings if r is not None]
        if not present:
            return None
        combined = present[0]
        for reading in present[1:]:
            combined = combined + reading
        return combined

    @property
    def node_ids(self) -> list[int]:
        return sorted(self.local.nodes)

    def node_pid(self, node_id: int) -> int | None:
        return self.local.node(node_id).pid

    def node_address(self, node_id: int) -> tuple[str, int]:
        host, _, port = self.local.node(node_id).listener.rpartition(":")
        return host, int(port)

    def signal_node(self, node_id: int, sig: int) -> None:
        node = self.local.node(node_id)
        node.signal(sig)
        if sig == signal.SIGKILL:
            node.wait()

    def start_node(self, node_id: int) -> None:
        self.local.node(node_id).start()

    def close(self) -> None:
        self.local.close()
        shutil.rmtree(self.workdir, ignore_errors=True)


class KafkaCluster(ClusterTarget):
    """``nodes`` Apache Kafka brokers beside one KRaft controller
    (:class:`regroup.refkafka.KafkaReferenceCluster`)."""

    kind = "kafka"

    def __init__(self, nodes: int, overrides: Mapping[str, str]) -> None:
        super().__init__()
        from regroup import refkafka

        reason = refkafka.skip_reason()
        if reason is not None:
            raise BenchTargetError(reason)
        self.nodes = nodes
        self.overrides = _replicated(nodes, overrides)
        self.ref = refkafka.KafkaReferenceCluster(nodes, self.overrides, heap=KafkaBroker.HEAP)
        self.version = f"Apache Kafka {self.ref.version}, {nodes} brokers + 1 KRaft controller"

    def start(self) -> None:
        from regroup.refkafka import RefKafkaError

        try:
            self.ref.start()
        except RefKafkaError as exc:
            raise BenchTargetError(str(exc)) from exc
        self.bootstrap = self.ref.bootstrap_servers

    @property
    def pids(self) -> list[int]:
        ids = [*self.ref.broker_ids, self.ref.CONTROLLER_ID]
        return [pid for pid in (self.ref.pid(n) for n in ids) if pid is not None]

    @property
    def node_ids(self) -> list[int]:
        return list(self.ref.broker_ids)

    def node_pid(self, node_id: int) -> int | None:
        return self.ref.pid(node_id)

    def node_address(self, node_id: int) -> tuple[str, int]:
        return "127.0.0.1", self.ref.port(node_id)

    def signal_node(self, node_id: int, sig: int) -> None:
        self.ref.kill(node_id, sig)

    def start_node(self, node_id: int) -> None:
        self.ref.start_node(node_id)

    def close(self) -> None:
        self.ref.stop()


def _dir_bytes(path: Path) -> int | None:
    if not path.is_dir():
        return None
    return sum(p.stat().st_size for p in path.iterdir() if p.suffix == ".log")


def start_broker(kind: str, overrides: Mapping[str, str], nodes: int = 1) -> BenchTarget:
    """Start a ``regroup``, ``kafka`` or ``fake`` broker, or with ``nodes`` > 1 a cluster of that many."""
    broker: BenchTarget
    if nodes > 1 and kind == "regroup":
        broker = RegroupCluster(nodes, overrides)
    elif nodes > 1 and kind == "kafka":
        broker = KafkaCluster(nodes, overrides)
    elif nodes > 1:
        raise ValueError(f"a {kind} broker has no cluster mode")
    elif kind == "regroup":
        broker = RegroupBroker(overrides)
    elif kind == "kafka":
        broker = KafkaBroker(overrides)
    elif kind == "fake":
        broker = FakeBroker()
    else:
        raise ValueError(f"unknown broker kind {kind!r}")
    try:
        broker.start()
    except BaseException:
        broker.close()
        raise
    return broker


async def describe_settings(wire: Wire, keys: tuple[str, ...] = REPORTED_SETTINGS) -> dict[str, str]:
    """The broker's effective values of ``keys`` (DescribeConfigs); empty when it will not say."""
    with contextlib.suppress(ValueError, ConnectionError, TypeError):
        metadata = await wire.call(MetadataRequest(topics=[]), MetadataResponse)
        if not metadata.brokers:
            return {}
        request = DescribeConfigsRequest(
            resources=[
                DescribeConfigsResource(
                    resource_type=4,
                    resource_name=str(metadata.brokers[0].node_id),
                    configuration_keys=list(keys),
                )
            ]
        )
        resp = await wire.call(request, DescribeConfigsResponse)
        out: dict[str, str] = {}
        for result in resp.results:
            if result.error_code != ErrorCode.NONE:
                continue
            for config in result.configs:
                if config.value is not None:
                    out[config.name] = config.value
        return {k: out[k] for k in keys if k in out}
    return {}
