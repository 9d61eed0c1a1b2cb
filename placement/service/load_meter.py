"""Per-partition work rates, measured where the work is done (issue 33 item 1, the measuring part).

Load-aware weights (``placement.rebalance``) plan from one load figure per partition. A node
measures the figures of the partitions it works on: the application says what it did
(``Node.record_load(partition, units)``; ``PartitionContext.record_load``; the work sink counts
the items it accepts), and this meter turns those counts into rates that forget the past
smoothly: an exponentially weighted rate with a half-life (default 60 s), the same estimate
Unix load averages use (Gunther, "UNIX Load Average Part 1", 2010: exponential damping of a
sampled count). A partition's rate halves every ``half_life_s`` without work, and a steady
stream of ``r`` units a second reads ``r`` once a few half-lives have passed.

With ``--load-aware``, ``load_balance`` gathers every member's figures (``GET /v1/load``) and
hands them to the ownership protocol, which commits them in a stable view that every member
plans from (docs/ownership.md, rule 12).

Memory: one entry per partition ever recorded here, forgotten once its rate is below
``forget_below`` (so a partition handed on is dropped after a few half-lives).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["DEFAULT_HALF_LIFE_S", "LoadMeter"]

DEFAULT_HALF_LIFE_S = 60.0


@dataclass
class _Rate:
    value: float  # units per second, as of ``at``
    at: float


class LoadMeter:
    """Exponentially decaying per-partition rates (module docstring). ``now``: any monotonic
    clock in seconds (the node passes ``time.monotonic()``)."""

    def __init__(self, half_life_s: float = DEFAULT_HALF_LIFE_S, forget_below: float = 1e-3) -> None:
        if not (math.isfinite(half_life_s) and half_life_s > 0):
            raise ValueError(f"half_life_s must be a positive number of seconds, got {half_life_s!r}")
        self.half_life_s = half_life_s
        self.forget_below = forget_below
        self._k = math.log(2) / half_life_s  # decay per second
        self._rates: dict[int, _Rate] = {}

    def record(self, partition: int, units: float, now: float) -> None:
        """``units`` of work done on ``partition`` at ``now`` (finite, >= 0)."""
        if not (math.isfinite(units) and units >= 0):
            raise ValueError(f"units must be a finite number >= 0, got {units!r}")
        r = self._rates.get(partition)
        if r is None:
            self._rates[partition] = _Rate(units * self._k, now)
            return
        # The rate decays from r.at to now, then the new units arrive as an impulse: the
        # continuous form of an EWMA, whose long-run value for r units/s is r.
        r.value = r.value * math.exp(-self._k * max(0.0, now - r.at)) + units * self._k
        r.at = max(r.at, now)

    def rate(self, partition: int, now: float) -> float:
        r = self._rates.get(partition)
        return 0.0 if r is None else r.value * math.exp(-self._k * max(0.0, now - r.at))

    def rates(self, now: float) -> dict[int, float]:
        """Every partition's rate now (units/s); the ones decayed below ``forget_below`` are
        dropped from the meter."""
        out = {}
        for p in list(self._rates):
            value = self.rate(p, now)
            if value < self.forget_below:
                del self._rates[p]
            else:
                out[p] = value
        return out
