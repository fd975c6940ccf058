"""Fixtures of the compatibility tests: the session's shared regroup broker (and Kafka reference broker
for the byte-compatibility check), and the compatibility report hooks."""

from __future__ import annotations

import pytest

from regroup import __version__ as regroup_version
from regroup.refkafka import kafka_version, skip_reason
from support import compat_report
from support.brokers import BrokerPair, RegroupServer, shared_pair, shared_regroup, stop_shared
from support.tools import missing


@pytest.fixture(scope="session")
def regroup_server() -> RegroupServer:
    """The shared regroup broker (settings mirrored from the reference broker's test configuration)."""
    compat_report.record_environment("regroup", regroup_version)
    return shared_regroup().result()


@pytest.fixture(scope="session")
def broker_pair() -> BrokerPair:
    reason = skip_reason()
    if reason:
        missing(reason)
    compat_report.record_environment("Apache Kafka (reference broker)", kafka_version())
    return shared_pair()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    compat_report.record_report(report)


def pytest_sessionfinish(session: pytest.Session) -> None:
    compat_report.write_if_requested()
    stop_shared()
