"""The console (issue 12): first paint and update latency of /ui, and the CPU an open console
costs the node, with 256 members x 65,536 partitions (a synthetic snapshot), in headless Chromium.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_console.py [--members 256] [--partitions 65536]

The node is a stand-in that serves the real HTTP API (``create_app``) over a synthetic view -
N members need no N processes - in a child process whose CPU time is read from /proc. Every
member's HTTP address is that same server, so the agreement panel's fan-out (one
``/v1/checksum`` per member every few seconds) lands on the node too: its CPU figure is an upper
bound (a real node serves only its own checksum and asks the N - 1 others).

Measured:
1. first paint: navigation start -> map drawn and members table filled (page timestamps);
2. update: a member is declared dead (its ``dead`` and ``placement`` events appended) -> its
   row shows dead, and -> the new map is drawn, from the wall clock of the append (same machine);
3. node CPU: its process CPU seconds per wall second, without and with one console open.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import time

import httpx
from fresh_state import fresh_state_home  # (a sibling script, not a package)

from membership import MemberInfo, Meta
from placement.service.console import browser
from placement.service.console.events import EventLog
from placement.snapshot import PlacementSnapshot
from placement.table import PlacementTable


class SyntheticNode:
    """What ``create_app`` reads from a node, over a made-up view of ``members`` members."""

    def __init__(self, members: int, partitions: int, replicas: int, url: str, fanout: bool) -> None:
        self.ids = [f"m{i:04d}" for i in range(members)]
        self.node_id = self.ids[0]
        self.url = url
        self.fanout = fanout  # every member's address is this server (else only this node has one)
        self.infos = {m: MemberInfo(m, ("127.0.0.1", 20000 + i), "alive", 1, Meta(1.0, url, {"zone": f"z{i % 3}"}))
                      for i, m in enumerate(self.ids)}
        self._snapshot = PlacementSnapshot(PlacementTable.build(dict.fromkeys(self.ids, 1.0), partitions=partitions,
                                                                replicas=replicas), self.addresses(self.ids))
        self.events = EventLog()
        for m in self.ids:
            self.events.append("joined", m, "synthetic", time.time())
        self.placement_changes = 0
        self.callback_errors = 0
        self.paused = None
        self.ready = True
        self.joined = True  # a member of a running cluster (NodeLike: the API answers only once joined)

    def addresses(self, ids: list[str]) -> dict[str, str]:
        return {m: self.url if self.fanout or m == self.node_id else "" for m in ids}

    @property
    def snapshot(self) -> PlacementSnapshot:
        return self._snapshot

    def members(self) -> list[MemberInfo]:
        return list(self.infos.values())

    def owned_partitions(self) -> frozenset[int]:
        return frozenset(self._snapshot.table.owned_by(self.node_id, leader_only=True))

    def releasing_partitions(self) -> frozenset[int]:
        return frozenset()

    def grant(self, partition: int) -> None:
        return None

    def ownership_status(self) -> dict[str, object]:
        return {"mode": "available", "owned": len(self.owned_partitions())}

    async def wait_for_change(self, etag: str, timeout_s: float) -> PlacementSnapshot:
        if etag == self._snapshot.etag:
            await asyncio.sleep(timeout_s)
        return self._snapshot

    async def leave(self, timeout_s: float = 2.0) -> None:
        return None

    def kill(self, member: str) -> None:
        """As the node does when gossip declares ``member`` dead: view, then placement."""
        old = self.infos[member]
        self.infos[member] = MemberInfo(member, old.addr, "dead", old.incarnation, old.meta)
        now = time.time()
        self.events.append("dead", member, "synthetic", now)
        table = self._snapshot.table
        live = {m: 1.0 for m, i in self.infos.items() if i.is_live}
        new = table.with_members(live)
        self._snapshot = PlacementSnapshot(new, self.addresses(list(live)))
        self.events.append("placement", "", f"{len(table.moved(new, leaders=True))} leaderships moved; "
                           f"{len(live)} live members", now)


def serve(port: int, members: int, partitions: int, fanout: bool) -> None:
    """Child process: the synthetic node's HTTP API, plus ``POST /bench/kill`` to drive it."""
    import uvicorn

    from placement.service.http_api import create_app

    node = SyntheticNode(members, partitions, 2, f"http://127.0.0.1:{port}", fanout)
    app = create_app(node)

    @app.post("/bench/kill")
    async def kill(member: str) -> dict:
        node.kill(member)
        return {"etag": node.snapshot.etag}

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="error", lifespan="off", timeout_graceful_shutdown=5)


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_share(pid: int, seconds: float) -> float:
    c0, t0 = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)  # the measurement window
    return (cpu_seconds(pid) - c0) / (time.monotonic() - t0)


def until(driver, script: str, timeout_s: float = 60.0):
    """Evaluate ``script`` in the page until it returns something truthy; return that."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = driver.execute_script(script)
        if value:
            return value
        time.sleep(0.02)  # sampling period; the page's own timestamps are what is measured
    raise TimeoutError(f"page never satisfied: {script}")


FIRST_PAINT = """const s = window.consoleState;
  return s && s.mapAt && s.membersAt ? Math.max(s.mapAt, s.membersAt) - performance.timeOrigin : null;"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--members", type=int, default=256)
    ap.add_argument("--partitions", type=int, default=65_536)
    ap.add_argument("--loads", type=int, default=3, help="page loads for first paint")
    ap.add_argument("--updates", type=int, default=5, help="members declared dead, one at a time")
    ap.add_argument("--cpu-s", type=float, default=20.0, help="seconds per CPU window")
    ap.add_argument("--no-fanout", action="store_true",
                    help="only the node has an HTTP address: the agreement panel asks nobody else")
    args = ap.parse_args()
    fresh_state_home()  # (a first start each run: benchmarks/fresh_state.py)
    if (why := browser.missing()) is not None:
        sys.exit(f"bench_console: {why}")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([sys.executable, __file__, "--serve", str(port), str(args.members), str(args.partitions),
                             "0" if args.no_fanout else "1"])
    driver = None
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(base + "/healthz", timeout=1).raise_for_status()
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.1)
        size = len(httpx.get(base + "/v1/map").content)
        idle = cpu_share(proc.pid, args.cpu_s)

        driver = browser.chromium()
        paints = []
        driver.get(base + "/ui")  # warm-up: the browser's first page load pays its own start-up
        until(driver, FIRST_PAINT)
        for _ in range(args.loads):
            driver.get("about:blank")
            time.sleep(5)  # the previous page's agreement fan-out ends: each load meets a quiet node
            driver.get(base + "/ui")
            paints.append(until(driver, FIRST_PAINT))
        time.sleep(3)  # let the first agreement fan-out and polls settle before measuring CPU
        open_cpu = cpu_share(proc.pid, args.cpu_s)

        row_lags, map_lags = [], []
        for i in range(1, args.updates + 1):
            member = f"m{i:04d}"
            before = driver.execute_script("return window.consoleState.mapAt")
            t0 = time.time() * 1000
            httpx.post(base + "/bench/kill", params={"member": member}, timeout=30).raise_for_status()
            until(driver, f"return document.querySelector('tr[data-member=\"{member}\"]').dataset.status === 'dead'")
            row_lags.append(driver.execute_script("return window.consoleState.memberEventAt") - t0)
            map_lags.append(until(driver, f"const a = window.consoleState.mapAt; return a > {before} ? a : null") - t0)
    finally:
        if driver is not None:
            driver.quit()
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()

    med = statistics.median
    print(f"\n{args.members} members x {args.partitions:,} partitions x 2 replicas; "
          f"/v1/map body {size / 1024:,.0f} KiB")
    print("| measure | median | min | max |\n|---|---|---|---|")
    print(f"| first paint: navigation -> map drawn and members listed ({args.loads} loads) | "
          f"{med(paints):,.0f} ms | {min(paints):,.0f} ms | {max(paints):,.0f} ms |")
    print(f"| update: member declared dead -> its row shows dead ({args.updates} deaths) | "
          f"{med(row_lags):,.0f} ms | {min(row_lags):,.0f} ms | {max(row_lags):,.0f} ms |")
    print(f"| update: placement changed -> new map drawn ({args.updates} changes) | "
          f"{med(map_lags):,.0f} ms | {min(map_lags):,.0f} ms | {max(map_lags):,.0f} ms |")
    fanout = (f"includes the agreement fan-out: {args.members - 1} /v1/checksum requests sent and answered by the "
              "node itself" if not args.no_fanout else "no agreement fan-out")
    print(f"\nnode CPU over {args.cpu_s:.0f} s: {100 * idle:.1f}% of a core idle, "
          f"{100 * open_cpu:.1f}% with one console open (+{100 * (open_cpu - idle):.1f}%; {fanout})")


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--serve":
        serve(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1")
    else:
        main()
