"""A real one-member etcd for tests: :class:`regroup.cluster.local.LocalEtcd` (Debian's ``etcd``, package
``etcd-server``, on free loopback ports, never 2379/2380 where a system etcd may run), after checking the
binary is there."""

from __future__ import annotations

from pathlib import Path

from regroup.cluster.local import LocalEtcd
from support.tools import require_executable

__all__ = ["EtcdProcess", "require_etcd", "start_etcd"]

EtcdProcess = LocalEtcd


def require_etcd() -> str:
    """The ``etcd`` binary; skips (locally) or fails (CI) the test when it is missing."""
    return require_executable("etcd", "install Debian's etcd-server, as scripts/test does")


def start_etcd(workdir: Path) -> LocalEtcd:
    return LocalEtcd(workdir, require_etcd()).start()
