"""A whole cluster on this machine, for developers and tests: a private one-member etcd on loopback (Debian's
``etcd``, from the ``etcd-server`` package) and N ``regroup serve`` processes joined to it, each with its own
free ports and data directory. ``regroup cluster up`` runs one in the foreground; ``regroup.testing.Cluster``
runs one around a test.

Processes are real: a node is killed with SIGKILL, paused with SIGSTOP, stopped with SIGTERM (a controlled
shutdown) and started again on the same ports and data; with ``network_faults`` its network can be cut
(:mod:`regroup.cluster.netfaults`). The cluster's state is read from etcd
(:func:`read_image`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from regroup.cluster.image import ImageBuilder, StoredEntry
from regroup.cluster.model import ClusterImage, Keys
from regroup.cluster.netfaults import NetworkFaults
from regroup.runtime.ports import free_ports

__all__ = ["LocalCluster", "LocalEtcd", "LocalNode", "etcd_binary", "read_image"]

_START_TIMEOUT_S = 60.0


def etcd_binary() -> str | None:
    """The ``etcd`` executable (``REGROUP_ETCD`` or the PATH; Debian installs it as /usr/bin/etcd)."""
    return os.environ.get("REGROUP_ETCD") or shutil.which("etcd")


class LocalEtcd:
    """A one-member etcd as a child process; :meth:`start` returns once it answers ``/health``."""

    def __init__(self, workdir: Path, binary: str | None = None, name: str = "regroup") -> None:
        found = binary or etcd_binary()
        if found is None:
            raise FileNotFoundError(
                "etcd is not installed: install Debian's etcd-server package (or set REGROUP_ETCD)"
            )
        self.binary = found
        self.workdir = workdir
        self.name = name
        self.client_port = 0
        self.peer_port = 0
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> tuple[str, int]:
        return ("127.0.0.1", self.client_port)

    @property
    def url(self) -> str:
        """This etcd as a ``cluster.metadata.endpoints`` value."""
        return f"etcd://127.0.0.1:{self.client_port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "etcd.log"

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def start(self) -> LocalEtcd:
        for _attempt in range(3):  # a free port can be taken between probing it and etcd binding it
            if self._start_once():
                return self
        raise RuntimeError(f"etcd did not start; its log:\n{self.log_tail()}")

    def _start_once(self) -> bool:
        self.client_port, self.peer_port = free_ports(2)
        client = f"http://127.0.0.1:{self.client_port}"
        peer = f"http://127.0.0.1:{self.peer_port}"
        data_dir = self.workdir / "data"
        self.workdir.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [
                    self.binary,
                    f"--name={self.name}",
                    f"--data-dir={data_dir}",
                    f"--listen-client-urls={client}",
                    f"--advertise-client-urls={client}",
                    f"--listen-peer-urls={peer}",
                    f"--initial-advertise-peer-urls={peer}",
                    f"--initial-cluster={self.name}={peer}",
                    "--initial-cluster-state=new",
                    "--logger=zap",
                    "--log-outputs=stderr",
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env={k: v for k, v in os.environ.items() if not k.startswith("ETCD")},
                start_new_session=True,
            )
        deadline = time.monotonic() + _START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.process = None
                shutil.rmtree(data_dir, ignore_errors=True)
                return False
            if self.healthy():
                return True
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"etcd did not become healthy in {_START_TIMEOUT_S:.0f} s:\n{self.log_tail()}")

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.client_port}/health", timeout=2) as reply:
                return b'"health":"true"' in reply.read()
        except (OSError, urllib.error.URLError):
            return False

    def kill(self) -> None:
        """SIGKILL, as a crash."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=30)
        self.process = None

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()
        self.process = None

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"


@dataclass
class LocalNode:
    """One ``regroup serve`` process of a :class:`LocalCluster`."""

    node_id: int
    port: int
    admin_port: int
    data_dir: Path
    settings: dict[str, str]
    log_path: Path
    # The port clients and other nodes are told (a network-fault relay's), when it is not ``port``.
    advertised_port: int = 0
    process: subprocess.Popen[bytes] | None = None
    _output: list[str] = field(default_factory=list)

    @property
    def listener(self) -> str:
        """The address clients use (``host:port``)."""
        return f"127.0.0.1:{self.advertised_port or self.port}"

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, *, echo: Callable[[str], None] | None = None) -> None:
        """Start the process (same ports and data as before) and wait until it is ready."""
        if self.running:
            return
        args = [sys.executable, "-m", "regroup.cli", "serve"]
        for key, value in self.settings.items():
            args += ["--override", f"{key}={value}"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("REGROUP_")}
        env.setdefault("PYTHONUNBUFFERED", "1")
        self.process = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        ready = threading.Event()
        assert self.process.stdout is not None
        threading.Thread(
            target=self._pump,
            args=(self.process.stdout, ready, echo),
            daemon=True,
            name=f"node {self.node_id}",
        ).start()
        deadline = time.monotonic() + _START_TIMEOUT_S
        while not ready.wait(0.1):
            if self.process.poll() is not None or time.monotonic() > deadline:
                tail = "\n".join(self._output[-30:])
                self.kill()
                raise RuntimeError(f"node {self.node_id} did not start:\n{tail}")

    def _pump(self, stream: IO[bytes], ready: threading.Event, echo: Callable[[str], None] | None) -> None:
        with self.log_path.open("ab") as log:
            for raw in iter(stream.readline, b""):
                log.write(raw)
                log.flush()
                line = raw.decode(errors="replace").rstrip("\n")
                self._output.append(line)
                del self._output[:-200]
                if " ready on " in line:
                    ready.set()
                if echo is not None:
                    echo(line)
        stream.close()

    def signal(self, signum: int) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signum)

    def kill(self) -> None:
        """SIGKILL: a crash (the node's session expires after broker.session.timeout.ms)."""
        self.signal(signal.SIGKILL)
        self.wait()

    def stop(self, timeout: float = 60.0) -> None:
        """SIGTERM: a controlled shutdown (leaderships move away first)."""
        self.signal(signal.SIGTERM)
        if not self.wait(timeout):
            self.kill()

    def pause(self) -> None:
        """SIGSTOP: the process stops answering (anyone, etcd included) until :meth:`resume`."""
        self.signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.signal(signal.SIGCONT)

    def wait(self, timeout: float = 60.0) -> bool:
        if self.process is None:
            return True
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return False
        self.process = None
        return True

    def describe(self) -> dict[str, object]:
        return {
            "node_id": self.node_id,
            "pid": self.pid,
            "listener": self.listener,
            "admin": f"127.0.0.1:{self.admin_port}",
            "data_dir": str(self.data_dir),
        }


class LocalCluster:
    """A private etcd and ``nodes`` regroup nodes on loopback."""

    def __init__(
        self,
        nodes: int = 3,
        *,
        data_dir: Path | None = None,
        etcd: str | None = None,
        overrides: Mapping[str, object] | None = None,
        echo: Callable[[str], None] | None = None,
        network_faults: bool = False,
    ) -> None:
        if nodes < 1:
            raise ValueError("a cluster needs at least one node")
        if network_faults and etcd is not None:
            raise ValueError("network faults need the cluster's private etcd")
        self.faults: NetworkFaults | None = NetworkFaults() if network_faults else None
        self._own_dir = data_dir is None
        self.data_dir = Path(tempfile.mkdtemp(prefix="regroup-cluster-")) if data_dir is None else data_dir
        self.etcd: LocalEtcd | None = None
        self.etcd_url = etcd
        self._echo = echo
        replication = str(min(3, nodes))
        self.defaults: dict[str, str] = {
            "offsets.topic.replication.factor": replication,
            "group.initial.rebalance.delay.ms": "0",
        }
        self.defaults.update({k: _render(v) for k, v in (overrides or {}).items()})
        self.nodes: dict[int, LocalNode] = {}
        self._count = nodes

    # ------------------------------------------------------------------------------------ lifecycle

    def start(self, timeout: float = 120.0) -> LocalCluster:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self.etcd_url is None:
            self.etcd = LocalEtcd(self.data_dir / "etcd").start()
            self.etcd_url = self.etcd.url
        if self.faults is not None:
            self.faults.start()
        for node_id in range(1, self._count + 1):
            # Kept across restarts of the node, so outside the ephemeral range.
            port, admin = free_ports(2, lasting=True)
            settings = {
                "node.id": str(node_id),
                "listeners": f"PLAINTEXT://127.0.0.1:{port}",
                "admin.listener": f"127.0.0.1:{admin}",
                "log.dirs": str(self.data_dir / f"node-{node_id}"),
                "cluster.metadata.endpoints": self.etcd_url,
                **self.defaults,
            }
            advertised = 0
            if self.faults is not None and self.etcd is not None:
                advertised = self.faults.relay(node_id, "listener", ("127.0.0.1", port))
                to_etcd = self.faults.relay(node_id, "etcd", self.etcd.endpoint)
                settings["advertised.listeners"] = f"PLAINTEXT://127.0.0.1:{advertised}"
                settings["cluster.metadata.endpoints"] = f"etcd://127.0.0.1:{to_etcd}"
            self.nodes[node_id] = LocalNode(
                node_id,
                port,
                admin,
                self.data_dir / f"node-{node_id}",
                settings,
                self.data_dir / f"node-{node_id}.log",
                advertised,
            )
        try:
            for node in self.nodes.values():
                node.start(echo=self._prefixed(node.node_id))
            deadline = time.monotonic() + timeout
            self.wait_until(self.registered, timeout=timeout, what="every node registered")
            # As on Kafka, __consumer_offsets appears on the first FindCoordinator: ask once every node
            # runs, so that its partitions are spread over all of them.
            self.wait_until(
                offsets_topic_created([("127.0.0.1", n.port) for n in self.nodes.values() if n.running]),
                timeout=max(1.0, deadline - time.monotonic()),
                what="__consumer_offsets created",
            )
            self.wait_until(
                self.ready,
                timeout=max(1.0, deadline - time.monotonic()),
                what="every node registered and __consumer_offsets led",
            )
        except BaseException:
            self.close()
            raise
        return self

    def _prefixed(self, node_id: int) -> Callable[[str], None] | None:
        echo = self._echo
        if echo is None:
            return None

        def line(text: str) -> None:
            echo(f"[node {node_id}] {text}")

        return line

    def registered(self, image: ClusterImage) -> bool:
        running = {n for n, node in self.nodes.items() if node.running}
        return running <= set(image.nodes) and image.controller is not None

    def ready(self, image: ClusterImage) -> bool:
        offsets = image.topics.get("__consumer_offsets")
        return (
            self.registered(image)
            and offsets is not None
            and all(image.leader_of("__consumer_offsets", p) >= 0 for p in range(offsets.partitions))
        )

    def close(self) -> None:
        """SIGTERM every node (a controlled shutdown each), then etcd; the data is removed unless it was
        given."""
        for node in self.nodes.values():
            node.signal(signal.SIGTERM)
        for node in self.nodes.values():
            if not node.wait(60):
                node.kill()
        if self.etcd is not None:
            self.etcd.stop()
        if self.faults is not None:
            self.faults.close()
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------------------------ observing

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(node.listener for node in self.nodes.values())

    def node(self, node_id: int) -> LocalNode:
        return self.nodes[node_id]

    def image(self) -> ClusterImage:
        """The cluster's metadata as etcd holds it now."""
        assert self.etcd_url is not None
        return read_image(self.etcd_url)

    def wait_until(
        self,
        predicate: Callable[[ClusterImage], bool],
        *,
        timeout: float = 60.0,
        what: str = "the cluster state",
    ) -> ClusterImage:
        deadline = time.monotonic() + timeout
        image = ClusterImage()
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                image = self.image()
                if predicate(image):
                    return image
            time.sleep(0.1)
        raise TimeoutError(f"{what}: not within {timeout:.0f} s (nodes {sorted(image.nodes)})")

    def describe(self) -> list[dict[str, object]]:
        return [node.describe() for node in self.nodes.values()]

    def json_lines(self) -> str:
        return "\n".join(json.dumps(d) for d in self.describe())


def offsets_topic_created(addresses: Sequence[tuple[str, int]]) -> Callable[[ClusterImage], bool]:
    """A wait's predicate: true once the image has ``__consumer_offsets``; until then each check sends a
    FindCoordinator for a group to the first of ``addresses`` that answers, which creates the topic (as on
    Kafka)."""
    from regroup.client.blocking import connect
    from regroup.protocol.api_keys import ApiKey
    from regroup.protocol.messages.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse

    key = "regroup-local-cluster"

    def created(image: ClusterImage) -> bool:
        if "__consumer_offsets" in image.topics:
            return True
        for address in addresses:
            with (
                contextlib.suppress(OSError, ConnectionError, TimeoutError),
                connect(address, timeout=5) as conn,
            ):
                request = (
                    FindCoordinatorRequest(key_type=0, coordinator_keys=[key])
                    if conn.version(ApiKey.FIND_COORDINATOR) >= 4
                    else FindCoordinatorRequest(key_type=0, key=key)
                )
                conn.request(request, FindCoordinatorResponse)
                break
        return False

    return created


def read_image(endpoints: str) -> ClusterImage:
    """The cluster image in the etcd named by ``endpoints`` (a ``cluster.metadata.endpoints`` value)."""
    from regroup.cluster.etcd import EtcdStore, parse_endpoints

    hosts, prefix = parse_endpoints(endpoints)

    async def read() -> ClusterImage:
        store = EtcdStore(hosts)
        try:
            keys = Keys(prefix)
            revision, kvs = await store.range(keys.root, prefix=True)
            return ImageBuilder(keys).build(
                revision, [StoredEntry(kv.key, kv.value, kv.create_revision) for kv in kvs]
            )
        finally:
            await store.close()

    return asyncio.run(read())


def _render(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Sequence) and not isinstance(value, str):
        return ",".join(str(v) for v in value)
    return str(value)
