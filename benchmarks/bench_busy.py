"""A busy application is not a dead member (issue 15): real processes on loopback.

Starts N member processes (``--system placement``: a ``Node`` embedded in an asyncio program,
exclusive ownership, the default configs; ``--system kinship``: a ``kinship.Cluster``, SWIM +
Lifeguard in Rust on its own thread, with the same probe interval and timeout). One of them,
the *busy* one, then blocks its application's event loop on command:

* ``cpu:S``   CPU-bound Python for S seconds (the GIL is switched every 5 ms);
* ``sleep:S`` ``time.sleep(S)`` on the loop (the GIL is released);
* ``none:S``  nothing (the control row: moves and suspicions the cluster has anyway);
* ``gil:S``   one C call that holds the GIL for about S seconds: ``re.match(r"(a+)+$", "a"*n + "b")``,
  whose backtracking is exponential in n and runs in ``_sre`` without releasing the GIL (n is
  calibrated on this machine; the actual duration is reported).

For each block it reports, from the other members: suspicions of the busy member, deaths
declared (0 wanted), and partition acquisitions anywhere in the cluster (moves; 0 wanted), over
the block and ``--settle`` seconds after it. Then a ``kill -9`` of another member: the time until
every survivor sees it dead, and (placement) until its partitions are owned again.

``--idle`` instead starts N members, lets them idle, and reports CPU per member (user + system
seconds per second) and the kill -9 detection time; run it with ``PYTHONPATH`` pointing at
another checkout to compare designs (BENCHMARKS.md, "Busy application").

    python benchmarks/bench_busy.py --system placement --nodes 4 \
        --blocks cpu:1,cpu:5,cpu:10,cpu:30,sleep:10,gil:0.5,gil:2,gil:5
    python benchmarks/bench_busy.py --system kinship --nodes 4
    python benchmarks/bench_busy.py --idle --nodes 16 [--system kinship]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import signal
import subprocess
import sys
import threading
import time

# After PYTHONPATH and the installed project: ``PYTHONPATH=/other/checkout`` measures that one.
sys.path.append(os.path.join(os.path.dirname(__file__), ".."))

from fresh_state import fresh_state_home

PATTERN = re.compile(r"(a+)+$")


# ----------------------------------------------------------------------------- member process

def burn(seconds: float) -> None:
    end = time.monotonic() + seconds
    x = 0
    while time.monotonic() < end:
        for i in range(1000):
            x += i * i


def block(kind: str, arg: float) -> float:
    start = time.monotonic()
    if kind == "cpu":
        burn(arg)
    elif kind == "sleep":
        time.sleep(arg)
    elif kind == "gil":
        PATTERN.match("a" * int(arg) + "b")
    elif kind != "none":
        raise ValueError(f"unknown block {kind!r}")
    return time.monotonic() - start


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class PlacementMember:
    def __init__(self, args: argparse.Namespace) -> None:
        from placement.service.node import Node, NodeConfig

        seeds = tuple(("127.0.0.1", int(p)) for p in args.seeds.split(",") if p)
        self.node = Node(NodeConfig(args.id, gossip_bind=("127.0.0.1", args.port), join=seeds,
                                    partitions=args.partitions, new_cluster=not seeds))

    async def start(self) -> None:
        await self.node.start()

    def status(self) -> dict:
        node = self.node
        stats = node.member.core.stats
        counters = node.ownership_status().get("counters")
        if not isinstance(counters, dict):  # not exclusive: no ownership counters
            counters = {}
        node_file = sys.modules["placement.service.node"].__file__
        assert node_file is not None  # a module imported from a file
        return {"view": {m.node_id: m.status for m in node.members()}, "owned": len(node.owned_partitions()),
                "acquired": counters.get("acquired", 0), "declared_dead": node.declared_dead_count,
                "how": [counters.get(k, 0) for k in ("acquired_by_note", "acquired_by_takeover", "acquired_back")],
                "code": os.path.dirname(os.path.dirname(node_file)),
                "suspicions": stats.get("suspicions", 0), "deaths": stats.get("deaths_declared", 0)}

    async def leave(self) -> None:
        await self.node.leave()


class KinshipMember:
    def __init__(self, args: argparse.Namespace) -> None:
        import kinship

        self.kinship = kinship
        seeds = [f"127.0.0.1:{p}" for p in args.seeds.split(",") if p]
        self.cfg = kinship.Config.local(bind=f"127.0.0.1:{args.port}", seeds=seeds, name=args.id,
                                        probe_interval=1.0, probe_timeout=0.5)
        self.cluster = kinship.Cluster(self.cfg)
        self.seen: dict[str, str] = {}
        self.deaths = 0

    async def start(self) -> None:
        await self.cluster.start()
        # Kept: the loop holds tasks weakly, and an unreferenced one can be collected mid-run.
        self._watcher = asyncio.ensure_future(self._watch())

    async def _watch(self) -> None:
        async for event in self.cluster.events():
            if isinstance(event, self.kinship.MemberDead):
                self.deaths += 1

    def status(self) -> dict:
        view = {}
        for name in {*self.seen, *(m.name for m in self.cluster.members())}:
            m = self.cluster.member(name)
            if m is not None:
                view[name] = m.state.name.lower()
                self.seen[name] = view[name]
        st = self.cluster.stats()
        return {"view": view, "owned": 0, "acquired": 0, "declared_dead": 0, "how": [0, 0, 0], "code": "kinship",
                "suspicions": st.suspicions, "deaths": self.deaths}

    async def leave(self) -> None:
        await self.cluster.leave()
        await self.cluster.close()


async def member_main(args: argparse.Namespace) -> None:
    member = PlacementMember(args) if args.system == "placement" else KinshipMember(args)
    await member.start()
    loop = asyncio.get_running_loop()
    done = asyncio.Event()

    def say(obj: dict) -> None:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    def command(line: str) -> None:
        words = line.split()
        if not words or words[0] == "quit":
            done.set()
        elif words[0] == "status":
            say({"cpu": cpu_s(), "t": time.monotonic(), **member.status()})
        elif words[0] == "block":
            say({"took": block(words[1], float(words[2]))})

    def read() -> None:
        for line in sys.stdin:
            loop.call_soon_threadsafe(command, line)
        loop.call_soon_threadsafe(done.set)

    threading.Thread(target=read, daemon=True).start()
    say({"ready": True})
    await done.wait()
    await member.leave()
    sys.stdout.flush()
    os._exit(0)  # kinship 0.4.0 may segfault in interpreter teardown; nothing is left to flush


# ----------------------------------------------------------------------------- driver

class Proc:
    def __init__(self, system: str, i: int, base_port: int, partitions: int) -> None:
        self.id = f"m{i}"
        cmd = [sys.executable, __file__, "member", "--system", system, "--id", self.id, "--port", str(base_port + i),
               "--seeds", str(base_port) if i else "", "--partitions", str(partitions)]
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        assert self.p.stdin is not None and self.p.stdout is not None  # both PIPE
        self.stdin, self.stdout = self.p.stdin, self.p.stdout
        assert json.loads(self.stdout.readline()).get("ready"), f"{self.id} did not start"

    def ask(self, line: str) -> dict:
        self.stdin.write(line + "\n")
        self.stdin.flush()
        out = self.stdout.readline()
        if not out:
            raise RuntimeError(f"{self.id} exited")
        return json.loads(out)

    def send(self, line: str) -> None:
        self.stdin.write(line + "\n")
        self.stdin.flush()

    def read(self) -> dict:
        return json.loads(self.stdout.readline())


def start_cluster(args: argparse.Namespace) -> list[Proc]:
    system, n, partitions = args.system, args.nodes, args.partitions
    procs = [Proc(system, i, args.base_port, partitions) for i in range(n)]
    deadline = time.monotonic() + 60
    while True:
        sts = [p.ask("status") for p in procs]
        full = all(sum(s == "alive" for s in st["view"].values()) == n for st in sts)
        owned = system != "placement" or sum(st["owned"] for st in sts) == partitions
        if full and owned:
            break
        if time.monotonic() > deadline:
            raise SystemExit(f"cluster did not converge: {[(st['owned'], st['view']) for st in sts]}")
        time.sleep(0.5)
    if system == "placement":  # let handoffs finish: acquisitions stop moving
        last = None
        while (now := sum(p.ask("status")["acquired"] for p in procs)) != last:
            last = now
            time.sleep(5)
    return procs


def calibrate_gil(target_s: float, cache: dict) -> int:
    """n such that the backtracking match takes about target_s here (each +1 doubles it)."""
    if "n0" not in cache:
        n = 16
        while block("gil", n) < 0.05:
            n += 1
        cache["n0"], cache["t0"] = n, block("gil", n)
    import math
    return cache["n0"] + max(0, round(math.log2(target_s / cache["t0"])))


def run_blocks(args: argparse.Namespace) -> None:
    procs = start_cluster(args)
    busy, observers = procs[-1], procs[:-1]
    cache: dict = {}
    print(f"# {args.system} ({busy.ask('status')['code']}): {args.nodes} processes, P={args.partitions}, "
          f"busy member {busy.id}; settle {args.settle} s after each block", flush=True)
    print("| block | took s | suspicions of busy seen | deaths declared | busy told dead | partitions moved "
          "(by note / takeover / back) |")
    print("|---|---|---|---|---|---|", flush=True)
    for spec in args.blocks.split(","):
        kind, secs = spec.split(":")
        arg = calibrate_gil(float(secs), cache) if kind == "gil" else float(secs)
        before = [p.ask("status") for p in procs]
        busy.send(f"block {kind} {arg}")
        t0, suspect_seen, dead_seen = time.monotonic(), False, False
        took = None
        while time.monotonic() - t0 < float(secs) + args.settle or took is None:
            for p in observers:
                status = p.ask("status")["view"].get(busy.id)
                suspect_seen |= status == "suspect"
                dead_seen |= status == "dead"
            if took is None and time.monotonic() - t0 >= float(secs) * 0.9:
                took = busy.read()["took"]
            time.sleep(0.2)
        after = [p.ask("status") for p in procs]
        deaths = sum(a["deaths"] - b["deaths"] for a, b in zip(after, before))
        moved = sum(a["acquired"] - b["acquired"] for a, b in zip(after, before))
        told = after[-1]["declared_dead"] - before[-1]["declared_dead"]
        how = [sum(a["how"][i] - b["how"][i] for a, b in zip(after, before)) for i in range(3)]
        moved_s = f"{moved} ({' / '.join(map(str, how))})" if args.system == "placement" else "n/a"
        told_s = str(told) if args.system == "placement" else "n/a"
        print(f"| {kind} {secs} s | {took:.2f} | {'yes' if suspect_seen else 'no'} | {deaths}"
              f"{' (seen dead)' if dead_seen else ''} | {told_s} | {moved_s} |", flush=True)
    kill_and_measure(args, procs, victim=procs[1])
    for p in procs:
        if p.p.poll() is None:
            p.send("quit")
    for p in procs:
        p.p.wait(30)


def kill_and_measure(args: argparse.Namespace, procs: list[Proc], victim: Proc) -> None:
    victim.p.send_signal(signal.SIGKILL)
    t0 = time.monotonic()
    survivors = [p for p in procs if p is not victim]
    detected = owned = None
    while time.monotonic() - t0 < 120 and (detected is None or (owned is None and args.system == "placement")):
        sts = [p.ask("status") for p in survivors]
        if detected is None and all(st["view"].get(victim.id) == "dead" for st in sts):
            detected = time.monotonic() - t0
        if detected is not None and args.system == "placement" and sum(st["owned"] for st in sts) == args.partitions:
            owned = time.monotonic() - t0
        time.sleep(0.1)
    procs.remove(victim)
    def fmt(x: float | None) -> str:
        return "timeout" if x is None else f"{x:.1f} s"
    print(f"kill -9 of {victim.id}: dead in every survivor's view after {fmt(detected)}"
          + (f", its partitions owned again after {fmt(owned)}" if args.system == "placement" else ""), flush=True)


def run_idle(args: argparse.Namespace) -> None:
    procs = start_cluster(args)
    time.sleep(5)
    a = [p.ask("status") for p in procs]
    time.sleep(args.idle_s)
    b = [p.ask("status") for p in procs]
    per = sorted((y["cpu"] - x["cpu"]) / (y["t"] - x["t"]) for x, y in zip(a, b))
    print(f"# {args.system} ({b[0]['code']}): {args.nodes} processes idle for {args.idle_s:.0f} s: CPU per member "
          f"median {100 * per[len(per) // 2]:.2f} %, max {100 * per[-1]:.2f} % of one core", flush=True)
    kill_and_measure(args, procs, victim=procs[len(procs) // 2])
    for p in procs:
        p.send("quit")
    for p in procs:
        p.p.wait(30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", nargs="?", default="driver", choices=["driver", "member"])
    ap.add_argument("--system", choices=["placement", "kinship"], default="placement")
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--partitions", type=int, default=4096)
    ap.add_argument("--blocks", default="none:10,cpu:1,cpu:5,cpu:10,cpu:30,sleep:10,gil:0.5,gil:2,gil:5")
    ap.add_argument("--settle", type=float, default=12.0, help="seconds watched after each block")
    ap.add_argument("--idle", action="store_true")
    ap.add_argument("--idle-s", type=float, default=30.0)
    ap.add_argument("--base-port", type=int, default=17400, help="UDP ports base .. base+N-1")
    # member mode
    ap.add_argument("--id")
    ap.add_argument("--port", type=int)
    ap.add_argument("--seeds", default="")
    args = ap.parse_args()
    fresh_state_home()  # (a first start each run: benchmarks/fresh_state.py)
    if args.mode == "member":
        asyncio.run(member_main(args))
    elif args.idle:
        run_idle(args)
    else:
        run_blocks(args)


if __name__ == "__main__":
    main()
