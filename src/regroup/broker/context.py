"""What a request handler sees: the request's header fields, the client, and the broker as
:class:`BrokerPort` — the part of :class:`~regroup.broker.state.Broker` handlers, the server and the admin
port may use. Typing them against this interface (rather than the ``Broker`` class, which creates them)
keeps the broker package free of import cycles; mypy checks that ``Broker`` provides it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from regroup.broker.config import BrokerConfig
from regroup.broker.fetch_sessions import FetchSessionCache
from regroup.broker.meta import ProducerIdAllocator
from regroup.cluster.member import ClusterMember
from regroup.cluster.topology import Topology
from regroup.log import LogManager, PartitionLog
from regroup.runtime.clock import Clock
from regroup.runtime.coordinator import GroupCoordinator
from regroup.runtime.durability import GateRegistry, PartitionGate

__all__ = ["BrokerPort", "RequestContext"]


class BrokerPort(Protocol):
    """One regroup node, as its handlers see it."""

    config: BrokerConfig
    version: str
    node_id: int
    cluster_id: str
    data_dir: Path
    clock: Clock
    coordinator_clock: Clock
    logs: LogManager
    gates: GateRegistry
    group_coordinator: GroupCoordinator
    topology: Topology
    cluster: ClusterMember | None
    fetch_max_bytes: int
    fetch_sessions: FetchSessionCache

    @property
    def producer_ids(self) -> ProducerIdAllocator: ...

    async def allocate_producer_id(self) -> int:
        """A producer id never handed out before in this cluster (or by this single node)."""
        ...

    @property
    def stopping(self) -> asyncio.Future[None]:
        """Completed when shutdown begins (long polls return early)."""
        ...

    def gate(self, plog: PartitionLog) -> PartitionGate:
        """The partition's write gate: appends take turns, fsyncs run in a thread between them."""
        ...

    def advertised_endpoint(self, listener: str, local_host: str, local_port: int) -> tuple[str, int]:
        """Host and port to give clients of ``listener`` for this node."""
        ...

    def bound_addresses(self) -> dict[str, tuple[str, int]]:
        """Listener name -> the (host, port) it is bound to."""
        ...

    def request_internal_topics(self) -> None:
        """In a cluster, ask for ``__consumer_offsets`` (and ``__group_events``) to be created if they are
        missing and enough nodes run for their replication factor; returns at once."""
        ...


@dataclass(slots=True)
class RequestContext:
    broker: BrokerPort
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    client_host: str  # the peer's IP address
    client_port: int
    listener: str  # name of the listener the client connected to
    local_host: str  # the address the client connected to
    local_port: int
    # Set by a handler that sends no response but wants the connection closed (acks=0 produce errors).
    close_connection: bool = False

    @property
    def client_address(self) -> str:
        """The peer as Kafka renders it in group APIs (``InetAddress.toString()``: ``/127.0.0.1``)."""
        return "/" + self.client_host

    def now_ms(self) -> int:
        return self.broker.clock.now_ms()

    def advertised(self) -> tuple[str, int]:
        """Host and port to give this client for this broker (its listener's advertised endpoint)."""
        return self.broker.advertised_endpoint(self.listener, self.local_host, self.local_port)
