"""Fixtures of the cluster tests: a real etcd process per test (``etcd_server``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from support.etcd import EtcdProcess, start_etcd


@pytest.fixture
def etcd_server(tmp_path: Path) -> Iterator[EtcdProcess]:
    """A fresh one-member etcd on free loopback ports (revision 1, no auto-compaction), killed at teardown.
    Skips locally, fails in CI, when the ``etcd`` binary is missing."""
    server = start_etcd(tmp_path / "etcd")
    try:
        yield server
    finally:
        server.kill()
