"""A regroup broker served from a background event-loop thread, driven from synchronous code.

Everything that touches the broker runs on its loop: :meth:`BrokerRunner.run` submits a coroutine with
``asyncio.run_coroutine_threadsafe`` and waits for its result, so callers in any thread (a test, a client
library's own threads) see a consistent broker.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from regroup.broker.config import BrokerConfig
from regroup.broker.state import Broker
from regroup.runtime.clock import Clock

__all__ = ["BrokerRunner"]

T = TypeVar("T")


def _new_loop() -> asyncio.AbstractEventLoop:
    if sys.platform != "win32":
        try:
            import uvloop
        except ImportError:  # pragma: no cover - uvloop is a dependency on POSIX
            pass
        else:
            loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
            return loop
    return asyncio.new_event_loop()


class BrokerRunner:
    """A real :class:`~regroup.broker.state.Broker` on its own event-loop thread."""

    def __init__(
        self,
        config: BrokerConfig,
        *,
        coordinator_clock: Clock | None = None,
        shutdown_grace_seconds: float = 5.0,
    ) -> None:
        self.config = config
        self.coordinator_clock = coordinator_clock
        self.shutdown_grace_seconds = shutdown_grace_seconds
        self.loop = _new_loop()
        self.broker = self._make_broker(config)
        self._thread = threading.Thread(target=self.loop.run_forever, name="regroup broker", daemon=True)

    def _make_broker(self, config: BrokerConfig) -> Broker:
        return Broker(
            config,
            coordinator_clock=self.coordinator_clock,
            shutdown_grace_seconds=self.shutdown_grace_seconds,
        )

    # ------------------------------------------------------------------------------------ lifecycle

    def start(self, timeout: float = 30.0) -> None:
        self._thread.start()
        try:
            self.run(self.broker.start(), timeout)
        except BaseException:
            try:
                self.run(self.broker.stop(), 60.0)  # a partial start (logs, coordinator) is undone too
            finally:
                self.close()
            raise

    def restart(self, config: BrokerConfig | None = None, timeout: float = 30.0) -> None:
        """Stop the broker cleanly and start a new one (same loop) from ``config`` (default: the same)."""
        self.run(self.broker.stop(), 60.0)
        if config is not None:
            self.config = config
        self.broker = self.call(self._make_broker, self.config)
        self.run(self.broker.start(), timeout)

    def stop(self) -> None:
        """Stop the broker (flushing its logs) and the loop thread."""
        if self._thread.is_alive() and not self.loop.is_closed():
            try:
                self.run(self.broker.stop(), 60.0)
            finally:
                self.close()
        elif not self.loop.is_closed():
            self.close()

    def close(self) -> None:
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(30)
        if not self.loop.is_closed():
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.run_until_complete(self.loop.shutdown_default_executor())
            self.loop.close()

    # ------------------------------------------------------------------------------------ access

    @property
    def address(self) -> tuple[str, int]:
        host, port = next(iter(self.broker.bound_addresses().values()))
        return host, port

    @property
    def bootstrap(self) -> str:
        host, port = self.address
        return f"{host}:{port}"

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = 30.0) -> T:
        """Run ``coro`` on the broker's loop and return its result."""
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("BrokerRunner.run called from the broker's own loop thread")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` on the broker's loop thread and return its result."""

        async def run() -> T:
            return fn(*args)

        return self.run(run())
