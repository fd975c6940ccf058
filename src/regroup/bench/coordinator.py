"""``regroup bench coordinator``: how fast the group coordinator forms groups and answers heartbeats and
commits, measured over the wire with regroup's own protocol client.

Against a ``regroup serve`` subprocess (started on a free port with ``group.initial.rebalance.delay.ms=0``
unless ``--bootstrap`` is given):

* **formation**: N members (each a JoinGroup/SyncGroup/Heartbeat loop as a real client runs it: the
  MEMBER_ID_REQUIRED round trip, rejoining on REBALANCE_IN_PROGRESS) join one group at once; the time until
  all N are synced in one generation, and how many generations that took;
* **heartbeats**: members of the formed group heartbeat in a closed loop at increasing concurrency; the
  highest rate whose p99 latency stays under the target (5 ms by default) is reported;
* **commits**: members commit one offset each in a closed loop; rate and latency percentiles.

Each member has its own connection, as real clients do (a shared one would queue a member's responses
behind another member's parked JoinGroup). Numbers are printed, never asserted.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field

from regroup.client.connection import Connection, open_connection, parse_bootstrap_servers
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages.create_topics import CreatableTopic, CreateTopicsRequest, CreateTopicsResponse
from regroup.protocol.messages.heartbeat import HeartbeatRequest, HeartbeatResponse
from regroup.protocol.messages.join_group import JoinGroupRequest, JoinGroupRequestProtocol, JoinGroupResponse
from regroup.protocol.messages.leave_group import LeaveGroupRequest, LeaveGroupResponse, MemberIdentity
from regroup.protocol.messages.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
)
from regroup.protocol.messages.sync_group import (
    SyncGroupRequest,
    SyncGroupRequestAssignment,
    SyncGroupResponse,
)
from regroup.protocol.records.consumer_protocol import ConsumerProtocolSubscription

__all__ = ["FormationResult", "LoadResult", "Report", "main", "run"]

_READY = re.compile(r"ready on (\S+) ")
_TOPIC = "bench-commits"
_TOPIC_PARTITIONS = 64
_CONCURRENCY = (1, 2, 4, 8, 16, 32, 64, 128)


@dataclass(frozen=True)
class FormationResult:
    members: int
    seconds: float
    generations: int


@dataclass(frozen=True)
class LoadResult:
    concurrency: int
    requests: int
    per_second: float
    p50_ms: float
    p99_ms: float


@dataclass
class Report:
    broker: str
    formation: list[FormationResult] = field(default_factory=list)
    heartbeats: list[LoadResult] = field(default_factory=list)
    heartbeat_target_p99_ms: float = 5.0
    heartbeats_per_second_at_target: float = 0.0
    commits: list[LoadResult] = field(default_factory=list)


def _percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@contextlib.contextmanager
def _broker(bootstrap: str | None, fsync: bool) -> Iterator[str]:
    if bootstrap:
        yield bootstrap
        return
    with tempfile.TemporaryDirectory(prefix="regroup-bench-") as tmp:
        overrides = [
            "listeners=PLAINTEXT://127.0.0.1:0",
            f"log.dirs={tmp}/data",
            "group.initial.rebalance.delay.ms=0",
        ]
        if fsync:
            overrides.append("log.flush.interval.messages=1")
        cmd = [sys.executable, "-m", "regroup.cli", "serve", "--log-level", "WARNING"]
        for item in overrides:
            cmd += ["--override", item]
        env = {k: v for k, v in os.environ.items() if not k.startswith("REGROUP_")}
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            match = _READY.search(line)
            if match is None:
                raise RuntimeError(f"regroup serve did not start: {line!r}")
            yield match.group(1)
        finally:
            proc.terminate()
            proc.wait(60)
            if proc.stdout is not None:
                proc.stdout.close()


class _Member:
    """A classic-protocol member: join (with the MEMBER_ID_REQUIRED round trip), sync, heartbeat."""

    def __init__(self, conn: Connection, group_id: str, index: int) -> None:
        self.conn = conn
        self.group_id = group_id
        self.index = index
        self.member_id = ""
        self.generation_id = -1
        self.metadata = ConsumerProtocolSubscription(topics=[_TOPIC]).encode_versioned(0)

    async def join_and_sync(self) -> None:
        while True:
            join = await self.conn.request(
                JoinGroupRequest(
                    group_id=self.group_id,
                    session_timeout_ms=60_000,
                    rebalance_timeout_ms=120_000,
                    member_id=self.member_id,
                    protocol_type="consumer",
                    protocols=[JoinGroupRequestProtocol(name="range", metadata=self.metadata)],
                ),
                JoinGroupResponse,
                timeout_ms=300_000,
            )
            if join.error_code == ErrorCode.MEMBER_ID_REQUIRED:
                self.member_id = join.member_id
                continue
            if join.error_code != ErrorCode.NONE:
                raise RuntimeError(f"JoinGroup failed: {ErrorCode(join.error_code).name}")
            self.member_id = join.member_id
            self.generation_id = join.generation_id
            assignments = (
                [SyncGroupRequestAssignment(m.member_id, b"") for m in join.members]
                if join.leader == self.member_id
                else []
            )
            sync = await self.conn.request(
                SyncGroupRequest(
                    group_id=self.group_id,
                    generation_id=self.generation_id,
                    member_id=self.member_id,
                    protocol_type="consumer",
                    protocol_name=join.protocol_name,
                    assignments=assignments,
                ),
                SyncGroupResponse,
                timeout_ms=300_000,
            )
            if sync.error_code == ErrorCode.NONE:
                return
            if sync.error_code not in (ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION):
                raise RuntimeError(f"SyncGroup failed: {ErrorCode(sync.error_code).name}")

    async def heartbeat(self) -> ErrorCode:
        response = await self.conn.request(
            HeartbeatRequest(
                group_id=self.group_id, generation_id=self.generation_id, member_id=self.member_id
            ),
            HeartbeatResponse,
        )
        return ErrorCode(response.error_code)

    async def commit(self, offset: int) -> ErrorCode:
        response = await self.conn.request(
            OffsetCommitRequest(
                group_id=self.group_id,
                generation_id_or_member_epoch=self.generation_id,
                member_id=self.member_id,
                topics=[
                    OffsetCommitRequestTopic(
                        _TOPIC,
                        [
                            OffsetCommitRequestPartition(
                                self.index % _TOPIC_PARTITIONS, committed_offset=offset
                            )
                        ],
                    )
                ],
            ),
            OffsetCommitResponse,
        )
        return ErrorCode(response.topics[0].partitions[0].error_code)


async def _connect(servers: str, count: int) -> list[Connection]:
    host, port = parse_bootstrap_servers(servers)[0]
    conns: list[Connection] = []
    for start in range(0, count, 100):
        batch = range(start, min(count, start + 100))
        conns += await asyncio.gather(*(open_connection(host, port, client_id=f"bench-{i}") for i in batch))
    return conns


async def _form(conns: Sequence[Connection], group_id: str) -> tuple[list[_Member], FormationResult]:
    size = len(conns)
    members = [_Member(conn, group_id, i) for i, conn in enumerate(conns)]
    settled: dict[int, int] = {}
    done = asyncio.Event()
    started = time.perf_counter()
    finished = 0.0

    async def run(member: _Member) -> None:
        nonlocal finished
        while True:
            await member.join_and_sync()
            settled[member.index] = member.generation_id
            if len(settled) == size and len(set(settled.values())) == 1:
                finished = time.perf_counter()
                done.set()
            # Heartbeat until the group is complete; a rebalance (a later member joined) means rejoin.
            while not done.is_set():
                await asyncio.sleep(0.05)
                if await member.heartbeat() == ErrorCode.REBALANCE_IN_PROGRESS:
                    settled.pop(member.index, None)
                    break
            if done.is_set():
                return

    await asyncio.wait_for(asyncio.gather(*(run(m) for m in members)), 600)
    generation = members[0].generation_id
    return members, FormationResult(size, round(finished - started, 3), generation)


async def _closed_loop(
    members: Sequence[_Member], concurrency: int, seconds: float, call: str
) -> tuple[LoadResult, list[ErrorCode]]:
    latencies: list[float] = []
    errors: list[ErrorCode] = []
    deadline = time.perf_counter() + seconds
    counter = itertools.count()

    async def worker(w: int) -> None:
        i = w
        while time.perf_counter() < deadline:
            member = members[i % len(members)]
            i += concurrency
            t0 = time.perf_counter()
            if call == "heartbeat":
                code = await member.heartbeat()
            else:
                code = await member.commit(next(counter))
            latencies.append((time.perf_counter() - t0) * 1000)
            if code != ErrorCode.NONE:
                errors.append(code)

    started = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    elapsed = time.perf_counter() - started
    result = LoadResult(
        concurrency=concurrency,
        requests=len(latencies),
        per_second=round(len(latencies) / elapsed),
        p50_ms=round(_percentile(latencies, 0.50), 3),
        p99_ms=round(_percentile(latencies, 0.99), 3),
    )
    return result, errors


async def _run(servers: str, sizes: Sequence[int], seconds: float, target_p99_ms: float) -> Report:
    conns = await _connect(servers, max(sizes))
    report = Report(broker=servers, heartbeat_target_p99_ms=target_p99_ms)
    try:
        created = await conns[0].request(
            CreateTopicsRequest(topics=[CreatableTopic(_TOPIC, _TOPIC_PARTITIONS, 1)], timeout_ms=30_000),
            CreateTopicsResponse,
        )
        code = created.topics[0].error_code
        if code not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
            raise RuntimeError(f"cannot create {_TOPIC}: {ErrorCode(code).name}")
        group: list[_Member] = []
        for size in sizes:
            group_id = f"bench-{size}-{os.getpid()}-{time.monotonic_ns()}"
            members, formation = await _form(conns[:size], group_id)
            report.formation.append(formation)
            group = members
            if size != sizes[-1]:
                await _leave(members)
        for concurrency in _CONCURRENCY:
            result, errors = await _closed_loop(group, concurrency, seconds, "heartbeat")
            if errors:
                raise RuntimeError(f"heartbeats failed: {errors[:3]}")
            report.heartbeats.append(result)
            if result.p99_ms < target_p99_ms:
                report.heartbeats_per_second_at_target = max(
                    report.heartbeats_per_second_at_target, result.per_second
                )
        for concurrency in (1, 8, 64):
            result, errors = await _closed_loop(group, concurrency, seconds, "commit")
            if errors:
                raise RuntimeError(f"commits failed: {errors[:3]}")
            report.commits.append(result)
        await _leave(group)
    finally:
        await asyncio.gather(*(conn.close() for conn in conns))
    return report


async def _leave(members: Sequence[_Member]) -> None:
    if not members:
        return
    await members[0].conn.request(
        LeaveGroupRequest(
            group_id=members[0].group_id, members=[MemberIdentity(member_id=m.member_id) for m in members]
        ),
        LeaveGroupResponse,
    )


def run(
    *,
    bootstrap: str | None = None,
    sizes: Sequence[int] = (100, 1000),
    seconds: float = 2.0,
    target_p99_ms: float = 5.0,
    fsync: bool = False,
) -> Report:
    with _broker(bootstrap, fsync) as servers:
        return asyncio.run(_run(servers, sizes, seconds, target_p99_ms))


def _print(report: Report) -> None:
    print(f"regroup bench coordinator against {report.broker}")
    print()
    print("group formation (group.initial.rebalance.delay.ms=0)")
    print(f"  {'members':>8} {'seconds':>9} {'generations':>12}")
    for f in report.formation:
        print(f"  {f.members:>8} {f.seconds:>9.3f} {f.generations:>12}")
    for title, rows in (("heartbeats", report.heartbeats), ("offset commits", report.commits)):
        print()
        print(f"{title} (closed loop over the group's members)")
        print(f"  {'in flight':>9} {'per second':>11} {'p50 ms':>8} {'p99 ms':>8}")
        for r in rows:
            print(f"  {r.concurrency:>9} {r.per_second:>11} {r.p50_ms:>8.3f} {r.p99_ms:>8.3f}")
    print()
    print(
        f"heartbeats/s with p99 < {report.heartbeat_target_p99_ms:g} ms: "
        f"{report.heartbeats_per_second_at_target:.0f}"
    )


def main(
    *,
    json_output: bool = False,
    bootstrap: str | None = None,
    sizes: Sequence[int] = (100, 1000),
    seconds: float = 2.0,
    target_p99_ms: float = 5.0,
    fsync: bool = False,
) -> int:
    report = run(
        bootstrap=bootstrap,
        sizes=sizes,
        seconds=seconds,
        target_p99_ms=target_p99_ms,
        fsync=fsync,
    )
    if json_output:
        print(json.dumps(asdict(report), indent=2))
    else:
        _print(report)
    return 0


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(prog="python -m regroup.bench.coordinator", description=__doc__)
    parser.add_argument(
        "--bootstrap", default=None, help="host:port of a running broker (default: start one)"
    )
    parser.add_argument("--sizes", default="100,1000", help="group sizes to form (default: 100,1000)")
    parser.add_argument("--seconds", type=float, default=2.0, help="seconds per load step (default: 2)")
    parser.add_argument("--target-p99-ms", type=float, default=5.0, help="heartbeat p99 target (default: 5)")
    parser.add_argument("--fsync", action="store_true", help="log.flush.interval.messages=1 on the broker")
    parser.add_argument("--json", action="store_true", help="print JSON")
    ns = parser.parse_args()
    sys.exit(
        main(
            json_output=ns.json,
            bootstrap=ns.bootstrap,
            sizes=[int(s) for s in ns.sizes.split(",")],
            seconds=ns.seconds,
            target_p99_ms=ns.target_p99_ms,
            fsync=ns.fsync,
        )
    )
