"""Client-side routing: fetch a node's placement snapshot once, then route every key locally.

    with PlacementClient(["http://127.0.0.1:8001", "http://127.0.0.1:8002"]) as pc:
        pc.owner("order-42")            # member id: no HTTP call per key
        pc.owner_url("order-42")        # its base URL
        pc.route(keys)                  # {member: [keys]}
        pc.request("POST", "order-42", "/orders", json=...)   # to the leader; re-routed on 421, waits out 503
        pc.request("GET", "order-42", "/orders/42", idempotent=True)  # any replica; fails over

A background thread (task, for ``AsyncPlacementClient``) long-polls ``GET /v1/placement
?after=<etag>&wait=<s>`` so the snapshot follows membership changes within one round trip.
Node URLs are tried in turn, so one dead node does not stop a client. A request that reaches
a node that does not own its key gets ``421 Misdirected Request`` (``placement.service.guard``): the
client refreshes its snapshot and retries on the new owner; a ``503`` with ``Retry-After`` (a
handoff, a node leaving) is waited out and retried; a request that found no connection is
re-routed after a refresh; all bounded by a total deadline (``RetryPolicy``, 15 s by default:
a crashed owner's detection and takeover). A response with a placement checksum other than
the one the request was routed with refreshes the snapshot for the next requests. The long-poll
moves to another node when its node leaves (it answers ``503``) or cannot be reached.

Idempotent requests (``idempotent=True``) are spread over the key's whole replica set, one
replica after the other (round robin, started at a different replica by every request), and
fail over to the next replica when one cannot be reached; the rest go to the leader alone, as
in laminarmq (reads load-balanced over replicas, writes to the leader). A non-idempotent
request whose connection failed after it was sent is not sent again: the caller cannot know
whether the leader acted on it (``OutcomeUnknownError``); one that found no connection is.
``spread=False`` sends an idempotent request to the leader alone (an endpoint that only the
owner serves, such as a ``require_ownership`` route), with the retries of an idempotent one.

Those decisions live once, with no I/O, in ``placement.client.core``; ``placement.client.sync``
(``httpx.Client``) and ``placement.client.aio`` (``httpx.AsyncClient``) only carry them out.
"""

from .aio import AsyncPlacementClient
from .core import (
    CHECKSUM_HEADER,
    MSGPACK,
    OWNER_HEADER,
    NoNodeReachableError,
    NoReplicaReachableError,
    OutcomeUnknownError,
    RetryPolicy,
)
from .sync import PlacementClient

__all__ = [
    "CHECKSUM_HEADER",
    "MSGPACK",
    "OWNER_HEADER",
    "AsyncPlacementClient",
    "NoNodeReachableError",
    "NoReplicaReachableError",
    "OutcomeUnknownError",
    "PlacementClient",
    "RetryPolicy",
]
