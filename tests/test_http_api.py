"""HTTP API through httpx's ASGI transport, against a real single-node cluster on loopback."""

import asyncio

import httpx
import msgpack
import pytest

from placement.service.http_api import create_app
from placement.service.node import Node, NodeConfig
from placement.snapshot import PlacementSnapshot


def run(coro_fn, zone="", **app_kwargs):
    """Start one node (no seeds: a cluster of one), serve its app in-process, run the test."""

    async def main():
        config = NodeConfig("n1", gossip_bind=("127.0.0.1", 0), http_advertise="http://n1.test",
                            partitions=256, replicas=2, settle_s=0.0, zone=zone)
        async with Node(config) as node:
            app = create_app(node, **app_kwargs)
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
                return await coro_fn(client, node)

    return asyncio.run(main())


def test_members_placement_owners():
    async def check(client, node):
        members = (await client.get("/v1/members")).json()
        assert [m["id"] for m in members] == ["n1"]
        assert set(members[0]) == {"id", "gossip", "http", "status", "incarnation", "weight", "tags", "zone",
                                   "heard_s_ago"}
        assert members[0]["zone"] == ""
        assert members[0]["heard_s_ago"] is None  # itself: never "heard"
        assert members[0]["status"] == "alive" and members[0]["http"] == "http://n1.test"

        r = await client.get("/v1/placement")
        assert r.status_code == 200 and r.headers["etag"] == f'"{node.snapshot.etag}"'
        snap = PlacementSnapshot.from_json(r.content, verify=True)
        assert snap.table == node.table and snap.address("n1") == "http://n1.test"
        r304 = await client.get("/v1/placement", headers={"If-None-Match": r.headers["etag"]})
        assert r304.status_code == 304
        packed = await client.get("/v1/placement", headers={"Accept": "application/msgpack"})
        assert packed.headers["content-type"] == "application/msgpack"
        assert PlacementSnapshot.from_msgpack(packed.content).table == node.table

        o = (await client.get("/v1/owners", params={"key": "order-42"})).json()
        assert o["partition"] == node.table.partition_of("order-42")
        assert o["owners"] == [{"id": "n1", "http": "http://n1.test", "zone": ""}]
        assert o["checksum"] == node.table.checksum

    run(check)


def test_owners_and_members_show_the_zone():
    async def check(client, node):
        assert (await client.get("/v1/members")).json()[0]["zone"] == "eu-1a"
        o = (await client.get("/v1/owners", params={"key": "order-42"})).json()
        assert o["owners"] == [{"id": "n1", "http": "http://n1.test", "zone": "eu-1a"}]
        assert node.table.zones == {"n1": "eu-1a"}
        snap = PlacementSnapshot.from_json((await client.get("/v1/placement")).content, verify=True)
        assert snap.table.zones == {"n1": "eu-1a"} and snap.table == node.table

    run(check, zone="eu-1a")


def test_long_poll_returns_on_timeout_with_same_etag():
    async def check(client, node):
        etag = node.snapshot.etag
        r = await client.get("/v1/placement", params={"after": etag, "wait": 0.05})
        assert r.status_code == 200 and r.headers["etag"] == f'"{etag}"'

    run(check)


def test_route_json_and_msgpack():
    async def check(client, node):
        keys = [f"k{i}" for i in range(1000)]
        r = await client.post("/v1/route", json={"keys": keys})
        body = r.json()
        assert r.status_code == 200 and body["checksum"] == node.table.checksum
        assert sorted(body["routes"]["n1"]["keys"]) == sorted(keys)
        packed = await client.post("/v1/route", content=msgpack.packb({"keys": keys}),
                                   headers={"Content-Type": "application/msgpack", "Accept": "application/msgpack"})
        assert msgpack.unpackb(packed.content)["routes"]["n1"]["keys"] == body["routes"]["n1"]["keys"]
        empty = await client.post("/v1/route", json={"keys": []})
        assert empty.json()["routes"] == {}

    run(check)


BAD = [
    ("get", "/v1/owners", {}, None, 422),
    ("get", "/v1/owners", {"key": ""}, None, 422),
    ("get", "/v1/owners", {"key": "a", "replicas": "0"}, None, 422),
    ("get", "/v1/owners", {"key": "a", "replicas": "x"}, None, 422),
    ("get", "/v1/owners", {"key": "a" * 5000}, None, 422),
    ("get", "/v1/placement", {"wait": "-1"}, None, 422),
    ("get", "/v1/placement", {"wait": "1e9"}, None, 422),
    ("post", "/v1/route", {}, b"{not json", 400),
    ("post", "/v1/route", {}, b'{"keys": [1, 2]}', 422),
    ("post", "/v1/route", {}, b'{"keys": "abc"}', 422),
    ("post", "/v1/route", {}, b"[]", 422),
    ("post", "/v1/route", {}, b'"\\ud800"', 422),
    ("post", "/v1/route", {}, b'{"keys": ["\\ud800"]}', 422),
    ("get", "/v1/nope", {}, None, 404),
    ("delete", "/v1/members", {}, None, 405),
]


@pytest.mark.parametrize("method, path, params, body, status", BAD)
def test_bad_requests_get_problem_details(method, path, params, body, status):
    async def check(client, node):
        headers = {"Content-Type": "application/json"} if body is not None else {}
        r = await client.request(method.upper(), path, params=params, content=body, headers=headers)
        assert r.status_code == status, r.text
        assert r.headers["content-type"] == "application/problem+json"
        problem = r.json()
        assert problem["status"] == status and problem["title"] and "detail" in problem

    run(check)


def test_route_rejects_unknown_media_type_and_bad_msgpack():
    async def check(client, node):
        r = await client.post("/v1/route", content=b"keys", headers={"Content-Type": "application/xml"})
        assert r.status_code == 415
        r = await client.post("/v1/route", content=b"keys", headers={"Content-Type": "text/plain"})
        assert r.status_code == 403  # what a cross-site form may send (http_limits.CrossSite)
        r = await client.post("/v1/route", content=b"\xc1", headers={"Content-Type": "application/msgpack"})
        assert r.status_code == 400

    run(check)


def test_health_ready_metrics():
    async def check(client, node):
        assert (await client.get("/healthz")).json()["status"] == "ok"
        assert (await client.get("/readyz")).status_code == 200
        text = (await client.get("/metrics")).text
        assert 'placement_members{status="alive"} 1.0' in text
        assert "placement_partitions_owned 256.0" in text
        assert "placement_gossip_" in text

    run(check)


def test_leave_requires_admin_token():
    async def check(client, node):
        assert (await client.post("/v1/leave")).status_code == 401
        assert (await client.post("/v1/leave", headers={"Authorization": "Bearer nope"})).status_code == 403
        assert (await client.post("/v1/leave", headers={"Authorization": "Bearer "})).status_code == 401
        r = await client.post("/v1/leave", headers={"Authorization": "bearer s3cret"})  # any case (RFC 9110)
        assert r.status_code == 202
        await client._transport.app.state.leave_task  # wait for the leave to finish
        assert node.owned_partitions() == frozenset()

    run(check, admin_token="s3cret")


def test_leave_without_a_token_is_accepted_only_from_loopback():
    """Issue 16: one request from anyone who reached the HTTP port made a node leave."""

    async def main():
        config = NodeConfig("n1", gossip_bind=("127.0.0.1", 0), partitions=64, settle_s=0.0)
        async with Node(config) as node:
            app = create_app(node)
            for client_addr, status in ((("10.1.2.3", 5555), 403), (("::1", 5555), 202), (("127.0.0.1", 5555), 202)):
                transport = httpx.ASGITransport(app=app, client=client_addr)
                async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
                    r = await client.post("/v1/leave")
                    assert r.status_code == status, (client_addr, r.text)
                    if status == 403:
                        assert "--admin-token" in r.json()["detail"] and not node.leaving
            await app.state.leave_task
            assert node.leaving

    asyncio.run(main())


def test_a_node_that_has_not_joined_answers_ownership_queries_with_503():
    """Issue 16: alone, its view named itself the owner of every key."""

    async def main():
        config = NodeConfig("n9", gossip_bind=("127.0.0.1", 0), join=(("127.0.0.1", 9),), partitions=64)
        node = await Node(config).start()
        try:
            app = create_app(node)
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
                for r in (await client.get("/v1/owners", params={"key": "k"}), await client.get("/v1/placement"),
                          await client.post("/v1/route", json={"keys": ["k"]})):
                    assert r.status_code == 503 and r.headers["retry-after"] == "2", r.text
                    assert r.headers["content-type"] == "application/problem+json"
                    assert "has not joined the cluster yet" in r.json()["detail"]
                assert (await client.get("/v1/members")).status_code == 200  # what it knows, as it is
                assert (await client.get("/readyz")).status_code == 503
        finally:
            node.close()

    asyncio.run(main())


def test_openapi_documents_every_route():
    async def check(client, node):
        spec = (await client.get("/openapi.json")).json()
        paths = spec["paths"]
        for path in ("/v1/members", "/v1/placement", "/v1/owners", "/v1/route", "/healthz", "/readyz", "/metrics",
                     "/v1/leave"):
            assert path in paths
        route_body = paths["/v1/route"]["post"]["requestBody"]["content"]
        assert set(route_body) == {"application/json", "application/msgpack"}
        owners_schema = paths["/v1/owners"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
        assert owners_schema["$ref"].endswith("OwnersOut")

    run(check)
