"""``placement status``: against a live two-node cluster (uvicorn on loopback, in a thread)."""

import asyncio
import contextlib
import json
import socket
import threading

import httpx
import pytest
import uvicorn

from placement.service.console.status import collect, render
from placement.service.http_api import create_app
from placement.service.node import Node, NodeConfig
from placement_cli.main import main

from test_node import FAST, eventually
from test_node_exclusive import QUICK

_REAL_CLIENT = httpx.Client


@contextlib.contextmanager
def live_cluster(size=2):
    """``size`` nodes gossiping on loopback, each serving HTTP; yields the URLs."""
    socks = [socket.create_server(("127.0.0.1", 0)) for _ in range(size)]
    urls = [f"http://127.0.0.1:{s.getsockname()[1]}" for s in socks]
    up, stop, failure = threading.Event(), threading.Event(), []

    async def run():
        async with contextlib.AsyncExitStack() as stack:
            nodes: list[Node] = []
            for i, url in enumerate(urls):
                join = (nodes[0].member.bound,) if nodes else ()
                nodes.append(await stack.enter_async_context(Node(NodeConfig(
                    f"n{i + 1}", gossip_bind=("127.0.0.1", 0), join=join, partitions=512, replicas=2,
                    settle_s=0.0, membership=FAST, http_advertise=url, ownership="available"))))
            await eventually(lambda: all(len(n.table.members) == size for n in nodes), what="a full view")
            servers = [uvicorn.Server(uvicorn.Config(create_app(n), log_level="warning", lifespan="off"))
                       for n in nodes]
            tasks = [asyncio.create_task(s.serve(sockets=[sock])) for s, sock in zip(servers, socks)]
            up.set()
            await asyncio.to_thread(stop.wait)
            for s in servers:
                s.should_exit = True
            await asyncio.gather(*tasks)

    def thread_main():
        try:
            asyncio.run(run())
        except BaseException as exc:  # reported to the test
            failure.append(exc)
            up.set()

    thread = threading.Thread(target=thread_main, daemon=True)
    thread.start()
    try:
        assert up.wait(30), "the cluster did not start within 30 s"
        if failure:
            raise failure[0]
        yield urls
    finally:
        stop.set()
        thread.join(30)


@pytest.fixture(scope="module")
def urls():
    with live_cluster(2) as urls:
        yield urls


def test_status_table(urls, capsys):
    assert main(["status", "--url", urls[0]]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"node n1 at {urls[0]}  placement ")
    assert "members: 2 alive" in out and "512 partitions x 2 replicas" in out
    rows = [line.split() for line in out.splitlines() if line.startswith(("n1 ", "n2 "))]
    assert [r[:2] for r in rows] == [["n1", "alive"], ["n2", "alive"]]
    assert sum(int(r[4]) for r in rows) == 512 and all(int(r[5]) == 512 for r in rows)  # leads, replica of
    assert "agreement: all 2 answering members agree on " in out
    assert "balance: max/mean " in out and "recent changes:" in out and "joined" in out


def _proxied(monkeypatch, balancing):
    """``httpx.Client`` sends to the live nodes, except ``/v1/balancing``: ``balancing(request)``."""
    upstream = _REAL_CLIENT(timeout=5)

    def handler(request):
        if request.url.path == "/v1/balancing":
            return balancing(request)
        r = upstream.get(str(request.url), headers={k: v for k, v in request.headers.items() if k == "accept"})
        return httpx.Response(r.status_code, content=r.content, headers={"content-type": r.headers["content-type"]})

    monkeypatch.setattr(httpx, "Client", lambda **kw: _REAL_CLIENT(transport=httpx.MockTransport(handler), **kw))


def _rows(out):
    return {line.split()[0]: line.split() for line in out.splitlines() if line.startswith(("n1 ", "n2 "))}


def test_status_shows_each_members_load_and_dashes_where_a_node_has_none(urls, capsys, monkeypatch):
    """Issue 33: load per member from GET /v1/balancing; a node without --load-aware (these) has no
    figures, and a node older than the endpoint answers 404: '-' either way, no error."""
    assert main(["status", "--url", urls[0]]) == 0
    out = capsys.readouterr().out
    assert "load/s  x mean" in out
    assert all(r[6:8] == ["-", "-"] for r in _rows(out).values())  # no --load-aware: no figures
    _proxied(monkeypatch, lambda request: httpx.Response(404, json={"detail": "Not Found"}))
    assert main(["status", "--url", urls[0], "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert [(m["load"], m["load_over_mean"]) for m in s["members"]] == [(None, None)] * 2
    assert all(r[6:8] == ["-", "-"] for r in _rows(render(s)).values())
    body = {"members": [{"id": "n1", "load": 12.5, "load_over_mean": 1.25}, {"id": "n2", "weight": 1.0}]}
    _proxied(monkeypatch, lambda request: httpx.Response(200, json=body))
    assert main(["status", "--url", urls[0]]) == 0
    rows = _rows(capsys.readouterr().out)
    assert rows["n1"][6:8] == ["12.5", "1.25"] and rows["n2"][6:8] == ["-", "-"]  # n2: fields missing


def test_a_failing_balancing_endpoint_is_still_an_error(urls, capsys, monkeypatch):
    _proxied(monkeypatch, lambda request: httpx.Response(500, json={"detail": "boom"}))
    assert main(["status", "--url", urls[0]]) == 2
    assert "/v1/balancing: HTTP 500: boom" in capsys.readouterr().err


def test_status_json_is_what_the_table_shows(urls, capsys):
    assert main(["status", "--url", urls[1], "--json", "--recent", "3"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["node"] == "n2" and s["agreement"]["agree"] and s["agreement"]["majority"] == s["checksum"]
    assert {m["id"]: m["leads"] for m in s["members"]} == {m["id"]: m["leads"] for m in s["members"]}
    assert sum(m["leads"] for m in s["members"]) == 512 and len(s["recent"]) <= 3
    assert 0.5 < s["balance"]["max_over_mean"] < 1.5 and s["balance"]["members"] == 2
    assert render(s).startswith("node n2")


def test_watch_refreshes(urls, capsys):
    assert main(["status", "--url", urls[0], "--watch", "0.1", "--count", "2"]) == 0
    assert capsys.readouterr().out.count("node n1 at") == 2


def test_unreachable_node_and_bad_flags_are_clear_errors(capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens on it once closed
    assert main(["status", "--url", f"http://127.0.0.1:{port}"]) == 2
    assert f"placement status: error: cannot reach http://127.0.0.1:{port}" in capsys.readouterr().err
    for bad in (["--url", "ftp://x"], ["--watch", "0"], ["--count", "0"]):
        with pytest.raises(SystemExit) as exit_:
            main(["status", *bad])
        assert exit_.value.code == 2


def test_a_server_that_is_no_placement_node_is_a_clear_error(capsys, monkeypatch):
    def not_a_node(request):
        return httpx.Response(200, json={"hello": "world"})

    real_client = httpx.Client
    monkeypatch.setattr(httpx, "Client", lambda **kw: real_client(transport=httpx.MockTransport(not_a_node), **kw))
    assert main(["status", "--url", "http://elsewhere.test"]) == 2
    assert "not a placement snapshot" in capsys.readouterr().err


def test_render_flags_disagreement_and_unreachable_members():
    s = {"node": "n1", "url": "http://n1", "checksum": "a" * 32, "partitions": 8, "replicas": 1,
         "members": [{"id": "n1", "status": "alive", "incarnation": 5, "weight": 1.0, "leads": 8, "replica_of": 8,
                      "http": "http://n1"}],
         "agreement": {"agree": False, "majority": "a" * 32, "checksums": {"a" * 32: 2, "b" * 32: 1},
                       "disagree": ["n3"], "unreachable": ["n4"],
                       "members": [{"id": "n4", "checksum": None, "error": "ConnectError"}]
                       + [{"id": f"n{i}", "checksum": "a" * 32, "error": None} for i in (1, 2, 3)]},
         "balance": {"members": 0}, "recent": [{"at": 100.0, "kind": "dead", "member": "n5", "detail": "x"}]}
    out = render(s, now=130.0)
    assert "WARNING" not in out and "survives" not in out  # no survival (available mode): no line
    assert "agreement: DISAGREE - 2 checksums among 3 answering members" in out and "others: n3" in out
    assert "n4 did not answer: ConnectError" in out and "no member has a positive weight" in out
    assert "30 s ago  dead" in out
    assert "pinned" not in out.splitlines()[0]  # no pins: the header says nothing of them
    assert out.splitlines()[0].endswith("8 partitions x 1 replicas")
    assert render({**s, "pinned": 3}, now=130.0).splitlines()[0].endswith("8 partitions x 1 replicas, 3 pinned")


def test_render_flags_stable_view_members_it_cannot_reach():
    """Issue 31: with a member of the stable view killed, the others reported agreement."""
    s = {"node": "n1", "url": "http://n1", "checksum": "a" * 32, "partitions": 8, "replicas": 1, "members": [],
         "agreement": {"agree": False, "majority": "a" * 32, "checksums": {"a" * 32: 2}, "disagree": [],
                       "unreachable": ["n3"], "unconfirmed": ["n3"],
                       "members": [{"id": "n3", "checksum": None, "error": "ConnectError"}]
                       + [{"id": f"n{i}", "checksum": "a" * 32, "error": None} for i in (1, 2)]},
         "balance": {"members": 0}, "recent": []}
    out = render(s, now=0.0)
    assert "agreement: UNCONFIRMED - cannot reach n3 of the stable view; the 2 answering members report" in out
    assert "agree on" not in out and "n3 did not answer: ConnectError" in out


def test_status_says_what_the_cluster_survives_and_warns_when_one_crash_stops_all_work():
    """Exclusive mode (the default): two members, then a witness joins (n1 served on loopback)."""
    sock = socket.create_server(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"

    def config(node_id, join=(), **kw):
        return NodeConfig(node_id, gossip_bind=("127.0.0.1", 0), join=join, partitions=64, settle_s=0.0,
                          membership=FAST, exclusive=QUICK, http_advertise=url if node_id == "n1" else "", **kw)

    def status() -> str:
        with httpx.Client(timeout=5) as client:
            return render(collect(client, url))

    async def main_():
        n1 = await Node(config("n1")).start()
        server = uvicorn.Server(uvicorn.Config(create_app(n1), log_level="warning", lifespan="off"))
        serving = asyncio.create_task(server.serve(sockets=[sock]))
        n2 = await Node(config("n2", join=(n1.member.bound,))).start()
        await eventually(lambda: n1.survival is not None and len(n1.survival.members) == 2, timeout_s=20)
        out = await asyncio.to_thread(status)
        assert n1.survival is not None
        first = n1.survival.witnesses[0]
        assert f"WARNING: a crash of {first} stops all work: add a witness (placement witness)" in out
        assert f"including the first witness {first}" in out
        w = await Node(config("w", join=(n1.member.bound,), weight=0.0)).start()
        await eventually(lambda: n1.survival is not None and len(n1.survival.members) == 3, timeout_s=20)
        out = await asyncio.to_thread(status)
        assert "WARNING: a crash" not in out and "survives: survives the crash of any one member" in out
        assert "split: the side with 2 of the 3 witnesses" in out
        for n in (w, n2, n1):
            await n.leave()
        server.should_exit = True
        await serving

    asyncio.run(main_())
