"""Lifeguard local health awareness (LHA): distrust your own timeouts when you are unhealthy.

Lifeguard (arXiv 1707.00788, section IV-A; memberlist awareness.go): a saturating counter
``score`` in ``0 .. max_multiplier - 1``. Evidence that *we* are slow or badly connected raises
it: a probe that failed although indirect probers answered with nacks missing, having to
refute a suspicion of ourselves, event-loop lag reported by the driver. A successful probe
lowers it. Probe interval and probe timeout are multiplied by ``score + 1``, so a starved node
probes less often and waits longer before accusing anyone.
"""

from __future__ import annotations

__all__ = ["Awareness"]


class Awareness:
    __slots__ = ("enabled", "max_multiplier", "score")

    def __init__(self, max_multiplier: int, enabled: bool = True) -> None:
        self.max_multiplier = max_multiplier
        self.enabled = enabled
        self.score = 0

    def apply(self, delta: int) -> None:
        """Add ``delta`` to the score, saturating at 0 and max_multiplier - 1."""
        if self.enabled:
            self.score = min(self.max_multiplier - 1, max(0, self.score + delta))

    @property
    def multiplier(self) -> int:
        return self.score + 1

    def scale(self, seconds: float) -> float:
        return seconds * (self.score + 1)
