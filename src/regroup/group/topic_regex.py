"""Regular-expression subscriptions (KIP-848 ``SubscribedTopicRegex``): validation and resolution against
the injected topics, with RE2 semantics and full matches, as Kafka's RE2/J (``google-re2``'s ``re2``).

Resolution is synchronous here (Kafka resolves on a background executor); as Kafka, the consumer-group
manager writes each resolution as a type-16 record and replays it on load.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
from typing import Any

import re2

__all__ = ["InvalidRegularExpression", "compile_regex", "resolve"]

_OPTIONS: Any = re2.Options()
_OPTIONS.log_errors = False  # an invalid pattern is the client's error, not worth a line on stderr


class InvalidRegularExpression(ValueError):
    pass


@lru_cache(maxsize=1024)
def compile_regex(pattern: str) -> Any:
    """The compiled pattern; raises :class:`InvalidRegularExpression` when RE2 rejects it (lookarounds,
    backreferences, …)."""
    try:
        return re2.compile(pattern, _OPTIONS)
    except re2.error as exc:
        raise InvalidRegularExpression(f"Invalid regular expression {pattern!r}: {exc}") from exc


def resolve(pattern: str, topic_names: Iterable[str]) -> frozenset[str]:
    """The topic names the pattern fully matches (an invalid pattern matches nothing)."""
    try:
        compiled = compile_regex(pattern)
    except InvalidRegularExpression:
        return frozenset()
    return frozenset(name for name in topic_names if compiled.fullmatch(name) is not None)
