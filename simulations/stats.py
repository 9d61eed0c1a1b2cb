"""Nearest-rank percentiles, the one definition every simulator metric and benchmark reports
with (the smallest value with at least p % of the values at or below it; no interpolation, so a
reported figure is always a measured one)."""

from __future__ import annotations

import math

__all__ = ["percentiles"]


def percentiles(values: list[float], ranks: tuple[int, ...] = (50, 99)) -> dict[str, float | int | None]:
    """Nearest-rank percentiles (``p50``, ``p99``: one key per rank), ``max`` (None when there
    are no values) and the count ``n``."""
    if not values:
        return {**{f"p{p}": None for p in ranks}, "max": None, "n": 0}
    v = sorted(values)

    def rank(p: float) -> float:
        return round(v[max(0, math.ceil(p / 100 * len(v)) - 1)], 3)

    return {**{f"p{p}": rank(p) for p in ranks}, "max": round(v[-1], 3), "n": len(v)}
