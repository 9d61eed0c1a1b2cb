"""``--state-dir``: the file in which a witness keeps what it promised (issue 29 item 5).

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

import logging
import os
import time

from ownership.durable import StateRecordError, decode, encode
from ownership.lease import WitnessState
from ownership.views import AcceptorState

from ..errors import InvalidConfigError

__all__ = ["StateFile", "FILE_NAME"]

FILE_NAME = "witness.state"
_log = logging.getLogger("placement.node")


class StateFile:
    """The witness state file of node ``node`` of ``cluster`` in ``directory``."""

    def __init__(self, directory: str, *, cluster: str, node: str) -> None:
        self.directory = directory
        self.path = os.path.join(directory, FILE_NAME)
        self.cluster = cluster
        self.node = node
        self.writes = 0
        self.write_s = 0.0  # total time spent writing (write + fsync + rename + directory fsync)
        self.max_write_s = 0.0

    def load(self) -> WitnessState | None:
        """What the previous process of this node promised; None if there was no file (then an
        empty record is written). ``InvalidConfigError`` if the file cannot be believed."""
        try:
            os.makedirs(self.directory, exist_ok=True)
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            _log.warning("--state-dir: no %s: the first start of node %r with this directory. If this node "
                         "ran before and its file was lost, it votes on stable views only after the restart "
                         "quiet time (docs/ownership.md)", self.path, self.node)
            # Marked forgetful until it may vote (``AcceptorState.forgetful``): if this was a
            # restart whose file was lost, its next restart must not skip the quiet time either.
            self._save_at_start(WitnessState(AcceptorState(forgetful=True)))
            return None
        except OSError as exc:
            raise InvalidConfigError(f"--state-dir {self.path}: cannot read it: {exc.strerror or exc}") from None
        try:
            state = decode(data, cluster=self.cluster, node=self.node)
        except StateRecordError as exc:
            raise InvalidConfigError(
                f"--state-dir {self.path}: {exc}. This file holds what witness {self.node!r} promised; "
                "starting without it could break those promises. Restore it from the volume it was on, or, "
                "if it is lost for good, delete it: the node then starts as a witness that forgot its "
                "promises (it waits the restart quiet time before voting, docs/ownership.md)") from None
        self._save_at_start(state)  # (proves the directory writable now, not at the first promise)
        return state

    def _save_at_start(self, state: WitnessState) -> None:
        try:
            self.save(state)
        except OSError as exc:
            raise InvalidConfigError(f"--state-dir {self.directory}: cannot write {FILE_NAME} there: "
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

    def check_founder(self, state: WitnessState | None) -> None:
        """A node started without ``--join`` founds a new cluster: refuse that over the
        promises of a node that was a member of one."""
        if state is not None and state.views.view.num > 0:
            raise InvalidConfigError(
                f"--state-dir {self.path} holds stable view {state.views.view.num} of cluster {self.cluster!r}: "
                "this node was a member of a running cluster. Start it with --join to rejoin that cluster, "
                "or delete the file to found a new cluster")
