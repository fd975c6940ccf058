"""Prepare the built clients of the matrix ahead of a test run (CI warm-up):

    PYTHONPATH=tests .venv/bin/python -m support.clients

builds the franz-go driver (modules through the Go proxy) and installs kafkajs (npm ci from the committed
lock file) into ``<repo>/.cache/interop``, and resolves the Kafka jars (Java clients and tools).
"""

from __future__ import annotations

import sys

from regroup.refkafka import resolve_jars
from support.clients import franz_go_binary, kafkajs_dir


def main() -> int:
    failed = False
    for what, prepare in (
        ("Kafka jars", resolve_jars),
        ("franz-go driver", franz_go_binary),
        ("kafkajs", kafkajs_dir),
    ):
        try:
            print(f"{what}: {prepare()}")
        except BaseException as exc:  # pytest's skip/fail outcomes carry the one-line reason
            print(f"{what}: FAILED: {exc}", file=sys.stderr)
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
