"""Logging for the broker: Kafka's log4j layout on stderr, ``[2026-11-21 19:00:00,123] INFO msg (logger)``."""

from __future__ import annotations

import logging
import sys
from typing import Final, TextIO

__all__ = ["LOG_FORMAT", "setup_logging"]

LOG_FORMAT: Final = "[%(asctime)s] %(levelname)s %(message)s (%(name)s)"


def setup_logging(level: str = "INFO", stream: TextIO | None = None) -> None:
    """Send every ``regroup`` logger to ``stream`` (stderr) at ``level``."""
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # Warnings from the asyncio internals are interesting; its debug chatter is not.
    logging.getLogger("asyncio").setLevel(max(logging.WARNING, root.level))
