"""The pins planner (``placement.pinning``): deterministic, within its budgets and pin bound,
exact about what it moves, and quiet around balance."""

from __future__ import annotations

import random
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from placement.errors import InvalidConfigError
from placement.pinning import plan_pins
from placement.rebalance import LoadReport, RebalanceConfig, member_loads
from placement.table import PlacementTable, TableConfig

from test_rebalance import _skewed


def _ratio(table: PlacementTable, report: LoadReport) -> float:
    sums = np.array(list(member_loads(table, report.levels()).values()), dtype=float)
    return float(sums.max() * len(sums) / sums.sum())


cases = st.tuples(st.integers(2, 10), st.sampled_from([64, 128, 256]), st.integers(0, 10_000),
                  st.floats(0.0, 1.0), st.integers(0, 3))


@settings(max_examples=30, deadline=None)
@given(cases)
def test_a_pin_plan_is_identical_whatever_the_member_order_and_keeps_its_budgets(case):
    n, p, seed, allowance, replicas = case
    rng = random.Random(seed)
    weights = {f"m{i}": rng.choice([1.0, 0.75, 1.5, 2.0]) for i in range(n)}
    config = TableConfig(p, max(1, replicas), seed % 7)
    members = list(weights)
    old = {q: rng.choice([*members, "gone"]) for q in rng.sample(range(p), rng.randint(0, p // 8))}
    table = PlacementTable.from_config(config, weights, pins=old)
    report = LoadReport.of(_skewed(p, seed))
    rb = RebalanceConfig(trigger=1.0)
    first = plan_pins(table, report, rb, allowance=allowance)
    shuffled = list(weights.items())
    rng.shuffle(shuffled)
    again = plan_pins(PlacementTable.from_config(config, dict(shuffled), pins=dict(reversed(list(old.items())))),
                      report, rb, allowance=allowance)
    assert first == again and list(first.pins.items()) == list(again.pins.items())
    # What it says it moves is what the tables move, within the step's budget and the caller's.
    after = table.with_pins(first.pins)
    assert first.moved == len(table.moved(after, leaders=True))
    assert first.moved <= min(Fraction(rb.step_budget), Fraction(allowance)) * p
    assert first.ratio_before == pytest.approx(_ratio(table, report))
    assert first.ratio_after == pytest.approx(_ratio(after, report))
    assert first.ratio_after <= first.ratio_before
    if first.changed:
        # Every pin is to a member, and places its partition away from the rendezvous order.
        plain = table.with_pins({})
        assert all(m in weights and plain.owner(q) != m and after.owner(q) == m for q, m in first.pins.items())
    else:
        assert first.pins == table.pins and first.moved == 0


@pytest.mark.parametrize("seed", range(5))
def test_one_step_takes_a_skewed_cluster_under_the_trigger(seed: int) -> None:
    """The load-skew shape at N=16, P=1,024 (static max/mean about 1.4-1.6): one step within
    the 9 % budget ends at or under the trigger (1.1), by the figures it planned from."""
    config = TableConfig(1024)
    table = PlacementTable.from_config(config, {f"n{i:02d}": 1.0 for i in range(16)})
    report = LoadReport.of(_skewed(1024, seed))
    made = plan_pins(table, report)
    assert made.changed and made.ratio_before > 1.2
    assert made.ratio_after <= 1.1 and made.moved <= 0.09 * 1024
    assert _ratio(table.with_pins(made.pins), report) == pytest.approx(made.ratio_after)
    # Balanced now: the next plan from the same figures moves nothing (hysteresis).
    again = plan_pins(table.with_pins(made.pins), report)
    assert not again.changed and again.reason == "balanced"


def test_the_pin_bound_holds_and_a_full_bound_still_moves_pinned_partitions_home() -> None:
    config = TableConfig(256)
    weights = {f"n{i}": 1.0 for i in range(8)}
    table = PlacementTable.from_config(config, weights)
    report = LoadReport.of(_skewed(256, 3))
    made = plan_pins(table, report, max_pins=Fraction(1, 64))
    assert len(made.pins) <= 4
    # A quarter of the partitions pinned to one member, the bound full: only moves that drop a
    # pin are open at first, and they help.
    hot = {q: "n0" for q in range(0, 256, 4) if table.owner(q) != "n0"}
    crowded = table.with_pins(hot)
    fixed = plan_pins(crowded, report, max_pins=Fraction(len(hot), 256))
    assert fixed.changed and len(fixed.pins) < len(hot) and fixed.ratio_after < fixed.ratio_before
    assert set(hot) - set(fixed.pins)  # some went home: room for the new pins it made


def test_no_budget_or_no_members_moves_nothing_and_bad_figures_are_refused() -> None:
    config = TableConfig(128)
    table = PlacementTable.from_config(config, {"a": 1.0, "b": 1.0, "c": 1.0})
    report = LoadReport.of(_skewed(128, 1))
    assert plan_pins(table, report, RebalanceConfig(trigger=1.0), allowance=0).moved == 0
    alone = PlacementTable.from_config(config, {"a": 1.0})
    assert not plan_pins(alone, report).changed
    with pytest.raises(InvalidConfigError):
        plan_pins(table, LoadReport.of(np.ones(64)))


@pytest.mark.parametrize("draw", (1, 2, 3))
def test_noise_around_balance_moves_almost_nothing(draw: int) -> None:
    """Hysteresis: balanced (three plans on the same figures), then 30 rounds of +-5 % noise on
    every partition's figure move at most 1 % of the partitions in all (measured: 0, 0 and 2 of
    1,024; the weights planner moved up to 22 at N=16 and 77 at N=64 on the same test)."""
    p = 1024
    base = _skewed(p, draw)
    table = PlacementTable.from_config(TableConfig(p), {f"n{i:02d}": 1.0 for i in range(16)})
    for _ in range(3):
        table = table.with_pins(plan_pins(table, LoadReport.of(base)).pins)
    rng = np.random.default_rng(draw)
    moved = 0
    for _ in range(30):
        made = plan_pins(table, LoadReport.of(base * rng.uniform(0.95, 1.05, p)))
        moved += made.moved
        table = table.with_pins(made.pins)
    assert moved <= p // 100
