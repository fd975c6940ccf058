"""A leader cut off the network while it keeps running (``regroup.testing.Cluster(network_faults=True)``):
its session runs out, the others elect a new leader, and — though producers still reach it — it
acknowledges nothing once the new leader does. When the cut heals it truncates what only it had and follows
the new leader again."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from regroup.client.connection import open_connection
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages.produce import (
    PartitionProduceData,
    ProduceRequest,
    ProduceResponse,
    TopicProduceData,
)
from regroup.protocol.record_batch import Record, build_batch
from regroup.testing import Cluster
from support.etcd import require_etcd

from .workloads import ConfluentProducer, check_acknowledged, read_partitions, replica_batches

pytestmark = [pytest.mark.interop]

confluent_admin = pytest.importorskip("confluent_kafka.admin")

TOPIC = "cut"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    require_etcd()
    config = {"min.insync.replicas": 2}
    with Cluster(3, config=config, data_dir=tmp_path / "cluster", network_faults=True) as c:
        yield c


@dataclass
class DirectProducer:
    """acks=1 Produce requests sent straight to one node, never redirected, every ``interval`` seconds;
    remembers when each acknowledgement arrived and which errors came back."""

    address: str
    interval: float = 0.02
    acked: list[tuple[float, int, bytes]] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    failure: BaseException | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> DirectProducer:
        self._thread = threading.Thread(target=self._main, daemon=True)
        self._thread.start()
        return self

    def _main(self) -> None:
        try:
            asyncio.run(self._run())
        except BaseException as exc:
            self.failure = exc

    def count(self) -> int:
        if self.failure is not None:
            raise AssertionError("the direct producer failed") from self.failure
        return len(self.acked)

    def stop(self) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(60)
        self.count()

    async def _run(self) -> None:
        host, _, port = self.address.rpartition(":")
        conn = await open_connection(host, int(port), request_timeout_ms=5000)
        n = 0
        try:
            while not self._stop.is_set():
                value = f"direct-{n}".encode()
                n += 1
                batch = build_batch(
                    [Record(offset=0, timestamp=int(time.time() * 1000), key=None, value=value)]
                )
                request = ProduceRequest(
                    acks=1,
                    timeout_ms=5000,
                    topic_data=[TopicProduceData(TOPIC, [PartitionProduceData(index=0, records=batch)])],
                )
                try:
                    response = await conn.request(request, ProduceResponse, version=9)
                except (ConnectionError, TimeoutError) as exc:
                    self.errors[type(exc).__name__] = self.errors.get(type(exc).__name__, 0) + 1
                    if conn.closed:
                        conn = await open_connection(host, int(port), request_timeout_ms=5000)
                    continue
                answer = response.responses[0].partition_responses[0]
                if answer.error_code == 0:
                    self.acked.append((time.monotonic(), answer.base_offset, value))
                else:
                    name = ErrorCode.from_code(answer.error_code).name
                    self.errors[name] = self.errors.get(name, 0) + 1
                await asyncio.sleep(self.interval)
        finally:
            await conn.close()


def wait_for(check: object, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"{what} within {timeout} s"
        time.sleep(0.1)


def test_a_cut_off_leader_acknowledges_nothing_once_a_new_leader_does(cluster: Cluster) -> None:
    admin = confluent_admin.AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([confluent_admin.NewTopic(TOPIC, 1, 3)])[TOPIC].result(60)
    cluster.wait_for_isr(TOPIC, 0)
    old = cluster.leader(TOPIC, 0)
    direct = DirectProducer(cluster.node(old).listener).start()
    try:
        wait_for(lambda: direct.count() >= 20, "the leader acknowledging acks=1 writes")
        # Producers still reach the old leader; the other nodes and etcd do not.
        cluster.cut(old, clients=False)
        new = cluster.wait_for_leader(TOPIC, 0, not_on=old)
        others = ",".join(cluster.node(n).listener for n in cluster.node_ids if n != old)
        after = ConfluentProducer(others, TOPIC, name="after").start()
        wait_for(lambda: after.history.count() >= 50, "the new leader's ISR acknowledging writes")
        # The old leader goes on being asked for a while after the new one answers.
        time.sleep(1.0)
        after_history = after.stop()
    finally:
        direct.stop()
        cluster.heal(old)

    first_new_ack = min(a.at for a in after_history.acked)
    late = [(t - first_new_ack, offset) for t, offset, _ in direct.acked if t >= first_new_ack]
    assert not late, f"the cut-off leader acknowledged writes after the new leader did: {late[:5]}"
    assert direct.errors, "the direct producer kept asking the old leader and was refused"

    # Healed: the old leader follows the new one, its log the same byte for byte.
    cluster.wait_for_isr(TOPIC, 0)
    assert cluster.leader(TOPIC, 0) == new
    wait_for(
        lambda: (
            replica_batches(cluster.node(old).data_dir, TOPIC, 0)
            == replica_batches(cluster.node(new).data_dir, TOPIC, 0)
        ),
        "the old leader's log the new leader's, byte for byte",
    )
    log = read_partitions(cluster.bootstrap_servers, TOPIC, 1)
    check_acknowledged([after_history], log)


def test_a_cut_needs_network_faults(tmp_path: Path) -> None:
    cluster = Cluster(1, data_dir=tmp_path / "plain")
    with pytest.raises(RuntimeError, match="network_faults=True"):
        cluster.cut(1)
