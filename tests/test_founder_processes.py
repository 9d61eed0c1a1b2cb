"""The README's founder, as real `placement node` processes on loopback, watched from outside
(``ownership_sampler``: two owners count only when proven by the order of the answers):

* n1 founds (no ``--join``), n2 and n3 join it; n1 is killed (-9) and started again with its
  own command. It rejoins through its members file instead of founding a second cluster: no
  partition is owned twice, and it owns its share again.
* Then all three are killed and started again with their commands: nobody holds a view, so
  n1 founds the cluster again (``ownership.core``, rule 11) and everything is owned, once.

Before the members file, the first restart owned 40 of 64 partitions twice for 2.1-2.8 s
(``benchmarks/bench_bootstrap.py``)."""

from __future__ import annotations

import time

import httpx
import pytest

from host_cluster import Cluster, Loopback

pytestmark = pytest.mark.slow

P = 64


def _view(c: Cluster, name: str) -> int:
    view = httpx.get(f"http://{c.hosts.http(name)}/v1/ownership", timeout=2).json()["stable_view"]
    assert isinstance(view, int)
    return view


def test_a_founder_restarted_with_its_own_command_and_then_everyone_restarted() -> None:
    hosts = Loopback(3)
    c = Cluster(hosts, P)

    def own_command(name: str) -> None:  # the founder's: no --join, no --new-cluster
        hosts.start(name, ["--id", name, "--gossip", hosts.gossip(name), "--http", hosts.http(name),
                           "--partitions", str(P)])

    try:
        t0 = c.boot()
        c.settled(timeout_s=60)
        c.kill("n1")
        hosts.procs["n1"].wait(10)
        own_command("n1")
        c.settled(timeout_s=60)
        assert "rejoining cluster 'placement' through the members this node last knew" in hosts.log_tail("n1", 200)
        c.assert_exclusive(t0)
        before = _view(c, "n2")

        killed = time.monotonic()
        for name in hosts.names:
            c.kill(name)
            hosts.procs[name].wait(10)
        own_command("n1")
        c.start("n2")
        c.start("n3")
        back = c.settled(timeout_s=90)
        print(f"all restarted: every partition owned {back.end - killed:.1f} s after the kill")
        c.assert_exclusive(t0)
        # Each kept its witness state (by default, beside its members file): they resume the
        # view they held, nobody founds, and the fencing epochs of every partition kept rising
        # (assert_exclusive). (Without the state, --no-state-dir, n1 founds a new cluster
        # numbered above the old one: tests/test_refound.py.)
        assert _view(c, "n2") >= before
        metrics = httpx.get(f"http://{c.hosts.http('n1')}/metrics", timeout=2).text
        assert "\nplacement_ownership_refounded_total 0.0\n" in metrics
    finally:
        c.close()
