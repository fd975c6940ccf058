"""Where a heartbeat's or a commit's broker CPU goes, stage by stage.

``python -m tools.stage_profile commit`` (or ``heartbeat``) starts ``regroup serve`` with the benchmark's
settings, turns cProfile on in it (start-up and shutdown stay out of the profile), drives it with
``regroup bench commit|heartbeat --bootstrap-server …`` (a fixed-rate phase, then saturation), turns the
profiler off, and sorts the profile's own time (``tottime``) into the stages of the
request path by the file each function lives in: frame and request decoding, the coordinator core,
building ``__consumer_offsets`` records, batching and appending them, the runtime's lanes and timers, the
broker's connection and handler code, reply encoding, and the event loop with its socket calls. Each
stage is given as a share of the profiled time and in profiled µs per request (the stage's time over the
requests the scenario's handler took); with ``--cpu-us`` (the "broker CPU per request" that ``regroup
bench`` prints for the same scenario without the profiler) the share is also scaled to it. cProfile slows
Python-level calls more than C ones, so these are a map of where to look and a before/after comparison on
one machine, not exact costs.

``--pythonpath DIR`` profiles another checkout's ``src`` (before/after comparisons on the same machine).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path


def _stage(path: str, func: str) -> str:
    p = path.replace("\\", "/")
    if "/regroup/protocol/messages/" in p:
        return "decode request" if func.startswith("_r_") or func in ("read", "_read") else "encode reply"
    if p.endswith(("/regroup/protocol/framing.py", "/regroup/broker/wire.py")):
        return "decode request" if "decode" in func or func == "feed" else "encode reply"
    if "/regroup/protocol/records/" in p or p.endswith("/regroup/group/records.py"):
        return "build records"
    if "/regroup/group/" in p:
        return "coordinator core"
    if p.endswith(("/regroup/protocol/record_batch.py", "crc32c")) or "/regroup/log/" in p:
        return "batch and append"
    if "/regroup/runtime/" in p:
        return "runtime (lanes, timers, durability)"
    if p.endswith("/regroup/broker/server.py") and func == "_flush_output":
        return "event loop and socket calls"  # uvloop's transport.write: the send syscall, not profiled apart
    if "/regroup/broker/" in p:
        return "broker (connection, handlers)"
    if "/regroup/protocol/" in p:
        return "decode request"
    if "posix.fsync" in func or "fdatasync" in func:
        return "fsync (worker thread)"
    if (
        "asyncio" in p
        or "uvloop" in p
        or "selectors" in p
        or func.startswith(("<built-in method posix.", "<method 'send", "<method 'recv"))
        or "select" in func
    ):
        return "event loop and socket calls"
    return "other"


_ORDER = [
    "decode request",
    "broker (connection, handlers)",
    "runtime (lanes, timers, durability)",
    "coordinator core",
    "build records",
    "batch and append",
    "encode reply",
    "event loop and socket calls",
    "fsync (worker thread)",
    "other",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _wait_listening(port: int, proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"regroup serve exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"regroup serve did not listen on {port} within {timeout} s")


_HANDLER = {"commit": "offset_commit.py", "heartbeat": "heartbeat.py"}


def profile(
    scenario: str, bench_args: list[str], pythonpath: str | None
) -> tuple[dict[str, float], dict[str, list[tuple[float, str]]], int]:
    """Profile one run: seconds of own time per stage, each stage's functions with their time, and how many
    requests of the scenario's API the broker handled meanwhile."""
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath + os.pathsep + env.get("PYTHONPATH", "")
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="regroup-stages-") as tmp:
        out = Path(tmp) / "serve.prof"
        serve = [
            sys.executable,
            "-m",
            "tools.stage_profile",
            "--serve-profiled",
            str(out),
            "serve",
            "--override",
            f"listeners=PLAINTEXT://127.0.0.1:{port}",
            "--override",
            f"log.dirs={tmp}/data",
            "--override",
            "group.initial.rebalance.delay.ms=0",
            "--override",
            "offsets.topic.num.partitions=50",
            "--override",
            "admin.listener=",
        ]
        proc = subprocess.Popen(
            serve, env=env, cwd=_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            _wait_listening(port, proc)
            proc.send_signal(signal.SIGUSR1)
            bench = [sys.executable, "-m", "regroup.cli", "bench", scenario]
            bench += ["--bootstrap-server", f"127.0.0.1:{port}", "--quiet", *bench_args]
            subprocess.run(bench, env=env, check=True, stdout=subprocess.DEVNULL)
            proc.send_signal(signal.SIGUSR2)
            deadline = time.monotonic() + 60
            while not out.exists() and time.monotonic() < deadline:
                time.sleep(0.1)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=120)
        stats = pstats.Stats(str(out))
    totals: dict[str, float] = defaultdict(float)
    functions: dict[str, list[tuple[float, str]]] = defaultdict(list)
    requests = 0
    handler = "/regroup/broker/handlers/" + _HANDLER[scenario]
    for (path, line, func), (_cc, ncalls, tottime, _ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        if func == "handle" and path.replace("\\", "/").endswith(handler):
            requests = ncalls
        stage = _stage(path, func)
        totals[stage] += tottime
        functions[stage].append((tottime, f"{Path(path).name}:{line}({func})"))
    return totals, functions, requests


_ROOT = Path(__file__).resolve().parent.parent


def _serve_profiled(out: str, argv: list[str]) -> int:
    """``regroup`` with ``argv``; SIGUSR1 turns the profiler on, SIGUSR2 off and writes it to ``out``."""
    from regroup.cli import main as regroup_main

    # The main thread's CPU time, not the wall clock: on a busy machine a preempted call would count the
    # time other processes ran.
    profiler = cProfile.Profile(time.thread_time)

    def start(_sig: int, _frame: object) -> None:
        profiler.enable()

    def stop(_sig: int, _frame: object) -> None:
        profiler.disable()
        profiler.dump_stats(out)

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)
    return regroup_main(argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--serve-profiled"]:
        return _serve_profiled(argv[1], argv[2:])
    parser = argparse.ArgumentParser(prog="python -m tools.stage_profile", description=__doc__)
    parser.add_argument("scenario", choices=["commit", "heartbeat"])
    parser.add_argument("--pythonpath", help="profile this source tree instead of the installed regroup")
    parser.add_argument("--cpu-us", type=float, help="broker CPU per request measured without the profiler")
    parser.add_argument("--top", type=int, default=0, help="also list each stage's N costliest functions")
    parser.epilog = "Other arguments go to regroup bench (default: --rates 1000 --duration 8 --warmup 2)."
    args, bench_args = parser.parse_known_args(argv)
    bench_args = bench_args or ["--rates", "1000", "--duration", "8", "--warmup", "2"]
    totals, functions, requests = profile(args.scenario, bench_args, args.pythonpath)
    # Shutdown and start-up (loading, compiling) are not the request path.
    busy = sum(v for k, v in totals.items() if k not in ("fsync (worker thread)", "other"))
    print(f"{'stage':40} {'share':>7} {'profiled µs':>12}" + (f" {'µs/request':>11}" if args.cpu_us else ""))
    for stage in _ORDER[:-2]:
        seconds = totals.get(stage, 0.0)
        share = seconds / busy if busy else 0.0
        line = f"{stage:40} {share:7.1%} {seconds / requests * 1e6 if requests else 0.0:12.1f}"
        if args.cpu_us:
            line += f" {share * args.cpu_us:11.1f}"
        print(line)
        for seconds, name in sorted(functions.get(stage, []), reverse=True)[: args.top]:
            print(f"    {seconds / busy if busy else 0.0:7.1%}  {name}")
    print(
        f"({requests:,} requests; profiled request-path time {busy:.2f} s; "
        f"fsync {totals.get('fsync (worker thread)', 0.0):.2f} s)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
