"""The node's log lines about other members: one per join, suspicion, death, refutation and
leave, saying who and why (issue 31 item 4: a member killed abruptly used to appear in no other
node's log), rate-limited so that a split of a large cluster does not flood the log.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from membership import MemberEvent

__all__ = ["MembershipLog"]

#: ``placement node`` shows its INFO lines too.
_membership_log = logging.getLogger("placement.membership")


class MembershipLog:
    """``_membership_log`` lines, at most ``burst`` at once and ``per_s`` a second after that
    (a token bucket): a split of a large cluster changes hundreds of members in a second. What
    is dropped is counted and said in the next line that is written; ``GET /v1/events`` holds
    every change."""

    def __init__(self, observer: str, burst: int = 20, per_s: float = 2.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.observer = observer
        self.burst, self.per_s, self._clock = burst, per_s, clock
        self._tokens = float(burst)
        self._at = clock()
        self.dropped = 0

    def write(self, level: int, text: str) -> bool:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.per_s)
        self._at = now
        if self._tokens < 1:
            self.dropped += 1
            return False
        self._tokens -= 1
        if self.dropped:
            text += f" ({self.dropped} membership changes not logged before this: too many at once; see GET /v1/events)"
            self.dropped = 0
        _membership_log.log(level, "%s", text)
        return True

    def event(self, event: MemberEvent) -> None:
        """The line for one change of another member (``updated`` has none: metadata)."""
        m, by, me = event.member, event.by, self.observer
        where = f"{m.addr[0]}:{m.addr[1]}"
        heard = ("never heard from directly" if m.heard_at is None
                 else f"last heard {max(0.0, time.monotonic() - m.heard_at):.1f} s ago")
        if event.kind == "joined":
            self.write(logging.INFO, f"member {m.node_id} joined: gossip {where}, http {m.meta.http or '-'}, "
                                     f"weight {m.meta.weight:g}, incarnation {m.incarnation}")
        elif event.kind == "suspect":
            why = ("it did not answer this node's probes, direct or through other members" if by in ("", me)
                   else f"{by} suspects it (its probes went unanswered)")
            self.write(logging.WARNING, f"member {m.node_id} at {where} is suspect: {why}; {heard}; it is declared "
                                        "dead unless it refutes in time")
        elif event.kind == "alive":
            self.write(logging.INFO, f"member {m.node_id} at {where} refuted the suspicion: alive at incarnation "
                                     f"{m.incarnation}")
        elif event.kind == "dead":
            why = ("its suspicion ran out here without a refutation" if by in ("", me)
                   else f"declared dead by {by} (its suspicion ran out there without a refutation)")
            self.write(logging.WARNING, f"member {m.node_id} at {where} is dead: {why}; {heard}")
        elif event.kind == "left":
            self.write(logging.INFO, f"member {m.node_id} at {where} left: it announced its leave")
