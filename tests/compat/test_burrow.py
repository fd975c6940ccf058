"""Burrow 1.2.1 (Debian package ``burrow``) monitoring regroup: it reads committed offsets from regroup's
``__consumer_offsets`` with its own decoder (sarama 1.22.1: Metadata v5, ListOffsets v0, Fetch v4) and
reports each group's committed offsets and lag over HTTP. It needs a ZooKeeper, provided by
``support.fakezk``.

Burrow 1.2.1 decodes OffsetCommitValue up to v3 and skips v4, which Apache Kafka 4.3 (and regroup by
default) writes; so it monitors a regroup broker with ``offsets.commit.value.version=3``, the setting
documented for such tools."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

from regroup.client.blocking import BlockingConnection
from regroup.protocol.api_keys import ApiKey
from regroup.refkafka import api_versions
from regroup.runtime.ports import free_port
from support import compat_report
from support.brokers import RegroupServer, shared_regroup
from support.fakezk import FakeZooKeeper
from support.kafka_wire import create_topics, end_offsets, produce, wait_for
from support.tools import require_executable, tool_version

# What Burrow 1.2.1 sends (docs/design/ecosystem.md §5.3); regroup must advertise these versions.
BURROW_REQUESTS = {ApiKey.METADATA: 5, ApiKey.LIST_OFFSETS: 0, ApiKey.FETCH: 4}


def _config(bootstrap: str, zk_port: int, http_port: int) -> str:
    return f"""\
[general]
pidfile="burrow.pid"
stdout-logfile="burrow.out"
[logging]
filename="burrow.log"
level="info"
[zookeeper]
servers=["127.0.0.1:{zk_port}"]
timeout=6
root-path="/burrow"
[client-profile.local]
client-id="burrow-test"
kafka-version="2.1.0"
[cluster.local]
class-name="kafka"
servers=["{bootstrap}"]
client-profile="local"
topic-refresh=2
offset-refresh=1
[consumer.local]
class-name="kafka"
cluster="local"
servers=["{bootstrap}"]
client-profile="local"
start-latest=false
[httpserver.default]
address="127.0.0.1:{http_port}"
[storage.default]
class-name="inmemory"
intervals=10
min-distance=1
expire-group=604800
[evaluator.default]
class-name="caching"
expire-cache=1
"""


def _get(url: str) -> Any:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return json.loads(response.read())
    except (urllib.error.URLError, ConnectionError, ValueError):
        return None


LEGACY_OFFSET_VALUES = {"offsets.commit.value.version": "3"}


@pytest.fixture(scope="module")
def regroup_server() -> RegroupServer:
    return shared_regroup(LEGACY_OFFSET_VALUES).result()


@pytest.mark.interop
def test_burrow_reports_committed_offsets_and_lag(regroup_server: RegroupServer, tmp_path: Path) -> None:
    burrow = require_executable("Burrow", "apt-get install burrow")
    version = tool_version(["dpkg-query", "-W", "-f=${Version}", "burrow"])
    started = time.monotonic()
    advertised = api_versions(*regroup_server.address)
    for key, v in BURROW_REQUESTS.items():
        lo, hi = advertised[key]
        assert lo <= v <= hi, (
            f"regroup does not advertise {key.name} v{v} (has {lo}-{hi}); Burrow 1.2.1 needs it"
        )

    nonce = uuid.uuid4().hex[:6]
    topic, group = f"burrow-{nonce}", f"burrow-group-{nonce}"
    create_topics(regroup_server.address, {topic: 3})
    produce(regroup_server.address, topic, {0: 20, 1: 30, 2: 40})
    ends = end_offsets(regroup_server.address, topic, range(3))
    committed = {0: 5, 1: 30, 2: 12}
    from regroup.protocol.messages.offset_commit import (
        OffsetCommitRequest,
        OffsetCommitRequestPartition,
        OffsetCommitRequestTopic,
        OffsetCommitResponse,
    )

    with BlockingConnection(regroup_server.address) as conn:
        response = conn.request(
            OffsetCommitRequest(
                group_id=group,
                generation_id_or_member_epoch=-1,
                topics=[
                    OffsetCommitRequestTopic(
                        topic, [OffsetCommitRequestPartition(p, o) for p, o in committed.items()]
                    )
                ],
            ),
            OffsetCommitResponse,
            version=8,
        )
    assert all(p.error_code == 0 for t in response.topics for p in t.partitions)

    http_port = free_port()
    with FakeZooKeeper() as zk:
        (tmp_path / "burrow.toml").write_text(_config(regroup_server.bootstrap, zk.port, http_port))
        with (tmp_path / "stdout").open("wb") as out:
            proc = subprocess.Popen(
                [burrow, "-config-dir", str(tmp_path)], cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT
            )
        try:
            base = f"http://127.0.0.1:{http_port}"

            def logs() -> str:
                return "\n".join(
                    (tmp_path / name).read_text(errors="replace")[-3000:]
                    for name in ("stdout", "burrow.out", "burrow.log")
                    if (tmp_path / name).exists()
                )

            try:
                wait_for(lambda: _ready(base, proc), 30, "Burrow's HTTP server")
                lag = wait_for(
                    lambda: _lag(base, group, topic, committed, ends), 40, "Burrow's lag for the group"
                )
            except AssertionError as exc:
                raise AssertionError(f"{exc}\nBurrow exited with {proc.poll()}\n{logs()}") from None
        finally:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    total = sum(ends[p] - committed[p] for p in committed)
    assert lag is not None
    assert lag["totallag"] == total, lag
    compat_report.record_client(
        compat_report.ClientResult(
            "Burrow (reads __consumer_offsets itself)",
            f"burrow {version} (Debian)",
            "committed offsets and lag of a group",
            "pass",
            checks={
                "advertised versions": "Metadata v5, ListOffsets v0, Fetch v4",
                "broker setting": "offsets.commit.value.version=3 (Burrow 1.2.1 skips Kafka 4.3's v4)",
                "committed offsets": f"{committed} as committed",
                "lag": f"per partition = log end - committed, total {total}",
            },
            seconds=time.monotonic() - started,
        )
    )


def _ready(base: str, proc: subprocess.Popen[bytes]) -> bool:
    if proc.poll() is not None:
        raise AssertionError("Burrow exited")
    try:
        with urllib.request.urlopen(f"{base}/burrow/admin", timeout=2) as response:
            return b"GOOD" in response.read()
    except (urllib.error.URLError, ConnectionError):
        return False


def _lag(
    base: str, group: str, topic: str, committed: dict[int, int], ends: dict[int, int]
) -> dict[str, Any] | None:
    """Burrow's lag status for the group once it shows every partition's committed offset and lag."""
    answer = _get(f"{base}/v3/kafka/local/consumer/{group}/lag")
    if not answer or answer.get("error"):
        return None
    status = answer.get("status") or {}
    seen = {
        p["partition"]: p
        for p in status.get("partitions") or []
        if p.get("topic") == topic and p.get("end") is not None
    }
    if set(seen) != set(committed):
        return None
    for partition, entry in seen.items():
        if entry["end"]["offset"] != committed[partition]:
            return None
        if entry["current_lag"] != ends[partition] - committed[partition]:
            return None
    result: dict[str, Any] = status
    return result
