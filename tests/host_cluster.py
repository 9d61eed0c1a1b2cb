"""Five-ish `placement node` processes on "hosts", watched by an ``ownership_sampler.Sampler``.

``Hosts`` runs node processes on one address family of hosts: ``Loopback`` (every node on
127.0.0.1, its own ports) here, ``netns_lab.Lab`` (every node in its own network namespace, its
own IP) for real link faults. ``Cluster`` boots nodes on either, waits for conditions on the
sampler's rounds with deadlines, and checks exclusivity. Used by ``tests/test_netns_cluster.py``
and ``benchmarks/bench_hosts.py`` (the same scenario on loopback and on namespaces).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from placement import PlacementTable

from ownership_sampler import Round, Sampler, WaitTimeout
from ports import free_port


class Hosts:
    """Node processes, one per name; output to ``logdir/<name>.log``."""

    names: list[str]

    def __init__(self) -> None:
        self.procs: dict[str, subprocess.Popen] = {}
        self.logdir = Path(tempfile.mkdtemp(prefix="placement-hosts-"))
        #: The hosts' disk: where their nodes keep members files (``placement.service.members_file``),
        #: so a node restarted here finds its own, and a new ``Hosts`` starts from none.
        self.state_home = self.logdir / "state"

    def gossip(self, name: str) -> str:
        raise NotImplementedError

    def http(self, name: str) -> str:
        raise NotImplementedError

    def enter(self) -> None:
        """Run first in the sampler's thread (so it can reach the nodes)."""

    def command_prefix(self, name: str) -> list[str]:
        return []

    def up(self) -> None: ...

    def start(self, name: str, args: Sequence[str], command: str = "node",
              module: str = "placement_cli") -> subprocess.Popen:
        """Run ``placement COMMAND ARGS`` (node, or witness) as host ``name``; with ``module``
        another than ``placement_cli``, ``python -m MODULE ARGS`` (e.g. ``placement.service.work_sink``)."""
        log = open(self.logdir / f"{name}.log", "ab")
        what = [command] if module == "placement_cli" else []
        cmd = [*self.command_prefix(name), sys.executable, "-m", module, *what, *args]
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**os.environ, "PYTHONUNBUFFERED": "1",
                                     "PLACEMENT_STATE_HOME": str(self.state_home)})
        log.close()
        self.procs[name] = proc
        return proc

    def log_tail(self, name: str, lines: int = 15) -> str:
        path = self.logdir / f"{name}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def down(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)


class Loopback(Hosts):
    """Every node on 127.0.0.1 with its own free ports: the baseline without a network."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.names = [f"n{i + 1}" for i in range(n)]
        self._ports = {name: (free_port(), free_port()) for name in self.names}

    def gossip(self, name: str) -> str:
        return f"127.0.0.1:{self._ports[name][0]}"

    def http(self, name: str) -> str:
        return f"127.0.0.1:{self._ports[name][1]}"


def alive(names: Sequence[str]) -> dict[str, str]:
    return {n: "alive" for n in names}


class Cluster:
    """Nodes on ``hosts`` (the first is the seed), ``partitions`` partitions, and a sampler watching
    them. Those named in ``witnesses`` run ``placement witness`` (weight 0: they must own nothing).
    ``extra_args``: more flags for some nodes, at every start (e.g. ``--state-dir``)."""

    def __init__(self, hosts: Hosts, partitions: int, witnesses: Sequence[str] = (),
                 extra_args: Mapping[str, Sequence[str]] | None = None) -> None:
        self.hosts, self.partitions, self.names = hosts, partitions, hosts.names
        self.witnesses = set(witnesses)
        self.extra_args = dict(extra_args or {})
        self.sampler = Sampler({n: f"http://{hosts.http(n)}" for n in self.names}, setup=hosts.enter)
        self.joined_at = 0.0
        self.healed_at: float | None = None

    def boot(self) -> float:
        """Set the hosts up, start the seed, then the others; returns when the others were started."""
        self.hosts.up()
        self.sampler.start()
        self.start(self.names[0])
        self.wait(lambda r: r.views[self.names[0]] is not None, 0, 30, "the seed to answer")
        self.joined_at = time.monotonic()
        for name in self.names[1:]:
            self.start(name)
        return self.joined_at

    def close(self) -> None:
        self.sampler.stop()
        self.hosts.down()

    def start(self, name: str) -> None:
        args = ["--id", name, "--gossip", self.hosts.gossip(name), "--http", self.hosts.http(name),
                "--partitions", str(self.partitions)]
        if name != self.names[0]:
            args += ["--join", self.hosts.gossip(self.names[0])]
        elif name in self.hosts.procs:  # the seed restarted (its members file would lead it back too)
            args += ["--join", self.hosts.gossip(self.names[1])]
        args += self.extra_args.get(name, ())
        self.hosts.start(name, args, "witness" if name in self.witnesses else "node")

    def kill(self, name: str) -> None:
        self.hosts.procs[name].kill()

    def kill_and_take_over(self, victim: str, taker: str, witness: str) -> tuple[Round, Round, float]:
        """kill -9 ``victim`` of a worker, a worker and a witness; wait until the other two see
        it dead and ``taker`` owns every partition, the witness none. Returns (the round that
        saw it dead, the round that saw the takeover, when it was killed); prints the times."""
        killed = time.monotonic()
        self.kill(victim)
        survivors = [taker, witness]
        detected = self.wait(lambda r: r.sees(survivors, alive(survivors)), killed, 30, f"{victim} dead everywhere")
        taken = self.wait(lambda r: r.owns_exactly({taker: set(range(self.partitions)), witness: set()}), killed,
                          30, f"{taker} owning every partition, the witness none")
        print(f"kill -9 {victim}: detected after {detected.end - killed:.2f} s, {taker} owns all "
              f"{self.partitions} after {taken.end - killed:.2f} s")
        return detected, taken, killed

    def placed(self, names: Sequence[str]) -> dict[str, set[int]]:
        """Who must own what once ``names`` are the stable view: the placement table's leaders
        (a witness: nothing)."""
        table = PlacementTable.build({n: 0.0 if n in self.witnesses else 1.0 for n in names},
                                     partitions=self.partitions, replicas=1, seed=0)
        return {n: set(table.owned_by(n, leader_only=True)) for n in names}

    def wait(self, predicate: Callable[[Round], bool], since: float, timeout_s: float, what: str) -> Round:
        try:
            return self.sampler.wait_for(predicate, since, timeout_s, what)
        except WaitTimeout as exc:
            raise WaitTimeout(f"{exc}\n{self.diagnosis()}") from None

    def hold(self, until: float) -> None:
        """Let a fault last until ``until`` (monotonic), watching the sampler meanwhile."""
        self.wait(lambda r: r.start >= until, until, until - time.monotonic() + 30, "the sampler to go on")

    def settled(self, names: Sequence[str] | None = None, timeout_s: float = 60) -> Round:
        names = list(names or self.names)
        expected = self.placed(names)
        return self.wait(lambda r: r.sees(names, alive(names)) and r.owns_exactly(expected),
                         time.monotonic(), timeout_s, f"{names} all alive, each owning what the placement says")

    def assert_exclusive(self, t0: float) -> list[Round]:
        rounds = self.sampler.between(t0, time.monotonic())
        assert rounds, "the sampler took no round"
        proven = [(round(r.start - t0, 2), o) for r in rounds for o in r.proven]
        assert not proven, f"partitions owned by two nodes at once (s after start, (p, holder, other)): {proven[:10]}"
        return rounds

    def diagnosis(self) -> str:
        if not self.sampler.rounds:
            return "the sampler took no round"
        last = self.sampler.rounds[-1]
        owners = last.owners()
        state = {r.node: (len(r.owned), r.paused, r.waiting) for r in last.second if r is not None}
        unowned = sorted(set(range(self.partitions)).difference(*owners.values()))
        logs = "\n".join(f"--- {n}\n{self.hosts.log_tail(n)}" for n in self.names)
        return (f"last views: {last.views}\n(owned, paused, waiting): {state}\nunowned: {unowned}\n"
                f"logs: {self.hosts.logdir}\n{logs}")
