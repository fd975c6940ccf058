"""``python -m regroup.testing``: measure how long a test broker takes to start (and to stop).

The first start in a process includes importing the broker (its handlers and generated codecs); later starts
are what every further ``regroup_broker`` fixture costs.
"""

from __future__ import annotations

import argparse
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m regroup.testing", description=__doc__)
    parser.add_argument("--runs", type=int, default=20, help="brokers to start and stop (default: 20)")
    args = parser.parse_args()
    from regroup.testing import TestBroker

    starts: list[float] = []
    stops: list[float] = []
    for _ in range(max(args.runs, 2)):
        broker = TestBroker().start()
        assert broker.startup_seconds is not None
        starts.append(broker.startup_seconds)
        began = time.perf_counter()
        broker.stop()
        stops.append(time.perf_counter() - began)
    warm = starts[1:]
    print(f"first start (imports the broker): {starts[0] * 1000:.0f} ms")
    print(
        f"later starts over {len(warm)} runs: median {statistics.median(warm) * 1000:.0f} ms, "
        f"max {max(warm) * 1000:.0f} ms"
    )
    print(f"stop (clean shutdown, temp dir removed): median {statistics.median(stops) * 1000:.0f} ms")


if __name__ == "__main__":
    main()
