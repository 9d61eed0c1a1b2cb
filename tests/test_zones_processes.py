"""Five `placement node --zone` processes in three zones (issue 33 item 4): replica sets span the
zones, /v1/owners shows them, and a whole zone killed with -9 leaves every partition a live
replica of the placement the cluster held. (Five: the three left after zone a's two are gone
are a majority of the stable view, so they choose the next one, which clients are routed by.)"""

import os
import signal
import subprocess
import sys

import httpx
import pytest

from placement.snapshot import PlacementSnapshot

from ports import free_ports
from test_cluster_processes import poll

pytestmark = pytest.mark.slow

ZONES = {"n1": "a", "n2": "a", "n3": "b", "n4": "c", "n5": "b"}


def snapshot(url):
    return PlacementSnapshot.from_json(httpx.get(f"{url}/v1/placement", timeout=2).content, verify=True)


@pytest.fixture
def cluster():
    gossip, http = free_ports(len(ZONES)), free_ports(len(ZONES))
    procs, urls = {}, {n: f"http://127.0.0.1:{http[i]}" for i, n in enumerate(ZONES)}
    # one zone by flag, the others by variable
    for i, (name, zone) in enumerate(ZONES.items()):
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **({"PLACEMENT_ZONE": zone} if i % 2 else {})}
        cmd = [sys.executable, "-m", "placement_cli", "node", "--id", name, "--gossip", f"127.0.0.1:{gossip[i]}",
               "--http", f"127.0.0.1:{http[i]}", "--partitions", "512", "--replicas", "3",
               *([] if i % 2 else ["--zone", zone]), *(["--join", f"127.0.0.1:{gossip[0]}"] if i else [])]
        procs[name] = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield procs, urls
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
            p.wait(10)


def test_replica_sets_span_zones_and_a_lost_zone_leaves_a_live_replica(cluster):
    procs, urls = cluster
    poll(lambda: all(snapshot(u).table.zones == ZONES for u in urls.values()), 30, "every node sees the zones")
    poll(lambda: len({snapshot(u).checksum for u in urls.values()}) == 1, 30, "one checksum")
    held = snapshot(urls["n3"]).table
    for p in range(held.partitions):
        assert {ZONES[m] for m in held.owners(p)} == {"a", "b", "c"}, p
    for key in ("order-42", "user-7", "k"):
        owners = httpx.get(f"{urls['n4']}/v1/owners", params={"key": key}).json()["owners"]
        assert [o["id"] for o in owners] == list(held.lookup(key))
        assert [o["zone"] for o in owners] == [ZONES[o["id"]] for o in owners]
        assert sorted(o["zone"] for o in owners) == ["a", "b", "c"]

    for name in ("n1", "n2"):  # the whole of zone a
        procs[name].send_signal(signal.SIGKILL)
    survivors = {"n3", "n4", "n5"}
    # Before anyone recomputes, the placement everyone held has a live replica for every partition...
    assert all(set(held.owners(p)) & survivors for p in range(held.partitions))

    # ...and once the survivors drop zone a they agree on a placement over zones b and c.
    def converged():
        tables = [snapshot(urls[n]).table for n in sorted(survivors)]
        return len({t.checksum for t in tables}) == 1 and set(tables[0].members) == survivors

    poll(converged, 40, "survivors agree on a placement without zone a")
    owners = httpx.get(f"{urls['n3']}/v1/owners", params={"key": "order-42"}).json()["owners"]
    assert len(owners) == 3 and {o["zone"] for o in owners[:2]} == {"b", "c"}  # both zones first, then the rest
    assert owners[0]["id"] == held.lookup("order-42")[0] or ZONES[held.lookup("order-42")[0]] == "a"
