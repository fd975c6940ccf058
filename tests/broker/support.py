"""Test support: an in-process broker on its own event-loop thread and a subprocess broker. Tests talk to
them with regroup's :class:`~regroup.client.blocking.BlockingConnection`."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

from regroup.broker.config import BrokerConfig
from regroup.protocol.api_keys import ApiKey
from regroup.protocol.message import Message
from regroup.testing._runner import BrokerRunner

M = TypeVar("M", bound=Message)
READY = re.compile(r"ready on (\S+):(\d+) \(node (\d+), cluster (\S+), data (.+)\)")


class BrokerThread(BrokerRunner):
    """A real :class:`Broker` bound to 127.0.0.1 on a free port, served from a background thread."""

    def __init__(self, data_dir: Path, **overrides: Any) -> None:
        settings = {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(data_dir)}
        settings.update({k.replace("_", "."): str(v) for k, v in overrides.items()})
        super().__init__(BrokerConfig.load([], {}, list(settings.items())), shutdown_grace_seconds=5)

    def start(self, timeout: float = 30.0) -> BrokerThread:
        super().start(timeout)
        return self


@contextlib.contextmanager
def running_broker(data_dir: Path, **overrides: Any) -> Iterator[BrokerThread]:
    b = BrokerThread(data_dir, **overrides).start()
    try:
        yield b
    finally:
        b.stop()


def api_key_of(message: Message) -> ApiKey:
    return ApiKey(message.API_KEY)


class ServeProcess:
    """``regroup serve`` as a subprocess; waits for the readiness line on stdout."""

    def __init__(
        self,
        data_dir: Path,
        *args: str,
        env: dict[str, str] | None = None,
        properties: Path | None = None,
        port: int = 0,
    ) -> None:
        cmd = [sys.executable, "-m", "regroup.cli", "serve"]
        if properties is not None:
            cmd.append(str(properties))
        cmd += [
            "--override",
            f"listeners=PLAINTEXT://127.0.0.1:{port}",
            "--override",
            f"log.dirs={data_dir}",
            *args,
        ]
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("REGROUP_")}
        full_env.update(env or {})
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=full_env, text=True
        )
        self._stderr: list[str] = []
        self._stderr_reader: threading.Thread | None = None
        self.ready_line = ""
        self.host = ""
        self.port = 0
        self.cluster_id = ""

    def wait_ready(self, timeout: float = 30.0) -> ServeProcess:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        line = ""
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            match = READY.search(line)
            if match:
                self.ready_line = line.strip()
                self.host, self.port, self.cluster_id = match.group(1), int(match.group(2)), match.group(4)
                self._drain_stderr()
                return self
        _, err = self.proc.communicate(timeout=10)
        raise AssertionError(f"broker did not become ready: {line!r}\n{err}")

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def _drain_stderr(self) -> None:
        """Read the running broker's log as it comes: nobody else reads the pipe while tests run, and a
        broker whose log fills the pipe buffer would block inside its event loop."""
        assert self.proc.stderr is not None
        stream = self.proc.stderr
        self._stderr_reader = threading.Thread(
            target=lambda: self._stderr.extend(stream), name="serve stderr", daemon=True
        )
        self._stderr_reader.start()

    def _finish(self, timeout: float) -> str:
        if self._stderr_reader is None:
            _, err = self.proc.communicate(timeout=timeout)
            return err
        self.proc.wait(timeout)
        self._stderr_reader.join(timeout)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
        return "".join(self._stderr)

    def terminate(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> tuple[int, str]:
        self.proc.send_signal(sig)
        err = self._finish(timeout)
        return self.proc.returncode, err

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self._finish(30)
