"""A broker killed with SIGKILL while a Stable group commits: after a restart every acknowledged commit is
returned, and the group is still Stable in the same generation, its members carrying on without a rejoin."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from broker.support import ServeProcess
from coordinator.wire import GroupClient, errors
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages.describe_groups import DescribeGroupsRequest, DescribeGroupsResponse
from regroup.protocol.messages.join_group import JoinGroupResponse
from regroup.protocol.messages.offset_fetch import OffsetFetchRequest, OffsetFetchRequestGroup
from regroup.protocol.messages.sync_group import SyncGroupResponse
from regroup.runtime.ports import free_port

GROUP = "survivors"
TOPIC = "events"
PARTITIONS = 6
RETRIABLE = {
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
}


def serve(data: Path, port: int, *extra: str) -> ServeProcess:
    overrides = [
        "group.initial.rebalance.delay.ms=500",  # the three members join one generation
        "group.min.session.timeout.ms=1000",
        "offsets.topic.num.partitions=5",
        *extra,
    ]
    args: list[str] = []
    for item in overrides:
        args += ["--override", item]
    return ServeProcess(data, *args, port=port).wait_ready()


def form_group(address: tuple[str, int], size: int) -> list[tuple[GroupClient, str, int]]:
    clients = [GroupClient(address, client_id=f"m{i}") for i in range(size)]
    ids = [c.join(GROUP, session_timeout_ms=30_000).member_id for c in clients]
    for c, member_id in zip(clients, ids, strict=True):
        c.post(c.join_request(GROUP, member_id, session_timeout_ms=30_000), 9)
    joined = [c.collect() for c in clients]
    assert all(isinstance(j, JoinGroupResponse) and j.error_code == 0 for j in joined), joined
    generation = joined[0].generation_id
    leader = joined[0].leader
    assignments = {m: str(i).encode() for i, m in enumerate(ids)}
    for c, member_id in zip(clients, ids, strict=True):
        c.post(
            c.sync_request(
                GROUP, member_id, generation, assignments=assignments if member_id == leader else {}
            ),
            5,
        )
    synced = [c.collect() for c in clients]
    assert all(isinstance(s, SyncGroupResponse) and s.error_code == 0 for s in synced), synced
    return [(c, m, generation) for c, m in zip(clients, ids, strict=True)]


def retry(call: object, timeout: float = 30.0) -> object:
    deadline = time.monotonic() + timeout
    while True:
        result = call()  # type: ignore[operator]
        if result is not None:
            return result
        assert time.monotonic() < deadline, "the coordinator did not come back"
        time.sleep(0.1)


@pytest.mark.parametrize("flush", ["default", "fsync-per-message"])
def test_sigkill_while_committing_keeps_every_acknowledged_commit_and_the_stable_group(
    tmp_path: Path, flush: str
) -> None:
    port = free_port(lasting=True)  # the broker restarts on it
    data = tmp_path / "data"
    extra = ["log.flush.interval.messages=1"] if flush != "default" else []
    proc = serve(data, port, *extra)
    address = (proc.host, proc.port)
    try:
        with GroupClient(address) as admin:
            admin.create_topic(TOPIC, PARTITIONS)
        members = form_group(address, 3)
        acked: dict[tuple[str, int], int] = {}
        attempted: dict[tuple[str, int], int] = {}
        lock = threading.Lock()
        stop = threading.Event()

        def commit_loop(index: int) -> None:
            client, member_id, generation = members[index]
            mine = [(TOPIC, p) for p in range(PARTITIONS) if p % len(members) == index]
            offset = 0
            while not stop.is_set():
                offset += 1
                with lock:
                    for tp in mine:
                        attempted[tp] = offset
                try:
                    response = client.commit(
                        GROUP, dict.fromkeys(mine, offset), generation_id=generation, member_id=member_id
                    )
                except (ConnectionError, OSError):
                    return
                assert errors(response) == [0] * len(mine), response
                with lock:
                    for tp in mine:
                        acked[tp] = offset

        threads = [threading.Thread(target=commit_loop, args=(i,), daemon=True) for i in range(len(members))]
        for t in threads:
            t.start()
        time.sleep(1.0)
        proc.kill()  # SIGKILL, mid-commit
        stop.set()
        for t in threads:
            t.join(10)
        for client, _, _ in members:
            client.close()
        assert all(v > 5 for v in acked.values()), acked

        proc = serve(data, port, *extra)
        with GroupClient(address, client_id="checker") as checker:

            def fetched() -> dict[tuple[str, int], tuple[int, int]] | None:
                response = checker.call(
                    OffsetFetchRequest(groups=[OffsetFetchRequestGroup(GROUP, topics=None)]), 9
                )
                [group] = response.groups
                if group.error_code in RETRIABLE:
                    return None
                assert group.error_code == 0
                return {
                    (t.name, p.partition_index): p.committed_offset
                    for t in group.topics
                    for p in t.partitions
                }

            offsets = retry(fetched)
            assert isinstance(offsets, dict)
            for tp, value in acked.items():
                # Acknowledged commits survive; the one in flight at the kill may or may not have.
                assert value <= offsets[tp] <= attempted[tp], (tp, value, offsets[tp], attempted[tp])

            described = checker.call(DescribeGroupsRequest(groups=[GROUP]), 5)
            assert isinstance(described, DescribeGroupsResponse)
            [group] = described.groups
            assert group.group_state == "Stable"
            assert sorted(m.member_id for m in group.members) == sorted(m for _, m, _ in members)

        # The members carry on where they were: heartbeats and commits in the same generation succeed.
        for i, (_, member_id, generation) in enumerate(members):
            with GroupClient(address, client_id=f"m{i}") as client:

                def beat(
                    client: GroupClient = client, member_id: str = member_id, generation: int = generation
                ) -> int | None:
                    code = client.heartbeat(GROUP, member_id, generation).error_code
                    return None if code in RETRIABLE else code

                assert retry(beat) == ErrorCode.NONE
                tp = (TOPIC, i)
                response = client.commit(
                    GROUP, {tp: 10_000 + i}, generation_id=generation, member_id=member_id
                )
                assert errors(response) == [0]
        with GroupClient(address) as checker:
            [group] = checker.call(DescribeGroupsRequest(groups=[GROUP]), 5).groups
            assert group.group_state == "Stable"
    finally:
        if proc.proc.poll() is None:
            code, err = proc.terminate()
            assert code == 0, err
