"""Healthy members' dropped partitions when another member is killed, on real processes
(issue 29 item 6).

    python benchmarks/bench_healthy_drops.py [--nodes 4] [--embedded 2] [--kills 4] [--partitions 4096]

Starts ``--nodes`` ``placement node`` processes on loopback (exclusive ownership) and one
application process that embeds ``--embedded`` ``placement.service.node.Node``s (the issue's
drop came when such a process was killed). Then ``--kills`` times, alternately: kill -9 the
application process (all its embedded nodes at once) or the last command-line node, watch the
survivors until the stable view no longer holds the victims and nothing is waited for, and
start the victim again.

Every command-line node is polled (``GET /v1/ownership``) about 20 times a second. Per kill and
survivor it reports the dip of its owned count below what it owned just before the kill (a kill
only moves partitions *to* survivors, so any dip is a drop by a healthy member), and the change of
its counters: ``acquired_back`` (partitions it dropped and took back itself: exact, between
samples too), ``handoffs_timed_out`` and ``lease_losses``. The last line sums them as "healthy
members' dropped partitions" (the goal is 0). One run with the defaults takes about a minute.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
from fresh_state import fresh_state_home  # (a sibling script, not a package)

ROOT = Path(__file__).resolve().parent.parent


def free_port(kind: int) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------- the application process

async def embedded_app(ids: list[str], ports: list[int], seed: str, partitions: int) -> None:
    """Run the embedded nodes until killed (``--app``)."""
    from placement.service.node import Node, NodeConfig

    host, port = seed.rsplit(":", 1)
    nodes = []
    for node_id, p in zip(ids, ports):
        cfg = NodeConfig(node_id, gossip_bind=("127.0.0.1", p), join=((host, int(port)),), partitions=partitions)
        nodes.append(await Node(cfg).start())
    print("embedded nodes started:", ids, flush=True)
    await asyncio.Event().wait()


# ---------------------------------------------------------------- the harness

class Poller(threading.Thread):
    """Polls every command-line node's /v1/ownership; keeps (time, node, status) samples."""

    def __init__(self, urls: dict[str, str]) -> None:
        super().__init__(daemon=True)
        self.urls = urls
        self.samples: list[tuple[float, str, dict]] = []
        self.latest: dict[str, dict] = {}
        self.stop = threading.Event()
        self.paused: set[str] = set()

    def run(self) -> None:
        with httpx.Client(timeout=1.0) as http:
            while not self.stop.is_set():
                for name, url in list(self.urls.items()):
                    if name in self.paused:
                        continue
                    try:
                        full = http.get(f"{url}/v1/ownership").json()
                    except (httpx.HTTPError, ValueError):
                        continue
                    body = {"owned": len(full["owned"]), "releasing": len(full["releasing"]),
                            "waiting": full["waiting"], "paused": full["paused"], "stable_view": full["stable_view"],
                            "lease_valid_for_s": full["lease_valid_for_s"]}
                    t = time.monotonic()
                    self.samples.append((t, name, body))
                    self.latest[name] = body
                time.sleep(0.05)


def counters(url: str) -> dict[str, float]:
    """The ownership counters a node exports (``GET /metrics``: placement_ownership_*_total)."""
    out = {}
    for line in httpx.get(f"{url}/metrics", timeout=5.0).text.splitlines():
        if line.startswith("placement_ownership_") and line.split()[0].endswith("_total"):
            name, value = line.split()[:2]
            out[name[len("placement_ownership_"):-len("_total")]] = float(value)
    return out


def wait_until(pred, timeout_s: float, what: str, show=None) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}" + (f": {show()}" if show else ""))
        time.sleep(0.05)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=4, help="command-line nodes (default 4)")
    ap.add_argument("--embedded", type=int, default=2, help="embedded nodes in one application process (default 2)")
    ap.add_argument("--kills", type=int, default=4, help="kills, alternating app / command-line node (default 4)")
    ap.add_argument("--partitions", type=int, default=4096)
    ap.add_argument("--app", nargs=4, metavar=("IDS", "PORTS", "SEED", "P"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    fresh_state_home()  # (a first start each run: benchmarks/fresh_state.py)
    if args.app:
        ids, ports, seed, p = args.app
        asyncio.run(embedded_app(ids.split(","), [int(x) for x in ports.split(",")], seed, int(p)))
        return 0

    logdir = Path(tempfile.mkdtemp(prefix="healthy-drops-"))
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT)}
    cli = [f"n{i + 1}" for i in range(args.nodes)]
    emb = [f"e{i + 1}" for i in range(args.embedded)]
    gossip = {n: free_port(socket.SOCK_DGRAM) for n in cli + emb}
    http_port = {n: free_port(socket.SOCK_STREAM) for n in cli}
    procs: dict[str, subprocess.Popen] = {}
    seed_addr = f"127.0.0.1:{gossip[cli[0]]}"

    def start_cli(name: str, join: str | None) -> None:
        cmd = [sys.executable, "-m", "placement_cli", "node", "--id", name, "--gossip", f"127.0.0.1:{gossip[name]}",
               "--http", f"127.0.0.1:{http_port[name]}", "--partitions", str(args.partitions)]
        cmd += ["--join", join] if join else ["--new-cluster"]  # (a new cluster each run)
        with open(logdir / f"{name}.log", "ab") as log:
            procs[name] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                           env=env, cwd=ROOT)

    def start_app() -> None:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--app", ",".join(emb),
               ",".join(str(gossip[e]) for e in emb), seed_addr, str(args.partitions)]
        with open(logdir / "app.log", "ab") as log:
            procs["app"] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            env=env, cwd=ROOT)

    poller = Poller({n: f"http://127.0.0.1:{http_port[n]}" for n in cli})

    def show() -> str:
        return "; ".join(f"{n}: {s}" for n, s in poller.latest.items())

    quiet_since: dict[tuple, float] = {}

    def embedded_own() -> bool:
        """The command-line nodes own less than everything: the embedded ones own the rest."""
        return sum(poller.latest[n]["owned"] for n in cli) < args.partitions

    def settled(names: list[str], after_view: int = 0, owned_sum: int | None = None) -> bool:
        """Every node in ``names`` answers with one stable view above ``after_view``, waits for
        nothing, releases nothing, is not paused, and has done so for 2 s (with ``owned_sum``:
        together they own that many)."""
        answered = [s for n in names if (s := poller.latest.get(n)) is not None]
        ok = len(answered) == len(names) and all(
            s["stable_view"] and s["stable_view"] > after_view and not s["waiting"]
            and not s["releasing"] and not s["paused"] for s in answered)
        ok = ok and len({s["stable_view"] for s in answered}) == 1
        if ok and owned_sum is not None:
            ok = sum(s["owned"] for s in answered) == owned_sum
        key = (tuple(names), after_view)
        if not ok:
            quiet_since.pop(key, None)
            return False
        return time.monotonic() - quiet_since.setdefault(key, time.monotonic()) >= 2.0

    total_dips = total_back = 0
    rows = []
    try:
        start_cli(cli[0], None)
        poller.start()
        wait_until(lambda: cli[0] in poller.latest, 30, "the seed to answer")
        for n in cli[1:]:
            start_cli(n, seed_addr)
        start_app()
        wait_until(lambda: settled(cli) and embedded_own(), 90, "the cluster to settle", show)
        for k in range(args.kills):
            victim_is_app = k % 2 == 0
            victims = emb if victim_is_app else [cli[-1]]
            survivors = cli if victim_is_app else cli[:-1]
            before = {n: poller.latest[n] for n in survivors}
            counted = {n: counters(poller.urls[n]) for n in survivors}
            view0 = before[survivors[0]]["stable_view"]
            t_kill = time.monotonic()
            proc = procs["app" if victim_is_app else cli[-1]]
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            if not victim_is_app:
                poller.paused.add(cli[-1])
            wait_until(lambda: settled(survivors, view0, args.partitions if victim_is_app else None), 60,
                       "the survivors to take over", show)
            t_taken = time.monotonic() - t_kill
            time.sleep(3)  # a drop may come after the takeover (a second view change, a lapse)
            t_end = time.monotonic()
            for n in survivors:
                owned0 = before[n]["owned"]
                after = [s for (t, name, s) in poller.samples if name == n and t_kill <= t <= t_end]
                dip = max(0, owned0 - min((s["owned"] for s in after), default=owned0))
                c0, c1 = counted[n], counters(poller.urls[n])
                delta = {key: int(c1[key] - c0[key]) for key in ("acquired_back", "handoffs_timed_out", "lease_losses")}
                total_dips += dip
                total_back += delta["acquired_back"]
                rows.append((k, "+".join(victims), n, owned0, dip, delta))
                print(f"kill {k + 1} ({'app: ' if victim_is_app else ''}{'+'.join(victims)}): survivor {n} owned "
                      f"{owned0} before, dip {dip}, {delta}; taken over {t_taken:.1f} s after the kill", flush=True)
            # start the victim again and let the cluster settle
            if victim_is_app:
                start_app()
            else:
                start_cli(cli[-1], seed_addr)
                poller.paused.discard(cli[-1])
                poller.latest.pop(cli[-1], None)
            view1 = poller.latest[survivors[0]]["stable_view"]
            wait_until(lambda: settled(cli, view1) and embedded_own(), 90, "the cluster to settle again", show)
    finally:
        poller.stop.set()
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait(10)
    print(f"{args.kills} kills ({args.nodes} command-line nodes, {args.embedded} embedded in one process, "
          f"P={args.partitions}): healthy members' dropped partitions: {max(total_dips, total_back)} "
          f"(largest dip of an owned count, summed: {total_dips}; taken back after a drop: {total_back}); "
          f"logs in {logdir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
