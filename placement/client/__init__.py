"""Client-side routing: fetch a node's placement snapshot once, then route every key locally.

    with PlacementClient(["http://127.0.0.1:8001", "http://127.0.0.1:8002"]) as pc:
        pc.owner("order-42")            # member id: no HTTP call per key
        pc.owner_url("order-42")        # its base URL
        pc.route(keys)                  # {member: [keys]}
        pc.request("POST", "order-42", "/orders", json=...)   # to the leader; retried once on 421
        pc.request("GET", "order-42", "/orders/42", idempotent=True)  # any replica; fails over

A background thread (task, for ``AsyncPlacementClient``) long-polls ``GET /v1/placement
?after=<etag>&wait=<s>`` so the snapshot follows membership changes within one round trip.
Node URLs are tried in turn, so one dead node does not stop a client. A request that reaches
a node that does not own its key gets ``421 Misdirected Request`` (``placement.service.guard``): the
client refreshes its snapshot and retries once; so it does when a response carries a
placement checksum other than the one the request was routed with.

Idempotent requests (``idempotent=True``) are spread over the key's whole replica set, one
replica after the other (round robin, started at a different replica by every request), and
fail over to the next replica when one cannot be reached; the rest go to the leader alone, as
in laminarmq (reads load-balanced over replicas, writes to the leader). A non-idempotent
request that could not be delivered is not sent elsewhere: the caller cannot know whether the
leader acted on it.

Those decisions live once, with no I/O, in ``placement.client.core``; ``placement.client.sync``
(``httpx.Client``) and ``placement.client.aio`` (``httpx.AsyncClient``) only carry them out.
"""

from .aio import AsyncPlacementClient
from .core import CHECKSUM_HEADER, MSGPACK, OWNER_HEADER, NoNodeReachableError, NoReplicaReachableError
from .sync import PlacementClient

__all__ = [
    "CHECKSUM_HEADER",
    "MSGPACK",
    "OWNER_HEADER",
    "AsyncPlacementClient",
    "NoNodeReachableError",
    "NoReplicaReachableError",
    "PlacementClient",
]
