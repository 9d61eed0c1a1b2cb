"""Delivering routed items to their owners over HTTP (runs inside Spark tasks; no Spark imports).

Theory of operation. A ``Deliverer`` holds the placement snapshot it routes with, buffers items
per owner and POSTs a batch when an owner's buffer is full (``flush`` sends the rest). Each item
ends in exactly one outcome row: ``delivered`` (a 200 took it) or ``failed`` (with the reason).

* 200: delivered. A different ``X-Placement-Checksum`` on the answer means our snapshot is
  outdated: refresh it for the next batches (the receiver checked ownership, so these are done).
* 421: the receiver took none of the batch (see ``placement.service.work_sink``): refresh the snapshot
  (from any node but the one that refused) and re-route every item of the batch.
* connection error, timeout, 429 or 5xx: retry with exponential backoff; before each retry
  refresh the snapshot and re-route if the owner changed (a node that died or left is no longer
  in the placement once the cluster noticed). After ``max_attempts`` the items fail.
* any other status: the items fail (the receiver rejected them; retrying would not help).

An item re-routed more than ``max_reroutes`` times fails, so a cluster that never converges
cannot keep a task busy forever. Receivers deduplicate on ``(job, id)``, which makes resending
after a lost response (or a Spark task retry) safe.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from placement.client import CHECKSUM_HEADER, MSGPACK
from placement.errors import SnapshotError
from placement.snapshot import PlacementSnapshot

WORK_PATH = "/v1/work"
DELIVERED, FAILED = "delivered", "failed"
_RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})
_REFRESH_SOURCES = 5  # snapshots compared on a refresh


@dataclass
class Item:
    id: int
    key: str
    data: dict[str, Any]
    attempts: int = 0  # POSTs that carried this item
    reroutes: int = 0


@dataclass(frozen=True)
class DeliveryOptions:
    batch_size: int = 500
    #: 12: about 17 s of backoff, longer than failure detection plus a takeover (5-8 s measured
    #: after a kill -9, docs/spark.md), so one crashed owner does not fail items by default.
    max_attempts: int = 12
    max_reroutes: int = 5
    backoff_s: float = 0.1  # first retry delay; doubles each retry, capped at backoff_max_s
    backoff_max_s: float = 2.0
    timeout_s: float = 10.0


DEFAULT_OPTIONS = DeliveryOptions()


@dataclass
class DeliveryStats:
    batches: int = 0  # POSTs sent
    retries: int = 0  # POSTs repeated after an error
    rerouted: int = 0  # item re-routings (after a 421 or an owner change)
    refreshes: int = 0
    # (id, key, owner, status, attempts, reroutes, error); key and owner None: a null key (route.py).
    outcomes: list[tuple[int, str | None, str | None, str, int, int, str | None]] = field(default_factory=list)


class Deliverer:
    """Buffers items per owner and delivers them; ``outcomes`` rows: (id, key, owner, status,
    attempts, reroutes, error)."""

    def __init__(self, snapshot: PlacementSnapshot, urls: Sequence[str], job: str,
                 options: DeliveryOptions = DEFAULT_OPTIONS, http: httpx.Client | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.snapshot = snapshot
        self._planned = snapshot.checksum
        self.urls = [u.rstrip("/") for u in urls]
        self.job = job
        self.options = options
        self.stats = DeliveryStats()
        self._http = http or httpx.Client(timeout=options.timeout_s)
        self._sleep = sleep
        self._buffers: dict[str, list[Item]] = defaultdict(list)

    def close(self) -> None:
        self._http.close()

    # ----- routing -------------------------------------------------------------------------
    def _owner(self, key: str) -> str:
        owners = self.snapshot.table.lookup(key)
        return owners[0] if owners else ""

    def add(self, item: Item, planned: str | None = None) -> None:
        """Queue ``item`` for its owner and send full batches. ``planned`` is the owner computed
        at planning time; once this deliverer refreshed its snapshot, items follow the new one."""
        owner = self._owner(item.key) if planned is None or self.snapshot.checksum != self._planned else planned
        if planned is not None and owner != planned:
            item.reroutes += 1
            self.stats.rerouted += 1
        buf = self._buffers[owner]
        buf.append(item)
        if len(buf) >= self.options.batch_size:
            del self._buffers[owner]
            self._send(owner, buf)

    def flush(self) -> None:
        """Send every buffered item (re-routed items may refill buffers: loop until empty)."""
        while self._buffers:
            owner, items = next(iter(self._buffers.items()))
            del self._buffers[owner]
            for i in range(0, len(items), self.options.batch_size):
                self._send(owner, items[i:i + self.options.batch_size])

    def _reroute(self, items: list[Item]) -> None:
        for item in items:
            item.reroutes += 1
            self.stats.rerouted += 1
            if item.reroutes > self.options.max_reroutes:
                why = f"re-routed more than {self.options.max_reroutes} times"
                self._done(item, self._owner(item.key), FAILED, why)
            else:
                self.add(item)

    def _still_owned(self, owner: str, items: list[Item]) -> list[Item]:
        """Items ``owner`` still leads under the current snapshot; the others are re-routed."""
        keep: list[Item] = []
        moved: list[Item] = []
        for item in items:
            (keep if self._owner(item.key) == owner else moved).append(item)
        if moved:
            self._reroute(moved)
        return keep

    def _done(self, item: Item, owner: str, status: str, error: str | None = None) -> None:
        self.stats.outcomes.append((item.id, item.key, owner, status, item.attempts, item.reroutes, error))

    # ----- one batch ---------------------------------------------------------------------
    def _send(self, owner: str, items: list[Item]) -> None:
        retry_after = 0.0  # what the receiver asked for (503 Retry-After: a handoff under way)
        for attempt in range(self.options.max_attempts):
            if attempt:
                self.stats.retries += 1
                backoff = self.options.backoff_s * 2 ** (attempt - 1)
                self._sleep(min(max(backoff, retry_after), self.options.backoff_max_s))
                self._refresh(exclude="")
            items = self._still_owned(owner, items)
            if not items:
                return
            url = self.snapshot.address(owner)
            if not owner or not url:
                error = "no owner" if not owner else f"no HTTP address for owner {owner!r}"
                for item in items:
                    self._done(item, owner, FAILED, error)
                return
            checksum = self.snapshot.checksum
            body = {"job": self.job, "checksum": checksum,
                    "items": [{"id": it.id, "key": it.key, "data": it.data} for it in items]}
            for item in items:
                item.attempts += 1
            self.stats.batches += 1
            try:
                response = self._http.post(url + WORK_PATH, json=body, headers={CHECKSUM_HEADER: checksum})
            except httpx.TransportError as exc:
                error = f"{url}: {type(exc).__name__}: {exc}"
                continue
            if response.status_code == 200:
                for item in items:
                    self._done(item, owner, DELIVERED)
                if response.headers.get(CHECKSUM_HEADER, checksum) != checksum:
                    self._refresh(exclude="")
                return
            if response.status_code == 421:
                self._refresh(exclude=url)
                if self.snapshot.checksum == checksum:  # nobody has seen the change yet: give gossip time
                    self._sleep(min(self.options.backoff_s * 2 ** items[0].reroutes, self.options.backoff_max_s))
                return self._reroute(items)
            error = f"{url}: HTTP {response.status_code}: {response.text[:200]}"
            retry_after = _seconds(response.headers.get("Retry-After"))
            if response.status_code not in _RETRYABLE_STATUS:
                break
        for item in items:
            self._done(item, owner, FAILED, error)

    def _refresh(self, exclude: str) -> None:
        """Fetch a newer snapshot from the seed URLs or members, never from ``exclude``.

        A node that just answered 421 may be leaving and still serve its old snapshot, so it is
        skipped. The snapshot most of the first ``_REFRESH_SOURCES`` answers agree on wins; on a
        tie, one that differs from ours after a 421 (we were told we are stale), ours otherwise.
        "The first that differs" was not enough: on a retry (a 503 during a handoff) it could
        take a leaving node's old snapshot over the one everybody else had moved to, and send
        items back and forth.
        """
        stale = self.snapshot.checksum
        candidates = dict.fromkeys(self.urls + [a.rstrip("/") for a in self.snapshot.addresses.values() if a])
        votes: dict[str, int] = defaultdict(int)
        snaps: dict[str, PlacementSnapshot] = {}
        for url in candidates:
            if url == exclude:
                continue
            try:
                r = self._http.get(url + "/v1/placement", headers={"Accept": MSGPACK}, timeout=2.0)
                r.raise_for_status()
                snap = PlacementSnapshot.from_msgpack(r.content)
            except (httpx.HTTPError, SnapshotError):  # unreachable or broken node: try the next
                continue
            snaps.setdefault(snap.checksum, snap)
            votes[snap.checksum] += 1
            if sum(votes.values()) >= _REFRESH_SOURCES:
                break
        if votes:
            told_stale = bool(exclude)
            best = max(votes, key=lambda ck: (votes[ck], (ck != stale) == told_stale))
            self.stats.refreshes += 1
            self.snapshot = snaps[best]


def _seconds(header: str | None) -> float:
    """A ``Retry-After`` given in seconds (RFC 9110 10.2.3); 0 when absent or an HTTP date."""
    try:
        value = float(header) if header else 0.0
    except ValueError:
        return 0.0
    return value if 0 <= value < 3600 else 0.0
