"""Building a :class:`~regroup.group.effects.Result` while handling one event, and the shard's table of
armed timers.

Handlers write records, effects and append continuations into an :class:`Outcome`; ``result()`` turns it
into the contract's ``Result``. The :class:`TimerTable` remembers every armed key with its deadline and
what the timer captured (a generation, the initial-delay budget), so a fired key is looked up again on
delivery and stale fires — cancelled, or re-armed later — are recognised.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Generic, TypeVar

from mypy_extensions import mypyc_attr

from regroup.group.effects import (
    Cancel,
    CoordinatorRecord,
    Effect,
    Notify,
    Reply,
    Result,
    Schedule,
    TimerKey,
    TimerKind,
)
from regroup.protocol.errors import ErrorCode

__all__ = ["STALE", "AppendCallback", "Outcome", "TimerTable"]

R = TypeVar("R")

AppendCallback = Callable[["ErrorCode | None", "Outcome"], None]
"""Called once the records of the Outcome were (or failed to be) appended; writes into a fresh Outcome."""


class Outcome:
    """Everything one event produces, in order."""

    __slots__ = ("callbacks", "effects", "records")

    def __init__(self) -> None:
        self.records: list[CoordinatorRecord] = []
        self.effects: list[Effect] = []
        self.callbacks: list[AppendCallback] = []

    def reply(self, ticket: int, response: object) -> None:
        self.effects.append(Reply(ticket, response))

    def notify(self, event: object) -> None:
        self.effects.append(Notify(event))

    def after_append(self, callback: AppendCallback) -> None:
        self.callbacks.append(callback)

    def result(self, reply: R | None, on_failure: Callable[[ErrorCode], R | None] | None = None) -> Result[R]:
        """``reply`` is this request's response (``None``: parked or no response); ``on_failure`` gives the
        response that replaces it when the append fails."""
        if not self.records:
            # Nothing to append: continuations (if any) run right away as a success.
            for callback in self.callbacks:
                callback(None, self)
            self.callbacks = []
            return Result(records=(), reply=reply, effects=tuple(self.effects))
        return Result(
            records=tuple(self.records),
            reply=reply,
            effects=tuple(self.effects),
            on_append=partial(_appended, tuple(self.callbacks), reply, on_failure),
        )


def _appended(
    callbacks: tuple[AppendCallback, ...],
    reply: R | None,
    on_failure: Callable[[ErrorCode], R | None] | None,
    error: ErrorCode | None,
) -> Result[R]:
    """An Outcome's continuation once its records were (or failed to be) appended. A partial of a module
    function rather than a nested one: compiled, a nested function and the frame it closes over reference
    each other, a cycle per request for the collector."""
    after = Outcome()
    for callback in callbacks:
        callback(error, after)
    if error is not None and on_failure is not None:
        return after.result(on_failure(error), on_failure)
    return after.result(reply, on_failure)


class _Stale:
    __slots__ = ()

    def __repr__(self) -> str:
        return "STALE"


STALE = _Stale()
"""What :meth:`TimerTable.claim` returns for a fire that no longer matches an armed timer."""


@mypyc_attr(native_class=False)  # compiled, a generic dataclass stays a Python class
@dataclass(slots=True, unsafe_hash=True)
class _Armed(Generic[R]):
    deadline_ms: int
    payload: R


class TimerTable:
    """The timers this shard has armed (mirrors what the runtime holds, key for key)."""

    def __init__(self) -> None:
        # A timer without a payload (every member's session) is armed as its bare deadline.
        self._armed: dict[TimerKey, _Armed[object] | int] = {}

    def schedule(self, out: Outcome, key: TimerKey, deadline_ms: int, payload: object = None) -> None:
        self._armed[key] = deadline_ms if payload is None else _Armed(deadline_ms, payload)
        out.effects.append(Schedule(key, deadline_ms))

    def cancel(self, out: Outcome, key: TimerKey) -> None:
        if self._armed.pop(key, None) is not None:
            out.effects.append(Cancel(key))

    def claim(self, key: TimerKey, now_ms: int) -> object:
        """The payload of a due timer (and forget it), or :data:`STALE` when ``key`` is not armed or is
        armed for a later deadline (an older fire of a re-armed key)."""
        armed = self._armed.get(key)
        if armed is None:
            return STALE
        if isinstance(armed, int):
            deadline_ms, payload = armed, None
        else:
            deadline_ms, payload = armed.deadline_ms, armed.payload
        if deadline_ms > now_ms:
            return STALE
        del self._armed[key]
        return payload

    def deadline(self, key: TimerKey) -> int | None:
        armed = self._armed.get(key)
        return armed if armed is None or isinstance(armed, int) else armed.deadline_ms

    def keys_for_group(self, group_id: str) -> list[TimerKey]:
        return [k for k in self._armed if k.group_id == group_id and k.kind is not TimerKind.EXPIRATION]

    def cancel_all(self, out: Outcome) -> None:
        for key in list(self._armed):
            self.cancel(out, key)

    def snapshot(self) -> dict[TimerKey, int]:
        return {k: a if isinstance(a, int) else a.deadline_ms for k, a in self._armed.items()}
