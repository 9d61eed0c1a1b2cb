"""Bad input thrown at a healthy cluster (issue 16, "Measure"): for each bad joiner setting,
flag, variable and file, malformed gossip datagram, bad HTTP request and bad admin request, the
exit status or HTTP status and the message, and that the healthy members kept their membership,
readiness, placement checksum and the partitions they own.

One healthy cluster of three `placement node` processes (gossip encrypted with one key, 64
partitions) serves every row, in order; each row ends by comparing every member with what it was
before the first. The members differ where a row needs it: ``a`` listens for HTTP on every
interface (so a request can come from a non-loopback address of this host), ``b`` has an admin
token, ``c`` is the one a duplicate id copies (the last rows: its twin makes it unready for
90 s by design).
"""

from __future__ import annotations

import random
import re
import socket
from pathlib import Path

import httpx
import pytest

from test_cluster_processes import poll
from test_node_lifecycle import NodeProcess

pytestmark = pytest.mark.slow

P = 64
TOKEN = "s3cret"


def local_address() -> str | None:
    """A non-loopback IPv4 address of this host (the UDP socket sends nothing), or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # TEST-NET-1: only picks the source address a route would use
        except OSError:
            return None
        address = s.getsockname()[0]
    return None if address.startswith("127.") else address


class Cluster:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.key, self.other_key, self.bad_key = tmp / "key", tmp / "other-key", tmp / "bad-key"
        self.key.write_text("00" * 16 + "\n")
        self.other_key.write_text("11" * 16 + "\n")
        self.bad_key.write_text("not a key\n")
        common = ("--partitions", str(P), "--key-file", str(self.key))
        self.a = NodeProcess(tmp, "a", *common, http_host="0.0.0.0")
        poll(self.a.ready, 30, "a ready")
        self.b = NodeProcess(tmp, "b", *common, "--join", self.a.seed, "--admin-token", TOKEN)
        self.c = NodeProcess(tmp, "c", *common, "--join", self.a.seed)
        self.members = (self.a, self.b, self.c)
        self.joiners: list[NodeProcess] = []
        poll(self.settled, 60, "three members ready, agreeing, every partition owned")
        self.before = self.state()

    def settled(self) -> bool:
        states = [self.member_state(m) for m in self.members]
        # At rest: one stable view everywhere, nothing waiting or draining, each member owning its
        # share. (Under load a member once owned nothing for a moment, removed from the stable
        # view by a false death and re-added, while the other two owned every partition: the
        # later state then differed from this one for reasons no bad input caused.)
        rest = [m.get("/v1/ownership").json() for m in self.members]
        return (all(ready == 200 for _, ready, _, _ in states) and len({s[2] for s in states}) == 1
                and sum(len(owned) for *_, owned in states) == P and all(owned for *_, owned in states)
                and len({o["stable_view"] for o in rest}) == 1
                and not any(o["waiting"] or o["releasing"] for o in rest)
                and all(len(view) == 3 and {s for _, s, *_ in view} == {"alive"} for view, *_ in states))

    @staticmethod
    def member_state(node: NodeProcess) -> tuple:
        view = sorted((m["id"], m["status"], m["gossip"], m["http"], m["weight"])
                      for m in node.get("/v1/members").json())
        return (view, node.get("/readyz").status_code, node.get("/v1/checksum").json()["checksum"],
                node.get("/v1/ownership").json()["owned"])

    def state(self, members: tuple[NodeProcess, ...] | None = None) -> list[tuple]:
        return [self.member_state(m) for m in members or self.members]

    def assert_unchanged(self, members: tuple[NodeProcess, ...] | None = None) -> None:
        members = members or self.members
        assert all(m.proc.poll() is None for m in members), [m.output() for m in members if m.proc.poll() is not None]
        before = [s for m, s in zip(self.members, self.before) if m in members]
        assert self.state(members) == before

    def joiner(self, name: str, *flags: str, env: dict[str, str] | None = None,
               node_id: str | None = None) -> NodeProcess:
        self.joiners.append(NodeProcess(self.tmp, node_id or name, "--partitions", str(P), "--join", self.a.seed,
                                        *flags, name=name, env=env))
        return self.joiners[-1]

    def metric(self, node: NodeProcess, name: str) -> float:
        """The sum of a metric's samples (over its labels)."""
        text = node.get("/metrics").text
        return sum(float(v) for v in re.findall(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M))

    def close(self) -> None:
        for n in (*self.joiners, *self.members):
            n.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("healthy"))
    try:
        yield c
    finally:
        c.close()


# ----- joiners -----------------------------------------------------------------------------
K, OTHER, BAD = "KEY", "OTHER_KEY", "BAD_KEY"  # placeholders for the cluster's key files

BAD_JOINERS = {
    # name: (flags, environment, exit status, what its output says, what the seed logs)
    "partitions": (["--key-file", K, "--partitions", "128"], {}, 3,
                   ["refused this node", "'partitions=64,", "(this node: partitions=128,"], "refused a join from"),
    "replicas": (["--key-file", K, "--replicas", "2"], {}, 3,
                 ["refused this node", "replicas=1,", "(this node: partitions=64,replicas=2,"], "refused a join from"),
    "seed": (["--key-file", K, "--seed", "7"], {}, 3, ["refused this node", "seed=0,", "seed=7,"],
             "refused a join from"),
    "cluster": (["--key-file", K, "--cluster", "staging"], {}, 3,
                ["refused this node", "cluster name differs", "'placement'", "'staging'"], "refused a join from"),
    "other-key": (["--key-file", OTHER, "--join-timeout", "3"], {}, 5,
                  ["join attempt 1 to", "it cannot decrypt our datagrams (different gossip keys?)",
                   "within --join-timeout 3 s"], None),
    "no-key": ([], {}, 3, ["refused this node", "it encrypts gossip and we have no keys"], None),
    "bad-flag": (["--key-file", K, "--weight", "-1"], {}, 2, ["argument --weight", "'-1'"], None),
    "bad-variable": (["--key-file", K], {"PLACEMENT_REPLICAS": "two"}, 2,
                     ["environment variable PLACEMENT_REPLICAS", "'two'"], None),
    "bad-key-file": (["--key-file", BAD], {}, 2, ["--key-file ", "bad-key:1: a key must be hex or base64"], None),
    "busy-gossip-port": (["--key-file", K, "--gossip", "A_GOSSIP"], {}, 2,
                         ["cannot bind gossip UDP 127.0.0.1:", "(--gossip or PLACEMENT_GOSSIP)"], None),
    "busy-http-port": (["--key-file", K, "--http", "B_HTTP"], {}, 2,
                       ["cannot bind HTTP 127.0.0.1:", "(--http or PLACEMENT_HTTP)"], None),
}


@pytest.mark.parametrize("name", BAD_JOINERS)
def test_a_bad_joiner_exits_and_the_cluster_is_untouched(cluster, name):
    flags, env, status, says, seed_logs = BAD_JOINERS[name]
    values = {K: str(cluster.key), OTHER: str(cluster.other_key), BAD: str(cluster.bad_key),
              "A_GOSSIP": cluster.a.seed, "B_HTTP": f"127.0.0.1:{cluster.b.http}"}
    joiner = cluster.joiner(name, *[values.get(f, f) for f in flags], env=env)
    code, text = joiner.wait_exit(30), joiner.output()
    assert code == status and all(s in text for s in says) and "Traceback" not in text, (code, text)
    if status == 2:  # bad input of its own: one line, before it contacts anyone
        assert text.count("\n") == 1, text
    if seed_logs:
        poll(lambda: f"{seed_logs} {name!r}" in cluster.a.output(), 10, f"the seed's log of {name}")
    cluster.assert_unchanged()


# ----- gossip datagrams --------------------------------------------------------------------
def garbage(prefix: bytes, count: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    return [prefix + rng.randbytes(rng.randint(1, 1400)) for _ in range(count)]


MALFORMED = {
    # name: (datagrams, the metric that counts them)
    "random bytes": (garbage(b"", 50, 1), "placement_gossip_dropped_datagrams_total"),
    "gossip magic, then garbage": (garbage(b"SW", 50, 2), "placement_gossip_dropped_datagrams_total"),
    "gossip header (encrypted), then garbage": (garbage(b"SW\x01\x01", 50, 3),
                                                "placement_gossip_dropped_datagrams_total"),
    "handoff magic, then garbage": (garbage(b"\xc1P", 50, 4), "placement_handoff_dropped_datagrams_total"),
    "larger than any datagram we send": ([b"SW" + bytes(60_000)], "placement_gossip_dropped_datagrams_total"),
    "empty": ([b""], "placement_gossip_dropped_datagrams_total"),
}


@pytest.mark.parametrize("name", MALFORMED)
def test_malformed_datagrams_are_dropped_and_counted(cluster, name):
    datagrams, metric = MALFORMED[name]
    before = [cluster.metric(m, metric) for m in cluster.members]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for member in cluster.members:
            for d in datagrams:
                s.sendto(d, ("127.0.0.1", member.gossip))
    for member, count in zip(cluster.members, before):
        poll(lambda: cluster.metric(member, metric) == count + len(datagrams), 10,
             f"{len(datagrams)} more in {metric} of {member.url}")
    cluster.assert_unchanged()


# ----- HTTP --------------------------------------------------------------------------------
BAD_REQUESTS = [
    # (method, path, request arguments, status, what the problem's detail says)
    ("POST", "/v1/route", {"content": b'{"keys": ['}, 400, "could not decode the application/json body"),
    ("POST", "/v1/route", {"content": b"\xff\x00", "headers": {"content-type": "application/msgpack"}}, 400,
     "could not decode the application/msgpack body"),
    ("POST", "/v1/route", {"json": {"keys": "order-42"}}, 422, 'body must be {"keys": [string, ...]}'),
    ("POST", "/v1/route", {"json": {"keys": [1, 2]}}, 422, 'body must be {"keys": [string, ...]}'),
    ("POST", "/v1/route", {"content": b'{"keys": ["\\ud800"]}'}, 422, "keys must be valid Unicode text"),
    ("POST", "/v1/route", {"content": b"<keys/>", "headers": {"content-type": "application/xml"}}, 415,
     "send application/json or application/msgpack, not application/xml"),
    # Issue 31: what a cross-site page could send is refused before any route runs
    ("POST", "/v1/route", {"content": b"keys=a", "headers": {"content-type": "text/plain"}}, 403,
     "Content-Type text/plain refused: any web page can send it"),
    ("POST", "/v1/leave", {"content": b"x=1", "headers": {"content-type": "application/x-www-form-urlencoded",
                                                          "origin": "http://evil.example"}}, 403,
     "Origin 'http://evil.example' is not this node"),
    ("POST", "/v1/leave", {"headers": {"origin": "null"}}, 403, "cross-site request refused"),
    ("POST", "/v1/route", {"json": {"keys": ["a", ""]}}, 422, "keys[1]: a key must not be empty"),
    ("POST", "/v1/route", {"json": {"keys": ["k" * 5000]}}, 422, "keys[0]: a key is at most 4096 characters"),
    ("POST", "/v1/route", {"content": b"\xc1", "headers": {"content-type": "application/msgpack"}}, 400,
     "FormatError (not valid application/msgpack)"),
    ("POST", "/v1/route", {"content": b"x" * (33 << 20)}, 413, "larger than 33,554,432 bytes"),
    ("GET", "/v1/owners", {}, 422, "query.key: Field required"),
    ("GET", "/v1/owners", {"params": {"key": ""}}, 422, "query.key"),
    ("GET", "/v1/owners", {"params": {"key": "k", "replicas": "0"}}, 422, "query.replicas"),
    ("GET", "/v1/owners", {"params": {"key": "k", "replicas": "many"}}, 422, "query.replicas"),
    ("GET", "/v1/owners", {"params": {"key": "k", "replicas": "3"}}, 422, "less than or equal to 1"),
    ("GET", "/v1/placement", {"params": {"after": "x", "wait": "-1"}}, 422, "query.wait"),
    ("GET", "/v1/placement", {"params": {"after": "x" * 65}}, 422, "query.after"),
    ("GET", "/v1/events", {"params": {"after": "yesterday"}}, 422, "query.after"),
    ("GET", "/v1/nothing-here", {}, 404, "Not Found"),
    ("DELETE", "/v1/members", {}, 405, "Method Not Allowed"),
    ("GET", "/v1/route", {}, 405, "Method Not Allowed"),
    ("GET", "/v1/leave", {}, 405, "Method Not Allowed"),
]


@pytest.mark.parametrize("method, path, kwargs, status, detail", BAD_REQUESTS,
                         ids=[f"{r[0]} {r[1]} {r[3]}" for r in BAD_REQUESTS])
def test_a_bad_request_is_a_problem_and_the_cluster_is_untouched(cluster, method, path, kwargs, status, detail):
    for member in cluster.members:
        r = httpx.request(method, member.url + path, timeout=5, **kwargs)
        assert r.status_code == status and r.headers["content-type"] == "application/problem+json", (r, r.text)
        assert detail in r.json()["detail"], r.text
    cluster.assert_unchanged()


# ----- POST /v1/leave ----------------------------------------------------------------------
def test_leave_from_another_host_is_refused_without_a_token(cluster):
    """`a` has no admin token, so only loopback may make it leave. A request from this host's
    non-loopback address reaches its socket from that address, as one from another host would."""
    address = local_address()
    if address is None:
        pytest.skip("this host has no non-loopback IPv4 address to send from")
    r = httpx.post(f"http://{address}:{cluster.a.http}/v1/leave", timeout=5)
    assert r.status_code == 403 and "accepted only from loopback" in r.json()["detail"], r.text
    r = httpx.post(f"http://{address}:{cluster.a.http}/v1/leave", headers={"Authorization": f"Bearer {TOKEN}"},
                   timeout=5)  # a token a node does not have opens nothing
    assert r.status_code == 403, r.text
    cluster.assert_unchanged()


@pytest.mark.parametrize("authorization, status, detail", [
    (None, 401, "send Authorization: Bearer <admin token>"),
    ("Basic czNjcmV0", 401, "send Authorization: Bearer <admin token>"),
    ("Bearer wrong", 403, "wrong admin token"),
    ("Bearer", 401, "send Authorization: Bearer <admin token>"),
    (f"Bearer {TOKEN}x", 403, "wrong admin token"),
])
def test_leave_with_a_wrong_token_is_refused(cluster, authorization, status, detail):
    """`b` has an admin token: from loopback too, nothing but that token makes it leave."""
    headers = {"Authorization": authorization} if authorization is not None else {}
    r = httpx.post(cluster.b.url + "/v1/leave", headers=headers, timeout=5)
    assert r.status_code == status and detail in r.json()["detail"], r.text
    cluster.assert_unchanged()


# ----- a second process with an existing id (last: `c` stays unready for 90 s) --------------
def events_after(node: NodeProcess, seq: int) -> list[dict]:
    return node.get("/v1/events", after=seq).json()["events"]


@pytest.fixture(scope="module")
def twin(cluster):
    """A process started with `c`'s id: it joins, both processes report the conflict, then
    it is stopped (SIGTERM, as an operator would). What the others logged meanwhile is kept."""
    last = {m: m.get("/v1/events").json()["last_seq"] for m in cluster.members}
    # (Its own state, as on another host: on this one it could not share c's witness state.)
    twin = cluster.joiner("twin", "--key-file", str(cluster.key), "--state-dir", str(cluster.tmp / "twin-state"),
                          node_id="c")
    poll(lambda: all("uses node id 'c'" in n.output() for n in (cluster.c, twin)), 30,
         "the duplicate id reported by both processes")
    ready = twin.get("/readyz")
    twin.proc.terminate()
    code = twin.wait_exit(10)
    return {"ready": ready, "code": code, "output": twin.output(), "gossip": twin.gossip,
            "events": {m: events_after(m, seq) for m, seq in last.items()}}


def test_a_duplicate_id_is_reported_on_both_sides_and_the_cluster_recovers(cluster, twin):
    assert twin["ready"].status_code == 503 and "uses node id 'c'" in twin["ready"].json()["detail"]
    assert twin["code"] == 0 and "Traceback" not in twin["output"]
    assert "uses node id 'c'" in cluster.c.get("/readyz").json()["detail"]  # held 90 s: by design
    # Once the twin is gone, the others see `c` where it was, and `c` owns what it owned.
    poll(lambda: cluster.state((cluster.a, cluster.b)) == cluster.before[:2], 15, "a and b as before")
    poll(lambda: [cluster.member_state(cluster.c)[i] for i in (0, 2, 3)] == [cluster.before[2][i] for i in (0, 2, 3)],
         15, "c's view, checksum and partitions as before")


def test_a_duplicate_id_moves_nothing_while_it_runs(cluster, twin):
    # Members keep `c` at its own address (the twin's claim is a conflict, not a move), and `c`
    # keeps its partitions; the id-conflict report itself names the twin's address.
    moved = [e for events in twin["events"].values() for e in events
             if e["member"] == "c" and f":{twin['gossip']}" in e["detail"] and e["kind"] != "id-conflict"]
    dropped = [e for e in twin["events"][cluster.c]
               if e["kind"] == "ownership" and not e["detail"].endswith(" -0 partitions")]
    assert not moved and not dropped, (moved, dropped)
