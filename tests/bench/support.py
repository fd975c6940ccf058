"""Helpers shared by the group-benchmark tests."""

from __future__ import annotations

from regroup.bench.groups.scenarios import Params


def tiny(**overrides: object) -> Params:
    """Parameters small enough for a smoke run: a few members, sub-second phases, no progress output."""
    params = Params(
        members=4,
        groups=2,
        rates=[20.0],
        duration=0.3,
        warmup=0.1,
        connections=2,
        session_timeout_ms=10000,
        heartbeat_interval_ms=300,
        timeout=60.0,
        progress=False,
    )
    for key, value in overrides.items():
        setattr(params, key, value)
    return params
