"""Rolling restarts under client load (issue 30; Shard Manager's upgrade test).

    python benchmarks/bench_restarts.py [--nodes 5] [--at-once 1] [--rate 100] [--threads 4]
    python benchmarks/bench_restarts.py --nodes 10 --at-once 2     # 10 % of the nodes at once

Boots ``--nodes`` ``python -m placement.service.work_sink --journal FILE`` processes on loopback
(P=256, exclusive ownership; ``tests/host_cluster.py``'s launcher), then sends ``--rate``
single-item ``POST /v1/work`` batches a second from ``--threads`` threads through one
``PlacementClient`` (``request(..., idempotent=True, spread=False)``: the sink takes an item once
per ``(job, id)``, so resending is safe; only the owner takes it). Phases:

* ``steady``: ``--steady-s`` seconds of load on the settled cluster;
* ``rolling``: every node in turn (``--at-once`` at a time) gets SIGTERM; the script waits for
  the processes to exit (the leave time: printed per node), restarts them under the same ids
  and addresses, and waits until every node owns exactly what the placement says before the
  next group;
* ``kill9``: the last node is killed with SIGKILL, restarted once the others own its partitions
  (the failure detection and takeover: printed), and the cluster settles again.

A request belongs to the phase in which it started. Per phase: requests, success on the first
try (one ``POST /v1/work``, answered 200), success after the client's own retries (the caller
does nothing else), time to success p50/p99/p99.9/max (from the call to its 200), failures by
error, and items *accepted twice*: the same item id in two lines of the sinks' journals (each
sink appends the items it takes, flushed before its 200, so a killed sink's count stays), i.e.
taken by two nodes, or by one node before and after its restart. Goals (issue 30): rolling: max
<= 3 s, 100 % success, 0 accepted twice; kill9: max <= detection + 3 s.

Ownership is read from ``GET /v1/ownership`` every 0.2 s while waiting (the sampler of
``bench_hosts.py`` polls flat out, which would load the 2 cores the clients and nodes share).
"""

from __future__ import annotations

import argparse
import collections
import json
import signal
import sys
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from placement.client import PlacementClient, RetryPolicy
from placement.errors import PlacementError
from simulations.stats import percentiles

from host_cluster import Cluster, Loopback

JOB = "restarts"


class SinkCluster(Cluster):
    """``Cluster`` whose nodes are work sinks with journals; a restarted node joins through a node
    that is not restarting with it."""

    def __init__(self, hosts: Loopback, partitions: int) -> None:
        super().__init__(hosts, partitions)
        self.down: set[str] = set()

    def journal(self, name: str) -> Path:
        return self.hosts.logdir / f"{name}.jsonl"

    def start(self, name: str) -> None:
        args = ["--id", name, "--gossip", self.hosts.gossip(name), "--http", self.hosts.http(name),
                "--partitions", str(self.partitions), "--journal", str(self.journal(name))]
        if name in self.hosts.procs or name != self.names[0]:  # only the first start of the seed founds
            seed = next(n for n in self.names if n != name and n not in self.down)
            args += ["--join", self.hosts.gossip(seed)]
        self.hosts.start(name, args, module="placement.service.work_sink")

    def url(self, name: str) -> str:
        return f"http://{self.hosts.http(name)}"

    def settle(self, timeout_s: float = 90.0) -> float:
        """Wait until every node answers and owns exactly what the placement of all says; seconds taken."""
        return self._owns_as_placed(self.names, timeout_s, "the cluster did not settle")

    def taken_over(self, survivors: list[str], timeout_s: float = 60.0) -> float:
        return self._owns_as_placed(survivors, timeout_s, "no takeover")

    def _owns_as_placed(self, names: list[str], timeout_s: float, failure: str) -> float:
        """Poll until ``names`` answer and own exactly what their placement says; seconds taken."""
        expected = self.placed(names)
        t0 = time.monotonic()
        with httpx.Client(timeout=2.0) as http:
            while time.monotonic() - t0 < timeout_s:
                try:
                    owned = {n: set(http.get(f"{self.url(n)}/v1/ownership").json()["owned"]) for n in names}
                    if owned == expected:
                        return time.monotonic() - t0
                except (httpx.HTTPError, ValueError, KeyError):
                    pass
                time.sleep(0.2)  # a poll with a deadline
        raise TimeoutError(f"{failure} within {timeout_s} s (logs: {self.hosts.logdir})")


class Counting(httpx.HTTPTransport):
    """Records the ``POST /v1/work`` calls of the current thread (the attempts of its request):
    their answers, a status or an error name."""

    local = threading.local()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path != "/v1/work":
            return super().handle_request(request)
        try:
            response = super().handle_request(request)
        except httpx.HTTPError as exc:
            self.local.answers.append(type(exc).__name__)
            raise
        self.local.answers.append(str(response.status_code))
        return response


class Load:
    """``threads`` threads sending ``rate`` requests a second in all, each recorded as
    (phase, seconds to its outcome, attempts, outcome: "ok" or the error)."""

    def __init__(self, client: PlacementClient, rate: float, threads: int) -> None:
        self.client, self.rate, self.threads = client, rate, threads
        self.phase = "steady"
        self.records: list[tuple[str, float, int, str]] = []
        self.slow: collections.Counter = collections.Counter()  # (phase, answers) of requests over 1 s
        self.item_phase: dict[int, str] = {}
        self._ids = iter(range(1, 1 << 62))
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._workers = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(threads)]

    def start(self) -> None:
        for t in self._workers:
            t.start()

    def stop(self) -> None:
        self._stop.set()
        for t in self._workers:
            t.join(60)

    def _run(self, i: int) -> None:
        period = self.threads / self.rate
        due = time.monotonic() + i * period / self.threads
        while not self._stop.is_set():
            now = time.monotonic()
            if due > now:
                time.sleep(due - now)
            due = max(due + period, time.monotonic() - 1.0)  # catch up for at most 1 s of lag
            with self._lock:
                item, phase = next(self._ids), self.phase
                self.item_phase[item] = phase
            key = f"item-{item}"
            body = {"job": JOB, "items": [{"id": item, "key": key}]}
            answers: list[str] = []
            Counting.local.answers = answers
            t0 = time.monotonic()
            try:
                r = self.client.request("POST", key, "/v1/work", idempotent=True, spread=False, json=body)
                outcome = "ok" if r.status_code == 200 else f"HTTP {r.status_code}"
            except (httpx.HTTPError, PlacementError) as exc:
                outcome = type(exc).__name__
            took = time.monotonic() - t0
            with self._lock:
                self.records.append((phase, took, len(answers), outcome))
                if took > 1.0:
                    self.slow[(phase, " ".join(answers))] += 1


def accepted_twice(c: SinkCluster, item_phase: dict[int, str]) -> collections.Counter:
    """Per phase: items in more than one journal line (taken twice: by two nodes, or by one node
    before and after a restart). Items resent to the node that had them are not: it recognises
    them (the journal's ``duplicates``)."""
    seen: collections.Counter = collections.Counter()
    for name in c.names:
        path = c.journal(name)
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue  # a last line cut by kill -9: never acknowledged
            if entry["job"] == JOB:
                seen.update(int(i) for i, _ in entry["items"])
    return collections.Counter(item_phase.get(i, "?") for i, n in seen.items() if n > 1)


def report(load: Load, twice: collections.Counter, detection: float | None) -> None:
    print(f"\n{'phase':8s} {'requests':>8s} {'1st try':>8s} {'success':>8s} {'p50 ms':>8s} {'p99 ms':>8s} "
          f"{'p99.9 ms':>9s} {'max ms':>8s} {'twice':>6s}  failures / retried by outcome")
    for phase in ("steady", "rolling", "kill9"):
        rows = [r for r in load.records if r[0] == phase]
        if not rows:
            continue
        ok = [r for r in rows if r[3] == "ok"]
        first = [r for r in ok if r[2] == 1]
        p = percentiles([r[1] * 1000 for r in ok], (50, 99, 99.9))  # type: ignore[arg-type]
        failures = collections.Counter(r[3] for r in rows if r[3] != "ok")
        retried = collections.Counter(f"{r[2]} attempts" for r in ok if r[2] != 1)
        print(f"{phase:8s} {len(rows):8d} {100 * len(first) / len(rows):7.2f}% {100 * len(ok) / len(rows):7.2f}% "
              f"{p['p50'] or 0:8.1f} {p['p99'] or 0:8.1f} {p['p99.9'] or 0:9.1f} {p['max'] or 0:8.1f} "
              f"{twice.get(phase, 0):6d}  {dict(failures) or '-'} / {dict(sorted(retried.items())) or '-'}")
    if load.slow:
        print("requests over 1 s by phase and the answers of their attempts: "
              + "; ".join(f"{ph}: [{a}] x{n}" for (ph, a), n in sorted(load.slow.items())))
    if detection is not None:
        print(f"kill9 goal: max <= detection ({detection:.2f} s) + 3 s = {detection + 3:.2f} s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=5)
    ap.add_argument("--at-once", type=int, default=1, help="nodes restarted together in the rolling phase")
    ap.add_argument("--rate", type=float, default=100.0, help="requests a second, all threads together")
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--steady-s", type=float, default=5.0)
    ap.add_argument("--client-deadline-s", type=float, default=30.0,
                    help="the client's RetryPolicy deadline (longer than the goals: the figures show the waits)")
    ap.add_argument("--no-kill", action="store_true", help="skip the kill -9 phase")
    args = ap.parse_args()
    if not 1 <= args.at_once < args.nodes:
        ap.error("--at-once must be at least 1 and below --nodes")
    c = SinkCluster(Loopback(args.nodes), partitions=256)
    print(f"{args.nodes} work sinks (P=256), {args.rate:g} requests/s from {args.threads} threads; "
          f"logs and journals in {c.hosts.logdir}", flush=True)
    load = None
    detection = None
    started = time.monotonic()
    try:
        for name in c.names:
            c.start(name)
            if name == c.names[0]:
                _wait_up(c.url(name))  # the seed answers before the others join it
        print(f"booted and settled in {c.settle():.1f} s", flush=True)
        client = PlacementClient([c.url(n) for n in c.names], transport=Counting(),
                                 retry=RetryPolicy(deadline_s=args.client_deadline_s))
        load = Load(client, args.rate, args.threads)
        load.start()
        time.sleep(args.steady_s)
        load.phase = "rolling"
        groups = [c.names[i:i + args.at_once] for i in range(0, len(c.names), args.at_once)]
        for group in groups:
            t0 = time.monotonic()
            c.down = set(group)
            for name in group:
                c.hosts.procs[name].send_signal(signal.SIGTERM)
            exits = {}
            for name in group:
                c.hosts.procs[name].wait(60)
                exits[name] = time.monotonic() - t0
            t1 = time.monotonic()
            for name in group:
                c.start(name)
            c.down = set()
            settled = c.settle()
            print(f"rolling {','.join(group)}: exited after SIGTERM in "
                  + ", ".join(f"{n} {s:.2f} s" for n, s in exits.items())
                  + f"; restarted, settled {settled:.1f} s later (total {time.monotonic() - t0:.1f} s; "
                  f"restart to settled {time.monotonic() - t1:.1f} s)", flush=True)
        if not args.no_kill:
            time.sleep(2.0)
            load.phase = "kill9"
            victim = c.names[-1]
            survivors = c.names[:-1]
            t0 = time.monotonic()
            c.hosts.procs[victim].kill()
            c.hosts.procs[victim].wait(10)
            detection = _dead_everywhere(c, survivors, victim)
            c.taken_over(survivors)
            taken = time.monotonic() - t0
            c.down = {victim}
            c.start(victim)
            c.down = set()
            settled = c.settle()
            print(f"kill -9 {victim}: dead in every survivor's view after {detection:.2f} s, its partitions "
                  f"taken over after {taken:.2f} s; restarted, settled {settled:.1f} s later", flush=True)
            time.sleep(2.0)
        load.phase = "after"
        time.sleep(1.0)
    finally:
        if load is not None:
            load.stop()
            load.client.close()
        c.hosts.down()
    twice = accepted_twice(c, load.item_phase if load else {})
    if load is not None:
        report(load, twice, detection)
    print(f"\nrun took {time.monotonic() - started:.0f} s")
    return 0


def _wait_up(url: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/healthz", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{url} did not come up")


def _dead_everywhere(c: SinkCluster, survivors: list[str], victim: str, timeout_s: float = 60.0) -> float:
    """Seconds from now (just after the kill) until every survivor lists ``victim`` as dead."""
    t0 = time.monotonic()
    with httpx.Client(timeout=2.0) as http:
        while time.monotonic() - t0 < timeout_s:
            try:
                views = [{m["id"]: m["status"] for m in http.get(f"{c.url(n)}/v1/members").json()} for n in survivors]
                if all(v.get(victim) in ("dead", None) for v in views):
                    return time.monotonic() - t0
            except (httpx.HTTPError, ValueError, KeyError):
                pass
            time.sleep(0.1)
    raise TimeoutError(f"{victim} not dead everywhere within {timeout_s} s")


if __name__ == "__main__":
    sys.exit(main())
