"""The OpenAPI document: valid OpenAPI 3.1, and true of a live node.

A live node here is a real one: gossip on UDP loopback, the HTTP API served by uvicorn on a
loopback port, both in a thread of their own (schemathesis calls it synchronously, over HTTP).
schemathesis generates requests from the document - valid ones and invalid ones - and checks
every response against it: no 5xx, a documented status, a documented media type, a body that
matches the schema of that media type (the msgpack form too), required headers present,
invalid input refused with a 4xx and valid input accepted. The stateful test follows the links
the document declares (a snapshot's etag -> the long poll, the conditional GET).

``POST /v1/leave`` stops the node that answers it, so it is fuzzed on a node of its own with an
admin token (schemathesis cannot guess the token: it sees 401 and 403), and the 202 is checked
on one more node, with the token.

The documents fuzzed come from ``create_app`` in-process, because schemathesis' pytest
integration needs them when tests are collected, before a node runs (its fixture-based loader
does not run on pytest 9); ``test_live_nodes_serve_the_documents_fuzzed`` checks that the live
nodes serve exactly these documents.
"""

import asyncio
import contextlib
import socket
import tempfile
import threading

import httpx
import msgpack
import pytest
import schemathesis
import uvicorn
from hypothesis import HealthCheck, settings
from openapi_spec_validator import validate

from placement.service.http_api import MSGPACK, create_app
from placement.service.node import Node, NodeConfig

from test_node import FAST, eventually

TOKEN = "s3cret"
LONG_POLL_CAP_S = 0.2
SETTINGS = settings(max_examples=40, deadline=None, database=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                           HealthCheck.function_scoped_fixture])


def node_config(node_id, join=(), **kw):
    return NodeConfig(node_id, gossip_bind=("127.0.0.1", 0), join=tuple(join), partitions=64, replicas=2,
                      settle_s=0.0, membership=FAST, http_advertise=f"http://{node_id}.test", **kw)


def document(**app_kwargs):
    """The OpenAPI document of a node's app (it does not depend on the node's state)."""
    return create_app(Node(node_config("n1")), **app_kwargs).openapi()


API = schemathesis.openapi.from_dict(document()).exclude(method="POST", path="/v1/leave")
LEAVE_API = schemathesis.openapi.from_dict(document(admin_token=TOKEN)).include(path="/v1/leave")


def _map_leaves(value, leaf):
    if isinstance(value, dict):
        return {k: _map_leaves(v, leaf) for k, v in value.items()}
    if isinstance(value, list):
        return [_map_leaves(v, leaf) for v in value]
    return leaf(value)


@schemathesis.deserializer(MSGPACK)
def _from_msgpack(ctx, response):
    # msgpack bin has no JSON Schema type; the schema calls it a string (format: binary).
    return _map_leaves(msgpack.unpackb(response.content, raw=False),
                       lambda v: v.decode("latin-1") if isinstance(v, bytes) else v)


def _to_msgpack(ctx, value):
    # Integers past 64 bits (invalid data the fuzzer makes) have no msgpack form: sent as floats.
    def packable(v):
        return float(v) if isinstance(v, int) and not -2**63 <= v < 2**64 else v

    return msgpack.packb(_map_leaves(value, packable), use_bin_type=True)


schemathesis.serializer(MSGPACK)(_to_msgpack)


# ----- live nodes ----------------------------------------------------------------------------
@contextlib.contextmanager
def live_cluster(size, **app_kwargs):
    """``size`` nodes on loopback gossip, the first one's HTTP API on a loopback port: its URL.

    The listening socket is bound before the thread starts, so a request sent early waits in
    the accept queue instead of failing."""
    sock = socket.create_server(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    up = threading.Event()
    stop = threading.Event()
    failure = []

    # (Two of these run at once: each keeps its members files and witness records apart.)
    home = tempfile.mkdtemp(prefix="placement-live-")

    async def main():
        async with contextlib.AsyncExitStack() as stack:
            # (A new cluster: each n1 would otherwise rejoin the other's members.)
            first = await stack.enter_async_context(Node(node_config("n1", new_cluster=True, state_home=home)))
            for i in range(2, size + 1):
                await stack.enter_async_context(Node(node_config(f"n{i}", join=[first.member.bound],
                                                                 state_home=home)))
            await eventually(lambda: len(first.table.members) == size, what="a full view")
            server = uvicorn.Server(uvicorn.Config(create_app(first, **app_kwargs), log_level="warning",
                                                   lifespan="off"))
            serving = asyncio.create_task(server.serve(sockets=[sock]))
            up.set()
            await asyncio.to_thread(stop.wait)
            server.should_exit = True
            await serving

    def run():
        try:
            asyncio.run(main())
        except BaseException as exc:  # reported to the test instead of dying with the thread
            failure.append(exc)
            up.set()

    thread = threading.Thread(target=run, name="live-node", daemon=True)
    thread.start()
    try:
        if not up.wait(30):
            raise AssertionError("the live node did not start within 30 s")
        if failure:
            raise failure[0]
        yield url
    finally:
        stop.set()
        thread.join(30)
    if failure:  # the node or its server failed while the tests ran
        raise failure[0]


@pytest.fixture(scope="module")
def node_url():
    with live_cluster(2) as url:
        yield url


@pytest.fixture(scope="module")
def leaving_url():
    with live_cluster(1, admin_token=TOKEN) as url:
        yield url


# ----- the document ------------------------------------------------------------------------
def test_documents_are_valid_openapi_3_1():
    for doc in (document(), document(admin_token=TOKEN)):
        assert doc["openapi"].startswith("3.1.")
        validate(doc)  # openapi-spec-validator: the 3.1 meta-schema and its JSON Schema dialect


def test_every_error_is_a_problem_body_and_msgpack_is_described():
    doc = document(admin_token=TOKEN)
    for path, operations in doc["paths"].items():
        for method, op in operations.items():
            for status, response in op["responses"].items():
                if int(status) >= 400:
                    assert set(response["content"]) == {"application/problem+json"}, (method, path, status)
    for path in ("/v1/members", "/v1/placement", "/v1/owners", "/v1/route"):
        content = doc["paths"][path]["get" if path != "/v1/route" else "post"]["responses"]["200"]["content"]
        assert set(content) == {"application/json", MSGPACK}, path


def test_live_nodes_serve_the_documents_fuzzed(node_url, leaving_url):
    assert httpx.get(node_url + "/openapi.json").json() == API.raw_schema
    assert httpx.get(leaving_url + "/openapi.json").json() == LEAVE_API.raw_schema


def test_root_redirects_to_the_console_and_the_docs_stay(node_url):
    r = httpx.get(node_url + "/")
    assert r.status_code == 307 and r.headers["location"] == "/ui"
    assert "<canvas" in httpx.get(node_url + "/ui").text
    assert "swagger" in httpx.get(node_url + "/docs").text.lower()


# ----- fuzzing -----------------------------------------------------------------------------
def _call_and_validate(case, url):
    case.call_and_validate(base_url=url)
    content = case.operation.definition.raw["responses"].get("200", {}).get("content", {})
    if MSGPACK in content:
        case.call_and_validate(base_url=url, headers={"Accept": MSGPACK})


@API.parametrize()
@SETTINGS
def test_live_node_conforms(case, node_url):
    _call_and_validate(case, node_url)


@LEAVE_API.parametrize()
@SETTINGS
def test_leave_conforms(case, leaving_url):
    _call_and_validate(case, leaving_url)


def test_leave_with_the_token_conforms():
    case = LEAVE_API["/v1/leave"]["POST"].Case(headers={"Authorization": f"Bearer {TOKEN}"})
    with live_cluster(1, admin_token=TOKEN) as url:
        assert case.call_and_validate(base_url=url).status_code == 202


def test_links_between_operations(node_url):
    class Workflow(API.as_state_machine()):  # type: ignore[misc]  # a class schemathesis builds at run time
        def get_call_kwargs(self, case):
            return {"base_url": node_url}

        def before_call(self, case):
            # On a quiet cluster a long poll on the current etag lasts exactly `wait` (up to 60 s):
            # shorter waits exercise the same path.
            wait = (case.query or {}).get("wait")
            if isinstance(wait, (int, float)) and not isinstance(wait, bool) and wait > LONG_POLL_CAP_S:
                case.query["wait"] = LONG_POLL_CAP_S

    Workflow.run(settings=settings(SETTINGS, max_examples=30, stateful_step_count=4))
