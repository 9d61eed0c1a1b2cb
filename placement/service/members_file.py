"""The members file: where a node remembers the cluster it is in, so that the same command run
again rejoins that cluster instead of founding a second one beside it.

Why. A node started without ``--join`` (and without ``--bootstrap``) founds a cluster and owns
every partition at once under a view of its own. Restarted with the same command while its
cluster runs, it used to found a *second* cluster: measured with ``benchmarks/bench_bootstrap.py``
(3 nodes, P=64), 40 of 64 partitions were owned twice for 2.1-2.8 s, until the old members'
gossip reached it; had they already declared it dead, the two clusters would never have met.
Without stable storage a process cannot tell its first start from a restart, so the node now
keeps one small file, as Serf's ``-snapshot`` keeps the members to rejoin and Elasticsearch keeps
its cluster UUID in its data path:

* every exclusive-mode node records the gossip addresses of the other members it knows
  (``note``, on the membership thread, before the ownership core hears of the change: the first
  member that joins a founder is on file before any stable view could name it, in practice; a
  member's ownership datagrams could in principle arrive before its join event is pumped);
* a node started with no seeds (``NodeConfig.join`` empty) that finds other members on file
  rejoins through them (``seeds``), as if started with ``--join``, and logs it; if every member
  it reaches holds no stable view (the whole cluster restarted) it founds one (``ownership.core``,
  rule 11); with no other member on file (a first start, or a cluster of one) it founds at once;
* ``--new-cluster`` (``NodeConfig.new_cluster``) founds a new cluster whatever the file says:
  the launcher of a whole new cluster (``placement cluster``, the benchmarks) passes it.

Where: ``members.json`` in ``--state-dir`` when given; else ``CLUSTER/ID.json`` under
``$PLACEMENT_STATE_HOME``, else ``$XDG_STATE_HOME/placement``, else ``~/.local/state/placement``
(names percent-encoded). A node that cannot read or write there logs why and runs as before the
file existed (a restart could found a second cluster); a corrupt file is an error naming it.

Writes replace the file atomically (temporary file, fsync, rename, directory fsync). The list
is rewritten at once when no member on file is still live (the case that matters for safety),
otherwise at most every ``REFRESH_S`` seconds when it changed.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import urllib.parse
from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import InvalidConfigError

__all__ = ["MembersFile", "FILE_NAME", "default_home"]

FILE_NAME = "members.json"
FORMAT = 1
REFRESH_S = 10.0
_log = logging.getLogger("placement.node")
_survival_log = logging.getLogger("placement.survival")  # (what a cluster survives, and how it forms)


def default_home(environ: Mapping[str, str] | None = None) -> str:
    """The directory under which nodes without ``--state-dir`` keep their members file."""
    env = os.environ if environ is None else environ
    if env.get("PLACEMENT_STATE_HOME"):
        return env["PLACEMENT_STATE_HOME"]
    base = env.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "placement")


def _quote(name: str) -> str:
    return urllib.parse.quote(name, safe="") or "%"


class MembersFile:
    """The members file of node ``node`` of ``cluster`` (module docstring)."""

    def __init__(self, *, cluster: str, node: str, state_dir: str | None = None, home: str | None = None) -> None:
        self.cluster = cluster
        self.node = node
        if state_dir is not None:
            self.path = os.path.join(state_dir, FILE_NAME)
        else:
            self.path = os.path.join(home or default_home(), _quote(cluster), _quote(node) + ".json")
        self.members: dict[str, str] = {}  # what the file holds: member id -> "host:port"
        self._written_at = -float("inf")
        self.writes = 0
        self.write_errors = 0
        self._broken = False  # could not write: said once, then keeps trying quietly
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ reading

    def load(self) -> dict[str, str]:
        """The other members on file ({} without a file). ``InvalidConfigError`` if the file is
        not a members file of this node and cluster; an unreadable directory is logged, {}."""
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            _log.warning("cannot read the members file %s (%s): a restart of this node cannot tell it ran before",
                         self.path, exc.strerror or exc)
            return {}
        try:
            record = json.loads(data)
            ok = (isinstance(record, dict) and record.get("format") == FORMAT
                  and isinstance(record.get("members"), dict)
                  and all(isinstance(k, str) and isinstance(v, str) for k, v in record["members"].items()))
        except ValueError:
            ok = False
        if not ok:
            raise InvalidConfigError(
                f"{self.path} is not a members file this version can read. It lists the members this node "
                "rejoins when started without --join; delete it if this node's cluster is gone, or start the "
                "node with --join to a running member")
        if record.get("cluster") != self.cluster or record.get("node") != self.node:
            raise InvalidConfigError(
                f"{self.path} belongs to node {record.get('node')!r} of cluster {record.get('cluster')!r}, "
                f"not to node {self.node!r} of cluster {self.cluster!r}: give each node its own file")
        self.members = {k: v for k, v in record["members"].items() if k != self.node}
        return dict(self.members)

    def start_seeds(self, join: tuple[Any, ...], *, new_cluster: bool) -> tuple[Any, ...]:
        """The seeds a node starts with: ``join``; without any, the members on file (it rejoins
        the cluster it was in instead of founding a second one), unless ``new_cluster``; ()
        to found. Says which, in the log."""
        on_file = self.load()
        if join:
            return join
        if not on_file:
            return ()
        if new_cluster:
            _survival_log.warning("--new-cluster: founding a new cluster %r although this node was a member of one "
                                  "with %s (%s)", self.cluster, ", ".join(sorted(on_file)), self.path)
            return ()
        listed = ", ".join(f"{m} ({a})" for m, a in sorted(on_file.items()))
        _survival_log.warning("no --join: rejoining cluster %r through the members this node last knew in it, %s "
                              "(%s), instead of founding a second cluster beside it; if every member it reaches holds "
                              "no view (all restarted), it founds one. To found a new cluster now, start with "
                              "--new-cluster", self.cluster, listed, self.path)
        return tuple(self.seeds())

    def seeds(self) -> list[tuple[str, int]]:
        """The addresses on file, as ``--join`` seeds."""
        out = []
        for addr in self.members.values():
            host, _, port = addr.rpartition(":")
            if host and port.isdigit():
                out.append((host.strip("[]"), int(port)))
        return out

    # ------------------------------------------------------------------ writing

    def note(self, live: Iterable[tuple[str, tuple[str, int]]], now: float) -> None:
        """The live members (id, gossip address) this node knows now, itself included or not.

        Called on the membership thread with every change of the live list, before the
        ownership core hears of it. The first other member is written at once, and so is any
        list once no member on file is live: a restart needs one member on file that still runs.
        Other changes are written at most every ``REFRESH_S``. An empty list is never written
        here (alone, the list on file is still the way back, e.g. while rejoining through it);
        ``found`` writes it."""
        current = {m: f"{h}:{p}" if ":" not in h else f"[{h}]:{p}" for m, (h, p) in live if m != self.node}
        if not current or current == self.members:
            return  # (alone: the list on file is still the way back, e.g. while rejoining through it)
        urgent = bool(current) and not (current.keys() & self.members.keys())
        if urgent or now - self._written_at >= REFRESH_S:
            self._write(current, now)

    def found(self) -> None:
        """A new cluster founded by this node: nobody else is in it yet."""
        self._write({}, -float("inf"))

    def _write(self, members: dict[str, str], now: float) -> None:
        with self._lock:  # (``found`` runs on the application's thread, ``note`` on the membership thread)
            self._write_locked(members, now)

    def _write_locked(self, members: dict[str, str], now: float) -> None:
        record = {"format": FORMAT, "cluster": self.cluster, "node": self.node, "members": members,
                  "written": time.time()}
        data = json.dumps(record, indent=1, sort_keys=True).encode()
        directory = os.path.dirname(self.path)
        tmp = self.path + ".tmp"
        try:
            os.makedirs(directory, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
            dir_fd = os.open(directory, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except OSError as exc:
            self.write_errors += 1
            if not self._broken:
                self._broken = True
                _log.warning("cannot write the members file %s (%s): started again without --join, this node "
                             "would found a second cluster (set PLACEMENT_STATE_HOME or --state-dir to a writable "
                             "directory)", self.path, exc.strerror or exc)
            return
        self._broken = False
        self.members = members
        self._written_at = now
        self.writes += 1
