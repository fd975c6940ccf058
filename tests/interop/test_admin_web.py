"""The admin web view in headless Chromium (Selenium) against a real ``regroup serve`` with kafka-python
consumer groups: the page lists the groups with their states, member counts and lag (as ListOffsets −
OffsetFetch gives it), and the selected group's rebalance timeline has one chart mark per generation.
A screenshot is saved under ``test-artifacts/`` (or ``$REGROUP_TEST_ARTIFACTS``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

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
