"""Nodes on real UDP sockets (in-process): convergence, ownership, leave, leadership, 421 guard.

These run the opt-in availability-first mode (``ownership="available"``: a node owns what its
own view says at once), whose rules - join gate, declared-dead hold-down - are tested here; the
default exclusive mode is tested in tests/test_node_exclusive.py."""

import asyncio
import socket
import time
from collections.abc import Callable

import httpx
import pytest
from fastapi import Depends, FastAPI

from membership import MembershipConfig
from placement.service.guard import require_ownership
from placement.service.http_api import create_app
from placement.service.node import LeadershipLost, Node, NodeConfig

FAST = MembershipConfig(probe_interval_s=0.2, probe_timeout_s=0.1, gossip_interval_s=0.05,
                        push_pull_min_interval_s=0.5, join_retry_interval_s=0.2)
P = 512


def config(node_id, join=(), **kw):
    kw.setdefault("ownership", "available")
    return NodeConfig(node_id, gossip_bind=("127.0.0.1", 0), join=tuple(join), partitions=P, replicas=2,
                      settle_s=0.0, membership=FAST, http_advertise=f"http://{node_id}.test", **kw)


async def eventually(predicate, timeout_s=10.0, what="condition"):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def _recorder(log: list[tuple[str, str, int]], node_id: str, what: str) -> Callable[[int], None]:
    return lambda p: log.append((node_id, what, p))


async def start_cluster(n, log=None):
    first = await Node(config("n1")).start()
    nodes = [first]
    for i in range(2, n + 1):
        nodes.append(await Node(config(f"n{i}", join=[first.member.bound])).start())
    if log is not None:
        for node in nodes:
            node.on_ownership(acquired=_recorder(log, node.node_id, "acquired"),
                              released=_recorder(log, node.node_id, "released"))
    await eventually(lambda: all(len(x.table.members) == n for x in nodes), what="full views")
    return nodes


def agree(nodes):
    return len({n.table.checksum for n in nodes}) == 1


def test_cluster_converges_and_owns_every_partition_once():
    async def main():
        nodes = await start_cluster(4)
        await eventually(lambda: agree(nodes), what="same checksum")
        owned = [n.owned_partitions() for n in nodes]
        assert sum(len(o) for o in owned) == P and frozenset().union(*owned) == frozenset(range(P))
        assert all(n.ready for n in nodes)
        first = nodes[0].table
        assert {n.leader("scheduler") for n in nodes} == {first.owner(first.partition_of("scheduler"))}
        for n in nodes:
            await n.leave()

    asyncio.run(main())


def test_joining_node_owns_nothing_until_it_hears_from_the_cluster():
    async def main():
        lonely = await Node(config("n9", join=[("127.0.0.1", 9)])).start()  # nobody there
        await eventually(lambda: lonely.member.core.stats["join_attempts"] >= 3, what="join retried")
        assert lonely.owned_partitions() == frozenset() and not lonely.owns("k") and not lonely.ready
        assert len(lonely.table.members) == 1  # its own view alone would have given it everything
        lonely.close()

    asyncio.run(main())


def test_graceful_leave_releases_before_others_acquire():
    async def main():
        log: list[tuple[str, str, int]] = []
        nodes = await start_cluster(3, log)
        await eventually(lambda: agree(nodes))
        leaver, rest = nodes[2], nodes[:2]
        held = leaver.owned_partitions()
        assert held
        log.clear()
        await leaver.leave()
        await eventually(lambda: all(len(n.table.members) == 2 for n in rest) and agree(rest), what="leave seen")
        released_at = {p: i for i, (n, kind, p) in enumerate(log) if n == leaver.node_id and kind == "released"}
        acquired_at = {p: i for i, (n, kind, p) in enumerate(log) if n != leaver.node_id and kind == "acquired"}
        assert set(released_at) == set(held) == set(acquired_at)
        assert all(released_at[p] < acquired_at[p] for p in held)
        for n in rest:
            await n.leave()

    asyncio.run(main())


def test_leadership_runs_only_on_the_leader_and_moves_on_leave():
    async def main():
        nodes = await start_cluster(3)
        await eventually(lambda: agree(nodes))
        name = "nightly-compaction"
        leader = next(n for n in nodes if n.leader(name) == n.node_id)
        started = asyncio.Event()

        async def lead():
            async with leader.leadership(name):
                started.set()
                await asyncio.Event().wait()  # the leader's work: runs until leadership moves

        task = asyncio.create_task(lead())
        await asyncio.wait_for(started.wait(), 5)
        await leader.leave()
        with pytest.raises(LeadershipLost):
            await asyncio.wait_for(task, 5)
        rest = [n for n in nodes if n is not leader]
        await eventually(lambda: agree(rest) and len(rest[0].table.members) == 2)
        assert rest[0].leader(name) == rest[1].leader(name) != leader.node_id
        for n in rest:
            await n.leave()

    asyncio.run(main())


def test_leadership_waits_on_a_non_leader_until_the_leader_leaves():
    """The waiting side in the availability mode: a timeout around a non-leader's wait fires,
    and the wait enters once the leader leaves and the name's leadership falls to this node."""
    async def main():
        nodes = await start_cluster(2)
        await eventually(lambda: agree(nodes))
        name = "nightly-compaction"
        leader = next(n for n in nodes if n.leader(name) == n.node_id)
        other = next(n for n in nodes if n is not leader)
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.3):
                async with other.leadership(name):
                    raise AssertionError("the non-leader entered")
        inside = asyncio.Event()

        async def follow() -> None:
            async with other.leadership(name):
                inside.set()

        waiting = asyncio.create_task(follow())
        await asyncio.sleep(0.1)
        assert not waiting.done()
        await leader.leave()
        await asyncio.wait_for(inside.wait(), 10)
        await waiting
        await other.leave()

    asyncio.run(main())


def test_guard_answers_421_with_the_owner():
    async def main():
        nodes = await start_cluster(2)
        await eventually(lambda: agree(nodes))
        node = nodes[0]
        app = FastAPI()

        @app.get("/work/{key}")
        async def work(key: str = Depends(require_ownership(node))):
            return {"done": key}

        mine = next(f"k{i}" for i in range(1000) if node.owns(f"k{i}"))
        theirs = next(f"k{i}" for i in range(1000) if not node.owns(f"k{i}"))
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            assert (await client.get(f"/work/{mine}")).json() == {"done": mine}
            r = await client.get(f"/work/{theirs}")
            assert r.status_code == 421
            assert r.headers["x-placement-owner"] == "n2" and r.headers["location"] == f"http://n2.test/work/{theirs}"
            assert r.headers["x-placement-checksum"] == node.table.checksum
        for n in nodes:
            await n.leave()

    asyncio.run(main())


class HostRouter(httpx.AsyncBaseTransport):
    """Send each request to the in-process app of the node named by the URL's host."""

    def __init__(self, apps):
        self.transports = {host: httpx.ASGITransport(app=app) for host, app in apps.items()}

    async def handle_async_request(self, request):
        return await self.transports[request.url.host].handle_async_request(request)


def test_async_client_routes_locally_and_retries_once_after_421():
    from placement.client import AsyncPlacementClient

    def app_for(node):
        app = create_app(node)

        @app.get("/work/{key}")
        async def work(key: str = Depends(require_ownership(node))):
            return {"served_by": node.node_id}

        return app

    async def main():
        n1 = await Node(config("n1")).start()
        router = HostRouter({"n1.test": app_for(n1)})
        client = await AsyncPlacementClient.connect("http://n1.test", refresh=False, transport=router)
        assert client.snapshot.table.members == {"n1": 1.0}  # a snapshot that is about to go stale
        n2 = await Node(config("n2", join=[n1.member.bound])).start()
        router.transports["n2.test"] = httpx.ASGITransport(app=app_for(n2))
        await eventually(lambda: agree([n1, n2]) and len(n1.table.members) == 2)
        key = next(f"k{i}" for i in range(1000) if n2.owns(f"k{i}"))
        assert client.owner(key) == "n1"  # stale
        r = await client.request("GET", key, f"/work/{key}")
        assert r.status_code == 200 and r.json() == {"served_by": "n2"}
        assert client.owner(key) == "n2" and client.checksum == n1.table.checksum
        assert dict(client.route([key, "x"])) == {m: ks for m, ks in n1.table.route([key, "x"]).items()}
        await client.aclose()
        for n in (n2, n1):
            await n.leave()

    asyncio.run(main())


def test_node_declared_dead_releases_everything_then_reacquires_after_holddown():
    from membership.messages import Dead
    from simulations.datagrams import forge

    async def main():
        log = []
        n1 = await Node(config("n1")).start()
        n2 = await Node(config("n2", join=[n1.member.bound], rejoin_holddown_s=0.3)).start()
        n2.on_ownership(acquired=lambda p: log.append(("acquired", p)), released=lambda p: log.append(("released", p)))
        await eventually(lambda: agree([n1, n2]) and len(n1.table.members) == 2)
        held = n2.owned_partitions()
        assert held and log == [("acquired", p) for p in sorted(held)]
        log.clear()
        cfg = n2.config.membership_config()
        lie = forge(cfg, "zz", [Dead("n2", n2.member.core.incarnation, "zz")])
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as stranger:  # a forged datagram, from the network
            stranger.sendto(lie, n2.member.bound)
        await eventually(lambda: n2.declared_dead_count == 1, what="DeclaredDead handled")
        assert n2.owned_partitions() == frozenset() and not n2.owns("anything")
        assert sorted(log) == [("released", p) for p in sorted(held)]
        await eventually(lambda: n2.owned_partitions() == held, 5, what="re-acquired after the hold-down")
        assert sorted(log)[len(held):] == [("released", p) for p in sorted(held)]
        assert [e for e in log if e[0] == "acquired"] == [("acquired", p) for p in sorted(held)]
        for n in (n2, n1):
            await n.leave()

    asyncio.run(main())


def test_a_second_process_with_the_same_id_makes_the_node_unready_with_the_reason():
    async def main():
        nodes = await start_cluster(2)
        twin = await Node(config("n2", join=[nodes[0].member.bound])).start()
        twins = [nodes[1], twin]
        await eventually(lambda: any(x.id_conflict for x in twins), what="an id conflict")
        flagged = next(x for x in twins if x.id_conflict)
        assert not flagged.ready and "uses node id 'n2'" in flagged.id_conflict
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(flagged)),
                                     base_url="http://t") as client:
            r = await client.get("/readyz")
        assert r.status_code == 503 and "give every process its own id" in r.json()["detail"]
        for n in [*nodes, twin]:
            n.close()

    asyncio.run(main())


def test_a_raising_ownership_callback_is_isolated_and_the_leave_completes():
    """Issue 16: an exception in a callback used to abort leave(), so the node was seen dead."""

    async def main():
        n1 = await Node(config("n1")).start()
        n2 = await Node(config("n2", join=[n1.member.bound])).start()

        def explode(p):
            raise RuntimeError(f"application bug on {p}")

        n2.on_ownership(released=explode)
        await eventually(lambda: agree([n1, n2]) and len(n1.table.members) == 2)
        held = len(n2.owned_partitions())
        await n2.leave()  # must not raise
        assert n2.callback_errors == held > 0
        await eventually(lambda: any(m.node_id == "n2" and m.status == "left" for m in n1.members()),
                         what="n2 seen as left, not dead")
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(n2)), base_url="http://t") as c:
            text = (await c.get("/metrics")).text
        assert f"placement_callback_errors_total {float(held)}" in text
        await n1.leave()

    asyncio.run(main())
