"""Lifeguard suspicion timer: starts at a maximum and falls with independent confirmations.

Lifeguard (Dadgar et al., arXiv 1707.00788, section IV-B "Local Health Aware Suspicion")
and memberlist suspicion.go: with ``c`` independent confirmations out of ``k`` expected::

    timeout(c) = max(min, max - (max - min) * log(c + 1) / log(k + 1))

so a lone accuser (who may itself be the slow one) waits the long maximum, while a member
that several peers independently cannot reach is declared dead after the minimum.
Pure arithmetic on the ``now`` values passed in; no clock.
"""

from __future__ import annotations

import math

__all__ = ["Suspicion", "suspicion_timeout"]


def suspicion_timeout(confirmations: int, k: int, min_s: float, max_s: float) -> float:
    """The formula above; ``k == 0`` means the minimum applies at once."""
    if k < 1:
        return min_s
    frac = math.log(confirmations + 1) / math.log(k + 1)
    return max(min_s, max_s - (max_s - min_s) * frac)


class Suspicion:
    """The suspicion of one member at one incarnation, as held by the local view."""

    __slots__ = (
        "_confirmers",
        "accuser",
        "deadline",
        "incarnation",
        "k",
        "last_chance_sent",
        "max_s",
        "min_s",
        "not_before",
        "start",
    )

    def __init__(self, *, incarnation: int, accuser: str, start: float, k: int,
                 min_s: float, max_s: float) -> None:
        self.incarnation = incarnation
        self.accuser = accuser
        self.start = start
        self.k = k
        self.min_s = min_s
        self.max_s = max_s
        #: The verdict waits at least until then (see ``defer``).
        self.not_before = start
        #: Whether our last-chance ping went out (see ``Updates._last_chance_pings`` in updates.py).
        self.last_chance_sent = False
        # The first accuser does not count as a confirmation (memberlist does the same).
        self._confirmers = {accuser}
        #: When the suspicion turns into ``dead`` (kept up to date by ``confirm``; the driver
        #: asks for it after every input).
        self.deadline = start + suspicion_timeout(0, k, min_s, max_s)

    @property
    def confirmations(self) -> int:
        return len(self._confirmers) - 1

    def confirm(self, accuser: str) -> bool:
        """Record an accusation; True if it came from a new, independent accuser."""
        if accuser in self._confirmers or self.confirmations >= self.k:
            return False
        self._confirmers.add(accuser)
        self.deadline = max(self.start + suspicion_timeout(self.confirmations, self.k, self.min_s, self.max_s),
                            self.not_before)
        return True

    def defer(self, until: float) -> None:
        """Hold the verdict until ``until`` (used when the local timer fired late: see
        ``Updates.expire_suspicions``); never brings it forward."""
        self.not_before = max(self.not_before, until)
        self.deadline = max(self.deadline, self.not_before)
