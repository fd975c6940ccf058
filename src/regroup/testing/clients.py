"""Closing a client's consumer safely beside an in-process broker.

The broker of :class:`~regroup.testing.TestBroker` runs in the test's process and so shares its GIL. A
client call that blocks inside C while holding the GIL stops the broker too, and the call then waits for a
broker that can never answer. confluent-kafka has one: closing a consumer serves any rebalance event still
queued (the revoke of its partitions, an assignment on its way) in its rebalance callback, which asks
librdkafka for the rebalance protocol, or assigns, while holding the GIL, and that call can block for good
once the consumer is closing (librdkafka#4041, #4884).
"""

from __future__ import annotations

import threading
import time
from typing import Any, Protocol

__all__ = ["close_consumer"]


class _Consumer(Protocol):
    def unsubscribe(self) -> Any: ...

    def assignment(self) -> Any: ...

    def poll(self, timeout: float) -> Any: ...

    def close(self) -> Any: ...


def close_consumer(consumer: _Consumer, timeout: float = 30.0) -> bool:
    """Give up ``consumer``'s partitions, then close it; False if the close has not returned after
    ``timeout`` seconds (it goes on in a daemon thread, so the test can still fail with its own message),
    or if the consumer had failed fatally.

    The consumer unsubscribes and polls until it has owned no partition for half a second, so that its
    revoke (and any ``on_revoke`` commit), and an assignment still on its way from the group, are served
    by poll while it is still open, as an application's shutdown would do it; the close that follows has
    no rebalance left to serve. A consumer that failed fatally (fenced, say) is not closed: its poll only
    raises the error again, its close would still serve a rebalance event in the callback, and such a
    consumer can only be dropped — confluent-kafka destroys a consumer it collects without the consumer
    close, and without holding the GIL. Written for confluent-kafka's ``Consumer``; any consumer with
    ``unsubscribe``, ``assignment``, ``poll(seconds)`` and ``close`` can use it."""
    deadline = time.monotonic() + timeout
    try:
        consumer.unsubscribe()
        quiet_since: float | None = None
        while (now := time.monotonic()) < deadline:
            if consumer.assignment():
                quiet_since = None
            elif quiet_since is None:
                quiet_since = now
            elif now - quiet_since >= _QUIET_S:
                break
            consumer.poll(0.05)
    except Exception as exc:  # the client's own error type (KafkaException for confluent-kafka)
        if _fatal(exc):
            return False
    closing = threading.Thread(target=consumer.close, name="regroup-close-consumer", daemon=True)
    closing.start()
    closing.join(max(0.0, deadline - time.monotonic()))
    return not closing.is_alive()


_QUIET_S = 0.5  # a rebalance event still in flight from an in-process broker arrives well within it
_FATAL_CODE = -150  # librdkafka's RD_KAFKA_RESP_ERR__FATAL


def _fatal(exc: Exception) -> bool:
    """Whether ``exc`` carries a fatal client error (confluent-kafka: a ``KafkaError`` in its args)."""
    error = exc.args[0] if exc.args else None
    fatal = getattr(error, "fatal", None)
    code = getattr(error, "code", None)
    return (callable(fatal) and fatal() is True) or (callable(code) and code() == _FATAL_CODE)
