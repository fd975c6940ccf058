"""The shard runner and coordinator runtime over a real LogManager with a manual clock: durability before
replies, append failures and their restore paths, timers, load/unload/reload, expiration."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from regroup.group.effects import CoordinatorRecord, Reply, Result, TimerKey, TimerKind
from regroup.group.state import GroupState
from regroup.protocol.errors import ErrorCode, KafkaError
from regroup.protocol.messages.heartbeat import HeartbeatRequest, HeartbeatResponse
from regroup.protocol.messages.offset_fetch import OffsetFetchResponseGroup
from regroup.protocol.record_batch import Record as BatchRecord
from regroup.protocol.record_batch import build_batch, decode_batches
from regroup.runtime.coordinator import CoordinatorConfig, PartitionState
from regroup.runtime.shard_runner import WriteBehind, append_error
from runtime.support import (
    HOST,
    Env,
    commit,
    commit_request,
    coordinator_env,
    form_group,
    heartbeat,
    join,
    join_request,
    leave,
    partition_errors,
    storage_error,
    subscription,
)

GROUP = "g"


def run(coro: object) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


async def fetch(env: Env, group_id: str, *tps: tuple[str, int]) -> dict[tuple[str, int], int]:
    topics: dict[str, list[int]] = {}
    for t, p in tps:
        topics.setdefault(t, []).append(p)
    (group,) = await env.coord.offset_fetch([(group_id, list(topics.items()))], False, 9)
    assert isinstance(group, OffsetFetchResponseGroup)
    assert group.error_code == ErrorCode.NONE
    return {(t.name, p.partition_index): p.committed_offset for t in group.topics for p in t.partitions}


async def until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.001)


def log_records(env: Env, partition: int = 0) -> list[tuple[bytes | None, bytes | None, int]]:
    plog = env.plog(partition)
    out = []
    offset = plog.log_start_offset
    while offset < plog.log_end_offset:
        data = plog.read(offset, 1 << 20).data
        for batch in decode_batches(data):
            out.extend((r.key, r.value, r.timestamp) for r in batch.records)
            offset = batch.next_offset
    return out


# ------------------------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("raised", "expected"),
    [
        (KafkaError(ErrorCode.KAFKA_STORAGE_ERROR), ErrorCode.NOT_COORDINATOR),
        (KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER), ErrorCode.NOT_COORDINATOR),
        (OSError("disk gone"), ErrorCode.NOT_COORDINATOR),
        (KafkaError(ErrorCode.MESSAGE_TOO_LARGE), ErrorCode.UNKNOWN_SERVER_ERROR),
        (KafkaError(ErrorCode.RECORD_LIST_TOO_LARGE), ErrorCode.UNKNOWN_SERVER_ERROR),
        (KafkaError(ErrorCode.INVALID_FETCH_SIZE), ErrorCode.UNKNOWN_SERVER_ERROR),
        (KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), ErrorCode.COORDINATOR_NOT_AVAILABLE),
        (KafkaError(ErrorCode.NOT_ENOUGH_REPLICAS), ErrorCode.COORDINATOR_NOT_AVAILABLE),
        (KafkaError(ErrorCode.REQUEST_TIMED_OUT), ErrorCode.COORDINATOR_NOT_AVAILABLE),
        (KafkaError(ErrorCode.NETWORK_EXCEPTION), ErrorCode.COORDINATOR_LOAD_IN_PROGRESS),
        (RuntimeError("bug"), ErrorCode.UNKNOWN_SERVER_ERROR),
    ],
)
def test_append_errors_map_as_kafka_maps_them(raised: BaseException, expected: ErrorCode) -> None:
    assert append_error(raised) is expected


# ------------------------------------------------------------------------------------------- durability


def test_commit_reply_waits_for_its_fsync_while_the_lane_goes_on(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with coordinator_env(tmp_path, flush_messages=1, slow_flush=True) as env:
            slow = env.slow[0]
            slow.release.set()  # topic creation and loading flush nothing of ours; let setup through
            [member] = await form_group(env, GROUP)
            slow.release.clear()
            slow.started.clear()
            end_before = env.plog().log_end_offset
            pending = asyncio.ensure_future(
                commit(
                    env.coord,
                    commit_request(
                        GROUP, {("t", 0): 42}, generation_id=member.generation_id, member_id=member.member_id
                    ),
                )
            )
            # The record is appended and its fsync started, but the reply is held back.
            await asyncio.to_thread(slow.started.wait, 5)
            await asyncio.sleep(0.05)
            assert env.plog().log_end_offset == end_before + 1
            assert not pending.done()
            # The lane is not blocked: a heartbeat and a timer fire are handled meanwhile...
            runner = env.coord.runner(0)
            assert runner is not None
            events = runner.stats.events
            hb = asyncio.ensure_future(heartbeat(env.coord, GROUP, member))
            await until(lambda: runner.stats.events == events + 1)
            # ...but their replies are released in order, after the fsync that covers the commit.
            assert not hb.done()
            slow.release.set()
            response = await asyncio.wait_for(pending, 5)
            assert partition_errors(response) == [ErrorCode.NONE]
            assert (await asyncio.wait_for(hb, 5)).error_code == ErrorCode.NONE
            assert env.plog().recovery_point >= end_before + 1
            assert await fetch(env, GROUP, ("t", 0)) == {("t", 0): 42}

    run(scenario())


def test_a_heartbeat_never_waits_for_another_groups_fsync(tmp_path: Path) -> None:
    """Group a's commit is appended and its fsync hangs. Group b's heartbeat, and a heartbeat behind a
    commit of group c that could not even be appended yet (the fsync holds the partition), are answered at
    once; a's own offsets are read only once they are durable."""

    async def scenario() -> None:
        async with coordinator_env(tmp_path, flush_messages=1, slow_flush=True) as env:
            slow = env.slow[0]
            slow.release.set()
            [a] = await form_group(env, "a")
            [b] = await form_group(env, "b")
            [c] = await form_group(env, "c")
            slow.release.clear()
            slow.started.clear()
            end_before = env.plog().log_end_offset
            a_commit = asyncio.ensure_future(
                commit(
                    env.coord,
                    commit_request("a", {("t", 0): 1}, generation_id=a.generation_id, member_id=a.member_id),
                )
            )
            await asyncio.to_thread(slow.started.wait, 5)
            assert env.plog().log_end_offset == end_before + 1
            hb = await asyncio.wait_for(heartbeat(env.coord, "b", b), 5)
            assert hb.error_code == ErrorCode.NONE
            c_commit = asyncio.ensure_future(
                commit(
                    env.coord,
                    commit_request("c", {("t", 0): 3}, generation_id=c.generation_id, member_id=c.member_id),
                )
            )
            # The lane is not stuck behind c's append: b's next heartbeat is answered while the fsync hangs.
            assert (await asyncio.wait_for(heartbeat(env.coord, "b", b), 5)).error_code == ErrorCode.NONE
            assert env.plog().log_end_offset == end_before + 1  # c's batch waits for the partition
            a_fetch = asyncio.ensure_future(fetch(env, "a", ("t", 0)))
            a_heartbeat = asyncio.ensure_future(heartbeat(env.coord, "a", a))
            await asyncio.sleep(0.05)
            assert not any(f.done() for f in (a_commit, c_commit, a_fetch, a_heartbeat))
            slow.release.set()
            assert partition_errors(await asyncio.wait_for(a_commit, 5)) == [ErrorCode.NONE]
            assert partition_errors(await asyncio.wait_for(c_commit, 5)) == [ErrorCode.NONE]
            assert await asyncio.wait_for(a_fetch, 5) == {("t", 0): 1}
            assert (await asyncio.wait_for(a_heartbeat, 5)).error_code == ErrorCode.NONE
            assert env.plog().log_end_offset == end_before + 2
            assert await fetch(env, "c", ("t", 0)) == {("t", 0): 3}

    run(scenario())


def test_a_deferred_append_that_fails_fails_the_partition(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with coordinator_env(tmp_path, flush_messages=1, slow_flush=True, faulty=True) as env:
            slow = env.slow[0]
            slow.release.set()
            await env.settle()
            slow.release.clear()
            slow.started.clear()
            first = asyncio.ensure_future(commit(env.coord, commit_request("a", {("t", 0): 1})))
            await asyncio.to_thread(slow.started.wait, 5)
            env.faulty[0].fail_next.append(storage_error())
            second = asyncio.ensure_future(commit(env.coord, commit_request("b", {("t", 0): 2})))
            await asyncio.sleep(0.05)
            slow.release.set()
            assert partition_errors(await asyncio.wait_for(first, 5)) == [ErrorCode.NONE]
            assert partition_errors(await asyncio.wait_for(second, 5)) == [ErrorCode.NOT_COORDINATOR]
            await until(lambda: env.coord.state(0) is not PartitionState.ACTIVE)

    run(scenario())


def test_concurrent_commits_share_one_fsync(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with coordinator_env(tmp_path, flush_messages=1, slow_flush=True) as env:
            slow = env.slow[0]
            slow.release.set()
            await env.settle()
            calls = slow.calls
            slow.release.clear()
            first = asyncio.ensure_future(commit(env.coord, commit_request("a", {("t", 0): 1})))
            await asyncio.to_thread(slow.started.wait, 5)
            # While that fsync runs, ten more commits arrive; they are appended after it and share one.
            others = [
                asyncio.ensure_future(commit(env.coord, commit_request(f"g{i}", {("t", 0): i})))
                for i in range(10)
            ]
            await asyncio.sleep(0.05)
            slow.release.set()
            responses = await asyncio.wait_for(asyncio.gather(first, *others), 5)
            assert all(partition_errors(r) == [ErrorCode.NONE] for r in responses)
            assert slow.calls - calls == 2

    run(scenario())


def _batches_since(env: Env, offset: int) -> list[int]:
    """The record count of each batch of ``__consumer_offsets-0`` from ``offset`` on."""
    return [len(batch.records) for batch in decode_batches(env.plog().read(offset, 1 << 20).data)]


def test_writes_of_one_loop_step_share_one_append_when_they_wait_for_a_flush(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with coordinator_env(tmp_path, flush_messages=1) as env:
            runner = env.coord.runner(0)
            assert runner is not None
            end = env.plog().log_end_offset
            # Five commits in one loop step: the first is appended at once, the other four linger and go
            # in one batch when the step ends; every reply waits for the fsync that covers it.
            pending = [
                env.coord.offset_commit("client", HOST, 9, commit_request(f"g{i}", {("t", 0): 10 + i}))
                for i in range(5)
            ]
            assert not any(p.done() for p in pending)
            assert env.plog().log_end_offset == end + 1
            responses = await asyncio.wait_for(asyncio.gather(*pending), 5)
            assert all(partition_errors(r) == [ErrorCode.NONE] for r in responses)
            assert _batches_since(env, end) == [1, 4]
            assert runner.stats.lingered == 4
            assert env.plog().recovery_point == end + 5
            for i in range(5):
                assert await fetch(env, f"g{i}", ("t", 0)) == {("t", 0): 10 + i}
        # The shared batch is an ordinary part of the log: a reload replays it.
        async with coordinator_env(tmp_path, flush_messages=1) as env:
            for i in range(5):
                assert await fetch(env, f"g{i}", ("t", 0)) == {("t", 0): 10 + i}

    run(scenario())


def test_an_event_whose_lingering_records_leave_before_it_ends_is_still_answered(tmp_path: Path) -> None:
    """An event lingers, then its continuation writes a batch of its own, which sends the shared batch
    ahead (here to the backlog, an fsync running) and then fails: the event's reply must follow where its
    first records went, not the shared batch they left."""

    async def scenario() -> None:
        async with coordinator_env(tmp_path, flush_messages=1, slow_flush=True) as env:
            slow = env.slow[0]
            slow.release.set()
            await env.settle()
            slow.release.clear()
            runner = env.coord.runner(0)
            assert runner is not None

            def two_writes(now: int) -> Result[str]:
                def then_too_large(error: ErrorCode | None) -> Result[str]:
                    huge = CoordinatorRecord(b"\x7f\x7fhuge", b"x" * 1_100_000)
                    return Result(records=(huge,), reply="second", on_append=lambda e: Result(reply=repr(e)))

                small = CoordinatorRecord(b"\x7f\x7fsmall", b"v")
                return Result(records=(small,), reply="first", on_append=then_too_large)

            first = env.coord.offset_commit("client", HOST, 9, commit_request("a", {("t", 0): 1}))
            answer = runner.call(lambda code: f"error {code.name}", two_writes)
            assert runner.stats.lingered == 1
            slow.release.set()
            assert partition_errors(await asyncio.wait_for(first, 5)) == [ErrorCode.NONE]
            assert await asyncio.wait_for(answer, 5) == repr(ErrorCode.UNKNOWN_SERVER_ERROR)

    run(scenario())


def test_writes_that_wait_for_no_flush_are_appended_and_answered_one_by_one(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with coordinator_env(tmp_path) as env:  # flush.messages = Long.MAX
            runner = env.coord.runner(0)
            assert runner is not None
            end = env.plog().log_end_offset
            pending = [
                env.coord.offset_commit("client", HOST, 9, commit_request(f"g{i}", {("t", 0): i}))
                for i in range(3)
            ]
            assert all(p.done() for p in pending)
            assert _batches_since(env, end) == [1, 1, 1]
            assert runner.stats.lingered == 0

    run(scenario())


def test_a_shared_batch_that_fails_to_append_fails_the_partition(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with coordinator_env(tmp_path, flush_messages=1, faulty=True) as env:
            first = env.coord.offset_commit("client", HOST, 9, commit_request("a", {("t", 0): 1}))
            env.faulty[0].fail_next.append(storage_error())  # the step's shared batch
            later = [
                env.coord.offset_commit("client", HOST, 9, commit_request(g, {("t", 0): 2}))
                for g in ("b", "c")
            ]
            for response in await asyncio.wait_for(asyncio.gather(*later), 5):
                assert partition_errors(response) == [ErrorCode.NOT_COORDINATOR]
            await asyncio.wait_for(first, 5)
            await until(lambda: env.coord.state(0) is not PartitionState.ACTIVE)
            # Reloading rebuilds the state from the log, which never got the lingering commits.
            await env.settle()
            await env.coord.load(0)
            assert await fetch(env, "a", ("t", 0)) == {("t", 0): 1}
            assert await fetch(env, "b", ("t", 0)) == {("t", 0): -1}
            assert await fetch(env, "c", ("t", 0)) == {("t", 0): -1}

    run(scenario())


def test_writes_behind_the_reads_of_a_step_are_answered_at_once_and_appended_as_one_batch_when_it_ends(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        behind = WriteBehind()
        async with coordinator_env(tmp_path, write_behind=behind) as env:
            runner = env.coord.runner(0)
            assert runner is not None
            end = env.plog().log_end_offset
            released: list[tuple[str, bool]] = []
            pending = []
            for read, groups in (("a", range(3)), ("b", range(3, 5))):  # two connections' reads, one step
                behind.begin()
                pending += [
                    env.coord.offset_commit("client", HOST, 9, commit_request(f"g{i}", {("t", 0): 10 + i}))
                    for i in groups
                ]
                behind.end()
                assert behind.holding
                behind.hold(lambda ok, read=read: released.append((read, ok)))
            # Answered in the caller's step, the records not in the log yet: the connections hold the
            # replies until the step's end has appended them.
            assert all(p.done() for p in pending)
            assert all(partition_errors(p.result()) == [ErrorCode.NONE] for p in pending)
            assert env.plog().log_end_offset == end
            assert released == []
            await asyncio.sleep(0)
            assert released == [("a", True), ("b", True)]
            assert not behind.holding
            assert _batches_since(env, end) == [5]
            assert runner.stats.written_behind == 5
            for i in range(5):
                assert await fetch(env, f"g{i}", ("t", 0)) == {("t", 0): 10 + i}
            # Outside a read, a write is appended at once as before.
            await commit(env.coord, commit_request("h", {("t", 0): 1}))
            assert _batches_since(env, end) == [5, 1]
        async with coordinator_env(tmp_path) as env:
            for i in range(5):
                assert await fetch(env, f"g{i}", ("t", 0)) == {("t", 0): 10 + i}

    run(scenario())


def test_a_write_between_the_reads_of_a_step_appends_their_open_batch_first(tmp_path: Path) -> None:
    async def scenario() -> None:
        behind = WriteBehind()
        async with coordinator_env(tmp_path, write_behind=behind) as env:
            end = env.plog().log_end_offset
            behind.begin()
            read = env.coord.offset_commit("client", HOST, 9, commit_request("a", {("t", 0): 1}))
            behind.end()
            assert read.done()
            assert env.plog().log_end_offset == end
            # A write outside any read (a timer's, an admin's) in the same step: the log keeps event order.
            outside = env.coord.offset_commit("client", HOST, 9, commit_request("b", {("t", 0): 2}))
            assert outside.done()
            assert _batches_since(env, end) == [1, 1]
            assert behind.holding  # (what was held still waits for the step's end, which appends nothing)
            assert behind.flush()
            assert _batches_since(env, end) == [1, 1]
            assert await fetch(env, "a", ("t", 0)) == {("t", 0): 1}
            assert await fetch(env, "b", ("t", 0)) == {("t", 0): 2}

    run(scenario())


def test_a_write_behind_append_that_fails_closes_the_held_and_fails_the_partition(tmp_path: Path) -> None:
    async def scenario() -> None:
        behind = WriteBehind()
        async with coordinator_env(tmp_path, faulty=True, write_behind=behind) as env:
            await commit(env.coord, commit_request("a", {("t", 0): 1}))
            env.faulty[0].fail_next.append(storage_error())
            behind.begin()
            answered = env.coord.offset_commit("client", HOST, 9, commit_request("a", {("t", 0): 2}))
            behind.end()
            assert answered.done()  # (a reply the connection must now drop)
            released: list[bool] = []
            behind.hold(released.append)
            await asyncio.sleep(0)
            assert released == [False]
            await until(lambda: env.coord.state(0) is not PartitionState.ACTIVE)
            later = await commit(env.coord, commit_request("a", {("t", 0): 3}))
            assert partition_errors(later) == [ErrorCode.NOT_COORDINATOR]
            await env.settle()
            await env.coord.load(0)
            assert await fetch(env, "a", ("t", 0)) == {("t", 0): 1}
            # The next step starts clean.
            behind.begin()
            env.coord.offset_commit("client", HOST, 9, commit_request("a", {("t", 0): 4}))
            behind.end()
            assert behind.flush()
            assert await fetch(env, "a", ("t", 0)) == {("t", 0): 4}

    run(scenario())


@pytest.mark.parametrize("fails", [False, True])
def test_a_write_behind_that_releases_other_replies_is_appended_before_them(
    tmp_path: Path, fails: bool
) -> None:
    """An event of a read that answers parked requests of other connections (a leave completing a join
    phase, say) has its records appended before those replies are released, not at the read's end."""

    async def scenario() -> None:
        behind = WriteBehind()
        async with coordinator_env(tmp_path, faulty=True, write_behind=behind) as env:
            runner = env.coord.runner(0)
            assert runner is not None

            def park(now: int) -> Result[str]:
                return Result()

            def write_and_answer(now: int) -> Result[str]:
                record = CoordinatorRecord(b"\x7f\x7fbehind", b"value")
                return Result(records=(record,), reply="mine", effects=(Reply(7, "theirs"),))

            parked = runner.call(lambda code: f"error {code.name}", park, ticket=7)
            await env.settle()
            assert not parked.done()
            end = env.plog().log_end_offset
            if fails:
                env.faulty[0].fail_next.append(storage_error())
            behind.begin()
            mine = runner.call(lambda code: f"error {code.name}", write_and_answer)
            if not fails:
                assert env.plog().log_end_offset == end + 1  # already, before the read ends
            behind.end()
            released: list[bool] = []
            assert behind.holding  # (its batch went ahead; the step's end appends nothing more)
            behind.hold(released.append)
            if fails:
                assert await asyncio.wait_for(parked, 5) == "error NOT_COORDINATOR"
                assert await asyncio.wait_for(mine, 5) == "error NOT_COORDINATOR"
            else:
                assert await asyncio.wait_for(parked, 5) == "theirs"
                assert await asyncio.wait_for(mine, 5) == "mine"
            await asyncio.sleep(0)
            assert released == [not fails]  # a failed append behind a read closes the held connections
            assert behind.flush()
            assert not behind.holding

    run(scenario())


def test_writes_that_wait_for_a_flush_are_not_written_behind(tmp_path: Path) -> None:
    async def scenario() -> None:
        behind = WriteBehind()
        async with coordinator_env(tmp_path, flush_messages=1, write_behind=behind) as env:
            runner = env.coord.runner(0)
            assert runner is not None
            end = env.plog().log_end_offset
            behind.begin()
            pending = [
                env.coord.offset_commit("client", HOST, 9, commit_request(f"g{i}", {("t", 0): i}))
                for i in range(3)
            ]
            behind.end()
            assert not behind.holding
            assert not any(p.done() for p in pending)  # they wait for their fsync
            responses = await asyncio.wait_for(asyncio.gather(*pending), 5)
            assert all(partition_errors(r) == [ErrorCode.NONE] for r in responses)
            assert runner.stats.written_behind == 0
            assert _batches_since(env, end) == [1, 2]

    run(scenario())


def test_replies_wait_for_nothing_when_the_flush_policy_asks_for_no_fsync(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with coordinator_env(tmp_path, slow_flush=True) as env:  # flush.messages = Long.MAX
            response = await asyncio.wait_for(commit(env.coord, commit_request("a", {("t", 0): 7})), 5)
            assert partition_errors(response) == [ErrorCode.NONE]
            assert env.slow[0].calls == 0

    run(scenario())


def test_failed_fsync_answers_not_coordinator_and_unloads_the_partition(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with coordinator_env(tmp_path, flush_messages=1, slow_flush=True) as env:
            slow = env.slow[0]
            slow.fail = OSError("fsync failed")
            slow.release.set()
            response = await asyncio.wait_for(commit(env.coord, commit_request("a", {("t", 0): 7})), 5)
            assert partition_errors(response) == [ErrorCode.NOT_COORDINATOR]
            await env.settle()
            assert env.coord.state(0) in (PartitionState.UNLOADED, PartitionState.FAILED)
            later = await commit(env.coord, commit_request("a", {("t", 0): 8}))
            assert partition_errors(later) == [ErrorCode.NOT_COORDINATOR]
            # An operator (or a test) brings it back; the record written before the failed fsync is there.
            slow.fail = None
            await env.coord.load(0)
            assert env.coord.state(0) is PartitionState.ACTIVE

    run(scenario())


# ------------------------------------------------------------------------------------------- append failures


def test_failed_commit_append_answers_the_mapped_error_and_stores_nothing(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with coordinator_env(tmp_path, faulty=True) as env:
            env.faulty[0].fail_next.append(storage_error())
            response = await commit(env.coord, commit_request("a", {("t", 0): 5}))
            assert partition_errors(response) == [ErrorCode.NOT_COORDINATOR]
            assert await fetch(env, "a", ("t", 0)) == {("t", 0): -1}
            env.faulty[0].fail_next.append(KafkaError(ErrorCode.MESSAGE_TOO_LARGE))
            response = await commit(env.coord, commit_request("a", {("t", 0): 6}))
            assert partition_errors(response) == [ErrorCode.UNKNOWN_SERVER_ERROR]
            response = await commit(env.coord, commit_request("a", {("t", 0): 7}))
            assert partition_errors(response) == [ErrorCode.NONE]
            assert await fetch(env, "a", ("t", 0)) == {("t", 0): 7}

    run(scenario())


def test_oversized_batch_is_refused_before_the_log(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with coordinator_env(tmp_path) as env:
            big = "x" * 2_000_000
            coord = env.coord
            response = await commit(
                coord,
                commit_request("a", {("t", 0): 5}, metadata=big),
            )
            # offset.metadata.max.bytes is checked by the core first.
            assert partition_errors(response) == [ErrorCode.OFFSET_METADATA_TOO_LARGE]

    run(scenario())


def test_static_member_replacement_is_restored_when_its_append_fails_kafka_13581(tmp_path: Path) -> None:
    """A static member rejoining with an unknown member id in Stable replaces the old id without a
    rebalance, persisting first. If that append fails, the old member id, protocols and both timeouts are
    restored (the Scala coordinator put the *new* protocols back: KAFKA-13581)."""

    async def scenario() -> None:
        async with coordinator_env(tmp_path, faulty=True) as env:
            old_sub, new_sub = subscription("t"), subscription("t", "u")
            [old] = await form_group(
                env,
                GROUP,
                instance_ids=["i1"],
                protocols=(("range", old_sub),),
                session_timeout_ms=10_000,
                rebalance_timeout_ms=20_000,
            )
            before = env.coord.group(GROUP)
            assert before is not None
            assert before.state is GroupState.STABLE
            env.faulty[0].fail_next.append(storage_error())
            response = await join(
                env.coord,
                join_request(
                    GROUP,
                    instance_id="i1",
                    protocols=(("range", new_sub),),
                    session_timeout_ms=15_000,
                    rebalance_timeout_ms=30_000,
                ),
            )
            assert response.error_code == ErrorCode.NOT_COORDINATOR
            assert response.member_id == ""
            assert response.generation_id == old.generation_id
            after = env.coord.group(GROUP)
            assert after is not None
            assert after.state is GroupState.STABLE
            assert after.generation_id == before.generation_id
            [member] = after.members
            assert member.member_id == old.member_id
            assert [tuple(p) for p in member.protocols] == [("range", old_sub)]
            assert (member.session_timeout_ms, member.rebalance_timeout_ms) == (10_000, 20_000)
            # The old member id keeps working, and its session timer is armed again.
            assert (await heartbeat(env.coord, GROUP, old, "i1")).error_code == ErrorCode.NONE
            shard = env.coord.shard(GROUP)
            assert shard is not None
            assert TimerKey(TimerKind.HEARTBEAT, GROUP, old.member_id) in shard.armed_timers()
            # Nothing about the failed replacement reached the log: a reload sees the old member.
            await env.coord.unload(0)
            await env.coord.load(0)
            reloaded = env.coord.group(GROUP)
            assert reloaded is not None
            assert [m.member_id for m in reloaded.members] == [old.member_id]

    run(scenario())


# ------------------------------------------------------------------------------------------- timers


def test_session_expiry_fires_through_the_lane_when_the_manual_clock_advances(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with coordinator_env(tmp_path) as env:
            members = await form_group(env, GROUP, 2, session_timeout_ms=10_000)
            await env.advance(5_000)
            assert (await heartbeat(env.coord, GROUP, members[0])).error_code == ErrorCode.NONE
            await env.advance(5_001)  # members[1] has been silent for 10 001 ms
            group = env.coord.group(GROUP)
            assert group is not None
            assert [m.member_id for m in group.members] == [members[0].member_id]
            assert group.state is GroupState.PREPARING_REBALANCE

    run(scenario())


def test_a_timer_fire_overtaken_by_a_heartbeat_is_dropped(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with coordinator_env(tmp_path) as env:
            [member] = await form_group(env, GROUP, session_timeout_ms=10_000)
            runner = env.coord.runner(0)
            assert runner is not None
            await env.advance(9_999)
            # The heartbeat is queued first (behind a read, so the lane is not idle and does not answer it
            # at once); then the session deadline passes and the fire is queued behind it. The heartbeat
            # re-arms the key, so the fire is stale when the lane reaches it.
            ahead = runner.read(lambda code: None, lambda shard: None)
            hb = runner.call(
                lambda code: HeartbeatResponse(error_code=code),
                runner.shard.heartbeat,
                _ctx(),
                HeartbeatRequest(
                    group_id=GROUP, generation_id=member.generation_id, member_id=member.member_id
                ),
            )
            assert not hb.done()
            env.clock.advance(2)
            await env.settle()
            await ahead
            assert (await hb).error_code == ErrorCode.NONE
            assert runner.stats.stale_timer_fires == 1
            group = env.coord.group(GROUP)
            assert group is not None
            assert group.state is GroupState.STABLE
            assert [m.member_id for m in group.members] == [member.member_id]

    run(scenario())


def test_parked_join_is_answered_when_its_partition_is_unloaded(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with coordinator_env(tmp_path, group_initial_rebalance_delay_ms=3_000) as env:
            first = await join(env.coord, join_request(GROUP))
            parked = asyncio.ensure_future(join(env.coord, join_request(GROUP, first.member_id)))
            await env.settle()
            assert not parked.done()
            await env.coord.unload(0)
            response = await asyncio.wait_for(parked, 5)
            assert response.error_code == ErrorCode.NOT_COORDINATOR
            assert response.member_id == first.member_id

    run(scenario())


# ------------------------------------------------------------------------------------------- load / unload


def test_loading_answers_load_in_progress_heartbeats_none_and_unload_not_coordinator(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with coordinator_env(tmp_path) as env:
            members = await form_group(env, GROUP, 2)
            for i in range(200):
                await commit(
                    env.coord,
                    commit_request(
                        GROUP,
                        {("t", i % 4): i},
                        generation_id=members[0].generation_id,
                        member_id=members[0].member_id,
                    ),
                )
        # A new coordinator over the same log: requests race the load.
        config = CoordinatorConfig(offsets_load_buffer_size=256)  # many small reads: the load yields often
        async with coordinator_env(tmp_path, load=False, config=config) as env:
            assert env.coord.state(0) is PartitionState.LOADING
            response = await commit(env.coord, commit_request("other", {("t", 0): 1}))
            assert partition_errors(response) == [ErrorCode.COORDINATOR_LOAD_IN_PROGRESS]
            assert (await heartbeat(env.coord, GROUP, members[0])).error_code == ErrorCode.NONE
            error, groups = await env.coord.list_groups()
            assert (error, groups) == (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, [])
            [described] = await env.coord.describe_groups([GROUP], 5)
            assert described.error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
            [stats] = await env.coord.wait_loaded()
            assert stats.records > 200
            assert env.coord.state(0) is PartitionState.ACTIVE
            assert await fetch(env, GROUP, ("t", 0), ("t", 3)) == {("t", 0): 196, ("t", 3): 199}
            group = env.coord.group(GROUP)
            assert group is not None
            assert group.state is GroupState.STABLE
            assert group.generation_id == members[0].generation_id
            for m in members:  # loaded members keep their session: no rejoin needed
                assert (await heartbeat(env.coord, GROUP, m)).error_code == ErrorCode.NONE

            await env.coord.unload(0)
            assert env.coord.state(0) is PartitionState.UNLOADED
            assert (await heartbeat(env.coord, GROUP, members[0])).error_code == ErrorCode.NOT_COORDINATOR
            response = await commit(env.coord, commit_request(GROUP, {("t", 0): 1}))
            assert partition_errors(response) == [ErrorCode.NOT_COORDINATOR]
            error, groups = await env.coord.list_groups()
            assert (error, groups) == (ErrorCode.NONE, [])  # unloaded partitions are skipped

    run(scenario())


def test_state_is_identical_after_unload_and_reload(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with coordinator_env(tmp_path, offsets_topic_num_partitions=3) as env:
            coord = env.coord
            groups = ["alpha", "beta", "gamma", "delta"]
            for g in groups:
                members = await form_group(env, g, 2)
                await commit(
                    coord,
                    commit_request(
                        g,
                        {("t", 0): len(g), ("t", 1): 2 * len(g)},
                        generation_id=members[0].generation_id,
                        member_id=members[1].member_id,
                    ),
                )
            await commit(coord, commit_request("simple", {("u", 0): 9}))  # a simple group
            await leave(coord, "beta", (coord.group("beta") or _never()).members[0].member_id)
            await env.settle()

            def snapshot() -> dict[str, object]:
                out: dict[str, object] = {}
                for g in [*groups, "simple"]:
                    shard = coord.shard(g)
                    assert shard is not None
                    out[g] = (shard.group(g), shard.offsets(g))
                return out

            before = snapshot()
            partitions = sorted({coord.partition_for(g) for g in [*groups, "simple"]})
            for p in partitions:
                await coord.unload(p)
            for p in partitions:
                await coord.load(p)
            await env.settle()
            after = snapshot()
            # "beta" is mid-rebalance (PreparingRebalance), which loads as its last persisted generation.
            beta_before, beta_after = before.pop("beta"), after.pop("beta")
            assert beta_after[1] == beta_before[1]  # type: ignore[index]
            # A simple group has no GroupMetadata record, so its state timestamp is not persisted.
            simple_before, simple_after = before.pop("simple"), after.pop("simple")
            assert simple_before[1] == simple_after[1]  # type: ignore[index]
            assert before == after

    run(scenario())


# ------------------------------------------------------------------------------------------- expiration


def test_expiration_job_deletes_expired_offsets_and_empty_groups(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with coordinator_env(
            tmp_path, offsets_retention_ms=60_000, offsets_retention_check_interval_ms=10_000
        ) as env:
            await commit(env.coord, commit_request("simple", {("t", 0): 3, ("t", 1): 4}))
            await env.advance(30_000)
            assert await fetch(env, "simple", ("t", 0)) == {("t", 0): 3}
            await env.advance(40_000)  # 70 s after the commit; the check at 70 s expires it
            assert await fetch(env, "simple", ("t", 0), ("t", 1)) == {("t", 0): -1, ("t", 1): -1}
            assert env.coord.group("simple") is None
            tombstones = [key for key, value, _ in log_records(env) if value is None]
            assert len(tombstones) == 3  # two offsets and the group
        # The tombstones are replayed on the next load.
        async with coordinator_env(tmp_path) as env:
            assert await fetch(env, "simple", ("t", 0)) == {("t", 0): -1}

    run(scenario())


def test_records_are_written_as_one_create_time_batch_per_event(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with coordinator_env(tmp_path) as env:
            end = env.plog().log_end_offset
            await commit(env.coord, commit_request("a", {("t", 0): 1, ("t", 1): 2, ("u", 0): 3}))
            data = env.plog().read(end, 1 << 20).data
            [batch] = decode_batches(data)
            assert len(batch.records) == 3
            assert {r.timestamp for r in batch.records} == {env.clock.now_ms()}
            assert batch.producer_id == -1

    run(scenario())


def _ctx() -> object:
    from regroup.group.context import GroupRequestContext

    return GroupRequestContext("client", HOST, 4)


def _never() -> object:
    raise AssertionError("unreachable")


def test_unreadable_records_are_skipped_on_load(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with coordinator_env(tmp_path) as env:
            await commit(env.coord, commit_request("a", {("t", 0): 5}))
            env.plog().append(
                build_batch([BatchRecord(0, env.clock.now_ms(), b"\x7f\x7f\x00", b"garbage")]),
                now_ms=env.clock.now_ms(),
                validate=False,
            )
            await commit(env.coord, commit_request("a", {("t", 1): 6}))
        async with coordinator_env(tmp_path) as env:
            [stats] = await env.coord.wait_loaded()
            assert stats.skipped == 1
            assert await fetch(env, "a", ("t", 0), ("t", 1)) == {("t", 0): 5, ("t", 1): 6}

    run(scenario())


def test_reply_waiting_past_the_commit_timeout_is_coordinator_not_available(tmp_path: Path) -> None:
    async def scenario() -> None:
        config = CoordinatorConfig(offsets_commit_timeout_ms=100)
        async with coordinator_env(tmp_path, flush_messages=1, slow_flush=True, config=config) as env:
            slow = env.slow[0]
            response = await asyncio.wait_for(commit(env.coord, commit_request("a", {("t", 0): 7})), 5)
            assert partition_errors(response) == [ErrorCode.COORDINATOR_NOT_AVAILABLE]
            # The write was not undone: once the disk catches up it is there (an indeterminate commit).
            slow.release.set()
            await env.settle()
            assert await fetch(env, "a", ("t", 0)) == {("t", 0): 7}
            runner = env.coord.runner(0)
            assert runner is not None
            assert runner.stats.flush_timeouts == 1

    run(scenario())


def test_an_idle_lane_answers_a_heartbeat_in_the_callers_loop_step(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with coordinator_env(tmp_path) as env:
            [member] = await form_group(env, GROUP)
            runner = env.coord.runner(0)
            assert runner is not None
            request = HeartbeatRequest(
                group_id=GROUP, generation_id=member.generation_id, member_id=member.member_id
            )
            answered = env.coord.heartbeat("client", HOST, 4, request)
            assert answered.done()
            assert answered.result().error_code == ErrorCode.NONE
            # Behind a queued event the heartbeat waits its turn on the lane.
            ahead = runner.read(lambda code: None, lambda shard: None)
            queued = env.coord.heartbeat("client", HOST, 4, request)
            assert not queued.done()
            await ahead
            assert (await asyncio.wait_for(queued, 5)).error_code == ErrorCode.NONE

    run(scenario())
