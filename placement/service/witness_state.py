"""The file in which a witness keeps what it promised (issue 29 item 5): in ``--state-dir``, or
by default beside the node's members file (``StateFile.beside``; only ``--no-state-dir`` keeps
none). A default record yields to a cluster founded anew under the same name (the core's
``restored_yields``); a ``--state-dir`` one refuses it (docs/ownership.md, "Witness state").

The record's format and its checks are pure (``ownership.durable``); this module does the file
I/O. ``ExclusiveRunner`` writes the core's durable state (``QuorumLease.durable_state``: the
installed stable view, the ballot promised and the value accepted for its successor, the epoch
reserves granted, the standing condemnations) whenever it changed, *before* it sends any
datagram produced after the change, so nothing the witness said was ever more than what the
file holds. A restarted process reads it back and keeps those promises; it then votes at once,
without the quiet time of a witness that forgot them (docs/ownership.md, "What is guaranteed").

Writing: the record goes to ``witness.state.tmp``, is fsync'ed, renamed over ``witness.state``,
and the directory is fsync'ed, so after a crash the file holds the old record or the new one,
whole.

Reading (``load``), case by case:

* no file: the first start of this id with this directory. Nothing was promised by it. (A
  *restarted* witness whose file was lost is indistinguishable from that: it must not be run
  without its file, or the file deleted, unless the operator accepts today's fallback, the
  quiet time; ``load`` logs a warning saying so.) An empty record is written at once, which
  also proves the directory is writable;
* a file that is truncated, corrupt (checksum), of another format version, or written for
  another cluster or node id: ``InvalidConfigError`` naming the file and what to do; the node
  refuses to start (exit status 2, as for its other configuration errors). It never starts
  with a promise it cannot read.
"""

from __future__ import annotations

import fcntl
import logging
import os
import time

from ownership.durable import StateRecordError, decode, encode
from ownership.lease import WitnessState
from ownership.views import AcceptorState

from ..errors import InvalidConfigError

__all__ = ["StateFile", "FILE_NAME", "UnusableStateDir", "StateInUse"]

FILE_NAME = "witness.state"
_log = logging.getLogger("placement.node")
_survival_log = logging.getLogger("placement.survival")  # (how a cluster forms: shown by ``placement node``)


class UnusableStateDir(InvalidConfigError):
    """The file cannot be read or written (permissions, a read-only file system), as opposed
    to a file that can be read and cannot be believed."""


class StateInUse(InvalidConfigError):
    """Another process holds this file's lock: it runs the same node id of the same cluster
    with the same state (two processes started with one command line)."""


class StateFile:
    """The witness state file of node ``node`` of ``cluster`` in ``directory`` (``FILE_NAME``,
    or ``name``). ``implicit``: kept by default, the operator gave no ``--state-dir``
    (``beside``)."""

    def __init__(self, directory: str, *, cluster: str, node: str, name: str = FILE_NAME,
                 implicit: bool = False) -> None:
        self.directory = directory
        self.path = os.path.join(directory, name)
        self.cluster = cluster
        self.node = node
        self.implicit = implicit
        self._lock_fd: int | None = None
        self.writes = 0
        self.write_s = 0.0  # total time spent writing (write + fsync + rename + directory fsync)
        self.max_write_s = 0.0

    @classmethod
    def beside(cls, members_path: str, *, cluster: str, node: str) -> StateFile:
        """The default file of a node given no ``--state-dir``: beside its members file
        (``CLUSTER/ID.json`` under the state home), as ``CLUSTER/ID.witness.state``."""
        directory, name = os.path.split(members_path)
        return cls(directory, cluster=cluster, node=node, name=os.path.splitext(name)[0] + ".witness.state",
                   implicit=True)

    @property
    def flag(self) -> str:
        """How errors name the file: by the flag that chose it, or as the default one."""
        return self.path if self.implicit else f"--state-dir {self.path}"

    def lock(self) -> None:
        """Hold ``<file>.lock`` (``flock``, released when this process ends or ``unlock``) for as
        long as the node runs. Two processes of one node id writing one record would each
        overwrite what the other promised, and a restart would read the wrong one as its own:
        the second is refused (``StateInUse``), as etcd refuses a data directory in use."""
        path = self.path + ".lock"
        try:
            os.makedirs(self.directory, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise UnusableStateDir(f"{self.flag}: cannot open {path}: {exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            other = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise StateInUse(f"{self.flag} is in use by another process of node {self.node!r} of cluster "
                             f"{self.cluster!r} (pid {other}): give each process its own --id (and --state-dir), "
                             "or stop the other one") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._lock_fd = fd

    def unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # (closing the descriptor releases the lock)
            self._lock_fd = None

    def set_aside(self, why: str) -> None:
        """Found a new cluster over this record (``check_founder``): it is renamed
        ``<file>.replaced`` (one kept, for the curious) and a fresh record is written."""
        os.replace(self.path, self.path + ".replaced")
        _survival_log.warning("%s: %s; the record of the cluster before is kept aside as %s.replaced",
                              self.path, why, self.path)
        self._save_at_start(WitnessState(AcceptorState(forgetful=True)))

    def load(self) -> WitnessState | None:
        """What the previous process of this node promised; None if there was no file (then an
        empty record is written). ``InvalidConfigError`` if the file cannot be believed."""
        try:
            os.makedirs(self.directory, exist_ok=True)
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            if not self.implicit:  # (by default, the first start of every node: nothing to say)
                _log.warning("--state-dir: no %s: the first start of node %r with this directory. If this node "
                             "ran before and its file was lost, it votes on stable views only after the restart "
                             "quiet time (docs/ownership.md)", self.path, self.node)
            # Marked forgetful until it may vote (``AcceptorState.forgetful``): if this was a
            # restart whose file was lost, its next restart must not skip the quiet time either.
            self._save_at_start(WitnessState(AcceptorState(forgetful=True)))
            return None
        except OSError as exc:
            raise UnusableStateDir(f"{self.flag}: cannot read it: {exc.strerror or exc}") from None
        try:
            state = decode(data, cluster=self.cluster, node=self.node)
        except StateRecordError as exc:
            raise InvalidConfigError(
                f"{self.flag}: {exc}. This file holds what witness {self.node!r} promised; "
                "starting without it could break those promises. Restore it from the volume it was on, or, "
                "if it is lost for good, delete it: the node then starts as a witness that forgot its "
                "promises (it waits the restart quiet time before voting, docs/ownership.md)") from None
        self._save_at_start(state)  # (proves the directory writable now, not at the first promise)
        return state

    def _save_at_start(self, state: WitnessState) -> None:
        try:
            self.save(state)
        except OSError as exc:
            where = self.directory if self.implicit else f"--state-dir {self.directory}"
            raise UnusableStateDir(f"{where}: cannot write {os.path.basename(self.path)} there: "
                                     f"{exc.strerror or exc}") from None

    def save(self, state: WitnessState) -> None:
        """Write ``state`` durably (module docstring); OSError if it could not be."""
        started = time.perf_counter()
        data = encode(state, cluster=self.cluster, node=self.node)
        tmp = self.path + ".tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        dir_fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        took = time.perf_counter() - started
        self.writes += 1
        self.write_s += took
        self.max_write_s = max(self.max_write_s, took)

    def check_founder(self, state: WitnessState | None, *, new_cluster: bool) -> WitnessState | None:
        """A node started with no seeds (no ``--join``, no other member on file) founds a new
        cluster: what it restores then (None: nothing). Refused over the promises of a member of
        a cluster of others, unless the operator said ``--new-cluster``; over a record of a
        cluster of this node alone it founds anew, which is safe (below)."""
        if state is None or state.views.view.num == 0:
            return state
        view, accepted = state.views.view, state.views.accepted
        if new_cluster:
            self.set_aside("--new-cluster founds a new cluster")
            return None
        if set(view.members) <= {self.node} and accepted is None:
            # Nobody else was in its view and no successor was on its way: no other member can
            # hold a lease that counts (a joiner taught the view owns nothing in it). Its first
            # view is numbered by the clock, so its epochs stay above the old ones (rule 11).
            self.set_aside(f"this node was a cluster of one (stable view {view.num}); it founds it anew")
            return None
        raise InvalidConfigError(
            f"{self.flag} holds stable view {view.num} of cluster {self.cluster!r} ({len(view.members)} members): "
            "this node was a member of a running cluster, and none of its members is on file to rejoin "
            "through. Start it with --join to rejoin that cluster, or with --new-cluster to found a new one "
            "(the file is then set aside)")
