"""Suite-wide pytest configuration."""

from __future__ import annotations

import faulthandler
import gc
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final, TextIO

import pytest
from hypothesis import HealthCheck, settings
from pytest_timeout import get_env_settings

from support.kafka_python_join import patch_kafka_python_join

# No per-example deadline and no "too slow" health check: timings on shared 2-core CI machines are too
# noisy for either to mean anything. HYPOTHESIS_PROFILE=ci also fixes the seed so that a CI failure
# reproduces exactly.
_UNTIMED: dict[str, Any] = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}
settings.register_profile("dev", **_UNTIMED)
settings.register_profile("ci", **_UNTIMED, derandomize=True, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

# kafka-python group members run in this process too (support.admin_port, the pipeline scenario, the
# regroup.testing examples).
patch_kafka_python_join()


# Tests driving real clients and servers leave cyclic garbage (client objects, sockets and pipes kept alive
# by a failed assertion's traceback, say). Collecting it in their own teardown keeps its ResourceWarnings
# with the test that made it, rather than in whichever later test the garbage collector happens to run.
_COLLECT_AFTER: Final = frozenset(
    {"admin", "cluster", "compat", "differential", "interop", "pipeline", "testing"}
)
_TESTS: Final = Path(__file__).parent


@pytest.fixture(autouse=True)
def _collect_own_garbage(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if request.node.path.relative_to(_TESTS).parts[0] in _COLLECT_AFTER:
        gc.collect()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-slow", action="store_true", default=False, help="also run tests marked slow")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--run-slow"):
        return
    skip_slow = pytest.mark.skip(reason="slow: opt in with --run-slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip_slow)


# pytest-timeout's signal cannot interrupt a test stuck inside a C library (a librdkafka close that never
# returns, say): the run would hang until CI's own limit and say nothing. A C-level watchdog armed past the
# timeout dumps every thread's stack to the real stderr and ends the run instead.
_WATCHDOG_GRACE_S: Final = 120.0
_watchdog_stream: Final = pytest.StashKey[TextIO]()


_default_timeout: Final = pytest.StashKey[float]()


def pytest_configure(config: pytest.Config) -> None:
    # Capture is suspended while plugins configure, so fd 2 is still the terminal (or CI's log) here.
    config.stash[_watchdog_stream] = os.fdopen(os.dup(2), "w")
    # pytest-timeout's own resolution of --timeout, PYTEST_TIMEOUT and the ini value.
    config.stash[_default_timeout] = float(get_env_settings(config).timeout or 0)


def pytest_unconfigure(config: pytest.Config) -> None:
    config.stash[_watchdog_stream].close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    marker = item.get_closest_marker("timeout")
    given = (marker.args[0] if marker.args else marker.kwargs.get("timeout")) if marker else None
    timeout = item.config.stash[_default_timeout] if given is None else float(given)
    if timeout > 0:
        faulthandler.dump_traceback_later(
            timeout + _WATCHDOG_GRACE_S, file=item.config.stash[_watchdog_stream], exit=True
        )
    try:
        return (yield)
    finally:
        faulthandler.cancel_dump_traceback_later()
