"""`placement witness --state-dir` with real processes (issue 29 item 5, "Witnesses remember";
docs/ownership.md, "Witness state"): two `placement node` workers and one witness on 127.0.0.1,
default timings, watched by ``ownership_sampler``.

A kill -9 leaves the witness's file whole; the witness restarted on it keeps its promises and
votes at once; a worker's kill -9 is then taken over within detection + a few seconds, and no
fencing epoch falls. A corrupt file stops the witness with status 2 and a message naming it.

How "votes at once" shows from outside: no log line, metric or API field says so. The record a
witness writes says whether it is *forgetful*: started without its predecessor's promises, and
so waiting the restart quiet time (``2 lease_s``, 6 s after it learns a view naming it) before
it votes on stable views; it stays so until it may vote (docs/ownership.md, the table under
"Witness state"). So the record its core writes when it installs its first view tells: not
forgetful, it votes at once. The control at the end deletes the file before a restart: the
warning of a missing file comes back and the record is forgetful, also after that install.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from ownership.config import ExclusiveConfig
from ownership.durable import decode, encode
from ownership.lease import WitnessState
from ownership.views import AcceptorState, View
from placement.service.witness_state import FILE_NAME

from host_cluster import Cluster, Loopback
from ownership_sampler import Round
from ports import free_port
from test_cluster_processes import poll

pytestmark = pytest.mark.slow

P = 64
#: What `load` logs when there is no file (docs/ownership.md: a restart without it waits the quiet time).
NO_FILE = "WARNING --state-dir: no "


def _record(path: Path, node: str = "n3") -> WitnessState:
    return decode(path.read_bytes(), cluster="placement", node=node)


def _ownership(c: Cluster, name: str) -> dict:
    return httpx.get(f"http://{c.hosts.http(name)}/v1/ownership", timeout=2).json()


def _rewritten(path: Path, before: os.stat_result) -> bool:
    """The file was replaced since ``before`` (each write renames a new file over it)."""
    try:
        now = path.stat()
    except FileNotFoundError:
        return False
    return (now.st_ino, now.st_mtime_ns) != (before.st_ino, before.st_mtime_ns)


def fallen_epochs(rounds: list[Round]) -> list[tuple[int, str, int, int]]:
    """``(partition, node, epoch, highest seen before)`` for every answer, in the order they were
    given, that owned a partition under a lower fencing epoch than one answered before."""
    highest: dict[int, int] = {}
    fallen = []
    for r in rounds:
        for reply in r.first + r.second:  # each pass asks the nodes one after the other
            if reply is None:
                continue
            for p, epoch in reply.owned.items():
                if epoch is None:
                    continue
                if epoch < highest.get(p, -1):
                    fallen.append((p, reply.node, epoch, highest[p]))
                highest[p] = max(highest.get(p, -1), epoch)
    return fallen


def test_a_witness_restarted_on_its_state_votes_at_once_and_a_worker_crash_is_taken_over(tmp_path):
    state_dir = tmp_path / "n3-state"
    state = state_dir / FILE_NAME
    c = Cluster(Loopback(3), P, witnesses=["n3"], extra_args={"n3": ["--state-dir", str(state_dir)]})
    try:
        t0 = c.boot()
        c.settled(timeout_s=60)
        view = _ownership(c, "n1")["stable_view"]
        poll(lambda: _ownership(c, "n3")["votes"] is True, 10, "the witness to vote in the stable view")
        # It writes what it promised before it answers: by now, the view it voted for.
        poll(lambda: _record(state).views.view.num == view, 10, f"n3's file to hold stable view {view}")
        # Rolling lease rounds ask one witness at a time: wait until both workers have asked it.
        poll(lambda: {"n1", "n2"} <= set(_record(state).reserves), 15, "n3's file to hold both workers' reserves")

        c.kill("n3")
        assert c.hosts.procs["n3"].wait(10) == -9
        kept = _record(state)  # whole after a kill -9, and it decodes
        assert kept.views.view.num == view and kept.views.view.members == ("n1", "n2", "n3")
        assert not kept.views.forgetful, "it voted, so it was no longer forgetful"
        assert {"n1", "n2"} <= set(kept.reserves), f"no epoch reserves kept for the workers: {kept.reserves}"
        assert c.hosts.log_tail("n3", 1000).count(NO_FILE) == 1  # its first start, and only that

        before = state.stat()
        c.start("n3")  # the same --state-dir, --join n1
        spawned = time.monotonic()
        poll(lambda: _rewritten(state, before), 15, "the restarted witness to write its record at start")
        restored = _record(state)
        # Its promises are back and it is not forgetful: no quiet time, it votes at once (a
        # restart without its file writes a forgetful record at once, the control below).
        assert restored.views.view.num >= kept.views.view.num and not restored.views.forgetful, restored
        assert all(restored.reserves.get(m, -1) >= r for m, r in kept.reserves.items()), (kept, restored)
        poll(lambda: _ownership(c, "n3")["stable_view"] == view, 15, f"n3 to hold stable view {view} again")
        print(f"restarted witness: its state read back and stable view {view} held "
              f"{time.monotonic() - spawned:.2f} s after its start")
        # The record above is the one read back, written again at start; this one is the core's
        # own, written when it installed the view (before it sent anything after that). A core
        # that forgot (started without the restored state) would write a forgetful record here
        # until its quiet time (6 s) passed.
        installed = _record(state)
        assert installed.views.view.num == view and not installed.views.forgetful, installed
        body = _ownership(c, "n3")  # and it says so
        assert body["forgetful"] is False and body["quiet_for_s"] == 0.0, body
        assert c.hosts.log_tail("n3", 1000).count(NO_FILE) == 1, c.hosts.log_tail("n3")

        # kill -9 of a worker: the survivor takes everything over, under higher epochs.
        last = c.sampler.rounds[-1]
        held = {p: e for r in last.second if r is not None and r.node == "n2" for p, e in r.owned.items()
                if e is not None}
        assert held, "n2 owned nothing before its crash"
        detected, taken, _ = c.kill_and_take_over("n2", "n1", "n3")
        # Detection (~4.5-5.5 s) plus a new stable view (n1 and n3 must both vote: the restarted
        # witness's vote is needed) and the condemnation round; loose, for 2 shared cores.
        assert taken.end - detected.end < 3.0
        body = _ownership(c, "n1")
        assert body["stable_view"] > view and body["survival"]["members"] == ["n1", "n3"]
        taken_over = {p: e for r in taken.second if r is not None and r.node == "n1" for p, e in r.owned.items()
                      if p in held}
        low = {p: (held[p], taken_over.get(p)) for p in held if (taken_over.get(p) or -1) <= held[p]}
        assert not low, f"n1 took partitions over under epochs not above n2's (p: (n2's, n1's)): {low}"
        rounds = c.assert_exclusive(t0)
        fallen = fallen_epochs(rounds)
        assert not fallen, f"fencing epochs fell ((p, node, epoch, highest before)): {fallen[:10]}"

        # The control: restarted without its file, it warns and its record is forgetful (it
        # waits the quiet time before voting on stable views).
        c.kill("n3")
        c.hosts.procs["n3"].wait(10)
        state.unlink()
        c.start("n3")
        poll(lambda: state.exists(), 15, "the witness restarted without its file to write one")
        assert _record(state).views.forgetful
        now_view = _ownership(c, "n1")["stable_view"]
        poll(lambda: _ownership(c, "n3")["stable_view"] == now_view, 15, f"n3 to hold stable view {now_view}")
        assert _record(state).views.forgetful, "installed its first view without the quiet time"
        body = _ownership(c, "n3")
        assert body["forgetful"] is True and 0.0 < body["quiet_for_s"] <= 2 * ExclusiveConfig().lease_s, body
        poll(lambda: c.hosts.log_tail("n3", 1000).count(NO_FILE) == 2, 10, "the warning of a missing file")
    finally:
        c.close()
    print(f"logs: {c.hosts.logdir}")


def test_a_witness_refuses_to_start_on_a_corrupt_state_file(tmp_path):
    """A flipped byte (the checksum catches it): exit status 2 within seconds, the file named in
    the error, and the file left as it was."""
    record = encode(WitnessState(AcceptorState(View.of(2, {"n1": 1.0, "n2": 1.0, "w": 0.0})),
                                 reserves={"n1": 2**32 + 7, "n2": 2**32 + 9}),
                    cluster="placement", node="w")
    state = tmp_path / FILE_NAME
    corrupt = bytearray(record)
    corrupt[record.index(b'"n2"') + 1] ^= 0x01  # a member's name in the body: "n2" -> "o2"
    state.write_bytes(bytes(corrupt))
    cmd = [sys.executable, "-m", "placement_cli", "witness", "--id", "w",
           "--gossip", f"127.0.0.1:{free_port()}", "--partitions", str(P),
           "--join", f"127.0.0.1:{free_port()}", "--state-dir", str(tmp_path)]
    started = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    took = time.monotonic() - started
    print(f"corrupt state file: exit status {done.returncode} after {took:.2f} s\n{done.stderr.strip()}")
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert f"placement witness: error: --state-dir {state}: checksum mismatch" in done.stderr, done.stderr
    assert "Restore it" in done.stderr and "delete it" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert took < 10
    assert state.read_bytes() == bytes(corrupt), "the corrupt file was changed"
