"""Issue 31 item 5, the smaller items: one key rule for every route, replicas above the
cluster's refused, msgpack errors with a detail, the real port advertised when binding port 0."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time
from typing import Any

import httpx
import msgpack
import pytest

from placement.service.guard import require_ownership
from placement.service.http_api import create_app
from placement.service.key_rules import MAX_KEY_CHARS
from placement.service.node import Node, NodeConfig
from placement.service.work_sink import create_sink_app


def run(check: Any, sink: bool = False) -> None:
    async def main() -> None:
        config = NodeConfig("n1", gossip_bind=("127.0.0.1", 0), http_advertise="http://n1.test", partitions=64,
                            replicas=1, settle_s=0.0)
        async with Node(config) as node:
            app = create_sink_app(node) if sink else create_app(node)
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
                await check(client, node, app)

    asyncio.run(main())


BAD_KEYS = ["", "k" * (MAX_KEY_CHARS + 1), "k" * 5_000_000]


def test_every_route_takes_the_same_keys():
    """/v1/route took "" and a 5 MB key that /v1/owners refused."""

    async def check(client: httpx.AsyncClient, node: Node, app: Any) -> None:
        for key in BAD_KEYS:
            route = await client.post("/v1/route", json={"keys": ["fine", key]})
            work = await client.post("/v1/work", json={"job": "j", "items": [{"id": 1, "key": key}]})
            assert (route.status_code, work.status_code) == (422, 422), len(key)
            if len(key) < 60_000:  # (a URL holds no 5 MB key: httpx refuses to send one)
                assert (await client.get("/v1/owners", params={"key": key})).status_code == 422
            assert route.json()["detail"].startswith("keys[1]: a key ")
        longest = "k" * MAX_KEY_CHARS
        assert (await client.get("/v1/owners", params={"key": longest})).status_code == 200
        assert (await client.post("/v1/route", json={"keys": [longest]})).status_code == 200

    run(check, sink=True)


def test_the_ownership_guard_takes_the_same_keys():
    async def check(client: httpx.AsyncClient, node: Node, app: Any) -> None:
        guard = require_ownership(node)

        @app.get("/orders/{key}")
        async def order(key: str = __import__("fastapi").Depends(guard)) -> dict[str, str]:
            return {"key": key}

        assert (await client.get("/orders/order-42")).status_code == 200
        r = await client.get("/orders/" + "k" * (MAX_KEY_CHARS + 1))
        assert r.status_code == 422 and "at most 4096 characters" in r.json()["detail"]

    run(check)


def test_replicas_above_the_clusters_are_a_422():
    """replicas=3 on a replicas-1 cluster answered one owner, silently."""

    async def check(client: httpx.AsyncClient, node: Node, app: Any) -> None:
        r = await client.get("/v1/owners", params={"key": "k", "replicas": 3})
        assert r.status_code == 422 and "less than or equal to 1" in r.json()["detail"], r.text
        assert (await client.get("/v1/owners", params={"key": "k", "replicas": 1})).status_code == 200
        spec = (await client.get("/openapi.json")).json()
        param = next(p for p in spec["paths"]["/v1/owners"]["get"]["parameters"] if p["name"] == "replicas")
        assert param["schema"]["anyOf"][0]["maximum"] == 1

    run(check)


def test_msgpack_errors_have_a_detail():
    async def check(client: httpx.AsyncClient, node: Node, app: Any) -> None:
        for body in (b"\xc1", b"\x92", msgpack.packb({"keys": ["a"]}) + b"\x00"):
            r = await client.post("/v1/route", content=body, headers={"Content-Type": "application/msgpack"})
            detail = r.json()["detail"]
            assert r.status_code == 400 and re.search(r"body: \w+", detail), detail
        r = await client.post("/v1/route", content=b"\xc1", headers={"Content-Type": "application/msgpack"})
        assert r.json()["detail"] == ("could not decode the application/msgpack body: FormatError (not valid "
                                      "application/msgpack)")

    run(check)


def test_a_node_bound_to_port_0_advertises_the_port_it_got():
    """`--gossip 127.0.0.1:0` (and `--http 127.0.0.1:0`) advertised port 0."""
    node = subprocess.Popen([sys.executable, "-m", "placement_cli", "node", "--id", "z", "--gossip", "127.0.0.1:0",
                             "--http", "127.0.0.1:0", "--partitions", "64"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        assert node.stdout is not None
        first = node.stdout.readline()
        m = re.search(r"gossip 127\.0\.0\.1:(\d+) http http://127\.0\.0\.1:(\d+) ", first)
        assert m and m.group(1) != "0" and m.group(2) != "0", first
        url = f"http://127.0.0.1:{m.group(2)}"
        deadline = time.monotonic() + 20
        while True:
            try:
                members = httpx.get(url + "/v1/members", timeout=2).json()
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline and node.poll() is None
                time.sleep(0.1)
        assert members[0]["gossip"] == f"127.0.0.1:{m.group(1)}" and members[0]["http"] == url
    finally:
        node.terminate()
        node.wait(10)


@pytest.mark.parametrize("advertise", [None, ("127.0.0.1", 0)])
def test_the_library_advertises_the_bound_gossip_port(advertise: tuple[str, int] | None):
    async def main() -> None:
        async with Node(NodeConfig("n1", gossip_bind=("127.0.0.1", 0), gossip_advertise=advertise,
                                   partitions=64)) as node:
            assert node.members()[0].addr == node.member.bound and node.member.bound[1] != 0

    asyncio.run(main())
