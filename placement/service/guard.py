"""Answer ``421 Misdirected Request`` when a request reaches a node that does not own its key.

Applications that embed a ``Node`` in their FastAPI app add the dependency::

    app = FastAPI()
    owned = require_ownership(node)                  # the key comes from path or query "key"

    @app.post("/orders/{key}")
    async def create(key: str = Depends(owned)): ...

A request for a key whose partition this node leads but does not hold yet (exclusive mode: the
handoff is under way, or ownership is paused) waits for it up to ``HANDOFF_WAIT_S`` and is
served as soon as it arrives; after that it gets ``503`` with ``Retry-After``: nobody may serve
it now, and it will be this node's shortly. (Issue 30: clients route to a node that joins as
soon as they hear of it, a second or two before the handoff to it ends; with a 503 at once and
``Retry-After: 1``, requests of a rolling restart waited 2-3 s, in whole seconds.)

A misdirected request gets a 421 problem body naming the current owner, with its address in
``Location`` and the headers the client library reads (``X-Placement-Owner``,
``X-Placement-Checksum``): the client refreshes its snapshot and retries once. This is how
routing stays correct while membership changes, without a lease store. ``create_app``'s
problem handler renders it; a plain FastAPI app renders it with its default handler.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

from fastapi import Request
from starlette.exceptions import HTTPException

from ..client import CHECKSUM_HEADER, OWNER_HEADER
from ..snapshot import PlacementSnapshot
from ..table import PlacementTable
from .key_rules import key_error

#: How long a request waits for a partition this node leads but does not hold yet (a handoff
#: to it under way) before the 503.
HANDOFF_WAIT_S = 2.0
#: How often it looks while it waits.
HANDOFF_POLL_S = 0.02



class OwnerNode(Protocol):
    """What the guard reads from a node (``placement.service.node.Node`` provides it: mypy
    checks that in ``node.py``). ``paused`` and ``leaving`` are read when present, only to say
    why a 503 is answered."""

    @property
    def node_id(self) -> str: ...
    @property
    def table(self) -> PlacementTable: ...
    @property
    def snapshot(self) -> PlacementSnapshot: ...
    def owns(self, key: str | bytes) -> bool: ...


class Misdirected(HTTPException):
    """Raised by ``require_ownership``; rendered as a 421 problem response."""

    def __init__(self, owner: str, owner_url: str, checksum: str, path: str) -> None:
        headers = {OWNER_HEADER: owner, CHECKSUM_HEADER: checksum}
        if owner_url:
            headers["Location"] = owner_url + path
        super().__init__(421, f"this node does not own the key; its owner is {owner!r} at {owner_url or 'unknown'}",
                         headers)


class NotYetOwned(HTTPException):
    """503 + ``Retry-After``: this node leads the key's partition but does not hold it (yet): in
    exclusive mode it is still being handed over, or ownership is paused (no quorum lease), or
    the node is leaving. Nobody else may take the request either, so the client waits.
    It is answered once the request already waited ``HANDOFF_WAIT_S`` for it here (``hold``), so
    it may come back at once (``Retry-After: 0``: it waits here again, a leaving node too, until
    its placement names the next owner)."""

    def __init__(self, node: OwnerNode, key: str | bytes) -> None:
        paused = getattr(node, "paused", None)
        why = (f"ownership is paused: {paused}" if paused else "this node is leaving" if getattr(node, "leaving", False)
               else f"partition {node.table.partition_of(key)} is being handed over to this node")
        super().__init__(503, f"this node leads the key but does not hold it yet ({why}); retry shortly",
                         {"Retry-After": "0"})


async def held(node: OwnerNode, key: str | bytes, timeout_s: float = HANDOFF_WAIT_S) -> bool:
    """Whether ``node`` holds ``key`` (``owns``), waiting up to ``timeout_s`` while it leads the
    key in its table and does not hold it (yet): a handoff to it under way, or, on a node that
    is leaving, its own handoff away, until its table names the next owner (the caller then
    answers 421 with it: issue 30, requests to a leaving node waited a whole ``Retry-After``
    second, where the placement moved within a fraction of it)."""
    deadline = time.monotonic() + timeout_s
    while not node.owns(key):
        if time.monotonic() >= deadline or node.table.lookup(key)[0] != node.node_id:
            return False
        await asyncio.sleep(HANDOFF_POLL_S)
    return True


async def hold(node: OwnerNode, key: str | bytes, path: str) -> None:
    """Return once ``node`` holds ``key`` (waiting as ``held`` does), else raise ``Misdirected``
    naming the owner its placement gives (it may have moved while the request waited) or
    ``NotYetOwned`` (it still leads the key and did not get it in time)."""
    owner = node.table.lookup(key)[0]
    if owner == node.node_id and await held(node, key):
        return
    owner = node.table.lookup(key)[0]
    if owner != node.node_id:
        raise Misdirected(owner, node.snapshot.address(owner), node.table.checksum, path)
    raise NotYetOwned(node, key)


def require_ownership(node: OwnerNode, param: str = "key") -> Callable[[Request], Awaitable[str]]:
    """A FastAPI dependency returning the request's key if ``node`` leads its partition.

    The key is read from the path parameter or query parameter named ``param``.
    """

    async def dependency(request: Request) -> str:
        key = request.path_params.get(param, request.query_params.get(param))
        if key is None:
            raise HTTPException(400, f"missing key parameter {param!r}")
        if (why := key_error(key)) is not None:
            raise HTTPException(422, f"{param}: {why}")
        await hold(node, key, request.url.path)
        return key

    return dependency
