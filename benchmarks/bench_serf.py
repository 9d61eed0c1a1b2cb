"""Idle CPU per member, side by side with Serf agents, in one run (issue 14 item 1).

    python benchmarks/bench_serf.py                       # N=16 then N=32, 60 s idle window each
    python benchmarks/bench_serf.py --n 16 32 --window 60 --settle 15
    python benchmarks/bench_serf.py --n 16 --variants serf member   # only some clusters
    python benchmarks/bench_serf.py --n 16 --variants serf node node-available member

Needs the ``serf`` binary (Debian package ``serf``: ``apt-get install -y serf``); without it the
script says so and exits with status 2. It installs nothing.

At each N it starts one cluster of N processes per variant on loopback, all at the same time:

* ``serf``: ``serf agent -profile=lan`` (Serf's default LAN timing: memberlist's
  DefaultLANConfig), every agent joined to the first;
* ``node``: ``placement node`` as ``make run`` (``placement cluster``) starts it: ``--partitions
  4096 --replicas 2 --work-sink``, default (exclusive) ownership, HTTP API, joined to the first;
* ``node-available`` (only with ``--variants``): the same node with ``--ownership available``
  (no quorum leases), to tell the exclusive mode's lease traffic from the rest;
* ``member``: the asyncio gossip driver alone (``membership.aio.start_member`` with the default
  ``MembershipConfig``), from this script's ``member`` subcommand (there is no other entry point).

It waits (polling, with a deadline) until every cluster has converged - every member sees N alive
members (``serf members``, ``GET /v1/members``, the driver's own view), and for ``node`` the
exclusive ownership has settled (every node on the same stable view, nothing waiting or
releasing, every partition owned once) - then lets ``--settle`` seconds pass so the join's
retransmissions and push-pulls die down, then reads utime+stime (children included) of every
process from /proc/PID/stat at the start and the end of one ``--window`` shared by all the
clusters. It prints per-member CPU % of one core (mean, min, max), the ratios ours/serf, and
gossip datagrams sent per member per second for our variants (the core's ``datagrams_out``
counter; the node's lease and handoff datagrams are not in it, and serf exposes no counter).
Every process is stopped at the end, also on Ctrl-C and on errors.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
VARIANTS = ("serf", "node", "member", "node-available")  # the last only when asked for
DEFAULT_VARIANTS = ("serf", "node", "member")
# Per cluster, the first port of each range (member i uses first + i).
SERF_BIND, SERF_RPC, MEMBER_GOSSIP = 27000, 27200, 27400
NODE_PORTS = {"node": (27600, 27800), "node-available": (28000, 28200)}  # (gossip, HTTP)
TICKS = os.sysconf("SC_CLK_TCK")


# --------------------------------------------------------------------------- /proc


def parse_stat(text: str) -> tuple[int, float]:
    """(ppid, CPU seconds) from the text of /proc/PID/stat: utime + stime of the process (all its
    threads) + cutime + cstime (its waited-for children). The command name (field 2) is in
    parentheses and may itself hold spaces and parentheses, so the fields are counted from the
    last ')'."""
    rest = text[text.rindex(")") + 2:].split()
    # rest[0] is field 3 (state): ppid is field 4, utime..cstime are fields 14..17.
    ppid = int(rest[1])
    utime, stime, cutime, cstime = (int(x) for x in rest[11:15])
    return ppid, (utime + stime + cutime + cstime) / TICKS


def _read_stat(pid: int) -> tuple[int, float] | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return parse_stat(fh.read())
    except (OSError, ValueError):
        return None


def cpu_seconds(pids: Iterable[int]) -> dict[int, float]:
    """CPU seconds of each pid and every live descendant of it (children that exited and were
    waited for are in cutime/cstime)."""
    stats: dict[int, tuple[int, float]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (s := _read_stat(int(name))) is not None:
            stats[int(name)] = s
    return tree_cpu(stats, pids)


def tree_cpu(stats: dict[int, tuple[int, float]], pids: Iterable[int]) -> dict[int, float]:
    """pid -> CPU seconds of it and its descendants, from ``stats`` (pid -> (ppid, CPU seconds))."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    out = {}
    for root in pids:
        total, todo = 0.0, [root]
        while todo:
            pid = todo.pop()
            if pid in stats:
                total += stats[pid][1]
            todo.extend(children.get(pid, ()))
        out[root] = total
    return out


# --------------------------------------------------------------------------- the clusters


@dataclass
class Cluster:
    """N processes of one variant."""

    variant: str
    n: int
    logdir: str
    root: str = ROOT  # the source tree the members run from (bench_wakeups.py --root)
    procs: list[subprocess.Popen] = field(default_factory=list)
    # member variant: each child's last reported live count and counters (from its stdout)
    live: dict[int, int] = field(default_factory=dict)
    counters: dict[int, tuple[int, int]] = field(default_factory=dict)
    _stats_seen: threading.Condition = field(default_factory=threading.Condition)

    def command(self, i: int) -> list[str]:
        if self.variant == "serf":
            cmd = ["serf", "agent", f"-node=s{i}", f"-bind=127.0.0.1:{SERF_BIND + i}",
                   f"-rpc-addr=127.0.0.1:{SERF_RPC + i}", "-profile=lan", "-log-level=warn"]
            return cmd + ([f"-retry-join=127.0.0.1:{SERF_BIND}", "-retry-interval=1s"] if i else [])
        if self.variant in NODE_PORTS:
            gossip, http = NODE_PORTS[self.variant]
            cmd = [sys.executable, "-m", "placement_cli", "node", "--id", f"n{i}",
                   "--gossip", f"127.0.0.1:{gossip + i}", "--http", f"127.0.0.1:{http + i}",
                   "--partitions", "4096", "--replicas", "2", "--work-sink"]
            if self.variant == "node-available":
                cmd += ["--ownership", "available"]
            return cmd + (["--join", f"127.0.0.1:{gossip}"] if i else ["--new-cluster"])
        cmd = [sys.executable, os.path.abspath(__file__), "member", "--id", f"m{i}", "--port", str(MEMBER_GOSSIP + i)]
        return cmd + (["--join", str(MEMBER_GOSSIP)] if i else [])

    def start(self, i: int) -> None:
        env = dict(os.environ, PYTHONPATH=self.root + os.pathsep + os.environ.get("PYTHONPATH", ""))
        log = open(os.path.join(self.logdir, f"{self.variant}-{i}.log"), "w")  # the child holds it
        piped = self.variant == "member"
        proc = subprocess.Popen(self.command(i), stdin=subprocess.DEVNULL, stderr=log, env=env, cwd=self.root,
                                stdout=subprocess.PIPE if piped else log, text=True, start_new_session=True)
        log.close()
        self.procs.append(proc)
        if piped:
            threading.Thread(target=self._read, args=(i, proc), daemon=True).start()

    def _read(self, i: int, proc: subprocess.Popen) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            word, *values = line.split()
            if word == "live":
                self.live[i] = int(values[0])
            elif word == "stats":
                with self._stats_seen:
                    self.counters[i] = (int(values[0]), int(values[1]))
                    self._stats_seen.notify_all()

    def exited(self) -> list[int]:
        return [i for i, p in enumerate(self.procs) if p.poll() is not None]

    def up(self, i: int) -> bool:
        """Member i answers (its first must before the others join it)."""
        if self.variant == "serf":
            return _serf_members(i) is not None
        if self.variant in NODE_PORTS:
            return _get_json(f"{self.url(i)}/healthz") is not None
        return i in self.live

    def url(self, i: int) -> str:
        return f"http://127.0.0.1:{NODE_PORTS[self.variant][1] + i}"

    def first_up(self) -> tuple[bool, str]:
        return self.up(0), ""

    def progress(self) -> tuple[bool, str]:
        """(converged, what each member sees) without waiting."""
        if self.variant == "serf":
            alive = [len(_serf_members(i) or ()) for i in range(self.n)]
        elif self.variant == "member":
            alive = [self.live.get(i, 0) for i in range(self.n)]
        else:
            alive = []
            for i in range(self.n):
                members = _get_json(f"{self.url(i)}/v1/members") or []
                alive.append(sum(1 for m in members if m["status"] == "alive"))
        seen = f"alive seen: min {min(alive)} max {max(alive)} of {self.n}"
        if min(alive) < self.n:
            return False, seen
        if self.variant != "node":  # (node-available owns what its view says: nothing to settle)
            return True, seen
        owns = [_get_json(f"{self.url(i)}/v1/ownership") for i in range(self.n)]
        if any(o is None for o in owns):
            return False, seen + "; ownership: no answer"
        views = {o["stable_view"] for o in owns}
        owned = sum(len(o["owned"]) for o in owns)
        busy = sum(o["waiting"] + len(o["releasing"]) for o in owns)
        settled = len(views) == 1 and busy == 0 and owned == 4096
        return settled, seen + f"; stable views {sorted(views, key=str)}, owned {owned}/4096, waiting+releasing {busy}"

    def datagrams_out(self) -> list[int] | None:
        """Gossip datagrams each member has sent so far (None for serf)."""
        if self.variant == "serf":
            return None
        if self.variant in NODE_PORTS:
            out = []
            for i in range(self.n):
                text = _get_text(f"{self.url(i)}/metrics") or ""
                out.append(int(float(next((line.split()[1] for line in text.splitlines()
                                           if line.startswith("placement_gossip_datagrams_out_total ")), "0"))))
            return out
        with self._stats_seen:
            self.counters.clear()
            for p in self.procs:
                p.send_signal(signal.SIGUSR1)
            self._stats_seen.wait_for(lambda: len(self.counters) == self.n, timeout=10)
            return [self.counters.get(i, (0, 0))[0] for i in range(self.n)]

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        for p in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(max(0.1, deadline - time.monotonic()))
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def _serf_members(i: int) -> list[str] | None:
    """The alive members agent i lists, or None if its RPC does not answer."""
    try:
        r = subprocess.run(["serf", "members", f"-rpc-addr=127.0.0.1:{SERF_RPC + i}", "-status=alive"],
                           capture_output=True, text=True, timeout=5)
    except subprocess.TimeoutExpired:
        return None
    return r.stdout.split("\n")[:-1] if r.returncode == 0 else None


def _get_text(url: str) -> str | None:
    import httpx

    try:
        r = httpx.get(url, timeout=5.0)
    except httpx.HTTPError:
        return None
    return r.text if r.status_code == 200 else None


def _get_json(url: str):
    import json

    text = _get_text(url)
    return None if text is None else json.loads(text)


def _wait(what: str, ready: Callable[[], tuple[bool, str]], timeout_s: float, clusters: list[Cluster]) -> None:
    deadline, said = time.monotonic() + timeout_s, 0.0
    while True:
        for c in clusters:
            if c.exited():
                raise RuntimeError(f"{c.variant} member(s) {c.exited()} exited; logs in {c.logdir}")
        done, text = ready()
        if done:
            print(f"  {what}: {text}", flush=True)
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {timeout_s:.0f} s ({text})")
        if time.monotonic() - said >= 5:
            print(f"  waiting for {what}: {text}", flush=True)
            said = time.monotonic()
        time.sleep(0.5)


def _pct(values: list[float]) -> str:
    return f"{sum(values) / len(values):6.2f} {min(values):6.2f} {max(values):6.2f}"


def run_n(n: int, variants: list[str], window_s: float, settle_s: float, logdir: str) -> dict[str, float]:
    """One run at N: start, converge, settle, measure; returns the mean CPU % per variant."""
    clusters = [Cluster(v, n, logdir) for v in variants]
    try:
        t0 = time.monotonic()
        for c in clusters:  # the first member of each cluster, then the others once it answers
            c.start(0)
        for c in clusters:
            _wait(f"{c.variant} first member up", c.first_up, 30, clusters)
        for c in clusters:
            for i in range(1, n):
                c.start(i)
        for c in clusters:
            _wait(f"{c.variant} converged", c.progress, 180, clusters)
        print(f"N={n}: all converged after {time.monotonic() - t0:.1f} s; settling {settle_s:.0f} s", flush=True)
        time.sleep(settle_s)  # the join's retransmissions and push-pulls die down (not waiting for an effect)
        sent0 = {c.variant: c.datagrams_out() for c in clusters}
        pids = [p.pid for c in clusters for p in c.procs]
        load0 = os.getloadavg()
        cpu0, w0 = cpu_seconds(pids), time.monotonic()
        while (left := w0 + window_s - time.monotonic()) > 0:
            time.sleep(min(10.0, left))
            for c in clusters:
                if c.exited():
                    raise RuntimeError(f"{c.variant} member(s) {c.exited()} exited; logs in {logdir}")
            print(f"  measuring: {time.monotonic() - w0:.0f}/{window_s:.0f} s, load {os.getloadavg()[0]:.2f}",
                  flush=True)
        cpu1, w1 = cpu_seconds(pids), time.monotonic()
        load1 = os.getloadavg()
        sent1 = {c.variant: c.datagrams_out() for c in clusters}
        dt = w1 - w0
        converged = {c.variant: c.progress() for c in clusters}
        print(f"\nN={n}, window {dt:.1f} s, load average (1 min) {load0[0]:.2f} at start, {load1[0]:.2f} at end")
        print("variant   CPU % of one core per member: mean    min    max  datagrams/member/s  still converged")
        means: dict[str, float] = {}
        for c in clusters:
            pcts = [100 * (cpu1[p.pid] - cpu0[p.pid]) / dt for p in c.procs]
            means[c.variant] = sum(pcts) / len(pcts)
            s0, s1 = sent0[c.variant], sent1[c.variant]
            rate = f"{(sum(s1) - sum(s0)) / dt / n:18.2f}" if s0 is not None and s1 is not None else f"{'-':>18}"
            print(f"{c.variant:<14} {'':>23}{_pct(pcts)}  {rate}  {converged[c.variant][0]}")
        if "serf" in means and means["serf"] > 0:
            for v in ("node", "member", "node-available"):
                if v in means:
                    print(f"ratio {v}/serf: {means[v] / means['serf']:.2f}")
        print(flush=True)
        return means
    finally:
        for c in clusters:
            c.stop()


# --------------------------------------------------------------------------- member subcommand


async def _member_main(node_id: str, port: int, join: int | None) -> None:
    """One asyncio gossip member (default MembershipConfig). Prints ``live K`` whenever its view
    changes, ``stats OUT IN`` (datagram counters) on SIGUSR1; leaves on SIGTERM/SIGINT."""
    from membership import MembershipConfig
    from membership.aio import start_member

    loop = asyncio.get_running_loop()
    member = await start_member(MembershipConfig(cluster_name="bench-serf"), node_id, bind=("127.0.0.1", port),
                                seeds=[("127.0.0.1", join)] if join else [])
    done = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, done.set)

    def stats() -> None:
        print(f"stats {member.core.stats['datagrams_out']} {member.core.stats['datagrams_in']}", flush=True)

    loop.add_signal_handler(signal.SIGUSR1, stats)

    async def report() -> None:
        print(f"live {len(member.live_members())}", flush=True)
        async for _ in member.subscribe(max_backlog=None):
            print(f"live {len(member.live_members())}", flush=True)

    reporting = asyncio.create_task(report())
    await done.wait()
    await member.leave()
    reporting.cancel()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command")
    member = sub.add_parser("member", help="(internal) run one asyncio gossip member")
    member.add_argument("--id", required=True)
    member.add_argument("--port", type=int, required=True)
    member.add_argument("--join", type=int, default=None, help="seed port on 127.0.0.1")
    ap.add_argument("--n", type=int, nargs="+", default=[16, 32], help="cluster sizes (default 16 32)")
    ap.add_argument("--window", type=float, default=60.0, help="idle window measured, seconds (default 60)")
    ap.add_argument("--settle", type=float, default=15.0, help="seconds between convergence and the window")
    ap.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(DEFAULT_VARIANTS),
                    help="default: serf node member; node-available: the node with --ownership available")
    args = ap.parse_args(argv)
    from fresh_state import fresh_state_home  # (a sibling script; here, so tests can load this file alone)

    fresh_state_home()  # (a first start each run: benchmarks/fresh_state.py)
    if args.command == "member":
        asyncio.run(_member_main(args.id, args.port, args.join))
        return 0
    if "serf" in args.variants and shutil.which("serf") is None:
        print("bench_serf: no `serf` binary on PATH; install it with `apt-get install -y serf` "
              "(Debian/Ubuntu package), or pass --variants node member", file=sys.stderr)
        return 2
    if max(args.n) > 200:
        print("bench_serf: --n at most 200 (port ranges)", file=sys.stderr)
        return 2
    if "serf" in args.variants:
        version = subprocess.run(["serf", "version"], capture_output=True, text=True).stdout.splitlines()
        print(f"serf {version[0] if version else '?'}; python {sys.version.split()[0]}; {os.cpu_count()} CPUs")
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # clean up as on Ctrl-C
    results: dict[int, dict[str, float]] = {}
    logdir = tempfile.mkdtemp(prefix="bench_serf-")  # kept if something fails
    try:
        for n in args.n:
            print(f"N={n}: starting {', '.join(args.variants)} ({n} processes each); logs in {logdir}", flush=True)
            results[n] = run_n(n, args.variants, args.window, args.settle, logdir)
    except KeyboardInterrupt:
        print(f"\ninterrupted: every process stopped; logs in {logdir}", file=sys.stderr)
        return 130
    except RuntimeError as exc:
        print(f"bench_serf: {exc}", file=sys.stderr)
        return 1
    shutil.rmtree(logdir, ignore_errors=True)
    print("summary: mean CPU % of one core per member" + "".join(f"; N={n}: " + ", ".join(
        f"{v} {m:.2f}" for v, m in r.items()) for n, r in results.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
