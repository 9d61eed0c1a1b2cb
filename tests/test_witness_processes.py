"""`placement witness` as a real process (issue 29 item 2): two `placement node` processes and one
witness on 127.0.0.1, default timings, watched by ``ownership_sampler`` (every round asks each
process twice; an overlap counts only when the order of the answers proves it). The witness's
expected share in every check is the empty set: it must never answer with a partition."""

import signal
import subprocess
import sys
import time

import httpx
import pytest

from host_cluster import Cluster, Loopback
from ports import free_port

pytestmark = pytest.mark.slow

P = 64


def test_two_workers_and_a_witness_survive_a_kill_9_of_the_seed_worker():
    c = Cluster(Loopback(3), P, witnesses=["n3"])
    try:
        t0 = c.boot()
        c.settled(timeout_s=60)
        witness_url = f"http://{c.hosts.http('n3')}"
        ready = httpx.get(witness_url + "/readyz", timeout=2).json()
        assert (ready["status"], ready["node"]) == ("ready", "n3") and "warning" not in ready  # (keyless: a
        # security_warning, issue 31)
        # n1 is both a worker and the seed: its crash must stop nothing.
        detected, taken, _ = c.kill_and_take_over("n1", "n2", "n3")
        # Detection (~4.5-5.5 s with the default timings) plus a new stable view and the condemnation
        # round: measured 0.2-0.5 s more on loopback (bench_hosts.py --witness; "detection + 1 s" is
        # the goal). A loose bound, for 2 cores shared with other work.
        assert taken.end - detected.end < 3.0
        rounds = c.assert_exclusive(t0)
        assert all(not (r.owners().get("n3")) for r in rounds), "the witness answered with a partition"
        # The survivors' stable view (the takeover needed it): two members, so one crash (of its
        # first witness) would stop all work, and /readyz says so while staying ready.
        body = httpx.get(f"http://{c.hosts.http('n2')}/v1/ownership", timeout=2).json()
        assert body["survival"]["members"] == ["n2", "n3"] and "stops all work" in body["survival"]["warning"]
        deadline = time.monotonic() + 10  # ready once its view has not changed for 1 s (settle_s)
        while (ready := httpx.get(f"http://{c.hosts.http('n2')}/readyz", timeout=2)).status_code != 200:
            assert time.monotonic() < deadline, ready.text
            assert body["survival"]["warning"] in ready.json()["detail"]  # said while not ready, too
            time.sleep(0.2)
        assert ready.json()["warning"] == body["survival"]["warning"]
    finally:
        c.close()


def test_a_witness_is_a_join_seed():
    """The witness founds the cluster and both workers join through it. Nobody held a partition
    before, so the first worker's partitions are created by the census (docs/ownership.md, rule
    10) after query_after_s (8 s), not handed over."""
    hosts = Loopback(3)
    c = Cluster(hosts, P, witnesses=["n1"])
    try:
        t0 = c.boot()
        r = c.settled(timeout_s=60)
        print(f"witness-seeded cluster: every partition owned {r.end - t0:.2f} s after the workers started")
        assert set(r.owners()["n1"]) == set()
        body = httpx.get(f"http://{hosts.http('n1')}/v1/ownership", timeout=2).json()
        assert body["votes"] is True and body["owned"] == [] and body["survival"]["crashes_survived"] == 1
        c.assert_exclusive(t0)
    finally:
        c.close()


def test_a_witness_without_http_joins_votes_and_leaves_on_sigterm(tmp_path):
    """No --http: no HTTP server; it still joins, enters the stable view, prints membership
    changes, and leaves on SIGTERM with status 0."""
    hosts = Loopback(1)
    c = Cluster(hosts, P)
    log = tmp_path / "w.log"
    witness = None
    try:
        c.boot()
        c.settled(timeout_s=60)
        with log.open("w") as out:
            witness = subprocess.Popen(
                [sys.executable, "-m", "placement_cli", "witness", "--id", "w", "--gossip",
                 f"127.0.0.1:{free_port()}", "--partitions", str(P), "--join", hosts.gossip("n1")],
                stdout=out, stderr=subprocess.STDOUT)
        url = f"http://{hosts.http('n1')}"

        def in_view() -> bool:
            survival = httpx.get(url + "/v1/ownership", timeout=2).json()["survival"]
            return survival is not None and survival["members"] == ["n1", "w"]

        deadline = time.monotonic() + 30
        while not in_view():
            assert time.monotonic() < deadline and witness.poll() is None, log.read_text()
            time.sleep(0.2)
        # n1 and w: a crash of the first witness stops all work, and n1 is the only owner anyway.
        assert "n1" in httpx.get(url + "/v1/ownership", timeout=2).json()["survival"]["fatal"]
        assert len(httpx.get(url + "/v1/ownership", timeout=2).json()["owned"]) == P
        witness.send_signal(signal.SIGTERM)
        assert witness.wait(30) == 0
        out = log.read_text()
        assert "[w] witness (weight 0: votes, owns nothing) gossip" in out and "http off" in out, out
        assert "[w] member n1 is alive" in out and "[w] stopped" in out, out
        assert "Traceback" not in out, out
    finally:
        if witness is not None and witness.poll() is None:
            witness.kill()
        c.close()
