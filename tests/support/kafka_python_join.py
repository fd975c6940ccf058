"""A work-around for a race in kafka-python 3.0.12's group join, applied wherever the tests run
kafka-python group members (the pytest process and the member subprocesses).

``KafkaConsumer.poll(timeout_ms)`` drives the join through ``BaseCoordinator.join_group_async``, which
loops ``while need_rejoin()`` and, when the poll's timer runs out, leaves its join task in flight for the
next poll to await. A leader that rejoins because topic metadata changed (``assignment_snapshot !=
metadata_snapshot``; the base ``rejoin_needed`` flag stays False) sees ``need_rejoin()`` turn False as
soon as it has computed the new assignment. If the poll times out while its SyncGroup is in flight, no
later poll enters the loop again: the finished join is never applied — no assignment, heartbeats left
disabled — so the broker expels the member after its session timeout and it never rejoins. Seen with
regroup and reproducible under CPU load (a first member that joins before its metadata lists the
topic). Counting a started join that was not applied yet as a reason to join makes the next poll await
it (or, when it already finished, join once more)."""

from __future__ import annotations

import warnings
from typing import Any


def patch_kafka_python_join() -> None:
    with warnings.catch_warnings():
        # kafka-python's protocol modules use importlib.resources.read_text (deprecated) on import.
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka.coordinator.consumer import ConsumerCoordinator

    original = ConsumerCoordinator.need_rejoin
    if getattr(original, "regroup_join_patch", False):
        return

    def need_rejoin(self: Any) -> bool:
        return self._join_task is not None or bool(original(self))

    need_rejoin.regroup_join_patch = True  # type: ignore[attr-defined]
    ConsumerCoordinator.need_rejoin = need_rejoin
