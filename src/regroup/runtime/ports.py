"""Free TCP ports on loopback for the processes regroup's launchers start (nodes, etcd, reference Kafka
brokers, benchmark servers).

A port the kernel hands out for ``bind(0)`` comes from its ephemeral range, where any outgoing connection may
take it as soon as it is released. That is fine for a process started once; a process that is stopped and
started again on the same port (a node restarted after a crash, a broker after a clean shutdown) needs a port
nobody else is given meanwhile, so :func:`free_port` with ``lasting=True`` picks one below that range.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

__all__ = ["free_port", "free_ports"]

_LOWEST_LASTING = 10_000
_EPHEMERAL_DEFAULT = (32768, 60999)  # Linux's default net.ipv4.ip_local_port_range


def _ephemeral_range() -> tuple[int, int]:
    """The kernel's range of ports for ``bind(0)`` and outgoing connections."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return _EPHEMERAL_DEFAULT


def free_port(host: str = "127.0.0.1", *, lasting: bool = False) -> int:
    """A port nothing listens on now. ``lasting``: one outside the ephemeral range, which stays free while
    its process restarts (falls back to an ephemeral one when the range leaves no room below it)."""
    if lasting:
        low, _high = _ephemeral_range()
        if low - _LOWEST_LASTING >= 1000:
            for _attempt in range(200):
                port = random.randrange(_LOWEST_LASTING, low)
                if _bindable(host, port):
                    return port
    return free_ports(1, host)[0]


def free_ports(count: int, host: str = "127.0.0.1", *, lasting: bool = False) -> list[int]:
    """``count`` distinct free ports."""
    if lasting:
        ports: list[int] = []
        while len(ports) < count:
            port = free_port(host, lasting=True)
            if port not in ports:
                ports.append(port)
        return ports
    # Held open together so the kernel hands out distinct ones.
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True
