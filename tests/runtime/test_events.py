"""The ``__group_events`` timeline: written by the coordinator runtime, replayed after a restart, and served
by ``GroupCoordinator.history_view`` with the live in-progress rebalance."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from regroup.protocol.errors import ErrorCode
from regroup.protocol.group_events import GROUP_EVENTS_TOPIC, decode_event
from regroup.protocol.record_batch import decode_batches
from regroup.runtime.coordinator import CoordinatorConfig
from regroup.runtime.events import GroupEventsConfig
from runtime.support import Env, coordinator_env, form_group, heartbeat, join, join_request, leave

GROUP = "g"


def run(coro: object) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


async def written(env: Env) -> list[dict[str, Any]]:
    """Every event in ``__group_events`` once the writer caught up."""
    events = env.coord.group_events
    assert events is not None
    for _ in range(100):
        await asyncio.sleep(0)
    out: list[dict[str, Any]] = []
    for partition in range(events.partitions):
        plog = env.logs.partition(GROUP_EVENTS_TOPIC, partition)
        assert plog is not None
        data = plog.read(plog.log_start_offset, 1 << 20).data
        for batch in decode_batches(data):
            for rec in batch.records:
                event = decode_event(rec.key, rec.value)
                assert event is not None
                out.append(event)
    return out


def test_generations_are_written_replayed_after_a_restart_and_served_as_json(tmp_path: Path) -> None:
    async def first_run() -> dict[str, Any]:
        async with coordinator_env(tmp_path) as env:
            info = env.logs.topic(GROUP_EVENTS_TOPIC)
            assert info is not None
            assert info.internal
            assert info.config("cleanup.policy") == "delete"
            assert info.config("retention.ms") == str(7 * 86_400_000)
            (member,) = await form_group(env, GROUP, 1)
            env.clock.advance(40)
            assert (await leave(env.coord, GROUP, member.member_id)).error_code == ErrorCode.NONE
            await env.settle()
            kinds = [e["type"] for e in await written(env)]
            # the initial rebalance waits for its (here zero) delay: a started event first
            assert kinds == [
                "rebalance_started",
                "generation_completed",
                "generation_stable",
                "generation_completed",
            ]
            view = env.coord.history_view(GROUP)
            json.dumps(view)  # JSON-able
            assert view["live"] is True
            return view

    async def second_run(before: dict[str, Any]) -> None:
        async with coordinator_env(tmp_path) as env:
            events = env.coord.group_events
            assert events is not None
            await events.wait_replayed()
            after = env.coord.history_view(GROUP, before["now_ms"])
            assert after["generations"] == before["generations"]

    before = asyncio.run(first_run())
    generations = before["generations"]
    assert [g["generation_id"] for g in generations] == [1, 2]
    assert [g["cause"]["kind"] for g in generations] == ["member_joined", "member_left"]
    assert generations[0]["stable_ms"] is not None
    assert generations[1]["members"] == []
    assert generations[1]["stable_ms"] is None
    assert generations[1]["rebalance_started_ms"] == generations[0]["stable_ms"] + 40
    run(second_run(before))


def test_a_stuck_rebalance_names_the_awaited_members_and_their_time_left(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with coordinator_env(tmp_path) as env:
            a, b = await form_group(env, GROUP, 2, session_timeout_ms=6000, rebalance_timeout_ms=20_000)
            env.clock.advance(1000)
            assert (await heartbeat(env.coord, GROUP, a)).error_code == ErrorCode.NONE
            # a third member joins: a and b must rejoin; only a does
            first = await join(env.coord, join_request(GROUP, session_timeout_ms=6000))
            third = asyncio.ensure_future(join(env.coord, join_request(GROUP, first.member_id)))
            rejoin = asyncio.ensure_future(join(env.coord, join_request(GROUP, a.member_id)))
            await env.settle()
            assert not third.done()
            now = env.clock.now_ms()
            view = env.coord.history_view(GROUP, now + 500)
            progress = view["in_progress"]
            assert progress is not None
            assert view["state"] == "PreparingRebalance"
            assert progress["cause"]["kind"] == "member_joined"
            assert [m["member_id"] for m in progress["awaiting"]] == [b.member_id]
            (awaited,) = progress["awaiting"]
            # b's session (armed at its sync, 1000 ms ago) ends before the 20 s rebalance timeout
            assert awaited["evicted_by"] == "session timeout"
            assert awaited["time_left_ms"] == awaited["deadline_ms"] - (now + 500)
            assert 0 < awaited["time_left_ms"] <= 6000
            started = [e for e in await written(env) if e["type"] == "rebalance_started"]
            # persisted when the rebalance started, before a rejoined
            assert [m["member_id"] for m in started[-1]["awaiting"]] == [a.member_id, b.member_id]
            env.clock.advance(6000)
            await env.settle()
            assert third.done()
            assert rejoin.done()
            view = env.coord.history_view(GROUP)
            assert view["in_progress"] is None
            last = view["generations"][-1]
            assert last["cause"]["kind"] == "member_joined"
            assert {m["member_id"]: m["reason"] for m in last["left"]} == {
                b.member_id: "session expired (6000 ms without a heartbeat)"
            }
            assert [e["kind"] for e in last["events"]] == ["session_expired"]
            assert last["join_phase_ms"] >= 5000

    run(scenario())


def test_disabled_timeline_creates_no_topic(tmp_path: Path) -> None:
    async def scenario() -> None:
        config = CoordinatorConfig(group_events=GroupEventsConfig(enabled=False))
        async with coordinator_env(tmp_path, config=config) as env:
            await form_group(env, GROUP, 1)
            assert env.logs.topic(GROUP_EVENTS_TOPIC) is None
            assert env.coord.history_view(GROUP)["generations"] == []

    run(scenario())


# ------------------------------------------------------------------------------------ consumer groups


async def _cgh(env: Env, member_id: str, epoch: int, names: list[str] | None = None) -> Any:
    from regroup.protocol.messages.consumer_group_heartbeat import ConsumerGroupHeartbeatRequest

    joining = epoch == 0
    req = ConsumerGroupHeartbeatRequest(
        group_id=GROUP,
        member_id=member_id,
        member_epoch=epoch,
        rebalance_timeout_ms=30_000 if joining else -1,
        subscribed_topic_names=names,
        topic_partitions=[] if joining else None,
    )
    response = await env.coord.consumer_group_heartbeat("c", "/127.0.0.1", 1, req)
    assert response.error_code == ErrorCode.NONE, response
    return response


def test_consumer_group_epoch_bumps_are_written_with_their_causes(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with coordinator_env(tmp_path) as env:
            env.logs.create_topic("t", 2, {}, now_ms=env.clock.now_ms())
            a = await _cgh(env, "a", 0, ["t"])
            a = await _cgh(env, "a", a.member_epoch)
            b = await _cgh(env, "b", 0, ["t"])
            await _cgh(env, "b", b.member_epoch, ["t", "u"])  # subscription changed
            await env.advance(1000)
            env.logs.create_partitions("t", 3, now_ms=env.clock.now_ms())
            await _cgh(env, "a", a.member_epoch)  # topic metadata changed
            await _cgh(env, "b", -1)  # left
            await env.advance(45_001)  # a's session expires
            await env.settle()
            bumps = [e for e in await written(env) if e["type"] == "consumer_epoch_bumped"]
            kinds = [e["cause"]["kind"] for e in bumps]
            assert kinds == [
                "member_joined",
                "member_joined",
                "subscription_changed",
                "topic_metadata_changed",
                "member_left",
                "member_fenced_session_timeout",
            ]
            epochs = [e["group_epoch"] for e in bumps]
            assert epochs == sorted(epochs)
            assert len(set(epochs)) == len(epochs)
            first = bumps[0]
            assert first["group_type"] == "consumer"
            assert first["assignment_epoch"] == first["group_epoch"]
            (member,) = first["members"]
            assert member["member_id"] == "a"
            assert member["state"] == "STABLE"
            assert member["assigned"] == {"t": [0, 1]}
            assert bumps[1]["joined"][0]["member_id"] == "b"
            # b joins within the assignment interval: the new target assignment waits
            second = bumps[1]
            assert second["assignment_epoch"] < second["group_epoch"]
            assert second["state"] == "Assigning"
            # only the members the bump's operation changed are listed; the group's totals are counted
            progress = {m["member_id"]: m for m in second["members"]}
            assert set(progress) == {"b"}
            assert progress["b"]["assigned"] == {}
            assert second["members_listed"] == "changed"
            # both members are at the (old) assignment epoch: the new target assignment is what waits
            assert (second["member_count"], second["waiting_count"]) == (2, 0)
            assert bumps[4]["left"] == [
                {"member_id": "b", "group_instance_id": None, "reason": "member b left the group"}
            ]
            assert bumps[5]["cause"]["timeout_ms"] == 45_000
            assert bumps[5]["members"] == []
            assert (bumps[5]["member_count"], bumps[5]["waiting_count"]) == (0, 0)
            assert bumps[5]["state"] == "Empty"

            view = env.coord.history_view(GROUP)
            generations = view["generations"]
            assert [g["generation_id"] for g in generations] == epochs
            assert generations[-1]["cause"]["kind"] == "member_fenced_session_timeout"
            assert generations[0]["stable_ms"] is not None

    run(scenario())


def test_large_events_are_remembered_as_written_and_replayed(tmp_path: Path) -> None:
    """A generation naming many members is remembered deflated; it reads back as the record written."""

    async def remembered(env: Env) -> list[dict[str, Any]]:
        events = env.coord.group_events
        assert events is not None
        return events.events(GROUP)

    async def first_run() -> list[dict[str, Any]]:
        async with coordinator_env(tmp_path) as env:
            await form_group(env, GROUP, 40)
            await env.settle()
            on_disk = await written(env)
            completed = [e for e in on_disk if e["type"] == "generation_completed"]
            assert len(json.dumps(completed[-1])) > 1024
            assert await remembered(env) == on_disk
            return on_disk

    async def second_run(on_disk: list[dict[str, Any]]) -> None:
        async with coordinator_env(tmp_path) as env:
            events = env.coord.group_events
            assert events is not None
            await events.wait_replayed()
            assert await remembered(env) == on_disk

    asyncio.run(second_run(asyncio.run(first_run())))
