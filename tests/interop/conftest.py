"""Fixtures for interop tests: a ``regroup serve`` subprocess and the kcat binary."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

from broker.support import ServeProcess


@pytest.fixture(scope="module")
def serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    data = tmp_path_factory.mktemp("interop") / "data"
    proc = ServeProcess(data, "--override", "num.partitions=6").wait_ready()
    try:
        yield proc
    finally:
        if proc.proc.poll() is None:
            code, err = proc.terminate()
            assert code == 0, err


@pytest.fixture
def kcat() -> str:
    """Path of kcat; a missing kcat skips locally but fails in CI (which installs it)."""
    path = shutil.which("kcat")
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail("kcat is not installed; CI must install it (apt-get install -y kcat)")
        pytest.skip("kcat is not installed (apt-get install -y kcat)")
    return path
