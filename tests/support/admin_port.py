"""Helpers for tests of the admin HTTP port: a ``regroup serve`` with the port on a free address, HTTP
reads, a Prometheus text parser, real kafka-python consumers driven from threads, and the lag a Kafka
client computes (ListOffsets − OffsetFetch)."""

from __future__ import annotations

import contextlib
import json
import queue
import re
import threading
import time
import urllib.error
import urllib.request
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from regroup.client.blocking import BlockingConnection

with warnings.catch_warnings():
    # kafka-python 3.0.12 loads its schemas with importlib.resources.read_text, deprecated in 3.11.
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaConsumer
    from kafka.errors import RebalanceInProgressError
    from kafka.structs import OffsetAndMetadata, TopicPartition

from regroup.protocol.messages.describe_groups import DescribeGroupsRequest, DescribeGroupsResponse
from regroup.protocol.messages.list_groups import ListGroupsRequest, ListGroupsResponse
from support.brokers import RegroupServer
from support.kafka_wire import Address, committed_offsets, end_offsets

__all__ = [
    "ConsumerThread",
    "Samples",
    "admin_url",
    "client_lag",
    "describe_groups",
    "get_json",
    "list_groups",
    "scrape",
    "serve_with_admin_port",
    "wait_until",
]

ADMIN_LINE = re.compile(r"Admin HTTP port listening on (http://\S+?) ")


@contextlib.contextmanager
def serve_with_admin_port(**settings: str) -> Iterator[tuple[RegroupServer, str]]:
    """``regroup serve`` (the reference broker's test settings) with ``admin.listener`` on a free port;
    yields the server and the admin base URL read from its log."""
    server = RegroupServer({"admin.listener": "127.0.0.1:0", **settings}).start()
    try:
        yield server, admin_url(server)
    finally:
        code = server.stop()
        assert code == 0, f"regroup serve exited with {code}:\n{server.log_tail()}"


def admin_url(server: RegroupServer, timeout: float = 10.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        match = ADMIN_LINE.search(server.log_path.read_text(errors="replace"))
        if match:
            return match.group(1)
        time.sleep(0.05)
    raise AssertionError(f"no admin port in the log:\n{server.log_tail()}")


def get_json(url: str) -> Any:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return json.load(response)
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            exc.close()
            return None
        raise


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(base: str) -> Samples:
    """``/metrics`` as {(sample name, sorted labels): value}."""
    with urllib.request.urlopen(base + "/metrics", timeout=10) as response:
        text = response.read().decode()
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def list_groups(address: Address) -> dict[str, str]:
    with BlockingConnection(address) as conn:
        response = conn.request(ListGroupsRequest(), ListGroupsResponse, version=4)
    assert response.error_code == 0, response
    return {g.group_id: g.group_state for g in response.groups}


def describe_groups(address: Address, groups: list[str]) -> dict[str, Any]:
    with BlockingConnection(address) as conn:
        response = conn.request(DescribeGroupsRequest(groups=groups), DescribeGroupsResponse, version=5)
    return {g.group_id: g for g in response.groups}


def client_lag(address: Address, group: str) -> dict[tuple[str, int], tuple[int, int]]:
    """{(topic, partition): (committed offset, lag)} the way a Kafka tool computes it: OffsetFetch, then
    ListOffsets(latest) − committed."""
    with BlockingConnection(address) as conn:
        committed = committed_offsets(conn, group)
    topics: dict[str, list[int]] = {}
    for topic, partition in committed:
        topics.setdefault(topic, []).append(partition)
    out: dict[tuple[str, int], tuple[int, int]] = {}
    for topic, partitions in topics.items():
        ends = end_offsets(address, topic, partitions)
        for p in partitions:
            out[(topic, p)] = (committed[(topic, p)], ends[p] - committed[(topic, p)])
    return out


def wait_until(check: Callable[[], str | None], timeout: float, interval: float = 0.25) -> None:
    """Retry ``check`` (returning a problem, or None when satisfied) until it passes; fail with the last
    problem otherwise."""
    deadline = time.monotonic() + timeout
    problem = check()
    while problem is not None:
        if time.monotonic() > deadline:
            raise AssertionError(problem)
        time.sleep(interval)
        problem = check()


class ConsumerThread:
    """A kafka-python ``KafkaConsumer`` in a group, polled from its own thread (so it takes part in
    rebalances), with commits of explicit offsets and a clean close run on that thread."""

    def __init__(self, bootstrap: str, group: str, topics: list[str], client_id: str) -> None:
        self.client_id = client_id
        self._commands: queue.Queue[tuple[str, Any, Future[None]]] = queue.Queue()
        self._ready: Future[None] = Future()
        self._thread = threading.Thread(
            target=self._run, args=(bootstrap, group, topics), name=f"consumer {client_id}", daemon=True
        )
        self._thread.start()
        self._ready.result(30)

    def _run(self, bootstrap: str, group: str, topics: list[str]) -> None:
        try:
            consumer = KafkaConsumer(
                *topics,
                bootstrap_servers=bootstrap,
                group_id=group,
                client_id=self.client_id,
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                session_timeout_ms=10000,
                heartbeat_interval_ms=500,
            )
        except BaseException as exc:
            self._ready.set_exception(exc)
            return
        self._ready.set_result(None)
        while True:
            consumer.poll(timeout_ms=100, max_records=100)
            try:
                command, arg, done = self._commands.get_nowait()
            except queue.Empty:
                continue
            try:
                if command == "commit":
                    offsets = {
                        TopicPartition(t, p): OffsetAndMetadata(o, "", -1) for (t, p), o in arg.items()
                    }
                    deadline = time.monotonic() + 20
                    while True:
                        try:
                            consumer.commit(offsets)
                            break
                        except RebalanceInProgressError:
                            # The broker is already Stable but this member has not finished its sync yet.
                            if time.monotonic() > deadline:
                                raise
                            consumer.poll(timeout_ms=100, max_records=100)
                elif command == "close":
                    consumer.close()
                    done.set_result(None)
                    return
                done.set_result(None)
            except BaseException as exc:
                done.set_exception(exc)

    def _call(self, command: str, arg: Any = None, timeout: float = 30.0) -> None:
        done: Future[None] = Future()
        self._commands.put((command, arg, done))
        done.result(timeout)

    def commit(self, offsets: dict[tuple[str, int], int]) -> None:
        self._call("commit", offsets)

    def close(self) -> None:
        if self._thread.is_alive():
            self._call("close")
            self._thread.join(30)
