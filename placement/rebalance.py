"""Load-aware weights: a deterministic plan that moves member weights toward balanced load,
within a move budget (issue 33 item 2).

Theory of operation
===================

Weights decide placement (``rendezvous``), and a stable view (``ownership.views``) carries
them, so a new view with new weights *is* a rebalance, and the handoff protocol moves the
partitions it reassigns with no dual owner. What is missing is who decides the weights. Here
nobody does: ``plan`` is a pure function of what a view commits - the members' weights, one
load figure per partition (``LoadReport``), the table settings and the move budget left - and
every step of it is integer arithmetic (weights in ``rendezvous.WEIGHT_SCALE`` units, loads in
integer levels, ``math.isqrt``, ``Fraction``), so every member that holds the same view
computes bit-identical weights, in any dict order, on any machine. No controller.

Inputs. Per-partition loads, not per-member totals: with them the planner evaluates a candidate
exactly (the leaders of the candidate's table, ``PlacementTable.from_config``, summed), where
member totals would only say who is hot, not what moving weight would carry away. A load is
committed as one byte (``LoadReport``: log scale, 16 levels per octave, so a figure is within
2.2 % of the rate reported, over a range of 2**15.9): P = 4,096 partitions cost 4 KiB per view.

Search, in three parts, every candidate scored exactly (its table built, incrementally from
the view's, and its member loads summed):

1. Broad: multiplicative updates on the evaluated candidate: a member whose load L is outside
   ``band`` of its target T (total load split by capacity) gets w <- w * sqrt(T / L) (damped:
   the table answers weight changes in lumps of whole partitions, and undamped updates were
   seen to oscillate), ``iterations`` times.
2. Budget: if the best candidate moves more than the step's budget (``step_budget`` of the
   partitions, and no more than the caller's ``allowance``: the per-hour bucket,
   ``MoveBudget``), points on the straight line from the view's weights to it are bisected
   toward the farthest one that fits.
3. Polish: from the best candidate that fits, greedy single-member steps (the most loaded
   member's weight down or the least loaded one's up, by a fraction of the way to its bound),
   whichever lowers max/mean most within the budget, up to ``polish_rounds`` times; when the
   top member's step only hands the top to the member that takes its partition, that member's
   step down follows (a chain of two). A single weight moves partitions only to or from its
   member, so the moves go where they help: at N=64, P=4,096 (load-skew) single steps took
   max/mean after two steps from 1.20 (mean of 5 draws) to 1.11; in the scenario's timeline the
   chains took the second step from 1.09-1.17 to 1.07-1.12 against the figures it planned from.

Every candidate weight stays within ``max_factor`` of the view's weight (a member's weight never
changes by more than that factor in one step), and the answer is the best by (max/mean, moved,
weights) - a total order, so ties are broken the same everywhere.

Hysteresis. No plan while max/mean is at most ``trigger`` (a balanced cluster stays put, so
noisy loads around balance do not move partitions back and forth), and none that gains less
than ``min_gain`` in max/mean. Members inside ``band`` of their target keep their weight.

Figures designed against (docs: ``REFERENCE.md`` section 7): Google's Slicer (Adya et al.,
"Slicer: Auto-Sharding for Datacenter Applications", OSDI 2016) keeps max/mean load below 1.2
while moving at most 9 % of the key space per rebalancing round and about 4 % per hour overall;
Databricks' Dicer balances within a 10 % imbalance tolerance. Both are central controllers.

What weights cannot do: a single partition heavier than about 1.2x a member's mean load (Zipf
s = 1.1 over partitions does that) caps max/mean above 1.2 under any placement of whole
partitions; only splitting or replicating it helps, which this does not do.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Final

import numpy as np

from .errors import InvalidConfigError
from .rendezvous import WEIGHT_SCALE, validate_members
from .table import PlacementTable, TableConfig

__all__ = ["LEVELS_PER_OCTAVE", "LoadReport", "RebalanceConfig", "MoveBudget", "Plan", "plan", "member_loads"]

LEVELS_PER_OCTAVE: Final = 16
_ROOT: Final = 4_485_121_744  # round(2**(1/16) * 2**32): one level's ratio in 32.32 fixed point
_BASE: Final = 1 << 16  # the level of code 1


def _levels() -> np.ndarray:
    """Code -> integer load level: 0 for code 0, then _BASE * 2**((code-1)/16) by repeated
    fixed-point multiplication (integers only, so identical everywhere)."""
    out = [0, _BASE]
    for _ in range(254):
        out.append((out[-1] * _ROOT) >> 32)
    return np.array(out, dtype=np.int64)


LEVELS: Final = _levels()
LEVELS.setflags(write=False)


@dataclass(frozen=True)
class LoadReport:
    """One byte per partition: 0 = no load, c >= 1 = ``LEVELS[c]`` (log scale, relative to the
    largest rate, which gets code 255; a positive rate more than 2**15.9 below it gets code 1).
    What a stable view would commit for a rebalance."""

    codes: bytes

    @staticmethod
    def of(rates: Iterable[float]) -> LoadReport:
        """Quantise per-partition rates (any non-negative unit: only ratios matter). The
        reporter's float arithmetic need not match anyone's: the committed codes are the input."""
        r = np.asarray(list(rates) if not isinstance(rates, np.ndarray) else rates, dtype=np.float64)
        if r.ndim != 1 or not np.isfinite(r).all() or (r < 0).any():
            raise InvalidConfigError("loads must be a list of finite non-negative rates, one per partition")
        top = float(r.max(initial=0.0))
        codes = np.zeros(len(r), dtype=np.uint8)
        if top > 0:
            pos = r > 0
            steps = np.rint(np.log2(r[pos] / top) * LEVELS_PER_OCTAVE)
            codes[pos] = np.clip(255 + steps, 1, 255).astype(np.uint8)
        return LoadReport(codes.tobytes())

    @property
    def partitions(self) -> int:
        return len(self.codes)

    def levels(self) -> np.ndarray:
        """Integer load level of every partition (int64)."""
        return LEVELS[np.frombuffer(self.codes, dtype=np.uint8)]


@dataclass(frozen=True)
class RebalanceConfig:
    """The planner's knobs (every member must use the same ones, as with ``TableConfig``)."""

    trigger: float = 1.1  # plan only above this max/mean (Dicer's default tolerance is 10 %)
    band: float = 0.05  # members within +-band of their target load keep their weight
    max_factor: float = 1.5  # a weight changes by at most this factor per step, either way
    step_budget: float = 0.09  # fraction of partitions one step may move (Slicer: 9 % per round)
    min_gain: float = 0.02  # a plan must lower max/mean by at least this much
    iterations: int = 12  # rounds of the broad search's multiplicative updates
    polish_rounds: int = 48  # rounds of the polish (``_polish``), each one member's step or a chain of two

    def __post_init__(self) -> None:
        checks = [("trigger", self.trigger >= 1.0), ("band", 0.0 <= self.band < 1.0),
                  ("max_factor", self.max_factor > 1.0), ("step_budget", 0.0 < self.step_budget <= 1.0),
                  ("min_gain", self.min_gain >= 0.0), ("iterations", 1 <= self.iterations <= 1000),
                  ("polish_rounds", 0 <= self.polish_rounds <= 1000)]
        for name, ok in checks:
            if not ok:
                raise InvalidConfigError(f"RebalanceConfig.{name} is out of range: {getattr(self, name)!r}")


@dataclass(frozen=True)
class MoveBudget:
    """A token bucket of partition moves, in fractions of the partitions: ``rate_per_hour``
    refills it, ``capacity`` caps it. Slicer's figures are 9 % per round and ~4 % per hour
    overall: the default capacity is two rounds' worth (a skew found at start-up is fixed in two
    steps), the refill 4 %/h (the steady state). Driven by logical time (the rebalance round's
    start, as committed), never by a local clock, so every member holds the same bucket."""

    capacity: Fraction = Fraction(18, 100)
    rate_per_hour: Fraction = Fraction(4, 100)
    tokens: Fraction = Fraction(18, 100)
    at_s: int = 0  # logical time of ``tokens``, whole seconds

    def refilled(self, now_s: int) -> MoveBudget:
        gained = self.rate_per_hour * max(0, now_s - self.at_s) / 3600
        return MoveBudget(self.capacity, self.rate_per_hour, min(self.capacity, self.tokens + gained),
                          max(self.at_s, now_s))

    def spent(self, moved: int, partitions: int) -> MoveBudget:
        left = max(Fraction(0), self.tokens - Fraction(moved, partitions))
        return MoveBudget(self.capacity, self.rate_per_hour, left, self.at_s)


@dataclass(frozen=True)
class Plan:
    """The planner's answer. ``weights`` (each a multiple of 1/65536, exact as a float) equal
    the view's when ``changed`` is false; ``ratio_*`` are max/mean loads (by capacity) under the
    view's table and under the plan's, ``moved`` the partitions whose leader changes."""

    weights: dict[str, float]
    changed: bool
    reason: str
    ratio_before: float
    ratio_after: float
    moved: int
    partitions: int
    evaluated: int = 0  # candidate tables built

    @property
    def moved_fraction(self) -> float:
        return self.moved / self.partitions


def member_loads(table: PlacementTable, levels: np.ndarray) -> dict[str, int]:
    """Sum of the partition loads each member leads (exact integers)."""
    ids, idx = table.owner_indices()
    sums = np.zeros(len(ids), dtype=np.int64)
    if idx.shape[1]:
        np.add.at(sums, idx[:, 0], levels)
    return dict(zip(ids, sums.tolist()))


_Scored = tuple[PlacementTable, dict[str, int], Fraction, int]


class _Evaluator:
    """Builds and scores candidate tables (cached by their weight units)."""

    def __init__(self, config: TableConfig, levels: np.ndarray, caps: dict[str, int]) -> None:
        self.config = config
        self.levels = levels
        self.caps = caps
        self.cap_total = sum(caps.values())
        self.equal_caps = len(set(caps.values())) == 1  # then load alone orders members (no Fractions)
        self.total = int(levels.sum())
        self.base: PlacementTable | None = None  # the view's table: the first one evaluated
        self.cache: dict[tuple[tuple[str, int], ...], _Scored] = {}

    def __call__(self, units: dict[str, int], parent: dict[str, int] | None = None) -> _Scored:
        """(table, member loads, max/mean, partitions moved from the view's table). ``parent``:
        an evaluated candidate close to ``units`` (a weight or two apart), to build from."""
        key = tuple(sorted(units.items()))
        hit = self.cache.get(key)
        if hit is None:
            weights = {m: u / WEIGHT_SCALE for m, u in key}
            # Incremental from the parent's table or the view's (equal to a full build,
            # ``with_members``): a candidate that changes a few weights costs O(P) instead of
            # O(P N); a candidate far from the view's (the polish's, after the search) is near
            # its parent (N=64, P=4,096: a second step took 3.0-6.6 s from the view's, 1.3-2.0 s so).
            near = self.cache.get(tuple(sorted(parent.items()))) if parent is not None else None
            table = (PlacementTable.from_config(self.config, weights) if self.base is None
                     else (near[0] if near is not None else self.base).with_members(weights))
            loads = member_loads(table, self.levels)
            moved = 0 if self.base is None else len(self.base.moved(table, leaders=True))
            hit = (table, loads, self.ratio(loads), moved)
            self.cache[key] = hit
            if self.base is None:
                self.base = table
        return hit

    def share(self, m: str, loads: Mapping[str, int]) -> int | Fraction:
        """Member ``m``'s load per unit of capacity, or, with equal capacities, its load: either
        orders the members the same way, the second without a Fraction per member."""
        return loads.get(m, 0) if self.equal_caps else Fraction(loads.get(m, 0), self.caps[m])

    def ratio(self, loads: Mapping[str, int]) -> Fraction:
        """max over members of (load / capacity) / (total load / total capacity)."""
        if not self.total:
            return Fraction(1)
        m = max(self.caps, key=lambda m: self.share(m, loads))
        return Fraction(loads.get(m, 0) * self.cap_total, self.caps[m] * self.total)


def plan(weights: Mapping[str, float], loads: LoadReport, config: TableConfig,
         rebalance: RebalanceConfig = RebalanceConfig(), *, allowance: float | Fraction = 1,
         capacities: Mapping[str, float] | None = None) -> Plan:
    """New weights for the members of a view (``weights``: id -> weight, as the view holds
    them; weight-0 members stay at 0) that bring max/mean load down, moving at most
    ``min(step_budget, allowance)`` of the partitions. ``capacities`` (default: equal) says what
    share of the load each member should carry."""
    if loads.partitions != config.partitions:
        raise InvalidConfigError(f"the load report has {loads.partitions} partitions, the table {config.partitions}")
    units0 = validate_members(weights)
    active = sorted(m for m, u in units0.items() if u > 0)
    caps = validate_members({m: 1.0 for m in active} if capacities is None
                            else {m: capacities[m] for m in active})
    if any(c == 0 for c in caps.values()):
        raise InvalidConfigError("every member with a positive weight needs a positive capacity")
    ev = _Evaluator(config, loads.levels(), caps)
    ratio0 = ev(units0)[2]

    def answer(units: dict[str, int], reason: str) -> Plan:
        _, _, ratio, moved = ev(units)
        return Plan({m: u / WEIGHT_SCALE for m, u in sorted(units.items())}, units != units0, reason, float(ratio0),
                    float(ratio), moved, config.partitions, len(ev.cache))

    if len(active) < 2 or ratio0 <= Fraction(rebalance.trigger):
        return answer(units0, "balanced")
    f = Fraction(rebalance.max_factor)
    bounds = {m: (max(1, -(-units0[m] * f.denominator // f.numerator)), units0[m] * f.numerator // f.denominator)
              for m in active}
    allowed = math.floor(min(Fraction(rebalance.step_budget), Fraction(allowance)) * config.partitions)
    cand = _search(units0, active, bounds, ev, rebalance)
    _shorten(units0, cand, ev, allowed)
    units = _polish(_best(ev, allowed), active, bounds, ev, allowed, rebalance.polish_rounds)
    if ratio0 - ev(units)[2] < Fraction(rebalance.min_gain):
        # "no budget" only when a candidate that gains enough was left out for its moves (every
        # one within the allowance gains less: ``units`` is the best of them); before, any plan
        # whose best candidate moved nothing said so, with most of a step's budget unspent.
        over = any(ratio0 - s[2] >= Fraction(rebalance.min_gain) for s in ev.cache.values())
        return answer(units0, "no budget" if over else "small gain")
    return answer(units, "planned")


def _search(units0: dict[str, int], active: list[str], bounds: dict[str, tuple[int, int]], ev: _Evaluator,
            rb: RebalanceConfig) -> dict[str, int]:
    """Damped multiplicative updates from the view's weights; the best candidate by (ratio, moved)."""
    band = Fraction(rb.band)
    units = dict(units0)
    for _ in range(rb.iterations):
        loads = ev(units)[1]
        nxt = dict(units)
        for m in active:
            target = Fraction(ev.total * ev.caps[m], ev.cap_total)  # this member's fair load
            load = loads.get(m, 0)
            if abs(load - target) <= band * target:
                continue
            u = units[m]
            lo, hi = bounds[m]
            # w * sqrt(target / load), in integers (a member with no load grows all it may).
            new = hi if load == 0 else math.isqrt(u * u * target.numerator // (load * target.denominator))
            nxt[m] = min(hi, max(lo, new))
        if nxt == units:
            break
        units = nxt
    return _best(ev, ev.config.partitions)


def _best(ev: _Evaluator, allowed: int) -> dict[str, int]:
    """Of every candidate evaluated so far, the best by (ratio, moved, units) moving at most ``allowed``."""
    return dict(min((s[2], s[3], key) for key, s in ev.cache.items() if s[3] <= allowed)[2])


def _shorten(units0: dict[str, int], cand: dict[str, int], ev: _Evaluator, allowed: int) -> None:
    """Evaluate points on the straight line from the view's weights to ``cand`` (64ths), bisecting
    toward the farthest one whose table moves at most ``allowed`` partitions."""
    def at(k: int) -> int:
        return ev({m: u + (cand[m] - u) * k // 64 for m, u in units0.items()})[3]

    if at(64) <= allowed:
        return
    lo, hi = 0, 64  # at(lo) fits, at(hi) does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if at(mid) <= allowed else (lo, mid)


_STEPS: Final = (Fraction(1, 32), Fraction(1, 16), Fraction(1, 8), Fraction(1, 4), Fraction(1, 2), Fraction(1))


def _polish(units: dict[str, int], active: list[str], bounds: dict[str, tuple[int, int]], ev: _Evaluator,
            allowed: int, rounds: int) -> dict[str, int]:
    """Greedy single-member steps: the most loaded member's weight down, or the least loaded
    one's up, by a fraction of the way to its bound (``_STEPS``), whichever lowers max/mean most
    within the budget. One weight at a time moves partitions only to or from that member, so
    this spends the moves the broad search left where they help.

    A step of the top member that sheds a partition heavy enough to make its taker the new top
    (max/mean not lower) is followed by a step of that taker down (a chain of two members):
    without it the search stopped there with most of the step's budget unspent (N=64, P=4,096,
    load-skew's second step: 3-6 % of the 9 % moved, max/mean 1.09-1.17 against the figures;
    docs/benchmarks-log.md, "drift or quantisation?"). Still a local search."""
    def top(loads: Mapping[str, int]) -> str:
        return max(active, key=lambda m: (ev.share(m, loads), m))

    def bottom(loads: Mapping[str, int]) -> str:
        return min(active, key=lambda m: (ev.share(m, loads), m))

    for _ in range(rounds):
        _, loads, ratio, _ = ev(units)
        hi, lo = top(loads), bottom(loads)
        downs = _steps(units, hi, bounds[hi][0])
        tries = [(t, units) for t in downs + _steps(units, lo, bounds[lo][1])]  # (candidate, parent)
        for t in downs:
            _, after, r, moved = ev(t, units)
            taker = top(after)
            if moved <= allowed and r >= ratio and taker != hi:
                tries += [(c, t) for c in _steps(t, taker, bounds[taker][0])]
        scored = [(ev(t, p)[2], ev(t, p)[3], sorted(t.items())) for t, p in tries]
        fits = [s for s in scored if s[1] <= allowed and s[0] < ratio]
        if not fits:
            break
        units = dict(min(fits)[2])
    return units


def _steps(units: dict[str, int], m: str, end: int) -> list[dict[str, int]]:
    """``units`` with member ``m``'s weight moved each ``_STEPS`` fraction of the way to ``end``."""
    out = []
    for step in _STEPS:
        u = units[m] + math.floor((end - units[m]) * step)
        if u != units[m]:
            out.append({**units, m: u})
    return out
