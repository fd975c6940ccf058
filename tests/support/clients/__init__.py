"""The third-party clients of the compatibility matrix: how to find, build and start each one.

Each ``*_row`` function returns a :class:`~support.client_matrix.GroupScenario` (or calls
:func:`support.tools.missing` when the client cannot be used here) plus a version string.
Built artefacts (the franz-go binary, kafkajs' node_modules) are cached under ``<repo>/.cache/interop``,
keyed by the hash of their sources.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from regroup.refkafka import java_available, kafka_version, resolve_jars, skip_reason
from support.client_matrix import (
    CONSUMER_SESSION_TIMEOUT_MS,
    HEARTBEAT_INTERVAL_MS,
    PRODUCE_RATE,
    SESSION_TIMEOUT_MS,
    Command,
    GroupScenario,
    kcat_records,
)
from support.tools import missing, require_executable, tool_version

__all__ = [
    "CACHE",
    "franz_go_binary",
    "franz_go_row",
    "java_row",
    "kafkajs_dir",
    "kafkajs_row",
    "kcat_row",
    "python_row",
]

HERE = Path(__file__).resolve().parent
CACHE = HERE.parents[2] / ".cache" / "interop"

JAVA_ASSIGNORS = {
    "range": "org.apache.kafka.clients.consumer.RangeAssignor",
    "cooperative-sticky": "org.apache.kafka.clients.consumer.CooperativeStickyAssignor",
}


def _digest(*files: Path) -> str:
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]


# ------------------------------------------------------------------------------------------------ Java


def _java_command(main_class: str, args: list[str]) -> list[str]:
    jars = resolve_jars()
    java = (
        shutil.which("java", path=os.path.join(os.environ["JAVA_HOME"], "bin"))
        if os.environ.get("JAVA_HOME")
        else None
    )
    return [
        java or "java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={jars / 'log4j2-tools.xml'}", "-cp", str(jars / "*"), main_class, *args,
    ]  # fmt: skip


def java_row(
    key: str, assignor: str, static: bool, workdir: Path, *, protocol: str = "classic"
) -> tuple[GroupScenario, str]:
    """Apache Kafka's own VerifiableConsumer/VerifiableProducer (Java KafkaConsumer/KafkaProducer) from the
    cached Kafka jars. ``protocol="consumer"``: KIP-848 (``group.protocol=consumer``), where ``assignor`` is
    the server-side assignor (``uniform``/``range``) and the broker decides session and heartbeat — the
    client refuses ``session.timeout.ms``, ``heartbeat.interval.ms`` and ``partition.assignment.strategy``."""
    reason = skip_reason()
    if reason or not java_available():
        missing(reason or "Java 17+ not found")
    resolve_jars()
    consumer_protocol = protocol == "consumer"
    # A restarted static member must rejoin within its session timeout to keep its generation, and a JVM
    # starts slowly on a loaded 2-core machine: static members get a longer session. With the consumer
    # protocol the session is the broker's group.consumer.session.timeout.ms.
    session = CONSUMER_SESSION_TIMEOUT_MS if consumer_protocol else 20000 if static else SESSION_TIMEOUT_MS
    config = workdir / f"{key}-consumer.properties"
    heartbeat = "" if consumer_protocol else f"heartbeat.interval.ms={HEARTBEAT_INTERVAL_MS}\n"
    config.write_text(
        f"{heartbeat}max.poll.interval.ms=30000\nmetadata.max.age.ms=5000\ngroup.protocol={protocol}\n"
    )

    def consumer(bootstrap: str, name: str, group: str, topic: str, instance: str | None) -> Command:
        args = [
            "--bootstrap-server", bootstrap, "--topic", topic, "--group-id", group,
            "--reset-policy", "earliest", "--command-config", str(config),
        ]  # fmt: skip
        if consumer_protocol:
            args += ["--group-protocol", "consumer", "--group-remote-assignor", assignor]
        else:
            args += ["--session-timeout", str(session), "--assignment-strategy", JAVA_ASSIGNORS[assignor]]
        if instance:
            args += ["--group-instance-id", instance]
        return Command(_java_command("org.apache.kafka.tools.VerifiableConsumer", args))

    # VerifiableProducer sends unkeyed records, which the default partitioner keeps on one partition for
    # seconds at a time: spread them so that every member keeps receiving records.
    producer_config = workdir / f"{key}-producer.properties"
    producer_config.write_text(
        "partitioner.class=org.apache.kafka.clients.producer.RoundRobinPartitioner\nlinger.ms=5\n"
    )

    def producer(bootstrap: str, topic: str) -> Command:
        args = [
            "--bootstrap-server", bootstrap, "--topic", topic, "--throughput", str(int(PRODUCE_RATE)),
            "--max-messages", "-1", "--acks", "-1", "--command-config", str(producer_config),
        ]  # fmt: skip
        return Command(_java_command("org.apache.kafka.tools.VerifiableProducer", args))

    return GroupScenario(
        key, consumer, producer, static=static, session_timeout_ms=session, protocol=protocol
    ), f"kafka-clients {kafka_version()}"


# ---------------------------------------------------------------------------------------------- Python


def python_row(client: str, assignor: str, *, protocol: str = "classic") -> tuple[GroupScenario, str]:
    """confluent-kafka, kafka-python or aiokafka through ``pyclient.py`` in this interpreter.
    ``protocol="consumer"`` (KIP-848, confluent-kafka only): librdkafka ≥ 2.12 is required."""
    script = HERE / "pyclient.py"
    distribution = {"confluent": "confluent-kafka", "kafka-python": "kafka-python", "aiokafka": "aiokafka"}[
        client
    ]
    try:
        version = f"{distribution} {importlib.metadata.version(distribution)}"
    except importlib.metadata.PackageNotFoundError:
        missing(f"{distribution} is not installed (pip install -e '.[test]')")
    if client == "confluent":
        # librdkafka is bundled in the wheel; ask it in a child so its import stays out of this process.
        librdkafka = subprocess.run(
            [sys.executable, "-c", "import confluent_kafka; print(confluent_kafka.libversion()[0])"],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        ).stdout.strip()
        version += f" (librdkafka {librdkafka or '?'})"
        if protocol == "consumer" and _version_tuple(librdkafka) < (2, 12):
            missing(f"librdkafka {librdkafka or '?'} predates the KIP-848 consumer protocol (GA in 2.12)")

    def consumer(bootstrap: str, name: str, group: str, topic: str, instance: str | None) -> Command:
        argv = [
            sys.executable, str(script), "consume", "--client", client, "--bootstrap", bootstrap,
            "--topic", topic, "--group", group, "--name", name, "--assignor", assignor,
            "--session-timeout", str(SESSION_TIMEOUT_MS), "--heartbeat-interval", str(HEARTBEAT_INTERVAL_MS),
            "--group-protocol", protocol,
        ]  # fmt: skip
        if instance:
            argv += ["--instance-id", instance]
        # The client library's INFO log (rebalances) goes to the member's stderr file, for post-mortems.
        return Command(argv, env={**os.environ, "PYCLIENT_LOG": "INFO"})

    def producer(bootstrap: str, topic: str) -> Command:
        argv = [
            sys.executable, str(script), "produce", "--client", client, "--bootstrap", bootstrap,
            "--topic", topic, "--rate", str(PRODUCE_RATE), "--name", "producer",
        ]  # fmt: skip
        return Command(argv)

    consumer_protocol = protocol == "consumer"
    return GroupScenario(
        f"{client}-{assignor}" + ("-kip848" if consumer_protocol else ""),
        consumer,
        producer,
        session_timeout_ms=CONSUMER_SESSION_TIMEOUT_MS if consumer_protocol else SESSION_TIMEOUT_MS,
        protocol=protocol,
    ), version


def _version_tuple(text: str) -> tuple[int, ...]:
    numbers = re.findall(r"\d+", text)[:3]
    return tuple(int(n) for n in numbers) if numbers else (0,)


# ------------------------------------------------------------------------------------------------ kcat


def kcat_row() -> tuple[GroupScenario, str]:
    """kcat -G (librdkafka's balanced consumer, auto-commit every 100 ms) and kcat -P."""
    kcat = require_executable("kcat", "apt-get install kcat")
    version_line = tool_version([kcat, "-V"])
    full = subprocess.run([kcat, "-V"], capture_output=True, text=True, check=False).stdout
    m = re.search(r"Version (\S+) .*librdkafka (\S+)", full.replace("\n", " "))
    version = f"kcat {m.group(1)} (librdkafka {m.group(2)})" if m else version_line

    def consumer(bootstrap: str, name: str, group: str, topic: str, instance: str | None) -> Command:
        argv = [
            kcat, "-b", bootstrap, "-G", group, "-E", "-q", "-J", "-u",
            "-X", f"client.id={name}", "-X", "auto.offset.reset=earliest",
            "-X", f"session.timeout.ms={SESSION_TIMEOUT_MS}",
            "-X", f"heartbeat.interval.ms={HEARTBEAT_INTERVAL_MS}",
            "-X", "auto.commit.interval.ms=100", topic,
        ]  # fmt: skip
        if instance:
            argv[-1:-1] = ["-X", f"group.instance.id={instance}"]
        return Command(argv, adapt=kcat_records, timestamp_slack_ms=1500, unreported_window=1)

    def producer(bootstrap: str, topic: str) -> Command:
        argv = [kcat, "-P", "-b", bootstrap, "-t", topic, "-K:", "-X", "acks=all", "-X", "linger.ms=5"]
        return Command(argv, stdin_lines=lambda i: f"{i}:{i}\n")

    return GroupScenario("kcat", consumer, producer, reports_assignments=False), version


# -------------------------------------------------------------------------------------------- franz-go


@functools.cache
def franz_go_binary() -> Path:
    """Build the franz-go driver (module download through the Go proxy on first use)."""
    go = require_executable("go", "install Go 1.21+ (golang.org/dl)")
    src = HERE / "franzgo"
    files = [src / "main.go", src / "go.mod", src / "go.sum"]
    out = CACHE / f"franzgo-{_digest(*files)}" / "franzgo"
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="franzgo-build-") as tmp:
        for f in files:
            shutil.copy(f, tmp)
        env = {**os.environ, "GOFLAGS": "-mod=readonly", "GOTOOLCHAIN": "local", "CGO_ENABLED": "0"}
        done = subprocess.run(
            [go, "build", "-o", str(out), "."],
            cwd=tmp,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    if done.returncode != 0:
        missing(
            f"building the franz-go driver failed: {(done.stderr or done.stdout).strip().splitlines()[-1:]}"
        )
    return out


def franz_go_row(balancer: str) -> tuple[GroupScenario, str]:
    binary = franz_go_binary()
    mod = (HERE / "franzgo" / "go.mod").read_text()
    m = re.search(r"github.com/twmb/franz-go (v\S+)", mod)
    go_version = tool_version(["go", "version"]).replace("go version ", "")
    version = f"franz-go {m.group(1) if m else '?'} ({go_version})"

    def consumer(bootstrap: str, name: str, group: str, topic: str, instance: str | None) -> Command:
        argv = [
            str(binary), "consume", "-bootstrap", bootstrap, "-topic", topic, "-group", group, "-name", name,
            "-balancer", balancer, "-session-timeout", str(SESSION_TIMEOUT_MS),
            "-heartbeat-interval", str(HEARTBEAT_INTERVAL_MS),
        ]  # fmt: skip
        if instance:
            argv += ["-instance-id", instance]
        return Command(argv)

    def producer(bootstrap: str, topic: str) -> Command:
        return Command(
            [str(binary), "produce", "-bootstrap", bootstrap, "-topic", topic, "-rate", str(PRODUCE_RATE)]
        )

    return GroupScenario(f"franz-go-{balancer}", consumer, producer), version


# --------------------------------------------------------------------------------------------- kafkajs


@functools.cache
def kafkajs_dir() -> Path:
    """The kafkajs driver with its node_modules (``npm ci`` from the committed lock file on first use)."""
    node = require_executable("node", "install Node.js 18+")
    npm = require_executable("npm", "install npm")
    src = HERE / "kafkajs"
    files = [src / "driver.js", src / "package.json", src / "package-lock.json"]
    out = CACHE / f"kafkajs-{_digest(*files)}"
    if (out / "node_modules" / "kafkajs" / "package.json").is_file():
        return out
    out.mkdir(parents=True, exist_ok=True)
    for f in files:
        shutil.copy(f, out)
    done = subprocess.run(
        [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
        cwd=out,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        missing(f"npm ci for kafkajs failed: {(done.stderr or done.stdout).strip().splitlines()[-1:]}")
    del node
    return out


def kafkajs_row() -> tuple[GroupScenario, str]:
    directory = kafkajs_dir()
    installed = json.loads((directory / "node_modules" / "kafkajs" / "package.json").read_text())["version"]
    version = f"kafkajs {installed} (node {tool_version(['node', '--version'])})"
    driver = str(directory / "driver.js")

    def consumer(bootstrap: str, name: str, group: str, topic: str, instance: str | None) -> Command:
        argv = [
            "node", driver, "consume", "--bootstrap", bootstrap, "--topic", topic, "--group", group,
            "--name", name, "--session-timeout", str(SESSION_TIMEOUT_MS),
            "--heartbeat-interval", str(HEARTBEAT_INTERVAL_MS),
        ]  # fmt: skip
        return Command(argv, cwd=directory)

    def producer(bootstrap: str, topic: str) -> Command:
        argv = [
            "node",
            driver,
            "produce",
            "--bootstrap",
            bootstrap,
            "--topic",
            topic,
            "--rate",
            str(PRODUCE_RATE),
        ]
        return Command(argv, cwd=directory)

    return GroupScenario("kafkajs", consumer, producer), version
