"""What the core needs to know about the request being handled, besides the request itself."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from regroup.group.effects import Ticket

__all__ = ["GroupRequestContext", "MemberIdFactory"]

MemberIdFactory = Callable[[str], str]
"""``factory(prefix) -> f"{prefix}-{uuid}"``. Kafka builds member ids as ``<client.id>-<uuid4>`` for
dynamic members and ``<group.instance.id>-<uuid4>`` for static ones; the runtime passes a uuid4-based
factory, tests a counter."""


@dataclass(slots=True, unsafe_hash=True, init=False)
class GroupRequestContext:
    """Per-request facts from the request header and the connection.

    ``client_host`` is stored and reported verbatim (DescribeGroups, GroupMetadata records); Kafka renders
    the peer address as ``InetAddress.toString()``, i.e. ``"/1.2.3.4"`` — the runtime should pass it in
    that form. ``ticket`` identifies the request if the core parks it (JoinGroup, SyncGroup).
    """

    client_id: str
    client_host: str
    api_version: int
    ticket: Ticket = 0

    # Its own __init__: compiled, a dataclass's generated one runs as Python (~7x slower per object).
    def __init__(self, client_id: str, client_host: str, api_version: int, ticket: Ticket = 0) -> None:
        self.client_id = client_id
        self.client_host = client_host
        self.api_version = api_version
        self.ticket = ticket
