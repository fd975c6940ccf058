"""A real one-member etcd for tests: Debian's ``etcd`` (package ``etcd-server``) on loopback, with free
client and peer ports (never 2379/2380, where a system etcd may run), its own data directory, no
auto-compaction, logs in ``<data dir>/etcd.log``."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from support.tools import require_executable

__all__ = ["EtcdProcess", "require_etcd"]

_START_TIMEOUT_S = 60.0


def require_etcd() -> str:
    """The ``etcd`` binary; skips (locally) or fails (CI) the test when it is missing."""
    return require_executable("etcd", "install Debian's etcd-server, as scripts/test does")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class EtcdProcess:
    """``etcd`` as a subprocess of the test; :meth:`start` returns once it answers ``/health``."""

    def __init__(self, workdir: Path, binary: str | None = None, name: str = "regroup-test") -> None:
        self.binary = binary or require_etcd()
        self.workdir = workdir
        self.name = name
        self.client_port = 0
        self.peer_port = 0
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> tuple[str, int]:
        return ("127.0.0.1", self.client_port)

    @property
    def url(self) -> str:
        """This etcd as a ``cluster.metadata.endpoints`` value (default prefix)."""
        return f"etcd://127.0.0.1:{self.client_port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "etcd.log"

    def start(self) -> EtcdProcess:
        for _attempt in range(3):  # a free port can be taken between probing it and etcd binding it
            if self._start_once():
                return self
        raise RuntimeError(f"etcd did not start; its log:\n{self.log_tail()}")

    def _start_once(self) -> bool:
        self.client_port, self.peer_port = _free_port(), _free_port()
        client = f"http://127.0.0.1:{self.client_port}"
        peer = f"http://127.0.0.1:{self.peer_port}"
        data_dir = self.workdir / "data"
        self.workdir.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [
                    self.binary,
                    f"--name={self.name}",
                    f"--data-dir={data_dir}",
                    f"--listen-client-urls={client}",
                    f"--advertise-client-urls={client}",
                    f"--listen-peer-urls={peer}",
                    f"--initial-advertise-peer-urls={peer}",
                    f"--initial-cluster={self.name}={peer}",
                    "--initial-cluster-state=new",
                    "--logger=zap",
                    "--log-outputs=stderr",
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env={k: v for k, v in os.environ.items() if not k.startswith("ETCD")},
            )
        deadline = time.monotonic() + _START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.process = None
                shutil.rmtree(data_dir, ignore_errors=True)
                return False
            if self._healthy():
                return True
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"etcd did not become healthy in {_START_TIMEOUT_S:.0f} s:\n{self.log_tail()}")

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.client_port}/health", timeout=2) as reply:
                return b'"health":"true"' in reply.read()
        except (OSError, urllib.error.URLError):
            return False

    def kill(self) -> None:
        """SIGKILL, as a crash."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=30)
        self.process = None

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"
