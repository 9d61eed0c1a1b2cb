"""The console in a real browser: headless Chromium (Debian's package) driven by selenium.

Three ``placement node`` processes on loopback; the page of n1 must show all three members and
the partition map, and a ``kill -9`` of n3 must show as dead on the page within 3 s of n1
declaring it dead (the ``at`` of n1's ``dead`` event); their load panel says they run without
``--load-aware``. Two nodes with ``--load-aware``: the panel lists each member's load and
weights, and the plans. The screenshots are saved under tests/artifacts/ (the path is printed).
"""

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import httpx
import pytest

from placement.service.console import browser

from ports import free_ports
from test_cluster_processes import poll

pytestmark = [pytest.mark.slow, pytest.mark.skipif(browser.missing() is not None,
                                                   reason=f"no headless browser: {browser.missing()}")]
ARTIFACTS = pathlib.Path(__file__).parent / "artifacts"
PAGE_DEADLINE_S = 3.0


def launch(count, *extra):
    """``count`` ``placement node`` processes on loopback (n1 founds, the others join it), each given
    ``extra`` flags; yields (processes, HTTP URLs) and kills what is left."""
    gossip, http = free_ports(count), free_ports(count)
    urls = [f"http://127.0.0.1:{p}" for p in http]
    procs = []
    for i in range(count):
        cmd = [sys.executable, "-m", "placement_cli", "node", "--id", f"n{i + 1}", "--gossip",
               f"127.0.0.1:{gossip[i]}", "--http", f"127.0.0.1:{http[i]}", "--partitions", "1024", "--replicas", "2",
               *extra]
        if i:
            cmd += ["--join", f"127.0.0.1:{gossip[0]}"]
        procs.append(subprocess.Popen(cmd, env={**os.environ, "PYTHONUNBUFFERED": "1"},
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    try:
        yield procs, urls
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait(10)


@pytest.fixture
def three_nodes():
    yield from launch(3)


@pytest.fixture
def two_load_aware_nodes():
    yield from launch(2, "--load-aware", "2")


@pytest.fixture
def page():
    driver = browser.chromium()
    try:
        yield driver
    finally:
        driver.quit()


def statuses(driver):
    return driver.execute_script(
        "return Object.fromEntries([...document.querySelectorAll('#members tbody tr')]"
        ".map(r => [r.dataset.member, r.dataset.status]))")


def map_colours(driver):
    """Distinct colours on the partition map's canvas (sampled every 7th pixel)."""
    return driver.execute_script("""
        const c = document.getElementById('map'), d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        const seen = new Set();
        for (let i = 0; i < d.length; i += 28) seen.add(`${d[i]},${d[i + 1]},${d[i + 2]}`);
        return seen.size;""")


def test_page_shows_members_map_and_a_kill_9_within_3_s(three_nodes, page):
    procs, urls = three_nodes
    poll(lambda: all(len(httpx.get(f"{u}/v1/members", timeout=10).json()) == 3 for u in urls), 30, "3 members")
    page.get(urls[0] + "/ui")
    poll(lambda: statuses(page) == {"n1": "alive", "n2": "alive", "n3": "alive"}, 20, "3 alive members on the page")
    poll(lambda: map_colours(page) >= 3, 20, "a map coloured by 3 leaders")
    assert page.execute_script("return window.consoleState.map.header.partitions") == 1024
    poll(lambda: "agree" in page.find_element("id", "agreement-verdict").text, 20, "the agreement panel")
    # What the cluster survives (GET /v1/ownership): three members, any one may crash.
    poll(lambda: "survives the crash of any one member" in page.find_element("id", "ownership").text, 20,
         "the survival line")
    # ... and without --load-aware: the load panel says so in one sentence, no empty tables.
    poll(lambda: "without --load-aware" in page.find_element("id", "load-note").text, 20, "the load-aware note")
    assert not page.find_element("id", "load-detail").is_displayed()
    # These nodes run without --key-file: the page says what that allows, above everything (issue 31)
    poll(lambda: "gossip runs without keys" in page.find_element("id", "security-warning").text, 20,
         "the keyless warning")

    # The key box names the same partition and owners as the API.
    page.find_element("id", "key").send_keys("order-42")
    page.find_element("css selector", "#key-form button").click()
    owners = httpx.get(f"{urls[0]}/v1/owners", params={"key": "order-42"}, timeout=10).json()
    expected = f'"order-42" → partition {owners["partition"]} → {", ".join(o["id"] for o in owners["owners"])}'
    poll(lambda: page.find_element("id", "key-result").text == expected, 10, "the key lookup")
    # ... and the map, decoded from /v1/map in the page, shows that partition's replicas in order.
    replicas = ", ".join(f'{o["id"]}{" (leader)" if i == 0 else ""}' for i, o in enumerate(owners["owners"]))
    assert page.find_element("id", "partition-info").text.startswith(f'partition {owners["partition"]}: {replicas}')

    procs[2].send_signal(signal.SIGKILL)

    def declared():
        events = httpx.get(f"{urls[0]}/v1/events", timeout=10).json()["events"]
        return next((e["at"] for e in events if e["kind"] == "dead" and e["member"] == "n3"), None)

    seen_at = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and seen_at is None:
        if statuses(page).get("n3") == "dead":
            seen_at = time.time()
        time.sleep(0.05)  # the sampling period of the page's state, not a wait for an effect
    assert seen_at is not None, "n3 never showed as dead on the page"
    declared_at = declared()
    assert declared_at is not None, "the page shows n3 dead but n1's log has no dead event"
    lag = seen_at - declared_at
    print(f"\nn3 dead on the page {lag:.2f} s after n1 declared it")
    assert lag <= PAGE_DEADLINE_S

    timeline = page.find_element("id", "timeline").text
    assert "dead n3" in timeline
    # Two members left: the crash of the first witness would stop all work; the page says so.
    poll(lambda: "stops all work: add a witness" in page.execute_script(
        "const w = document.querySelector('#ownership dd.warning'); return w ? w.textContent : ''"), 20,
        "the warning on the page")
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "console.png"
    page.save_screenshot(str(shot))
    print(f"screenshot: {shot}")
    severe = [e for e in page.get_log("browser") if e["level"] == "SEVERE"]
    assert severe == [], json.dumps(severe, indent=1)


def load_rows(driver, table):
    return driver.execute_script(
        f"return [...document.querySelectorAll('#{table} tbody tr')].map(r => [...r.cells].map(c => c.textContent))")


def test_page_shows_each_members_load_and_weights_and_the_plans_of_load_aware_nodes(two_load_aware_nodes, page):
    """With --load-aware (no work sent: every load is 0, so every plan finds the cluster balanced)
    the load panel lists both members with their weights and the plans as they are made."""
    _, urls = two_load_aware_nodes
    poll(lambda: all(len(httpx.get(f"{u}/v1/members", timeout=10).json()) == 2 for u in urls), 30, "2 members")
    page.get(urls[0] + "/ui")
    heads = page.execute_script("return [...document.querySelectorAll('#load thead th')].map(c => c.textContent)")
    assert heads == ["member", "load (work/s)", "load/mean", "weight (gossiped)", "weight (placed)", "planned weight"]
    poll(lambda: [r[0] for r in load_rows(page, "load")] == ["n1", "n2"], 30, "both members in the load table")
    poll(lambda: any(r[-1] == "balanced" for r in load_rows(page, "plans")), 60, "a plan in the steps table")
    rows = {r[0]: r for r in load_rows(page, "load")}
    # Load and gossiped weight; no planned weight: nodes balance by pins by default (--balance-by).
    assert rows["n1"][1] == "0" and rows["n1"][3] == "1" and rows["n1"][5] == "\u2013"  # (an en dash: no figure)
    verdict = page.find_element("id", "load-verdict").text
    assert verdict.startswith("by pins") and "0 partitions pinned" in verdict, verdict
    assert "without --load-aware" not in page.find_element("id", "load-note").text
    assert "gathered last" in page.find_element("id", "load-note").text
    body = httpx.get(f"{urls[0]}/v1/balancing", timeout=10).json()
    assert body["load_aware"] and body["steps"] and body["steps"][-1]["reason"] == "balanced"
    ARTIFACTS.mkdir(exist_ok=True)
    page.execute_script("document.getElementById('load-section').scrollIntoView()")
    page.save_screenshot(str(ARTIFACTS / "console-load.png"))
    severe = [e for e in page.get_log("browser") if e["level"] == "SEVERE"]
    assert severe == [], json.dumps(severe, indent=1)
