"""Watch a running cluster from outside: members and ownership of every node, many times a second.

Sampling cannot prove exclusivity (two owners between two samples go unseen); it can only catch
overlaps it happens to see. Asking every node in one round is not atomic either: a legitimate
handoff from A to B between A's answer and B's would look like two owners. So a round asks
every node *twice*, one after the other (A B C D E A B C D E), and an overlap counts only when
it is proven by the order of the answers (``overlaps``): X held partition p under the same
fencing epoch in two answers, and another node said it owned p in an answer given strictly
between them. The same epoch means the same grant (a member's epochs rise with every
acquisition, ``ownership.core``), so X held p throughout, while the other did too.
``loose_overlaps`` counts what a single pass would have flagged, for the report only.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import httpx


class WaitTimeout(AssertionError):
    """A condition was not seen within its deadline."""


@dataclass(frozen=True)
class Reply:
    """One node's ``GET /v1/ownership`` answer: partition -> fencing epoch of what it owns."""

    node: str
    sent: float
    received: float
    owned: dict[int, int | None]
    paused: str | None
    waiting: int = 0  # partitions it leads but waits to receive


def overlaps(replies: Sequence[Reply | None]) -> list[tuple[int, str, str]]:
    """``(partition, holder, other)`` for every overlap proven by the order of ``replies``
    (made one after the other, in list order; None = no answer)."""
    found = []
    for i, first in enumerate(replies):
        if first is None:
            continue
        later = next((j for j in range(i + 1, len(replies))
                      if (r := replies[j]) is not None and r.node == first.node), None)
        if later is None:
            continue
        second = replies[later]
        assert second is not None  # found just above
        held = {p for p, e in first.owned.items() if e is not None and second.owned.get(p) == e}
        for between in replies[i + 1:later]:
            if between is not None and between.node != first.node:
                found += [(p, first.node, between.node) for p in sorted(held & between.owned.keys())]
    return found


def loose_overlaps(replies: Sequence[Reply | None]) -> int:
    """Partitions owned by two nodes in one pass (not proof: see the module docstring)."""
    seen: dict[int, str] = {}
    count = 0
    for r in replies:
        if r is None:
            continue
        for p in r.owned:
            if seen.setdefault(p, r.node) != r.node:
                count += 1
    return count


@dataclass
class Round:
    start: float
    end: float
    first: list[Reply | None]  # pass 1, in node order
    second: list[Reply | None]  # pass 2
    views: dict[str, dict[str, str] | None]  # node -> member id -> status (None: no answer)
    proven: list[tuple[int, str, str]] = field(default_factory=list)
    loose: int = 0

    def owners(self) -> dict[str, set[int]]:
        return {r.node: set(r.owned) for r in self.second if r is not None}

    def sees(self, observers: Sequence[str], statuses: dict[str, str]) -> bool:
        """Every observer answered and its view has exactly these members with these statuses
        (members not named must be absent or dead/left)."""
        for o in observers:
            view = self.views.get(o)
            if view is None:
                return False
            if any(view.get(m) != s for m, s in statuses.items()):
                return False
            if any(s not in ("dead", "left") for m, s in view.items() if m not in statuses):
                return False
        return True

    def owns_exactly(self, expected: Mapping[str, set[int]]) -> bool:
        """Every node named answered and owns exactly its set (in both passes)."""
        for name, _parts in expected.items():
            if not any(r is not None and r.node == name for r in self.second):
                return False
        return all(r is None or r.node not in expected or set(r.owned) == expected[r.node]
                   for r in self.first + self.second)

    def dead_anywhere(self) -> set[tuple[str, str]]:
        """(observer, member) for every member some node's view has as dead."""
        return {(o, m) for o, v in self.views.items() if v for m, s in v.items() if s == "dead"}


class Sampler(threading.Thread):
    """Polls ``urls`` (node name -> base URL) in rounds until ``stop()``; ``setup`` runs first in
    the thread (e.g. entering a network namespace)."""

    def __init__(self, urls: dict[str, str], setup: Callable[[], None] = lambda: None,
                 timeout_s: float = 1.0, pause_s: float = 0.1) -> None:
        super().__init__(name="ownership-sampler", daemon=True)
        self.urls, self._setup, self._timeout, self._pause = urls, setup, timeout_s, pause_s
        self.rounds: list[Round] = []
        self.error: BaseException | None = None
        self._stop_event = threading.Event()
        self._cond = threading.Condition()

    def run(self) -> None:
        try:
            self._setup()
            with httpx.Client(timeout=self._timeout) as client:
                while not self._stop_event.is_set():
                    r = self._round(client)
                    with self._cond:
                        self.rounds.append(r)
                        self._cond.notify_all()
                    self._stop_event.wait(self._pause)
        except BaseException as exc:  # reported by wait_for/check in the test thread
            self.error = exc
            with self._cond:
                self._cond.notify_all()

    def _ask(self, client: httpx.Client, name: str) -> Reply | None:
        sent = time.monotonic()
        try:
            body = client.get(f"{self.urls[name]}/v1/ownership").json()
        except (httpx.HTTPError, ValueError):
            return None
        epochs = body.get("epochs", {})
        return Reply(name, sent, time.monotonic(), {p: epochs.get(str(p)) for p in body["owned"]}, body["paused"],
                     body.get("waiting", 0))

    def _view(self, client: httpx.Client, name: str) -> dict[str, str] | None:
        try:
            return {m["id"]: m["status"] for m in client.get(f"{self.urls[name]}/v1/members").json()}
        except (httpx.HTTPError, ValueError):
            return None

    def _round(self, client: httpx.Client) -> Round:
        start = time.monotonic()
        first = [self._ask(client, n) for n in self.urls]
        second = [self._ask(client, n) for n in self.urls]
        views = {n: self._view(client, n) for n in self.urls}
        return Round(start, time.monotonic(), first, second, views, overlaps(first + second),
                     loose_overlaps(first))

    def stop(self) -> None:
        self._stop_event.set()
        if self.ident is not None:  # started
            self.join(10)

    def wait_for(self, predicate: Callable[[Round], bool], since: float, timeout_s: float, what: str) -> Round:
        """The first round started at or after ``since`` that satisfies ``predicate``."""
        deadline = time.monotonic() + timeout_s
        checked = 0
        with self._cond:
            while True:
                if self.error is not None:
                    raise AssertionError(f"sampler failed: {self.error!r}")
                for r in self.rounds[checked:]:
                    if r.start >= since and predicate(r):
                        return r
                checked = len(self.rounds)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise WaitTimeout(f"timed out after {timeout_s} s waiting for {what}")
                self._cond.wait(min(left, 0.5))

    def between(self, t0: float, t1: float) -> list[Round]:
        with self._cond:
            return [r for r in self.rounds if r.start >= t0 and r.end <= t1]
