"""A consumer-group member for the rebalance-history scenario: run as a subprocess, killed or stopped.
With a seventh argument ``hold`` it prints "ready" once its consumer exists and joins only when a line
arrives on stdin, so that the scenario can time its join without waiting for the interpreter to start."""

from __future__ import annotations

import signal
import sys

from confluent_kafka import Consumer


def main() -> int:
    bootstrap, group, topic, client_id, instance, session_ms = sys.argv[1:7]
    hold = sys.argv[7:] == ["hold"]
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "client.id": client_id,
        "session.timeout.ms": int(session_ms),
        "heartbeat.interval.ms": 200,
        "max.poll.interval.ms": 20000,
        "enable.auto.commit": False,
        "topic.metadata.refresh.interval.ms": 1000,
        "allow.auto.create.topics": True,
    }
    if instance != "-":
        conf["group.instance.id"] = instance
    consumer = Consumer(conf)
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    if hold:
        print("ready", flush=True)
        sys.stdin.readline()
    consumer.subscribe([topic], on_assign=lambda _c, parts: print(f"assigned {len(parts)}", flush=True))
    print("started", flush=True)
    while not stopping:
        consumer.poll(0.1)
    consumer.close()
    print("closed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
