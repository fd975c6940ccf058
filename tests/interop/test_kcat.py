"""kcat (librdkafka 2.0.2, Debian) against ``regroup serve``: -L, -P and -C."""

from __future__ import annotations

import json
import subprocess

import pytest

from broker.support import ServeProcess

pytestmark = pytest.mark.interop


def run(kcat: str, *args: str, stdin: str | None = None) -> str:
    result = subprocess.run(
        [kcat, *args], input=stdin, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_kcat_metadata_produce_consume(serve: ServeProcess, kcat: str) -> None:
    lines = "\n".join(f"k{i}:v{i}" for i in range(1000)) + "\n"
    run(kcat, "-b", serve.bootstrap, "-P", "-t", "kc", "-K:", stdin=lines)

    listing = json.loads(run(kcat, "-b", serve.bootstrap, "-L", "-J"))
    assert [(b["id"], b["name"]) for b in listing["brokers"]] == [(1, serve.bootstrap)]
    topic = next(t for t in listing["topics"] if t["topic"] == "kc")
    assert len(topic["partitions"]) == 6  # auto-created with num.partitions=6
    assert all(p["leader"] == 1 and p["replicas"] == [{"id": 1}] for p in topic["partitions"])

    out = run(kcat, "-b", serve.bootstrap, "-C", "-t", "kc", "-e", "-q", "-J", "-o", "beginning")
    records = [json.loads(line) for line in out.splitlines() if line]
    assert sorted((r["key"], r["payload"]) for r in records) == sorted(
        (f"k{i}", f"v{i}") for i in range(1000)
    )
    for p in range(6):
        offsets = [r["offset"] for r in records if r["partition"] == p]
        assert offsets == list(range(len(offsets)))


def test_kcat_plain_listing(serve: ServeProcess, kcat: str) -> None:
    out = run(kcat, "-b", serve.bootstrap, "-L")
    assert f"broker 1 at {serve.bootstrap} (controller)" in out
