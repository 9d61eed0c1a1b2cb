"""The console: its event log and summaries (pure), and its routes on real nodes.

The routes are served by uvicorn on loopback sockets inside the test's event loop (httpx's ASGI
transport buffers a whole response, so it cannot show a server-sent event stream arriving)."""

import asyncio
import contextlib
import json
import socket

import httpx
import numpy as np
import pytest
import uvicorn

from placement.service.console.events import EventLog
from placement.service.console.summary import agreement, balance, map_payload, read_map_payload
from placement.service.http_api import create_app
from placement.service.node import Node, NodeConfig
from placement.snapshot import PlacementSnapshot
from placement.table import PlacementTable

from test_node import FAST, eventually


# ----- the event log (pure) ------------------------------------------------------------------
def test_event_log_numbers_events_and_keeps_the_newest():
    log = EventLog(capacity=3)
    assert (log.first_seq, log.last_seq, log.after(0)) == (1, 0, [])
    for i in range(5):
        log.append("joined", f"n{i}", "", now=float(i))
    assert [e.seq for e in log.after(0)] == [3, 4, 5] and log.first_seq == 3
    assert [e.member for e in log.after(3)] == ["n3", "n4"]
    assert [e.seq for e in log.after(0, limit=1)] == [5]
    assert log.after(5) == [] and log.after(99) == []
    with pytest.raises(ValueError, match="unknown event kind"):
        log.append("exploded", "", "", 0.0)


def test_an_ownership_burst_is_one_event_renumbered_as_it_grows():
    log = EventLog()
    log.append("joined", "n2", "", 0.0)
    log.ownership("n1", 1, 0, now=10.0)
    log.ownership("n1", 1, 0, now=10.5)
    last = log.ownership("n1", 0, 1, now=11.0)
    assert [e.kind for e in log.after(0)] == ["joined", "ownership"]
    assert last.seq == 4 and last.detail == "+2 -1 partitions"
    assert log.after(2) == [last]  # a reader that saw the burst's first event sees its totals
    later = log.ownership("n1", 1, 0, now=11.2)  # more than burst_s after the burst began
    assert later.detail == "+1 -0 partitions" and len(log.after(0)) == 3
    log.append("dead", "n2", "", 11.3)
    assert log.ownership("n1", 1, 0, now=11.4).detail == "+1 -0 partitions"  # a new burst


def test_listeners_hear_appends_and_close():
    log = EventLog()
    heard = []
    log.listeners.append(lambda: heard.append(log.last_seq))
    log.append("left", "n3", "", 0.0)
    log.close()
    assert heard == [1, 1] and log.closed


# ----- summaries (pure) ----------------------------------------------------------------------
def test_map_payload_carries_the_snapshot_and_its_owner_table():
    table = PlacementTable.build({"b": 1.0, "a": 2.0, "c": 0.0}, partitions=1000, replicas=2, seed=3)
    snap = PlacementSnapshot(table, {"a": "http://a", "b": "http://b", "c": ""})
    header, owners = read_map_payload(map_payload(snap))
    assert (4 + len(json.dumps(header, separators=(",", ":")))) <= len(map_payload(snap))
    assert header["checksum"] == table.checksum and header["etag"] == snap.etag
    assert header["members"] == [["a", 2.0], ["b", 1.0], ["c", 0.0]] and header["addresses"]["a"] == "http://a"
    assert (len(map_payload(snap)) - len(owners)) % 4 == 0  # the int32 table starts aligned
    idx = np.frombuffer(owners, dtype="<i4").reshape(1000, header["owners_width"])
    ids = [m for m, _ in header["members"]]
    assert all(tuple(ids[i] for i in idx[p]) == table.owners(p) for p in range(1000))
    with pytest.raises(ValueError):
        read_map_payload(b"\x10\x00\x00\x00{}")


def test_agreement_groups_checksums_and_flags_the_odd_ones():
    assert agreement({"n1": "x", "n2": "x", "n3": None}) == {
        "agree": True, "majority": "x", "checksums": {"x": 2}, "disagree": [], "unreachable": ["n3"],
        "unconfirmed": []}
    # Issue 31: a member of the stable view this node cannot reach is no agreement
    cut_off = agreement({"n1": "x", "n2": "x", "n3": None}, view=["n1", "n2", "n3"])
    assert not cut_off["agree"] and cut_off["unconfirmed"] == ["n3"] and cut_off["majority"] == "x"
    split = agreement({"n1": "x", "n2": "y", "n3": "y"})
    assert not split["agree"] and split["majority"] == "y" and split["disagree"] == ["n1"]
    assert agreement({"n1": None}) == {"agree": False, "majority": None, "checksums": {}, "disagree": [],
                                      "unreachable": ["n1"], "unconfirmed": []}
    assert agreement({"n1": "b", "n2": "a"})["majority"] == "a"  # a tie: the smaller, so every node says the same


def test_balance_is_leaderships_over_weighted_share():
    table = PlacementTable.build({"a": 1.0, "b": 3.0, "z": 0.0}, partitions=4096)
    b = balance(table)
    load = table.load()
    ratios = [load["a"] / 1024, load["b"] / 3072]
    assert b["members"] == 2 and b["max"] == pytest.approx(max(ratios))
    assert b["max_over_mean"] == pytest.approx(max(ratios) / (sum(ratios) / 2)) and b["worst"] in ("a", "b")
    assert balance(PlacementTable.build({"z": 0.0}, partitions=16))["max"] is None


# ----- routes on real nodes ------------------------------------------------------------------
@contextlib.asynccontextmanager
async def serving(nodes_and_socks):
    """Serve each node's app on its (already bound) socket, in this event loop."""
    servers = [uvicorn.Server(uvicorn.Config(create_app(n), log_level="warning", lifespan="off"))
               for n, _ in nodes_and_socks]
    tasks = [asyncio.create_task(s.serve(sockets=[sock])) for s, (_, sock) in zip(servers, nodes_and_socks)]
    try:
        yield
    finally:
        for s in servers:
            s.should_exit = True
        await asyncio.wait_for(asyncio.gather(*tasks), 10)


def bound_socket():
    sock = socket.create_server(("127.0.0.1", 0))
    return sock, f"http://127.0.0.1:{sock.getsockname()[1]}"


def node_config(node_id, url, join=()):
    return NodeConfig(node_id, gossip_bind=("127.0.0.1", 0), join=tuple(join), partitions=256, replicas=2,
                      settle_s=0.0, membership=FAST, http_advertise=url, ownership="available")


def run_cluster(check, size=2):
    async def main():
        socks = [bound_socket() for _ in range(size)]
        async with contextlib.AsyncExitStack() as stack:
            first = await stack.enter_async_context(Node(node_config("n1", socks[0][1])))
            nodes = [first] + [await stack.enter_async_context(Node(node_config(f"n{i + 1}", socks[i][1],
                                                                                [first.member.bound])))
                               for i in range(1, size)]
            await eventually(lambda: all(len(n.table.members) == size for n in nodes), what="a full view")
            async with serving([(n, s) for n, (s, _) in zip(nodes, socks)]):
                async with httpx.AsyncClient(base_url=socks[0][1], timeout=10) as client:
                    return await check(client, nodes, [u for _, u in socks])

    return asyncio.run(main())


def test_page_and_assets_are_served_and_bad_names_refused():
    async def check(client, nodes, urls):
        page = await client.get("/ui")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert '<canvas id="map"' in page.text and "/ui/console.js" in page.text
        js = await client.get("/ui/console.js")
        assert js.headers["content-type"].startswith("text/javascript") and "EventSource" in js.text
        assert (await client.get("/ui/console.css")).headers["content-type"].startswith("text/css")
        for bad in ("/ui/index.html", "/ui/..%2Fevents.py", "/ui/nope.js"):
            r = await client.get(bad)
            assert r.status_code in (404, 422) and r.headers["content-type"] == "application/problem+json", bad
        assert (await client.get("/", follow_redirects=False)).headers["location"] == "/ui"

    run_cluster(check, size=1)


def test_map_checksum_and_agreement_across_nodes():
    async def check(client, nodes, urls):
        r = await client.get("/v1/map")
        header, owners = read_map_payload(r.content)
        assert r.headers["content-type"] == "application/octet-stream"
        assert header["checksum"] == nodes[0].table.checksum and len(owners) == 256 * 2 * 4
        assert (await client.get("/v1/map", headers={"If-None-Match": r.headers["etag"]})).status_code == 304
        c = (await client.get("/v1/checksum")).json()
        assert c == {"node": "n1", "checksum": nodes[0].table.checksum, "etag": nodes[0].snapshot.etag, "members": 3}
        a = (await client.get("/v1/agreement")).json()
        assert a["agree"] and a["checksums"] == {nodes[0].table.checksum: 3} and a["unreachable"] == []
        assert [(m["id"], m["http"], m["error"]) for m in a["members"]] == [
            ("n1", urls[0], None), ("n2", urls[1], None), ("n3", urls[2], None)]

    run_cluster(check, size=3)


def test_agreement_names_a_member_that_does_not_answer():
    async def check(client, nodes, urls):
        nodes[0]._snapshot = PlacementSnapshot(nodes[0].table, {**nodes[0].snapshot.addresses,
                                                                "n2": "http://127.0.0.1:9"})
        a = (await client.get("/v1/agreement")).json()
        assert a["unreachable"] == ["n2"] and a["unconfirmed"] == ["n2"] and not a["agree"]  # (issue 31)
        assert "ConnectError" in next(m["error"] for m in a["members"] if m["id"] == "n2")

    run_cluster(check, size=2)


def test_events_long_poll_and_server_sent_events():
    async def check(client, nodes, urls):
        body = (await client.get("/v1/events")).json()
        kinds = {(e["kind"], e["member"]) for e in body["events"]}
        assert ("joined", "n2") in kinds and body["node"] == "n1" and body["last_seq"] == body["events"][-1]["seq"]
        last = body["last_seq"]

        # A long poll on the last event returns with the next one.
        poll = asyncio.create_task(client.get("/v1/events", params={"after": last, "wait": 10}))
        await asyncio.sleep(0)  # not a wait for an effect: lets the request start before the append
        nodes[0].events.append("updated", "n2", "test", 0.0)
        got = (await asyncio.wait_for(poll, 10)).json()["events"]
        assert [(e["seq"], e["detail"]) for e in got] == [(last + 1, "test")]

        # An event stream resumes after Last-Event-ID, then follows appends as they happen.
        headers = {"Accept": "text/event-stream", "Last-Event-ID": str(last)}
        async with client.stream("GET", "/v1/events", headers=headers) as r:
            assert r.headers["content-type"].startswith("text/event-stream")
            lines = r.aiter_lines()

            async def next_data():
                async for line in lines:
                    if line.startswith("data: "):
                        return json.loads(line[6:])

            assert (await asyncio.wait_for(next_data(), 10))["seq"] == last + 1
            nodes[0].events.append("suspect", "n2", "live", 0.0)
            e = await asyncio.wait_for(next_data(), 10)
            assert (e["kind"], e["detail"]) == ("suspect", "live")
        await eventually(lambda: nodes[0].events.listeners == [], what="the closed stream to leave nothing behind")

    run_cluster(check, size=2)


def test_a_dead_member_is_an_event_and_streams_end_when_the_node_stops():
    async def check(client, nodes, urls):
        nodes[1].close()  # as if killed
        await eventually(lambda: any(e.kind == "dead" and e.member == "n2" for e in nodes[0].events.after(0)),
                         timeout_s=20, what="n2 declared dead")
        placement = [e for e in nodes[0].events.after(0) if e.kind == "placement"]
        assert placement and "leaderships moved" in placement[-1].detail
        async with client.stream("GET", "/v1/events", headers={"Accept": "text/event-stream"}) as r:
            nodes[0].close()
            body = await asyncio.wait_for(r.aread(), 10)  # ends: it does not hold the server open
        assert body.startswith(b"retry: 1000")

    run_cluster(check, size=2)


BAD_QUERIES = [{"after": "-1"}, {"wait": "61"}, {"limit": "0"}, {"after": "x"}]


def test_bad_event_queries_are_problems():
    async def check(client, nodes, urls):
        for params in BAD_QUERIES:
            r = await client.get("/v1/events", params=params)
            assert r.status_code == 422 and r.headers["content-type"] == "application/problem+json", params
        last = nodes[0].events.append("updated", "n1", "", 0.0).seq
        ignored = await client.get("/v1/events", params={"after": last - 1}, headers={"Last-Event-ID": "nope"})
        assert ignored.status_code == 200 and [e["seq"] for e in ignored.json()["events"]] == [last]

    run_cluster(check, size=1)


def test_members_say_how_long_ago_each_was_heard_from():
    async def check(client, nodes, urls):
        async def heard():
            return {m["id"]: m["heard_s_ago"] for m in (await client.get("/v1/members")).json()}

        await eventually_async(lambda: heard(), lambda h: h["n1"] is None and h["n2"] is not None and h["n2"] < 3,
                               what="n2 heard from recently")
        nodes[1].close()  # silent from now on: its age grows past the probe period
        await eventually_async(lambda: heard(), lambda h: h["n2"] is not None and h["n2"] > 1.5,
                               what="n2's silence visible")

    run_cluster(check, size=2)


async def eventually_async(get, predicate, timeout_s=15.0, what="condition"):
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not predicate(value := await get()):
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}: {value}")
        await asyncio.sleep(0.1)
