"""The delivery loop of spark_jobs.deliver against scripted HTTP answers (no Spark, no nodes)."""

import httpx

from placement.snapshot import PlacementSnapshot
from placement.table import PlacementTable
from spark_jobs.deliver import Deliverer, DeliveryOptions, Item

URLS = {m: f"http://{m}.test" for m in ("n1", "n2", "n3")}


def snapshot(members):
    return PlacementSnapshot(PlacementTable.build({m: 1.0 for m in members}, 64, 1, 0), {m: URLS[m] for m in members})


def test_a_retry_refresh_follows_the_majority_not_a_leaving_nodes_old_snapshot():
    """n3 is leaving: it answers 421 and still serves the old snapshot. A 503 (a handoff under
    way at n1) makes the deliverer refresh again; taking "the first snapshot that differs" took
    n3's old one back and sent items to n3 once more."""
    old, new = snapshot(["n1", "n2", "n3"]), snapshot(["n1", "n2"])
    posts: list[str] = []
    busy = {"n1": 1}

    def answer(request: httpx.Request) -> httpx.Response:
        host = request.url.host.split(".")[0]
        if request.method == "GET":
            snap = old if host == "n3" else new
            return httpx.Response(200, content=snap.to_msgpack())
        posts.append(host)
        if host == "n3":
            return httpx.Response(421)
        if busy.get(host):
            busy[host] -= 1
            return httpx.Response(503, headers={"Retry-After": "0"})
        return httpx.Response(200)

    http = httpx.Client(transport=httpx.MockTransport(answer))
    # n3 first among the URLs: the order that made the old rule pick its snapshot.
    d = Deliverer(old, [URLS["n3"], URLS["n1"], URLS["n2"]], "job", DeliveryOptions(batch_size=10), http=http,
                  sleep=lambda s: None)
    keys = [f"k{i}" for i in range(200)]
    planned = {k: old.table.lookup(k)[0] for k in keys}
    for i, k in enumerate(keys):
        d.add(Item(i, k, {}), planned[k])
    d.flush()
    statuses = {row[3] for row in d.stats.outcomes}
    assert len(d.stats.outcomes) == 200 and statuses == {"delivered"}
    assert d.snapshot.checksum == new.checksum
    assert posts.count("n3") == 1  # one 421, then never again
    assert d.stats.rerouted == sum(1 for k in keys if planned[k] == "n3")
