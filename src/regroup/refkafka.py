"""The Apache Kafka reference broker that regroup is tested and benchmarked against.

Owns resolving the Kafka jars from Maven Central (cached per version, usable offline once cached), running a
single-node KRaft broker+controller — or a cluster of brokers beside a KRaft controller — on loopback with
regroup's test settings, waiting until it really serves requests, running Kafka's Java command-line tools,
and never leaving a JVM behind.

``python -m regroup.refkafka fetch`` warms the jar cache; ``python -m regroup.refkafka run`` starts a broker
and prints its bootstrap address until interrupted.
"""

from __future__ import annotations

import argparse
import atexit
import base64
import contextlib
import ctypes
import fcntl
import functools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Final, Self

from regroup.client.blocking import BlockingConnection, connect
from regroup.client.errors import UnsupportedApiVersionError
from regroup.protocol.errors import KafkaError
from regroup.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from regroup.protocol.messages.metadata import MetadataRequest, MetadataResponse
from regroup.protocol.primitives import DecodeError
from regroup.runtime.ports import free_ports

__all__ = [
    "CONSUMER_GROUPS_COMMAND",
    "KAFKA_VERSION",
    "TEST_BROKER_CONFIG",
    "KafkaReference",
    "KafkaReferenceCluster",
    "RefKafkaError",
    "api_versions",
    "cache_dir",
    "java_available",
    "kafka_version",
    "main",
    "maven_available",
    "resolve_jars",
    "run_tool",
    "skip_reason",
    "tool_command",
]

# 4.4.0 is listed on Maven Central but incomplete: kafka-tools-api and kafka-tools 4.4.0 (which the
# broker's own pom depends on) are missing, so 4.3.1 is the newest 4.x that resolves.
KAFKA_VERSION: Final = "4.3.1"
# The log4j2 version kafka_2.13 KAFKA_VERSION itself depends on; Kafka uses slf4j 1.7, hence the
# log4j-slf4j-impl binding.
LOG4J_VERSION: Final = "2.25.4"
MIN_JAVA: Final = 17
DEPENDENCY_PLUGIN: Final = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"

CONSUMER_GROUPS_COMMAND: Final = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
STORAGE_TOOL: Final = "kafka.tools.StorageTool"
BROKER_MAIN: Final = "kafka.Kafka"

ENV_CACHE: Final = "REGROUP_KAFKA_CACHE"
ENV_VERSION: Final = "REGROUP_KAFKA_VERSION"

# Mirrors the coordinator settings of regroup's own test configuration.
TEST_BROKER_CONFIG: Final[dict[str, str]] = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "group.max.session.timeout.ms": "1800000",
    # KIP-848 consumer groups: the broker decides session and heartbeat; 20 s lets a restarted static
    # member (a JVM on a loaded 2-core machine) come back in time, 0.5 s heartbeats keep reconciliation quick.
    "group.consumer.session.timeout.ms": "20000",
    "group.consumer.min.session.timeout.ms": "1000",
    "group.consumer.heartbeat.interval.ms": "500",
    "group.consumer.min.heartbeat.interval.ms": "500",
    # Kafka 4.3 recomputes a target at most once a second by default: a scripted sequence would then
    # depend on its own timing.
    "group.consumer.assignment.interval.ms": "0",
    "offsets.topic.num.partitions": "5",
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "num.partitions": "1",
    "auto.create.topics.enable": "true",
}

# Internal topics of a single node must not ask for more replicas than there are brokers.
_SINGLE_NODE_CONFIG: Final[dict[str, str]] = {
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "default.replication.factor": "1",
    "min.insync.replicas": "1",
}

_MARKER: Final = ".complete"
_TOOLS_LOG_CONFIG: Final = "log4j2-tools.xml"
_NODE_ID: Final = 1
# What a broker that is still starting answers a probe with: a refused or dropped connection, a
# timeout, an error code, or no Metadata version in common yet.
_NOT_READY: Final = (OSError, DecodeError, KafkaError, UnsupportedApiVersionError)
_FATAL_STARTUP: Final = "Exiting Kafka due to fatal exception"
_BIND_FAILED: Final = "Address already in use"

_LOG4J2_TEMPLATE: Final = """\
<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="WARN">
  <Appenders>
    <Console name="out" target="{target}">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
    </Console>
  </Appenders>
  <Loggers>
    <Logger name="kafka.server.KafkaRaftServer" level="INFO"/>
    <Logger name="kafka.server.BrokerServer" level="INFO"/>
    <Logger name="kafka.server.ControllerServer" level="INFO"/>
    <Root level="WARN">
      <AppenderRef ref="out"/>
    </Root>
  </Loggers>
</Configuration>
"""


class RefKafkaError(RuntimeError):
    """The reference broker or its jars could not be provided; the message says why (with a log tail)."""


# ----------------------------------------------------------------------------------------- environment


def kafka_version() -> str:
    return os.environ.get(ENV_VERSION) or KAFKA_VERSION


def _java() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = Path(home) / "bin" / "java"
        if os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which("java")


@functools.cache
def _java_major(java: str) -> int | None:
    try:
        out = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=30, check=False
        ).stderr
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if m is None:
        return None
    major = int(m.group(1))
    # Java 8 and older report "1.8.0_…".
    return int(m.group(2) or 0) if major == 1 else major


def java_available() -> bool:
    """A Java runtime new enough for a Kafka 4.x broker (17+) is on JAVA_HOME or PATH."""
    java = _java()
    if java is None:
        return False
    major = _java_major(java)
    return major is not None and major >= MIN_JAVA


def maven_available() -> bool:
    return shutil.which("mvn") is not None


def skip_reason() -> str | None:
    """One line saying why the reference broker cannot run here, or None when it can.

    Maven is only needed while the jar cache for the chosen version is incomplete.
    """
    java = _java()
    if java is None:
        return "Java not found (need Java 17+ on JAVA_HOME or PATH for the Kafka reference broker)"
    major = _java_major(java)
    if major is None or major < MIN_JAVA:
        return f"Java {major or '?'} at {java} is too old: the Kafka 4.x reference broker needs Java 17+"
    if not maven_available() and not _cache_complete(cache_dir()):
        return f"Maven (mvn) not found and no cached Kafka {kafka_version()} jars at {cache_dir()}"
    return None


# ------------------------------------------------------------------------------------------- jar cache


def _repo_root() -> Path | None:
    for parent in Path(__file__).resolve().parents:
        pyproject = parent / "pyproject.toml"
        if pyproject.is_file():
            with contextlib.suppress(OSError):
                if re.search(r'^name\s*=\s*"regroup"', pyproject.read_text(), re.MULTILINE):
                    return parent
    return None


def cache_dir(version: str | None = None) -> Path:
    """Where the jars of ``version`` live: $REGROUP_KAFKA_CACHE, else <repo>/.cache/kafka/<version>."""
    version = version or kafka_version()
    env = os.environ.get(ENV_CACHE)
    if env:
        return Path(env).expanduser().resolve()
    root = _repo_root()
    base = root / ".cache" if root is not None else Path.home() / ".cache" / "regroup"
    return base / "kafka" / version


def _cache_complete(directory: Path, version: str | None = None) -> bool:
    version = version or kafka_version()
    try:
        marker = json.loads((directory / _MARKER).read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(marker, dict) or marker.get("version") != version:
        return False
    jars = marker.get("jars")
    return isinstance(jars, list) and bool(jars) and all((directory / str(j)).is_file() for j in jars)


def _pom(version: str) -> str:
    deps = [
        ("org.apache.kafka", "kafka_2.13", version),
        ("org.apache.kafka", "kafka-tools", version),
        ("org.apache.kafka", "kafka-clients", version),
        ("org.apache.logging.log4j", "log4j-slf4j-impl", LOG4J_VERSION),
    ]
    body = "\n".join(
        f"    <dependency><groupId>{g}</groupId><artifactId>{a}</artifactId>"
        f"<version>{v}</version></dependency>"
        for g, a, v in deps
    )
    return f"""\
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>regroup.refkafka</groupId>
  <artifactId>kafka-classpath</artifactId>
  <version>{version}</version>
  <packaging>pom</packaging>
  <dependencies>
{body}
  </dependencies>
</project>
"""


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _head(text: str, lines: int = 40) -> str:
    """The start of a Java tool's output: an uncaught exception's message comes before its stack."""
    return "\n".join(text.strip().splitlines()[:lines])


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def resolve_jars(version: str | None = None) -> Path:
    """Return a directory holding the broker, tools, clients and log4j2 jars with all their dependencies.

    Resolves them with Maven on first use (minutes at most) and reuses the cache afterwards without
    touching the network. Safe against concurrent callers.
    """
    version = version or kafka_version()
    directory = cache_dir(version)
    if _cache_complete(directory, version):
        return directory
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _cache_complete(directory, version):
            return directory
        mvn = shutil.which("mvn")
        if mvn is None:
            raise RefKafkaError(
                f"Maven (mvn) not found and no complete Kafka {version} jar cache at {directory}"
            )
        for stale in directory.glob("*.jar"):
            stale.unlink()
        (directory / _MARKER).unlink(missing_ok=True)
        pom = directory / "pom.xml"
        pom.write_text(_pom(version))
        cmd = [
            mvn, "-B", "-q", "-f", str(pom),
            f"{DEPENDENCY_PLUGIN}:copy-dependencies",
            f"-DoutputDirectory={directory}",
            "-DincludeScope=runtime",
        ]  # fmt: skip
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
        except subprocess.TimeoutExpired as exc:
            raise RefKafkaError(f"mvn timed out resolving Kafka {version} jars into {directory}") from exc
        if done.returncode != 0:
            raise RefKafkaError(
                f"mvn failed ({done.returncode}) resolving Kafka {version} jars into {directory}:\n"
                + _tail(done.stdout + done.stderr)
            )
        jars = sorted(p.name for p in directory.glob("*.jar"))
        expected = [f"kafka_2.13-{version}.jar", f"kafka-tools-{version}.jar", f"kafka-clients-{version}.jar"]
        missing = [j for j in expected if j not in jars]
        if missing:
            raise RefKafkaError(f"mvn finished but {', '.join(missing)} missing from {directory}")
        _write_atomic(directory / _TOOLS_LOG_CONFIG, _LOG4J2_TEMPLATE.format(target="SYSTEM_ERR"))
        _write_atomic(
            directory / _MARKER, json.dumps({"version": version, "log4j": LOG4J_VERSION, "jars": jars})
        )
    return directory


# Short-lived tool JVMs: start fast rather than run fast.
_SHORT_JVM: Final = ("-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")


def _classpath(jar_dir: Path) -> str:
    return str(jar_dir / "*")


def _require_java() -> str:
    java = _java()
    if java is None or not java_available():
        raise RefKafkaError(skip_reason() or "no usable Java runtime")
    return java


def tool_command(main_class: str, *args: str, version: str | None = None) -> list[str]:
    """The command line that runs a Kafka Java command-line class from the cached jars (its own logging to
    stderr at WARN, so stdout stays parseable); for tools a caller runs in the background."""
    java = _require_java()
    jar_dir = resolve_jars(version)
    log_config = jar_dir / _TOOLS_LOG_CONFIG
    if not log_config.is_file():
        _write_atomic(log_config, _LOG4J2_TEMPLATE.format(target="SYSTEM_ERR"))
    return [
        java, *_SHORT_JVM, "-Djava.awt.headless=true", f"-Dlog4j2.configurationFile={log_config}",
        "-cp", _classpath(jar_dir), main_class, *args,
    ]  # fmt: skip


def run_tool(
    main_class: str, *args: str, timeout: float = 120.0, version: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a Kafka Java command-line class (e.g. :data:`CONSUMER_GROUPS_COMMAND`) from the cached jars.

    Output is captured as text; the tool's own logging goes to stderr at WARN so stdout stays parseable.
    The exit code is not checked.
    """
    return subprocess.run(
        tool_command(main_class, *args, version=version),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )


# ---------------------------------------------------------------------------------------- raw protocol


def api_versions(host: str, port: int, timeout: float = 5.0) -> dict[int, tuple[int, int]]:
    """Ask ``host:port`` for ApiVersions (v0) and return {api_key: (min_version, max_version)}."""
    with BlockingConnection((host, port), client_id="regroup-refkafka", timeout=timeout) as conn:
        reply = conn.request(ApiVersionsRequest(), ApiVersionsResponse, version=0)
    if reply.error_code != 0:
        raise DecodeError(f"ApiVersions error code {reply.error_code}")
    return {k.api_key: (k.min_version, k.max_version) for k in reply.api_keys}


def _metadata_broker_ids(host: str, port: int, timeout: float = 5.0) -> set[int]:
    """Node ids of the live brokers that ``host:port`` lists in Metadata (asked for no topics, so nothing
    is created). Raises one of :data:`_NOT_READY` while the broker is starting."""
    request = MetadataRequest(topics=[], allow_auto_topic_creation=False)
    with connect((host, port), client_id="regroup-refkafka", timeout=timeout) as conn:
        reply = conn.request(request, MetadataResponse)
    return {b.node_id for b in reply.brokers}


# -------------------------------------------------------------------------------------------- process


def _cluster_id() -> str:
    """A Kafka-style cluster id (url-safe base64 of a random UUID). Like Kafka's Uuid.randomUuid it never
    starts with '-', which the format tool's argument parser would take for an option."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cid.startswith("-"):
            return cid


def _escape_property(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")


def _die_with_parent() -> Callable[[], None] | None:
    """A preexec_fn making the child get SIGKILL when this process dies, so even a killed test run leaves
    no JVM behind. Linux only, and only from the main thread: the signal follows the forking *thread*."""
    if not sys.platform.startswith("linux") or threading.current_thread() is not threading.main_thread():
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()
    pr_set_pdeathsig = 1

    def preexec() -> None:
        prctl(pr_set_pdeathsig, signal.SIGKILL)
        if os.getppid() != parent:
            os._exit(1)

    return preexec


_LISTENER_NAMES: Final[dict[str, str]] = {
    "controller.listener.names": "CONTROLLER",
    "inter.broker.listener.name": "PLAINTEXT",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
}


def _broker_jvm_options(heap: str) -> list[str]:
    """The JVM options of a broker or controller: a fixed heap and G1, as Kafka's start script sets."""
    return [
        f"-Xms{heap}",
        f"-Xmx{heap}",
        "-XX:+UseG1GC",
        "-XX:MaxGCPauseMillis=20",
        "-XX:+ExitOnOutOfMemoryError",
    ]


class _KafkaNode:
    """One Kafka JVM's files and command: ``server.properties``, the log4j2 file, KRaft storage formatting,
    and the broker process (stdout and stderr into one log)."""

    def __init__(self, workdir: Path, jar_dir: Path, java: str, jvm_options: Sequence[str]) -> None:
        self.workdir = workdir
        self.java = java
        self.jvm_options = list(jvm_options)
        self.properties = workdir / "server.properties"
        log_config = workdir / "log4j2.xml"
        workdir.mkdir(parents=True, exist_ok=True)
        log_config.write_text(_LOG4J2_TEMPLATE.format(target="SYSTEM_OUT"))
        self.common = [
            "-Djava.awt.headless=true", f"-Dlog4j2.configurationFile={log_config}",
            f"-Dkafka.logs.dir={workdir}", "-cp", _classpath(jar_dir),
        ]  # fmt: skip

    def write_config(self, config: Mapping[str, str]) -> None:
        self.properties.write_text("".join(f"{k}={_escape_property(v)}\n" for k, v in config.items()))

    def format(self, cluster_id: str) -> None:
        # With static controller.quorum.voters the format tool takes no --standalone/--initial-controllers.
        fmt = subprocess.run(
            [self.java, *_SHORT_JVM, *self.common, STORAGE_TOOL, "format", "-t", cluster_id,
             "-c", str(self.properties)],
            capture_output=True, text=True, timeout=120, check=False, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        if fmt.returncode != 0:
            raise RefKafkaError(
                f"formatting KRaft storage failed ({fmt.returncode}):\n{_head(fmt.stdout + fmt.stderr)}"
            )

    def launch(self, log_path: Path, *, append: bool = False) -> subprocess.Popen[bytes]:
        with log_path.open("ab" if append else "wb") as log:
            return subprocess.Popen(
                [self.java, *self.jvm_options, *self.common, BROKER_MAIN, str(self.properties)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                # A terminal Ctrl-C reaches only us, and we stop the JVM in order.
                start_new_session=True,
                # Only a prctl call: safe despite the general preexec_fn caveats.
                preexec_fn=_die_with_parent(),  # noqa: PLW1509
            )


_LIVE: set[KafkaReference | KafkaReferenceCluster] = set()
_LIVE_LOCK = threading.Lock()


@atexit.register
def _stop_all() -> None:
    with _LIVE_LOCK:
        live = list(_LIVE)
    for ref in live:
        with contextlib.suppress(Exception):
            ref.stop(timeout=10.0)


class KafkaReference:
    """A single-node KRaft Apache Kafka broker+controller on loopback, for differential tests and benches.

    ``overrides`` are merged over :data:`TEST_BROKER_CONFIG` (and the fixed node/listener settings), so
    they can change anything. ``workdir`` holds server.properties, the log (``kafka.log``) and the data
    (``data/``, recreated on every start); without it a temporary directory is used and removed on stop.
    """

    def __init__(
        self,
        overrides: Mapping[str, str] | None = None,
        workdir: Path | None = None,
        *,
        version: str | None = None,
        startup_timeout: float = 60.0,
        heap: str = "512m",
    ) -> None:
        self._overrides = dict(overrides or {})
        self._given_workdir = Path(workdir) if workdir is not None else None
        self._version = version or kafka_version()
        self._startup_timeout = startup_timeout
        self._heap = heap
        self._proc: subprocess.Popen[bytes] | None = None
        self._workdir: Path | None = None
        self._port = 0
        self._controller_port = 0
        self._jar_dir: Path | None = None
        self.config: dict[str, str] = {}

    # ------------------------------------------------------------------------------------- properties

    @property
    def port(self) -> int:
        if not self._port:
            raise RefKafkaError("the reference broker is not started")
        return self._port

    @property
    def controller_port(self) -> int:
        if not self._controller_port:
            raise RefKafkaError("the reference broker is not started")
        return self._controller_port

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def workdir(self) -> Path:
        if self._workdir is None:
            raise RefKafkaError("the reference broker is not started")
        return self._workdir

    @property
    def log_path(self) -> Path:
        return self.workdir / "kafka.log"

    @property
    def version(self) -> str:
        return self._version

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def wait(self, timeout: float | None = None) -> int:
        """Block until the broker process exits (or ``timeout`` passes) and return its exit code."""
        if self._proc is None:
            raise RefKafkaError("the reference broker is not started")
        return self._proc.wait(timeout)

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        if self._workdir is None:
            return ""
        return _tail(self._log_text(), lines)

    # ------------------------------------------------------------------------------------- lifecycle

    def start(self) -> Self:
        """Format storage, launch the JVM and return once the broker serves ApiVersions and lists itself
        in Metadata. Raises :class:`RefKafkaError` (with the log tail) if it dies or times out."""
        if self._proc is not None:
            raise RefKafkaError("the reference broker is already started")
        java = _require_java()
        self._jar_dir = resolve_jars(self._version)
        if self._given_workdir is not None:
            self._given_workdir.mkdir(parents=True, exist_ok=True)
            self._workdir = self._given_workdir
        else:
            self._workdir = Path(tempfile.mkdtemp(prefix="regroup-kafka-"))
        with _LIVE_LOCK:
            _LIVE.add(self)
        attempt = 1
        try:
            while True:
                try:
                    self._start_once(java)
                except _PortTakenError:
                    # Another process took a probed port before the JVM bound it: retry with fresh ones.
                    self._kill(timeout=0)
                    if attempt == 3:
                        raise RefKafkaError(
                            "the reference broker could not bind its ports:\n" + self.log_tail()
                        ) from None
                    attempt += 1
                else:
                    return self
        except BaseException:
            # A broker that failed to start has nothing worth a graceful shutdown.
            self.stop(timeout=0)
            raise

    def _start_once(self, java: str) -> None:
        workdir = self.workdir
        assert self._jar_dir is not None
        self._port, self._controller_port = free_ports(2)
        data = workdir / "data"
        if data.exists():
            shutil.rmtree(data)
        self.config = {
            "node.id": str(_NODE_ID),
            "process.roles": "broker,controller",
            "listeners": f"PLAINTEXT://127.0.0.1:{self._port},CONTROLLER://127.0.0.1:{self._controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self._port}",
            "controller.quorum.voters": f"{_NODE_ID}@127.0.0.1:{self._controller_port}",
            "log.dirs": str(data),
            **_LISTENER_NAMES,
            **_SINGLE_NODE_CONFIG,
            **TEST_BROKER_CONFIG,
            **self._overrides,
        }
        node = _KafkaNode(workdir, self._jar_dir, java, _broker_jvm_options(self._heap))
        node.write_config(self.config)
        node.format(_cluster_id())
        self._proc = node.launch(self.log_path)
        self._wait_ready()

    def _wait_ready(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + self._startup_timeout
        polls = 0
        while True:
            code = self._proc.poll()
            # A failed startup can take seconds to wind down after logging its fatal error: don't wait.
            if code is not None or (polls % 10 == 9 and _FATAL_STARTUP in self._log_text()):
                log = self._log_text()
                if _BIND_FAILED in log:
                    raise _PortTakenError
                status = f"exited with code {code}" if code is not None else "failed"
                raise RefKafkaError(f"the reference broker {status} during startup:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise RefKafkaError(
                    f"the reference broker did not list itself in Metadata at {self.bootstrap_servers} in "
                    f"{self._startup_timeout:g}s:\n{self.log_tail()}"
                )
            with contextlib.suppress(*_NOT_READY):
                if _NODE_ID in _metadata_broker_ids("127.0.0.1", self._port, timeout=2.0):
                    return
            polls += 1
            time.sleep(0.05)

    def _log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def _kill(self, timeout: float = 20.0) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            if timeout > 0:
                proc.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout)
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM the broker (controlled shutdown), SIGKILL it after ``timeout`` seconds (at once for 0),
        and remove the temporary workdir if this object created it. Idempotent."""
        try:
            self._kill(timeout)
        finally:
            with _LIVE_LOCK:
                _LIVE.discard(self)
            if self._given_workdir is None and self._workdir is not None:
                shutil.rmtree(self._workdir, ignore_errors=True)
                self._workdir = None

    def run_tool(
        self, main_class: str, *args: str, timeout: float = 120.0
    ) -> subprocess.CompletedProcess[str]:
        """:func:`run_tool` with this broker's Kafka version."""
        return run_tool(main_class, *args, timeout=timeout, version=self._version)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class KafkaReferenceCluster:
    """A multi-broker KRaft Apache Kafka cluster on loopback: one controller-only node (the metadata quorum,
    as etcd is for a regroup cluster) and ``brokers`` broker-only nodes with ids 1..N, for benchmarks
    and interop tests that need replication and leadership moving between brokers.

    ``overrides`` apply to every broker over :data:`TEST_BROKER_CONFIG`; internal topics get
    min(3, brokers) replicas. Brokers can be killed (any signal) and started again on their data, as an
    operator's restart does; the controller stays up.
    """

    CONTROLLER_ID: Final = 3000

    def __init__(
        self,
        brokers: int = 3,
        overrides: Mapping[str, str] | None = None,
        workdir: Path | None = None,
        *,
        version: str | None = None,
        startup_timeout: float = 120.0,
        heap: str = "512m",
    ) -> None:
        if brokers < 1:
            raise ValueError("a cluster needs at least one broker")
        self.broker_ids = list(range(1, brokers + 1))
        self._overrides = dict(overrides or {})
        self._given_workdir = Path(workdir) if workdir is not None else None
        self._version = version or kafka_version()
        self._startup_timeout = startup_timeout
        self._heap = heap
        self._workdir: Path | None = None
        self._nodes: dict[int, _KafkaNode] = {}
        self._procs: dict[int, subprocess.Popen[bytes]] = {}
        self._ports: dict[int, int] = {}
        self.configs: dict[int, dict[str, str]] = {}

    @property
    def version(self) -> str:
        return self._version

    @property
    def workdir(self) -> Path:
        if self._workdir is None:
            raise RefKafkaError("the reference cluster is not started")
        return self._workdir

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"127.0.0.1:{self._ports[b]}" for b in self.broker_ids)

    def port(self, broker_id: int) -> int:
        return self._ports[broker_id]

    def pid(self, node_id: int) -> int | None:
        proc = self._procs.get(node_id)
        return proc.pid if proc is not None and proc.poll() is None else None

    def running(self, node_id: int) -> bool:
        proc = self._procs.get(node_id)
        return proc is not None and proc.poll() is None

    def log_path(self, node_id: int) -> Path:
        return self.workdir / f"node-{node_id}" / "kafka.log"

    def log_tail(self, node_id: int, lines: int = 40) -> str:
        try:
            return _tail(self.log_path(node_id).read_text(errors="replace"), lines)
        except (OSError, RefKafkaError):
            return ""

    # ------------------------------------------------------------------------------------- lifecycle

    def start(self) -> Self:
        """Format every node's storage with one cluster id, start the controller and the brokers, and
        return once every broker is listed in Metadata."""
        if self._procs:
            raise RefKafkaError("the reference cluster is already started")
        java = _require_java()
        jar_dir = resolve_jars(self._version)
        if self._given_workdir is not None:
            self._given_workdir.mkdir(parents=True, exist_ok=True)
            self._workdir = self._given_workdir
        else:
            self._workdir = Path(tempfile.mkdtemp(prefix="regroup-kafka-cluster-"))
        with _LIVE_LOCK:
            _LIVE.add(self)
        try:
            # Brokers restart on their ports (start_node), so none from the ephemeral range.
            ports = free_ports(len(self.broker_ids) + 1, lasting=True)
            controller_port = ports[0]
            self._ports = dict(zip(self.broker_ids, ports[1:], strict=True))
            voters = f"{self.CONTROLLER_ID}@127.0.0.1:{controller_port}"
            replicas = str(min(3, len(self.broker_ids)))
            cluster_id = _cluster_id()
            for node_id in [self.CONTROLLER_ID, *self.broker_ids]:
                node_dir = self.workdir / f"node-{node_id}"
                if node_dir.exists():
                    shutil.rmtree(node_dir)
                config: dict[str, str] = {
                    "node.id": str(node_id),
                    "controller.quorum.voters": voters,
                    "log.dirs": str(node_dir / "data"),
                    **_LISTENER_NAMES,
                }
                if node_id == self.CONTROLLER_ID:
                    # The controller fences brokers (broker.session.timeout.ms), so it gets the overrides too.
                    config |= {
                        "process.roles": "controller",
                        "listeners": f"CONTROLLER://127.0.0.1:{controller_port}",
                        **self._overrides,
                    }
                    config.pop("inter.broker.listener.name")
                else:
                    port = self._ports[node_id]
                    config |= {
                        "process.roles": "broker",
                        "listeners": f"PLAINTEXT://127.0.0.1:{port}",
                        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
                        **TEST_BROKER_CONFIG,
                        "offsets.topic.replication.factor": replicas,
                        "transaction.state.log.replication.factor": replicas,
                        "share.coordinator.state.topic.replication.factor": replicas,
                        **self._overrides,
                    }
                node = _KafkaNode(node_dir, jar_dir, java, _broker_jvm_options(self._heap))
                node.write_config(config)
                node.format(cluster_id)
                self._nodes[node_id] = node
                self.configs[node_id] = config
            for node_id in [self.CONTROLLER_ID, *self.broker_ids]:
                self.start_node(node_id)
            self.wait_for_brokers(self.broker_ids)
            return self
        except BaseException:
            self.stop(timeout=0)
            raise

    def start_node(self, node_id: int) -> None:
        """Launch node ``node_id`` on its existing data (no re-format); returns at once."""
        if self.running(node_id):
            raise RefKafkaError(f"node {node_id} is already running")
        self._procs[node_id] = self._nodes[node_id].launch(self.log_path(node_id), append=True)

    def kill(self, node_id: int, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to node ``node_id`` (SIGKILL: a crash; SIGTERM: a controlled shutdown)."""
        proc = self._procs.get(node_id)
        if proc is not None and proc.poll() is None:
            proc.send_signal(sig)

    def wait_for_brokers(self, broker_ids: Sequence[int], timeout: float | None = None) -> None:
        """Until every broker in ``broker_ids`` is listed in Metadata by a running broker."""
        deadline = time.monotonic() + (self._startup_timeout if timeout is None else timeout)
        wanted = set(broker_ids)
        while True:
            for node_id, proc in self._procs.items():
                if proc.poll() is not None and node_id in wanted | {self.CONTROLLER_ID}:
                    raise RefKafkaError(
                        f"Kafka node {node_id} exited with code {proc.returncode}:\n{self.log_tail(node_id)}"
                    )
            for broker_id in broker_ids:
                with contextlib.suppress(*_NOT_READY):
                    if wanted <= _metadata_broker_ids("127.0.0.1", self._ports[broker_id], timeout=2.0):
                        return
            if time.monotonic() > deadline:
                raise RefKafkaError(
                    f"Kafka brokers {sorted(wanted)} were not all listed in Metadata in time:\n"
                    + "\n".join(self.log_tail(b, 10) for b in broker_ids)
                )
            time.sleep(0.1)

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM the brokers, then the controller (SIGKILL after ``timeout`` seconds, at once for 0), and
        remove the temporary workdir if this object created it. Idempotent."""
        try:
            for group in (self.broker_ids, [self.CONTROLLER_ID]):
                procs = [self._procs.pop(n) for n in group if n in self._procs]
                for proc in procs:
                    if proc.poll() is None and timeout > 0:
                        proc.terminate()
                for proc in procs:
                    if proc.poll() is None:
                        with contextlib.suppress(subprocess.TimeoutExpired):
                            proc.wait(timeout)
                    if proc.poll() is None:
                        proc.kill()
                        proc.wait()
        finally:
            with _LIVE_LOCK:
                _LIVE.discard(self)
            if self._given_workdir is None and self._workdir is not None:
                shutil.rmtree(self._workdir, ignore_errors=True)
                self._workdir = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class _PortTakenError(Exception):
    pass


# ------------------------------------------------------------------------------------------------ CLI


def _parse_overrides(pairs: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise argparse.ArgumentTypeError(f"expected key=value, got {pair!r}")
        out[key.strip()] = value
    return out


@contextlib.contextmanager
def _sigterm_as_exit() -> Iterator[None]:
    def handler(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m regroup.refkafka", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("fetch", help="resolve the Kafka jars into the cache and print its directory")
    run = sub.add_parser("run", help="start a reference broker and print its bootstrap address until Ctrl-C")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="broker config override")
    run.add_argument("--workdir", type=Path, help="keep config, log and data here instead of a temp dir")
    args = parser.parse_args(argv)

    try:
        if args.command == "fetch":
            print(resolve_jars())
            return 0
        with _sigterm_as_exit(), KafkaReference(_parse_overrides(args.set), args.workdir) as ref:
            print(ref.bootstrap_servers, flush=True)
            print(f"Kafka {ref.version}, log at {ref.log_path}; Ctrl-C to stop", file=sys.stderr, flush=True)
            code = ref.wait()
            print(f"the reference broker exited with code {code}:\n{ref.log_tail()}", file=sys.stderr)
            return 1
    except KeyboardInterrupt:
        return 130
    except (RefKafkaError, argparse.ArgumentTypeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
