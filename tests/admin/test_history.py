"""``regroup groups --history``: the rebalance timeline read from ``__group_events``.

The scripted scenario runs real confluent-kafka consumers (subprocesses of ``history_member.py``) against
a real ``regroup serve``: members join, one is killed (session expiry), a static member is replaced, a
rebalance is stuck waiting for a killed static member, a member leaves cleanly; then the broker restarts
on the same data directory and the history reads the same.
"""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from admin.fakes import FakeAdmin, run
from broker.support import ServeProcess, running_broker
from regroup.admin.cli import main as groups_main
from regroup.admin.history import format_history
from regroup.admin.options import UsageError, parse_options

GROUP = "timeline"
TOPIC = "events-demo"
MEMBER_SCRIPT = Path(__file__).with_name("history_member.py")
SERVE_ARGS = (
    "--log-level",
    "WARNING",
    "--override",
    "group.initial.rebalance.delay.ms=0",
    "--override",
    "group.min.session.timeout.ms=500",
    "--override",
    "offsets.topic.num.partitions=3",
    "--override",
    "admin.listener=",
)


# ------------------------------------------------------------------------------------ without a broker


def test_a_cluster_without_group_events_gets_a_one_line_error() -> None:
    result = run(FakeAdmin(), "--history", "--group", "g")
    assert result.code == 1
    assert result.out == ""
    assert result.err.count("\n") == 1
    assert "__group_events" in result.err
    assert "regroup broker" in result.err


def test_a_broker_without_group_events_gets_the_one_line_error_over_the_wire(tmp_path: Path) -> None:
    with running_broker(tmp_path / "data", group_events_enable="false", admin_listener="") as broker:
        out, err = io.StringIO(), io.StringIO()
        code = groups_main(
            ["--bootstrap-server", broker.bootstrap, "--history", "--group", "g"], out=out, err=err
        )
        assert broker.broker.logs.topic("__group_events") is None
    assert code == 1
    assert out.getvalue() == ""
    assert err.getvalue() == (
        "Error: the cluster has no __group_events topic, so it keeps no rebalance history "
        "(--history needs a regroup broker)\n"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--history"], "Option [history] takes the following options: [group]"),
        (
            ["--history", "--describe", "--group", "g"],
            'Option "[history]" can\'t be used with option "[describe]"',
        ),
    ],
)
def test_history_option_errors(args: list[str], message: str) -> None:
    with pytest.raises(UsageError) as exc:
        parse_options(["--bootstrap-server", "b:1", *args], io.StringIO())
    assert str(exc.value) == message


def test_history_is_an_action_of_its_own() -> None:
    opts = parse_options(["--bootstrap-server", "b:1", "--history", "--group", "g"], io.StringIO())
    assert opts.action == "history"


def test_format_history_shows_each_generation_and_the_stuck_rebalance() -> None:
    cause = {"kind": "session_expired", "description": "member m2's session expired after 6000 ms"}
    view = {
        "group_id": "g",
        "now_ms": 10_000,
        "generations": [
            {
                "generation_id": 7,
                "protocol_name": "range",
                "leader_id": "m1",
                "members": [{"member_id": "m1", "group_instance_id": None}],
                "cause": cause,
                "events": [],
                "waited_for": ["m1"],
                "joined": [],
                "left": [{"member_id": "m2", "group_instance_id": "i2", "reason": "session expired"}],
                "rebalance_started_ms": 1000,
                "join_completed_ms": 1250,
                "join_phase_ms": 250,
                "stable_ms": 1262,
                "sync_phase_ms": 12,
                "static_replacements": [],
            }
        ],
        "in_progress": {
            "generation_id": 7,
            "cause": {"kind": "member_joined", "description": "new member m3 joined"},
            "rebalance_started_ms": 4000,
            "elapsed_ms": 6000,
            "awaiting": [
                {"member_id": "m1", "group_instance_id": None, "evicted_by": "rebalance timeout",
                 "deadline_ms": 12_500, "time_left_ms": 2500},
                {"member_id": "m4", "group_instance_id": "i4", "evicted_by": "session timeout",
                 "deadline_ms": 9000, "time_left_ms": -1000},
            ],
        },
    }  # fmt: skip
    text = format_history(view)
    lines = text.splitlines()
    assert lines[1] == "GROUP g: rebalance history, 1 generation(s), oldest first (UTC)"
    assert lines[2].split() == ["GENERATION", "REBALANCE-START", "CAUSE", "PROTOCOL", "MEMBERS", "JOIN-MS",
                                "SYNC-MS", "LEADER"]  # fmt: skip
    assert lines[3].split() == [
        "7",
        "1970-01-01",
        "00:00:01.000",
        "session-expired",
        "range",
        "1",
        "250",
        "12",
        "m1",
    ]
    assert "  left: m2 (instance i2): session expired" in lines
    assert "  waiting for m1: evicted by rebalance timeout in 2.5 s" in lines
    assert "  waiting for m4 (instance i4): session timeout deadline passed 1.0 s ago" in lines
    assert "REBALANCE IN PROGRESS since 1970-01-01 00:00:04.000 (6.0 s), replacing generation 7" in text


# ------------------------------------------------------------------------------------ the scenario


class Members:
    """Consumer subprocesses, each killed at the end whatever happens."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.procs: dict[str, subprocess.Popen[str]] = {}

    def start(self, name: str, instance: str | None, session_ms: int, *, hold: bool = False) -> None:
        """Start a member; with ``hold`` it is started up to its first join, which :meth:`release` sends."""
        self.procs[name] = proc = subprocess.Popen(
            [
                sys.executable,
                str(MEMBER_SCRIPT),
                self.bootstrap,
                GROUP,
                TOPIC,
                name,
                instance or "-",
                str(session_ms),
                *(["hold"] if hold else []),
            ],
            stdin=subprocess.PIPE if hold else subprocess.DEVNULL,
            stdout=subprocess.PIPE if hold else subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        if hold:
            assert proc.stdout is not None
            assert proc.stdout.readline() == "ready\n"

    def release(self, name: str) -> None:
        stdin = self.procs[name].stdin
        assert stdin is not None
        stdin.write("go\n")
        stdin.close()

    def kill(self, name: str) -> None:
        with self.procs.pop(name) as proc:  # closes a held member's pipes
            proc.kill()
            proc.wait(10)

    def stop(self, name: str) -> None:
        """SIGTERM: the member closes its consumer (a dynamic member sends LeaveGroup)."""
        with self.procs.pop(name) as proc:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(20) == 0

    def kill_all(self) -> None:
        for name in list(self.procs):
            self.kill(name)


def history(bootstrap: str, output: str = "json") -> str:
    out, err = io.StringIO(), io.StringIO()
    code = groups_main(
        ["--bootstrap-server", bootstrap, "--history", "--group", GROUP, "--output", output], out=out, err=err
    )
    assert code == 0, err.getvalue()
    return out.getvalue()


def timeline(bootstrap: str) -> dict[str, Any]:
    doc = json.loads(history(bootstrap))
    assert doc["action"] == "history"
    (view,) = doc["groups"]
    return view  # type: ignore[no-any-return]


def wait_for(
    bootstrap: str, condition: Callable[[dict[str, Any]], bool], timeout: float = 30.0
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        view = timeline(bootstrap)
        if condition(view):
            return view
        assert time.monotonic() < deadline, json.dumps(view, indent=1)
        time.sleep(0.1)


def stable_generations(n: int) -> Callable[[dict[str, Any]], bool]:
    def check(view: dict[str, Any]) -> bool:
        gens = view["generations"]
        return len(gens) >= n and gens[n - 1]["stable_ms"] is not None

    return check


def member_of(gen: dict[str, Any], prefix: str) -> str:
    (member_id,) = [m["member_id"] for m in gen["members"] if m["member_id"].startswith(prefix)]
    return member_id  # type: ignore[no-any-return]


def create_topic(bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(TOPIC, 4, 1)])
    for fut in futures.values():
        fut.result(30)


@pytest.mark.interop
def test_scripted_scenario_history_survives_a_restart(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    broker = ServeProcess(data_dir, *SERVE_ARGS).wait_ready()
    members = Members(broker.bootstrap)
    try:
        bootstrap = broker.bootstrap
        create_topic(bootstrap)

        members.start("a", None, 3000)
        wait_for(bootstrap, stable_generations(1))
        members.start("s", "s1", 6000)
        wait_for(bootstrap, stable_generations(2))
        members.start("k", None, 1500)
        view = wait_for(bootstrap, stable_generations(3))
        k_id = member_of(view["generations"][2], "k-")

        # member killed: its session expires
        members.kill("k")
        view = wait_for(bootstrap, stable_generations(4))
        gen4 = view["generations"][3]
        assert gen4["cause"]["kind"] == "session_expired"
        assert gen4["cause"]["member_id"] == k_id
        assert gen4["left"] == [
            {
                "member_id": k_id,
                "group_instance_id": None,
                "reason": "session expired (1500 ms without a heartbeat)",
            }
        ]
        s_id = member_of(gen4, "s1-")

        # static member replaced (same group.instance.id) within its session: no rebalance. The replacement
        # starts before the old member dies, so that slow interpreter start-up cannot outlast the session.
        members.start("s2", "s1", 6000, hold=True)
        members.kill("s")
        members.release("s2")
        view = wait_for(bootstrap, lambda v: bool(v["generations"][3]["static_replacements"]))
        (replacement,) = view["generations"][3]["static_replacements"]
        assert (replacement["group_instance_id"], replacement["old_member_id"]) == ("s1", s_id)
        s2_id = replacement["new_member_id"]
        assert len(view["generations"]) == 4

        # the replacement dies too, then a new member joins: the rebalance waits for the dead static member
        members.start("n", None, 3000, hold=True)
        members.kill("s2")
        members.release("n")
        view = wait_for(
            bootstrap,
            lambda v: (
                v["in_progress"] is not None
                and s2_id in [m["member_id"] for m in v["in_progress"]["awaiting"]]
            ),
        )
        awaited = next(m for m in view["in_progress"]["awaiting"] if m["member_id"] == s2_id)
        assert awaited["evicted_by"] == "session timeout"
        assert awaited["time_left_ms"] is not None
        assert awaited["time_left_ms"] <= 6000
        text = history(bootstrap, "table")
        assert "REBALANCE IN PROGRESS" in text
        assert f"waiting for {s2_id} (instance s1): " in text

        view = wait_for(bootstrap, stable_generations(5))
        gen5 = view["generations"][4]
        assert gen5["cause"]["kind"] == "member_joined"
        n_id = member_of(gen5, "n-")
        assert gen5["cause"]["member_id"] == n_id
        assert [e["kind"] for e in gen5["events"]] == ["session_expired"]
        assert gen5["left"] == [
            {
                "member_id": s2_id,
                "group_instance_id": None,
                "reason": "session expired (6000 ms without a heartbeat)",
            }
        ]
        assert [m["member_id"] for m in gen5["joined"]] == [n_id]
        assert 500 <= gen5["join_phase_ms"] <= 7000  # waited for the static member's session to expire

        # clean leave
        members.stop("n")
        view = wait_for(bootstrap, stable_generations(6))
        gen6 = view["generations"][5]
        assert gen6["cause"]["kind"] == "member_left"
        assert [(m["member_id"], m["reason"].split(" (reason")[0]) for m in gen6["left"]] == [
            (n_id, "left the group (LeaveGroup)")
        ]

        assert view["in_progress"] is None
        gens = view["generations"]
        assert [g["generation_id"] for g in gens] == [1, 2, 3, 4, 5, 6]
        assert [g["cause"]["kind"] for g in gens] == [
            "member_joined",
            "member_joined",
            "member_joined",
            "session_expired",
            "member_joined",
            "member_left",
        ]
        for g in gens:
            assert 0 <= g["join_phase_ms"] <= 7000
            assert g["sync_phase_ms"] is not None
            assert 0 <= g["sync_phase_ms"] < 5000
            assert g["join_phase_ms"] == g["join_completed_ms"] - g["rebalance_started_ms"]
        for g in (gens[1], gens[2], gens[3], gens[5]):
            assert g["join_phase_ms"] < 3000  # everyone alive rejoined promptly
        before_text = history(bootstrap, "table")
        for g in gens:
            assert f"\n{g['generation_id']}  " in before_text

        # restart on the same data dir: the same history
        code, err = broker.terminate()
        assert code == 0, err
        members.kill_all()
        broker = ServeProcess(data_dir, *SERVE_ARGS).wait_ready()
        after = timeline(broker.bootstrap)
        assert after["generations"][:6] == gens
        after_text = history(broker.bootstrap, "table")
        lines = after_text.splitlines()
        for line in before_text.splitlines()[2:]:
            assert line in lines
    finally:
        members.kill_all()
        if broker.proc.poll() is None:
            broker.kill()
