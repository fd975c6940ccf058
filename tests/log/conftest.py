"""fsync is replaced by a counter in these tests: durability against power loss cannot be observed from a
unit test, and real fsyncs make the suite's run time depend on the disk. ``fsyncs`` lists the synced file
descriptors' paths so tests can still check *what* gets synced."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True)
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    synced: list[str] = []

    def fake_fsync(fd: int) -> None:
        os.fstat(fd)  # still fails on a closed descriptor, like the real call
        try:
            synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            synced.append(str(fd))

    monkeypatch.setattr(os, "fsync", fake_fsync)
    if hasattr(os, "fdatasync"):
        monkeypatch.setattr(os, "fdatasync", fake_fsync)
    return synced
