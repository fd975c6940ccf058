"""External tools in tests: a missing tool skips the test locally with a one-line reason, and fails it
when the environment says it is CI (``CI=true``), where the tool is supposed to be installed."""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import NoReturn

import pytest

__all__ = ["in_ci", "missing", "require_executable", "tool_version"]


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def missing(reason: str) -> NoReturn:
    """Skip (locally) or fail (CI) the current test because a tool is not available."""
    if in_ci():
        pytest.fail(f"{reason} (required in CI)", pytrace=False)
    pytest.skip(reason)


def require_executable(name: str, install_hint: str) -> str:
    path = shutil.which(name)
    if path is None:
        missing(f"{name} not found ({install_hint})")
    return path


def tool_version(cmd: list[str], timeout: float = 30.0) -> str:
    """First non-empty output line of a version command ("?" if it cannot run)."""
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError):
        return "?"
    for line in (done.stdout + "\n" + done.stderr).splitlines():
        if line.strip():
            return line.strip()
    return "?"
