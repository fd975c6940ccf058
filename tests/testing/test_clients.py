"""regroup.testing.close_consumer: the revoke runs before the close, and a close that never returns is
reported instead of hanging the test."""

from __future__ import annotations

import threading
import time

from regroup.testing import close_consumer


class _Consumer:
    """Records the calls close_consumer makes; owns two partitions until a poll after unsubscribe."""

    def __init__(self, *, poll_error: Exception | None = None, close_blocks: bool = False) -> None:
        self.calls: list[str] = []
        self.owned = [0, 1]
        self.subscribed = True
        self.poll_error = poll_error
        self.release = threading.Event()
        self.close_blocks = close_blocks

    def unsubscribe(self) -> None:
        self.calls.append("unsubscribe")
        self.subscribed = False

    def assignment(self) -> list[int]:
        return list(self.owned)

    def poll(self, timeout: float) -> None:
        self.calls.append("poll")
        if self.poll_error is not None:
            raise self.poll_error
        if not self.subscribed:
            self.owned.pop()  # one partition revoked per poll

    def close(self) -> None:
        self.calls.append("close")
        if self.close_blocks:
            self.release.wait()


def test_partitions_are_given_up_by_polling_before_the_close() -> None:
    consumer = _Consumer()
    assert close_consumer(consumer, 5)
    polls = consumer.calls[1:-1]
    assert consumer.calls[0] == "unsubscribe"
    assert consumer.calls[-1] == "close"
    assert set(polls) == {"poll"}
    assert len(polls) >= 3  # two to give up the partitions, then a quiet spell before the close


def test_a_consumer_whose_poll_raises_a_passing_error_is_closed() -> None:
    consumer = _Consumer(poll_error=RuntimeError("fenced"))
    assert close_consumer(consumer, 5)
    assert consumer.calls == ["unsubscribe", "poll", "close"]  # the error ends the polling


class _FatalError:
    """What confluent-kafka's KafkaError answers for a fatal error (librdkafka's _FATAL)."""

    def code(self) -> int:
        return -150

    def fatal(self) -> bool:
        return True


def test_a_consumer_that_failed_fatally_is_left_unclosed() -> None:
    consumer = _Consumer(poll_error=RuntimeError(_FatalError()))
    assert not close_consumer(consumer, 5)
    assert consumer.calls == ["unsubscribe", "poll"]


def test_a_close_that_does_not_return_is_reported_after_the_timeout() -> None:
    consumer = _Consumer(close_blocks=True)
    started = time.monotonic()
    try:
        assert not close_consumer(consumer, 0.5)
        assert time.monotonic() - started < 30  # bounded by the timeout, not by the close
    finally:
        consumer.release.set()
