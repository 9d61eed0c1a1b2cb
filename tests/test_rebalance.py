"""The load-aware planner (``placement.rebalance``): deterministic, within its budgets, and quiet
around balance."""

from __future__ import annotations

import random
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from placement.errors import InvalidConfigError
from placement.rebalance import LEVELS, LoadReport, MoveBudget, RebalanceConfig, member_loads, plan
from placement.rendezvous import WEIGHT_SCALE
from placement.table import PlacementTable, TableConfig


def _skewed(partitions: int, seed: int) -> np.ndarray:
    """Lognormal rates with a 5 % hot set at 10x (the load-skew scenario's shape)."""
    rng = np.random.default_rng(seed)
    rates = rng.lognormal(0.0, 0.5, partitions)
    rates[rng.choice(partitions, max(1, partitions // 20), replace=False)] *= 10
    return rates


def _ratio(weights: dict[str, float], rates: np.ndarray, config: TableConfig) -> float:
    table = PlacementTable.from_config(config, weights)
    sums = np.array(list(member_loads(table, LoadReport.of(rates).levels()).values()), dtype=float)
    active = [m for m, w in weights.items() if w > 0]
    return float(sums.max() * len(active) / sums.sum())


cases = st.tuples(st.integers(2, 10), st.sampled_from([64, 128, 256]), st.integers(0, 10_000),
                  st.floats(0.0, 1.0))


@settings(max_examples=25, deadline=None)
@given(cases)
def test_a_plan_is_bit_identical_whatever_the_member_order_and_keeps_its_budgets(case):
    n, p, seed, allowance = case
    rng = random.Random(seed)
    weights = {f"m{i}": rng.choice([1.0, 0.75, 1.5, 2.0]) for i in range(n)}
    config = TableConfig(p, seed=seed % 7)
    report = LoadReport.of(_skewed(p, seed))
    rb = RebalanceConfig(trigger=1.0, iterations=6)
    first = plan(weights, report, config, rb, allowance=allowance)
    shuffled = list(weights.items())
    rng.shuffle(shuffled)
    again = plan(dict(shuffled), report, config, rb, allowance=allowance)
    assert first == again
    assert list(first.weights.items()) == list(again.weights.items())
    # Weights come out in units: exact as floats, so a view carries them unchanged.
    assert all((w * WEIGHT_SCALE).is_integer() for w in first.weights.values())
    # Move budget: the step's and the caller's, counted on the tables themselves.
    before = PlacementTable.from_config(config, weights)
    after = PlacementTable.from_config(config, first.weights)
    moved = len(before.moved(after, leaders=True))
    assert moved == first.moved <= min(Fraction(rb.step_budget), Fraction(allowance)) * p
    # Bounded factor per step, either way.
    for m, w in weights.items():
        assert w / rb.max_factor - 1 / WEIGHT_SCALE <= first.weights[m] <= w * rb.max_factor
    if first.changed:
        assert first.ratio_after <= first.ratio_before - rb.min_gain
        assert first.ratio_after == pytest.approx(_ratio(first.weights, _skewed(p, seed), config))


def test_levels_are_a_log_scale_and_quantising_keeps_rates_within_its_half_step():
    assert LEVELS[0] == 0 and (np.diff(LEVELS[1:]) > 0).all()
    assert LEVELS[17] / LEVELS[1] == pytest.approx(2.0, rel=1e-3)  # 16 levels per octave
    rates = np.array([0.0, 1e-9, 0.5, 1.0, 3.7, 10.0, 1e4])
    levels = LoadReport.of(rates).levels()
    assert levels[0] == 0 and levels[1] == LEVELS[1] and levels[-1] == LEVELS[255]  # below range: code 1
    rel = levels[2:] / levels[-1] / (rates[2:] / rates[-1])
    assert np.all(np.abs(rel - 1) < 0.023)
    assert LoadReport.of(rates * 7.0) == LoadReport.of(rates)  # only ratios matter
    with pytest.raises(InvalidConfigError):
        LoadReport.of([1.0, -1.0])


def test_skewed_clusters_get_below_1_2_in_two_steps_within_9_percent_each_then_stay_put():
    """Ten draws at N=16, P=1,024: every one >= 1.28 static; after two steps every one at or
    below 1.2 (measured 1.04-1.10; before the polish's two-member chains 9 of 10, one at 1.21)."""
    config = TableConfig(1024)
    after = []
    for seed in range(1, 11):
        rates = _skewed(1024, seed)
        weights = {f"n{i:02d}": 1.0 for i in range(16)}
        assert _ratio(weights, rates, config) > 1.28
        for _ in range(2):
            p = plan(weights, LoadReport.of(rates), config)
            assert p.moved_fraction <= 0.09
            weights = p.weights
        after.append(_ratio(weights, rates, config))
        third = plan(weights, LoadReport.of(rates), config)
        assert not third.changed or third.ratio_after <= third.ratio_before - 0.02
    assert max(after) <= 1.2


def test_no_plan_under_the_trigger_and_weight_0_members_stay_out():
    config = TableConfig(256)
    weights = {"a": 1.0, "b": 1.0, "w": 0.0}
    flat = LoadReport.of(np.ones(256))
    p = plan(weights, flat, config)
    assert (p.changed, p.reason, p.moved) == (False, "balanced", 0)
    skewed = plan(weights, LoadReport.of(_skewed(256, 1)), config, RebalanceConfig(trigger=1.0))
    assert skewed.weights["w"] == 0.0


def test_noisy_loads_around_balance_do_not_make_partitions_oscillate():
    """Balance first, then 30 rounds of +-5 % noise on every rate: once balanced, the planner
    stays put (the trigger's hysteresis), so the noise moves (almost) nothing."""
    config = TableConfig(1024)
    rates = _skewed(1024, 5)
    weights = {f"n{i:02d}": 1.0 for i in range(16)}
    for _ in range(3):
        weights = plan(weights, LoadReport.of(rates), config).weights
    rng = np.random.default_rng(0)
    total = 0
    for _ in range(30):
        noisy = rates * rng.uniform(0.95, 1.05, len(rates))
        p = plan(weights, LoadReport.of(noisy), config)
        total += p.moved
        weights = p.weights
    assert total <= 0.02 * 1024


def test_the_move_bucket_refills_by_logical_time_up_to_its_capacity():
    b = MoveBudget()
    assert b.tokens == Fraction(18, 100)
    b = b.spent(90, 1000).spent(90, 1000)
    assert b.tokens == 0
    b = b.refilled(1800)
    assert b.tokens == Fraction(2, 100)
    assert b.refilled(10 * 3600).tokens == b.capacity
    assert b.refilled(900).tokens == b.tokens  # time never runs back


def test_capacities_set_the_shares():
    """A member of capacity 2 is balanced at twice the load of the others."""
    config = TableConfig(512)
    rates = np.ones(512)
    weights = {"a": 1.0, "b": 1.0, "c": 1.0}
    p = plan(weights, LoadReport.of(rates), config, capacities={"a": 2.0, "b": 1.0, "c": 1.0})
    assert p.changed and p.weights["a"] > p.weights["b"]
    assert p.ratio_after < p.ratio_before


def test_a_plan_says_no_budget_only_when_the_budget_held_it_back():
    config = TableConfig(1024)
    rates = _skewed(1024, 2)
    weights = {f"n{i:02d}": 1.0 for i in range(16)}
    held = plan(weights, LoadReport.of(rates), config, allowance=Fraction(1, 1024))
    assert (held.changed, held.reason, held.moved) == (False, "no budget", 0)
    rb = RebalanceConfig(trigger=1.0)
    for _ in range(20):  # plan until the search finds nothing (each plan gains >= 0.02: few rounds)
        p = plan(weights, LoadReport.of(rates), config, rb)
        if not p.changed:
            break
        weights = p.weights
    assert (p.changed, p.reason) == (False, "small gain")  # nothing gains 0.02, budget or not


@settings(max_examples=15, deadline=None)
@given(st.integers(3, 12), st.sampled_from([64, 256]), st.integers(0, 10_000))
def test_a_plan_is_the_same_with_every_candidate_table_built_from_scratch(n, p, seed):
    """The planner builds each candidate's table incrementally from a near one (its parent in the
    polish, else the view's): the reference builds every one from scratch."""
    rng = random.Random(seed)
    weights = {f"m{i}": rng.choice([1.0, 0.75, 1.5]) for i in range(n)}
    config = TableConfig(p, seed=seed % 5)
    report = LoadReport.of(_skewed(p, seed))
    rb = RebalanceConfig(trigger=1.0, polish_rounds=12)
    fast = plan(weights, report, config, rb)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(PlacementTable, "with_members",
                   lambda self, members, zones=None: PlacementTable.from_config(self.config, members))
        reference = plan(weights, report, config, rb)
    assert fast == reference
