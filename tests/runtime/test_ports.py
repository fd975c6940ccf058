"""Free ports for restartable processes: outside the kernel's ephemeral range, distinct, and really free."""

from __future__ import annotations

import random
import socket

import pytest

from regroup.runtime import ports
from regroup.runtime.ports import free_port, free_ports


def test_a_lasting_port_is_below_the_ephemeral_range_and_bindable() -> None:
    low, _high = ports._ephemeral_range()
    for _ in range(20):
        port = free_port(lasting=True)
        assert 10_000 <= port < low
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_lasting_ports_are_distinct() -> None:
    chosen = free_ports(8, lasting=True)
    assert len(set(chosen)) == 8


def test_a_port_in_use_is_never_chosen(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        taken = busy.getsockname()[1]
        busy.listen()
        # The busy port is drawn twice, then real draws (a neighbour of an ephemeral port may be in use too).
        forced = iter([taken, taken])
        draw = random.Random().randrange
        monkeypatch.setattr(ports, "_ephemeral_range", lambda: (65536, 65536))
        monkeypatch.setattr(ports.random, "randrange", lambda a, b: next(forced, None) or draw(a, b))
        assert free_port(lasting=True) != taken
        assert next(forced, None) is None


def test_without_room_below_the_ephemeral_range_an_ephemeral_port_is_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ports, "_ephemeral_range", lambda: (10_500, 60999))
    port = free_port(lasting=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
