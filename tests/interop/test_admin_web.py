"""The admin web view in headless Chromium (Selenium) against a real ``regroup serve`` with kafka-python
consumer groups: the page lists the groups with their states, member counts and lag (as ListOffsets −
OffsetFetch gives it), and the selected group's rebalance timeline has one chart mark per generation.
A KIP-848 consumer group, driven over the wire with ConsumerGroupHeartbeat, is shown with its type, group
and target assignment epochs, and each member's epoch and reconciliation state (as ConsumerGroupDescribe
gives them) while one member holds partitions it was asked to revoke. Screenshots are saved under
``test-artifacts/`` (or ``$REGROUP_TEST_ARTIFACTS``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from regroup.client.blocking import BlockingConnection
from regroup.protocol.errors import ErrorCode
from regroup.protocol.messages.consumer_group_describe import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
)
from support.admin_port import (
    ConsumerThread,
    client_lag,
    describe_groups,
    get_json,
    serve_with_admin_port,
    wait_until,
)
from support.browser import artifacts_dir, headless_chromium
from support.kafka_wire import create_topics, produce
from support.kip848 import WireMember

pytestmark = pytest.mark.interop

TOPIC = "web-orders"


@pytest.fixture
def browser() -> Iterator[object]:
    with headless_chromium() as chrome:
        yield chrome


def test_web_view_shows_groups_lag_and_timeline(browser: object) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver

    assert isinstance(browser, WebDriver)
    with serve_with_admin_port() as (server, admin):
        create_topics(server.address, {TOPIC: 3})
        produce(server.address, TOPIC, {0: 12, 1: 25, 2: 40})
        bootstrap = f"{server.host}:{server.port}"

        def stable_with(group: str, n: int) -> str | None:
            desc = describe_groups(server.address, [group])[group]
            ok = desc.group_state == "Stable" and len(desc.members) == n
            return None if ok else f"{group}: {desc.group_state} with {len(desc.members)} members"

        live = [ConsumerThread(bootstrap, "web-live", [TOPIC], "web-a")]
        started = live.copy()  # every consumer thread, closed at the end even if the test fails
        try:
            wait_until(lambda: stable_with("web-live", 1), 30)
            live.append(ConsumerThread(bootstrap, "web-live", [TOPIC], "web-b"))
            started.append(live[-1])
            wait_until(lambda: stable_with("web-live", 2), 30)
            live[0].commit({(TOPIC, 0): 2, (TOPIC, 1): 20, (TOPIC, 2): 5})
            idle = ConsumerThread(bootstrap, "web-idle", [TOPIC], "web-c")
            started.append(idle)
            wait_until(lambda: stable_with("web-idle", 1), 30)
            idle.commit({(TOPIC, 2): 30})
            idle.close()

            expected = {
                "web-live": ("Stable", 2, client_lag(server.address, "web-live")),
                "web-idle": ("Empty", 0, client_lag(server.address, "web-idle")),
            }
            history = get_json(f"{admin}/api/groups/web-live/history")
            generations = [g["generation_id"] for g in history["generations"]]
            assert len(generations) >= 2  # one member, then two

            browser.get(f"{admin}/#group=web-live")

            def rows() -> dict[str, dict[str, str]]:
                out = {}
                for row in browser.find_elements(By.CSS_SELECTOR, "#groups tr.group-row"):
                    cells = {
                        c: row.find_element(By.CSS_SELECTOR, f"td.{c}").text
                        for c in ("group", "members", "lag", "health")
                    }
                    cells["state"] = row.find_element(By.CSS_SELECTOR, "td.state-cell").text
                    out[row.get_attribute("data-group") or ""] = cells
                return out

            def page_matches() -> str | None:
                seen = rows()
                for group, (state, members, lag) in expected.items():
                    want = {
                        "group": group,
                        "state": state,
                        "members": str(members),
                        "lag": str(sum(v for _, v in lag.values())),
                    }
                    got = {k: seen.get(group, {}).get(k) for k in want}
                    if got != want:
                        return f"row {group}: {got} != {want}"
                marks = browser.find_elements(By.CSS_SELECTOR, "svg#timeline rect.generation-mark")
                got_generations = [m.get_attribute("data-generation") for m in marks]
                if got_generations != [str(g) for g in generations]:
                    return f"timeline marks {got_generations} != generations {generations}"
                offsets = {
                    (r.get_attribute("data-topic"), int(r.get_attribute("data-partition") or -1)): (
                        r.find_element(By.CSS_SELECTOR, "td.current-offset").text,
                        r.find_element(By.CSS_SELECTOR, "td.lag").text,
                    )
                    for r in browser.find_elements(By.CSS_SELECTOR, "#offsets tr.offset-row")
                }
                want_offsets = {k: (str(c), str(v)) for k, (c, v) in expected["web-live"][2].items()}
                if offsets != want_offsets:
                    return f"offsets table {offsets} != {want_offsets}"
                return None

            try:
                wait_until(page_matches, 20)
                assert rows()["web-live"]["health"] == "OK"
                assert len(browser.find_elements(By.CSS_SELECTOR, "#members tr.member-row")) == 2
                title = browser.find_element(By.ID, "detail-title").text
                assert title == "web-live"
                assert browser.find_element(By.ID, "detail-state").text == "Stable"
            finally:
                shot = artifacts_dir() / "admin-web-view.png"
                browser.save_screenshot(str(shot))
            assert shot.stat().st_size > 10_000
        finally:
            for member in started:
                member.close()


KIP848_TOPIC, KIP848_GROUP = "web-kip848", "web-kip848"


def test_web_view_shows_a_consumer_protocol_group(browser: object) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver

    assert isinstance(browser, WebDriver)
    # The target assignment follows each epoch bump at once (Kafka 4.3 recomputes it at most every 1 s).
    with serve_with_admin_port(**{"group.consumer.assignment.interval.ms": "0"}) as (server, admin):
        create_topics(server.address, {KIP848_TOPIC: 4})
        produce(server.address, KIP848_TOPIC, {0: 10, 1: 20, 2: 30, 3: 40})
        a = WireMember(server.address, KIP848_GROUP, [KIP848_TOPIC], client_id="kip848-a")
        c = WireMember(server.address, KIP848_GROUP, [KIP848_TOPIC], client_id="kip848-c")
        try:

            def a_owns_all() -> str | None:
                assert a.heartbeat().error_code == ErrorCode.NONE
                return None if sum(map(len, a.owned.values())) == 4 else f"a owns {a.owned}"

            wait_until(a_owns_all, 20)
            a.commit(KIP848_TOPIC, {0: 4, 1: 5, 3: 40})
            # c joins; a is told to give up half of its partitions and does not: the group is Reconciling.
            a.stubborn = True
            for member in (c, a, c):
                assert member.heartbeat().error_code == ErrorCode.NONE

            with BlockingConnection(server.address) as conn:
                described = conn.request(
                    ConsumerGroupDescribeRequest(group_ids=[KIP848_GROUP]),
                    ConsumerGroupDescribeResponse,
                    version=0,
                ).groups[0]
            assert described.group_state == "Reconciling"
            epochs = {m.member_id: m.member_epoch for m in described.members}
            lag = client_lag(server.address, KIP848_GROUP)

            summary = next(g for g in get_json(f"{admin}/api/groups")["groups"] if g["group"] == KIP848_GROUP)
            assert summary["type"] == "consumer"
            assert summary["state"] == "Reconciling"
            assert summary["group_epoch"] == described.group_epoch
            assert summary["assignment_epoch"] == described.assignment_epoch
            assert summary["reconciling"] == 2
            assert summary["lag"] == sum(v for _, v in lag.values())
            detail = get_json(f"{admin}/api/groups/{KIP848_GROUP}")
            states = {m["member_id"]: m["state"] for m in detail["members"]}
            assert states == {a.member_id: "unrevoked_partitions", c.member_id: "unreleased_partitions"}
            assert {m["member_id"]: m["member_epoch"] for m in detail["members"]} == epochs

            browser.get(f"{admin}/#group={KIP848_GROUP}")

            def page_matches() -> str | None:
                rows = browser.find_elements(
                    By.CSS_SELECTOR, f'#groups tr.group-row[data-group="{KIP848_GROUP}"]'
                )
                if not rows:
                    return "no row for the consumer group yet"
                row = rows[0]
                got = {
                    c: row.find_element(By.CSS_SELECTOR, f"td.{c}").text
                    for c in ("type", "generation", "assignment-epoch", "reconciling", "lag")
                }
                got["state"] = row.find_element(By.CSS_SELECTOR, "td.state-cell").text
                want = {
                    "type": "consumer",
                    "state": "Reconciling",
                    "generation": str(described.group_epoch),
                    "assignment-epoch": str(described.assignment_epoch),
                    "reconciling": "2",
                    "lag": str(sum(v for _, v in lag.values())),
                }
                if got != want:
                    return f"group row {got} != {want}"
                members = {
                    r.get_attribute("data-member"): (
                        r.find_element(By.CSS_SELECTOR, "td.member-type").text,
                        r.find_element(By.CSS_SELECTOR, "td.member-epoch").text,
                        r.find_element(By.CSS_SELECTOR, "td.member-state").text,
                        r.find_element(By.CSS_SELECTOR, "td.pending-revocation").text != "(none)",
                    )
                    for r in browser.find_elements(By.CSS_SELECTOR, "#members tr.member-row")
                }
                want_members = {
                    a.member_id: ("consumer", str(epochs[a.member_id]), "unrevoked_partitions", True),
                    c.member_id: ("consumer", str(epochs[c.member_id]), "unreleased_partitions", False),
                }
                if members != want_members:
                    return f"members {members} != {want_members}"
                if (
                    "target assignment epoch " + str(described.assignment_epoch)
                    not in browser.find_element(By.ID, "detail-meta").text
                ):
                    return "no epochs in the detail line"
                return None

            try:
                wait_until(page_matches, 20)
                assert browser.find_element(By.ID, "detail-state").text == "Reconciling"
            finally:
                browser.save_screenshot(str(artifacts_dir() / "admin-web-view-consumer-group.png"))

            # a revokes at last: both members reach the group epoch and the page shows the group Stable.
            a.stubborn = False
            a.owned = {}
            assert a.heartbeat().error_code == ErrorCode.NONE

            def settled() -> str | None:
                assert c.heartbeat().error_code == ErrorCode.NONE
                group = next(
                    g for g in get_json(f"{admin}/api/groups")["groups"] if g["group"] == KIP848_GROUP
                )
                return None if group["state"] == "Stable" and group["reconciling"] == 0 else str(group)

            wait_until(settled, 20)
            wait_until(
                lambda: (
                    None
                    if browser.find_element(By.ID, "detail-state").text == "Stable"
                    else "the page does not show Stable yet"
                ),
                20,
            )
        finally:
            a.close()
            c.close()
