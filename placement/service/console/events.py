"""What happened on this node, as a bounded log of numbered events (pure: no clock, no asyncio).

The console's timeline and ``placement status`` read it through ``GET /v1/events``; the node
appends membership changes, placement changes and its own ownership changes as they happen.

Why a numbered ring and not a queue per reader: a reader (a browser tab, a script) says which
event it saw last (``after``, or the ``Last-Event-ID`` header an EventSource sends when it
reconnects, WHATWG HTML 9.2) and gets what followed, so a reconnect loses nothing that is still
in the ring and a slow or vanished reader costs the node nothing. A reader that fell behind by
more than the ring holds learns it from ``first_seq`` and refetches state instead of replaying.

Ownership changes come in bursts (in exclusive mode one grant at a time: a node that starts
alone acquires every partition within a second). A burst becomes one event, renumbered as it
grows, so it cannot push the membership history out of the ring.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass

from membership.status import EVENT_KINDS

#: Membership kinds (``membership.MemberEvent.kind``) plus the node's own.
MEMBER_KINDS = frozenset(EVENT_KINDS)
NODE_KINDS = frozenset({"placement", "ownership", "declared-dead", "refused", "id-conflict", "survival",
                        "leaving"})


@dataclass(frozen=True)
class ConsoleEvent:
    seq: int  # 1, 2, ...: the position in this node's log
    at: float  # wall-clock seconds since the epoch (for display; ordering is by seq)
    kind: str  # one of MEMBER_KINDS | NODE_KINDS
    member: str  # the member it is about ("" for none)
    detail: str  # one line for a human

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


class EventLog:
    """The last ``capacity`` events; ``listeners`` are called (synchronously) after each append
    and once on ``close`` - the HTTP layer uses them to wake its streams."""

    def __init__(self, capacity: int = 1000) -> None:
        if capacity < 1:
            raise ValueError("an event log holds at least one event")
        self._ring: deque[ConsoleEvent] = deque(maxlen=capacity)
        self._seq = 0
        self.closed = False
        self._burst: tuple[float, int, int] | None = None  # (first at, acquired, released)
        self.listeners: list[Callable[[], None]] = []

    @property
    def last_seq(self) -> int:
        return self._seq

    @property
    def first_seq(self) -> int:
        """The oldest event still held (``last_seq + 1`` while empty)."""
        return self._ring[0].seq if self._ring else self._seq + 1

    def append(self, kind: str, member: str, detail: str, now: float) -> ConsoleEvent:
        if kind not in MEMBER_KINDS | NODE_KINDS:
            raise ValueError(f"unknown event kind {kind!r}")
        self._seq += 1
        event = ConsoleEvent(self._seq, now, kind, member, detail)
        self._ring.append(event)
        self._notify()
        return event

    def ownership(self, member: str, acquired: int, released: int, now: float, burst_s: float = 1.0) -> ConsoleEvent:
        """``member`` acquired and released this many partitions (counts only: the node calls this
        once per partition in exclusive mode, so it must not cost O(partitions)). Within
        ``burst_s`` of the burst's first change, the burst's event is replaced by one with the
        totals and the next number (readers that saw the old number see the new one)."""
        first_at = now
        last = self._ring[-1] if self._ring else None
        if last is not None and last.kind == "ownership" and last.member == member and self._burst is not None:
            b_at, b_acq, b_rel = self._burst
            if now - b_at <= burst_s:
                self._ring.pop()
                first_at, acquired, released = b_at, b_acq + acquired, b_rel + released
        self._burst = (first_at, acquired, released)
        return self.append("ownership", member, f"+{acquired} -{released} partitions", now)

    def after(self, seq: int, limit: int | None = None) -> list[ConsoleEvent]:
        """Events with a number above ``seq``, oldest first (at most ``limit``, the newest)."""
        events = [e for e in self._ring if e.seq > seq]
        return events[-limit:] if limit else events

    def close(self) -> None:
        """The node stopped: streams end (a browser reconnects to whichever node answers)."""
        self.closed = True
        self._notify()

    def _notify(self) -> None:
        for listener in list(self.listeners):
            listener()
