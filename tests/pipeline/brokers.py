"""The broker the pipeline tests produce their data with, behind one small interface.

``BROKER`` picks it: ``regroup serve`` by default; ``REGROUP_PIPELINE_BROKER=kafka`` runs Apache Kafka's
reference broker instead. Both keep their data in the same on-disk layout, which the tests also read with
the Python Data Source.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Final, Protocol

from regroup.runtime.ports import free_port

BROKER: Final = os.environ.get("REGROUP_PIPELINE_BROKER", "regroup")  # "regroup" | "kafka"

# Fast group tests: no initial rebalance delay, short sessions allowed, few __consumer_offsets partitions;
# retention applied every second (the scenario's events topic).
GROUP_SETTINGS: Final = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "offsets.topic.num.partitions": "5",
    "offsets.topic.replication.factor": "1",
    "num.partitions": "1",
    "auto.create.topics.enable": "false",
    "log.retention.check.interval.ms": "1000",
}
_READY: Final = re.compile(r"ready on (\S+):(\d+)")


class PipelineBroker(Protocol):
    @property
    def bootstrap_servers(self) -> str: ...

    @property
    def data_dir(self) -> Path: ...

    def stop(self) -> None: ...


class KafkaBroker:
    """Apache Kafka (``regroup.refkafka``), data in ``<workdir>/data``."""

    def __init__(self, workdir: Path) -> None:
        from regroup.refkafka import KafkaReference

        self._ref = KafkaReference(GROUP_SETTINGS, workdir).start()

    @property
    def bootstrap_servers(self) -> str:
        return self._ref.bootstrap_servers

    @property
    def data_dir(self) -> Path:
        return self._ref.workdir / "data"

    def stop(self) -> None:
        self._ref.stop()


class RegroupBroker:
    """``regroup serve`` as a subprocess, data in ``<workdir>/data``."""

    def __init__(self, workdir: Path) -> None:
        self._data = workdir / "data"
        settings = {"listeners": f"PLAINTEXT://127.0.0.1:{free_port()}", "log.dirs": str(self._data)}
        settings.update(GROUP_SETTINGS)
        cmd = [sys.executable, "-m", "regroup.cli", "serve"]
        for key, value in settings.items():
            cmd += ["--override", f"{key}={value}"]
        self._log = (workdir / "broker.log").open("w")
        self._proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self._log, text=True)
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        match = _READY.search(line)
        if match is None:
            self.stop()
            raise RuntimeError(f"regroup serve did not start: {line!r}")
        self._bootstrap = f"{match.group(1)}:{match.group(2)}"

    @property
    def bootstrap_servers(self) -> str:
        return self._bootstrap

    @property
    def data_dir(self) -> Path:
        return self._data

    def stop(self) -> None:
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(10)
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        self._log.close()


def start_broker(workdir: Path) -> PipelineBroker:
    if BROKER == "kafka":
        return KafkaBroker(workdir)
    return RegroupBroker(workdir)
