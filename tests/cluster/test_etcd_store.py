"""EtcdStore beyond the shared contract: the ``cluster.metadata.endpoints`` format, choosing and failing
over between endpoints, errors when etcd goes away, and staying out of single-node imports."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import uvloop

from regroup.cluster.etcd import EtcdStore, parse_endpoints
from regroup.cluster.store import Put, StoreUnavailable
from support.etcd import EtcdProcess, start_etcd

WAIT_S = 30.0


def run(body: Callable[[], Awaitable[None]]) -> None:
    async def main() -> None:
        async with asyncio.timeout(120):
            await body()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main())


def closed_port() -> tuple[str, int]:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return ("127.0.0.1", s.getsockname()[1])


@pytest.mark.parametrize(
    ("value", "endpoints", "prefix"),
    [
        ("etcd://127.0.0.1:2379", [("127.0.0.1", 2379)], "/regroup"),
        ("etcd://h1:2379,h2:22379/kafka/prod", [("h1", 2379), ("h2", 22379)], "/kafka/prod"),
        (" etcd://h1:1, h2:2/p/ ", [("h1", 1), ("h2", 2)], "/p"),
        ("etcd://[::1]:2379,[fd00::2]:2380", [("::1", 2379), ("fd00::2", 2380)], "/regroup"),
    ],
)
def test_parse_endpoints(value: str, endpoints: list[tuple[str, int]], prefix: str) -> None:
    assert parse_endpoints(value) == (endpoints, prefix)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("http://h1:2379", "expected etcd://host:port"),
        ("h1:2379", "expected etcd://host:port"),
        ("etcd://", "no etcd endpoint"),
        ("etcd:///regroup", "no etcd endpoint"),
        ("etcd://h1", "has no port"),
        ("etcd://h1:2379,", "empty endpoint"),
        ("etcd://:2379", "has no host"),
        ("etcd://h1:http", "port must be a number"),
        ("etcd://h1:70000", "port must be a number"),
        ("etcd://::1:2379", "IPv6 address as [address]:port"),
        ("etcd://[::1]", "expected [IPv6 address]:port"),
        ("etcd://h1:2379/", "empty key prefix"),
    ],
)
def test_parse_endpoints_rejects(value: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_endpoints(value)


def test_connects_to_the_first_endpoint_that_answers(etcd_server: EtcdProcess) -> None:
    dead = closed_port()

    async def body() -> None:
        store = EtcdStore([dead, etcd_server.endpoint], timeout_s=10.0)
        try:
            revision, kvs = await store.range(b"/regroup/cluster")
            assert (revision, kvs) == (1, [])
            assert store.endpoint == etcd_server.endpoint
        finally:
            await store.close()

    run(body)


def test_no_endpoint_answering_raises_store_unavailable() -> None:
    dead = [closed_port(), closed_port()]

    async def body() -> None:
        store = EtcdStore(dead, timeout_s=5.0)
        try:
            with pytest.raises(StoreUnavailable, match="no etcd endpoint answered") as failure:
                await store.range(b"/regroup/cluster")
            for host, port in dead:
                assert f"{host}:{port}" in str(failure.value)
        finally:
            await store.close()

    run(body)


def test_a_lost_etcd_raises_store_unavailable_then_the_next_endpoint_serves(
    etcd_server: EtcdProcess, tmp_path: Path
) -> None:
    other = start_etcd(tmp_path / "other")

    async def body() -> None:
        store = EtcdStore([etcd_server.endpoint, other.endpoint], timeout_s=10.0)
        try:
            written = await store.txn([], [Put(b"/regroup/cluster", b"first")])
            assert store.endpoint == etcd_server.endpoint
            watches = [store.watch(b"/regroup/", written.revision) for _ in range(2)]
            async with asyncio.timeout(WAIT_S):
                for watch in watches:  # both streams are up
                    assert (await anext(watch)).revision == written.revision
            followers = [asyncio.create_task(anext(watch)) for watch in watches]
            etcd_server.kill()
            async with asyncio.timeout(WAIT_S):
                outcomes = await asyncio.gather(*followers, return_exceptions=True)
            assert [type(outcome) for outcome in outcomes] == [StoreUnavailable, StoreUnavailable]
            # The other endpoint is a different (empty) etcd here: what matters is who answers.
            assert await store.range(b"/regroup/cluster") == (1, [])
            assert store.endpoint == other.endpoint

            other.kill()
            with pytest.raises(StoreUnavailable):
                await store.range(b"/regroup/cluster")
        finally:
            await store.close()
            other.kill()

    run(body)


def test_importing_the_cluster_store_does_not_load_grpc() -> None:
    code = (
        "import sys, regroup.cluster.etcd, regroup.cluster.memory, regroup.cluster.store\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('grpc', 'aetcd'))\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
