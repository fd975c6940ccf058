"""Times and durations as the pipeline's command line takes them (``--since -2h``, ``--horizon 7d``)."""

from __future__ import annotations

import argparse
import re
import time
from datetime import UTC, datetime
from typing import Final

__all__ = ["parse_duration", "parse_time"]

_UNITS: Final = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION: Final = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")


def parse_duration(text: str) -> int:
    """``500ms``, ``30s``, ``15m``, ``2h``, ``7d``, combinations like ``1h30m``, or plain milliseconds."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    pos = 0
    total = 0.0
    for m in _DURATION.finditer(text):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if pos != len(text) or not text:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 500ms, 30s, 15m, 2h, 7d)")
    return int(total)


def parse_time(text: str, *, now_ms: int | None = None) -> int:
    """An instant as epoch milliseconds: ISO 8601 (``2026-11-21T10:00:00Z``; no zone means UTC), epoch
    milliseconds, ``now``, or ``now-<duration>`` / ``-<duration>`` (e.g. ``-2h``)."""
    text = text.strip()
    now = now_ms if now_ms is not None else int(time.time() * 1000)
    if text == "now":
        return now
    for prefix in ("now-", "-"):
        if text.startswith(prefix):
            return now - parse_duration(text[len(prefix) :])
    if text.isdigit():
        return int(text)
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a time: {text!r} (ISO 8601, epoch ms, now, or -<duration>)"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return int(parsed.timestamp() * 1000)
