"""Per-partition load for the ``load-skew`` scenario (issue 33 item 3): skewed, with a drifting
hot set, reproducible from a seed.

Every partition has a base rate drawn once, lognormal with sigma ``sigma`` (mu 0); a hot set of
``hot_fraction`` of the partitions carries ``hot_factor`` times its base rate. Every
``drift_every_s`` seconds ``drift_fraction`` of the hot set (at least one partition) cools down
and as many other partitions heat up, chosen at random. With sigma 0.5, 5 % hot at 10x and equal
static weights, max/mean member load is about 1.5 at N=16, P=1,024 and 1.66 at N=64, P=4,096,
while a packing of about 1.00 exists: the imbalance is all placement. (A heavier skew, e.g. Zipf
s = 1.1 over partitions, puts more than 1.2x a member's mean load on one partition: no placement
of whole partitions balances that, and this model does not pretend to.)

The state at time t depends on the seed and on floor(t / drift_every_s) only, whatever the order
or spacing of the queries.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["LoadModel", "LoadShape"]


@dataclass(frozen=True)
class LoadShape:
    sigma: float = 0.5
    hot_fraction: float = 0.05
    hot_factor: float = 10.0
    drift_fraction: float = 0.04
    drift_every_s: float = 180.0


class LoadModel:
    """Per-partition rates at a simulated time (``rates(t)``, t >= 0 from the model's start)."""

    def __init__(self, partitions: int, seed: int, shape: LoadShape = LoadShape()) -> None:
        self.partitions = partitions
        self.shape = shape
        self._rng = np.random.default_rng([seed, 0x10AD])
        self.base = self._rng.lognormal(0.0, shape.sigma, partitions)
        hot = max(1, round(shape.hot_fraction * partitions))
        self._hot = np.zeros(partitions, dtype=bool)
        self._hot[self._rng.choice(partitions, hot, replace=False)] = True
        self._swap = max(1, round(shape.drift_fraction * hot))
        self._step = 0

    def _drift_to(self, step: int) -> None:
        if step < self._step:
            raise ValueError("a load model only moves forward in time")
        for _ in range(step - self._step):
            hot, cold = np.flatnonzero(self._hot), np.flatnonzero(~self._hot)
            self._hot[self._rng.choice(hot, self._swap, replace=False)] = False
            self._hot[self._rng.choice(cold, self._swap, replace=False)] = True
        self._step = step

    def rates(self, t: float) -> np.ndarray:
        self._drift_to(int(t // self.shape.drift_every_s))
        return np.where(self._hot, self.base * self.shape.hot_factor, self.base)

    def hot(self) -> np.ndarray:
        """The current hot partitions (as of the last ``rates`` call)."""
        return np.flatnonzero(self._hot)
