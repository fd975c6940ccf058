"""``regroup serve`` as a subprocess: configuration sources, errors, readiness, signals, persistence."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from broker.support import ServeProcess
from regroup.client.blocking import BlockingConnection
from regroup.protocol.messages.create_topics import CreatableTopic, CreateTopicsRequest, CreateTopicsResponse
from regroup.protocol.messages.metadata import MetadataRequest, MetadataRequestTopic, MetadataResponse
from regroup.protocol.messages.produce import (
    PartitionProduceData,
    ProduceRequest,
    ProduceResponse,
    TopicProduceData,
)
from regroup.protocol.record_batch import Record, build_batch, decode_batches


def serve(data_dir: Path, *args: str, **kwargs: Any) -> ServeProcess:
    """``regroup serve`` with one ``__consumer_offsets`` partition, so that it starts quickly."""
    return ServeProcess(data_dir, "--override", "offsets.topic.num.partitions=1", *args, **kwargs)


def address(proc: ServeProcess) -> tuple[str, int]:
    return proc.host, proc.port


def auto_created_partitions(proc: ServeProcess, topic: str) -> int:
    with BlockingConnection(address(proc)) as conn:
        response = conn.request(
            MetadataRequest(topics=[MetadataRequestTopic(name=topic)], allow_auto_topic_creation=True),
            MetadataResponse,
            version=12,
        )
        return len(response.topics[0].partitions)


def test_readiness_line_and_effective_config(tmp_path: Path) -> None:
    proc = serve(tmp_path / "data").wait_ready()
    try:
        assert proc.ready_line.startswith("regroup 0.1.0 ready on 127.0.0.1:")
        assert f"data {tmp_path / 'data'}" in proc.ready_line
        meta = (tmp_path / "data" / "meta.properties").read_text()
        assert "version=1" in meta
        assert f"cluster.id={proc.cluster_id}" in meta
        assert "node.id=1" in meta
    finally:
        code, err = proc.terminate()
    assert code == 0
    assert "RegroupConfig values:" in err
    assert "\tnum.partitions = 1" in err
    assert "INFO" in err
    assert "(regroup.broker)" in err
    # The cluster id survives a restart.
    again = serve(tmp_path / "data").wait_ready()
    try:
        assert again.cluster_id == proc.cluster_id
    finally:
        assert again.terminate()[0] == 0


def test_precedence_file_env_override(tmp_path: Path) -> None:
    props = tmp_path / "server.properties"
    props.write_text("num.partitions=2\nlog.retention.hours=5\nlog.retention.bytes=7\n")
    env = {"REGROUP_NUM_PARTITIONS": "3", "REGROUP_LOG_RETENTION_BYTES": "8"}
    with_env = serve(tmp_path / "a", properties=props, env=env).wait_ready()
    try:
        assert auto_created_partitions(with_env, "x") == 3
    finally:
        _, err = with_env.terminate()
    assert "\tlog.retention.hours = 5" in err  # file over default
    assert "\tlog.retention.bytes = 8" in err  # environment over file
    everything = serve(
        tmp_path / "b", "--override", "num.partitions=4", properties=props, env=env
    ).wait_ready()
    try:
        assert auto_created_partitions(everything, "x") == 4  # --override over environment
    finally:
        _, err = everything.terminate()
    assert "\tnum.partitions = 4" in err


def test_unknown_key_warns_and_carries_on(tmp_path: Path) -> None:
    props = tmp_path / "server.properties"
    props.write_text("no.such.setting=1\n")
    proc = serve(tmp_path / "data", properties=props).wait_ready()
    code, err = proc.terminate()
    assert code == 0
    warning = next(line for line in err.splitlines() if "no.such.setting" in line)
    assert "WARNING" in warning
    assert "server.properties:1" in warning


@pytest.mark.parametrize(
    ("args", "env", "key"),
    [
        (["--override", "num.partitions=zero"], {}, "num.partitions"),
        ([], {"REGROUP_LOG_RETENTION_BYTES": "lots"}, "log.retention.bytes"),
        (["--override", "listeners=nonsense"], {}, "listeners"),
    ],
)
def test_invalid_value_exits_2_naming_the_key(
    tmp_path: Path, args: list[str], env: dict[str, str], key: str
) -> None:
    proc = serve(tmp_path / "data", *args, env=env)
    _, err = proc.proc.communicate(timeout=30)
    assert proc.proc.returncode == 2
    assert key in err
    assert "Traceback" not in err
    assert err.startswith("regroup serve: error:")


def test_help_documents_precedence() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "regroup.cli", "serve", "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert "--override" in out
    assert "REGROUP_" in out
    assert "server.properties" in out.lower() or "SERVER_PROPERTIES" in out


def test_list_configs() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "regroup.cli", "serve", "--list-configs"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "offsets.topic.num.partitions  (INT, default: 50)" in out


def test_port_in_use_exits_1(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        proc = serve(tmp_path / "data", port=port)
        _, err = proc.proc.communicate(timeout=30)
    assert proc.proc.returncode == 1
    assert "Cannot start" in err


def test_stored_cluster_id_must_match(tmp_path: Path) -> None:
    serve(tmp_path / "data").wait_ready().terminate()
    proc = serve(tmp_path / "data", "--override", "cluster.id=someone-else")
    _, err = proc.proc.communicate(timeout=30)
    assert proc.proc.returncode == 2
    assert "cluster.id" in err


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_shuts_down_cleanly_with_data_flushed(tmp_path: Path, sig: int) -> None:
    proc = serve(tmp_path / "data").wait_ready()
    try:
        with BlockingConnection(address(proc)) as conn:
            conn.request(
                CreateTopicsRequest(topics=[CreatableTopic("kept", 1, 1)], timeout_ms=5000),
                CreateTopicsResponse,
                version=7,
            )
            ts = int(time.time() * 1000)
            data = build_batch([Record(i, ts, None, b"v%d" % i) for i in range(100)])
            request = ProduceRequest(
                acks=1,
                timeout_ms=5000,
                topic_data=[TopicProduceData("kept", [PartitionProduceData(0, data)])],
            )
            assert (
                conn.request(request, ProduceResponse, version=9)
                .responses[0]
                .partition_responses[0]
                .error_code
                == 0
            )
    except BaseException:
        proc.kill()
        raise
    started = time.monotonic()
    code, err = proc.terminate(sig)
    assert code == 0, err
    assert time.monotonic() - started < 15
    assert "shut down completed" in err
    assert (tmp_path / "data" / ".clean_shutdown").exists()
    log_file = tmp_path / "data" / "kept-0" / "00000000000000000000.log"
    batches = decode_batches(log_file.read_bytes())
    assert sum(len(b.records) for b in batches) == 100
