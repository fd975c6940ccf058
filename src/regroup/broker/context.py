"""What a request handler sees: the request's header fields, the client and the broker."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from regroup.broker.state import Broker

__all__ = ["Broker", "RequestContext"]


@dataclass(slots=True)
class RequestContext:
    broker: Broker
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
