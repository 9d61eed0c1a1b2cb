"""The ``load-skew`` scenario (issue 33 items 1 and 3), small: every member plans the same weights
from the load figures its stable view committed, they are committed by views and moved by handoffs under the simulator's
invariants (no second owner, epochs rising), and the load gets more even than static weights."""

from __future__ import annotations

import numpy as np

from simulations.load_model import LoadModel
from simulations.scenarios import run_scenario


def test_load_skew_small_runs_with_agreeing_plans_and_no_dual_owner():
    r = run_scenario("load-skew", nodes=8, partitions=128, duration_s=700.0, seed=3, system="swim-exclusive",
                     params={"period_s": 300.0, "first_s": 30.0, "balance_by": "weights"})
    for key in ("load_max_over_mean_static", "load_max_over_mean", "load_max_over_mean_series",
                "moved_fraction_max_step", "moved_fraction_per_hour", "plans_agree"):
        assert key in r
    assert r["plans_agree"] is True
    assert r["dual_ownership_partition_s"] == 0.0
    rounds = r["load_rounds"]
    assert [x["at"] for x in rounds] == [30, 330, 630]
    # Every member planned from the figures its stable view committed for the round, all from
    # one view (issue 33 item 1: the planner's input is what a view committed).
    assert all(x["loads_at"] == [x["at"]] and len(x["views"]) == 1 and x["members_planned"] == 8 for x in rounds)
    assert rounds[0]["planned"] and rounds[0]["ratio_settled"] < rounds[0]["static"]
    # Under the figures a round planned from: the same as measured when no drift step came
    # between (t=30 and its settling at 100: drift every 180 s), otherwise apart.
    assert rounds[0]["ratio_settled_figures"] == rounds[0]["ratio_settled"]
    assert all("ratio_settled_figures" in x for x in rounds)
    assert r["moved_fraction_max_step"] <= 0.09 + 1 / 128  # the planned 9 %, as observed
    assert len(r["load_max_over_mean_series"]) >= 700 / 30


def test_load_skew_by_pins_commits_the_pins_every_member_planned_and_moves_them_by_handoff():
    """Rule 13: every member plans the same pins from its stable view, the first-ranked proposes
    them, a view commits them and the partitions move by handoff with no second owner; what was
    observed to move is what was planned."""
    r = run_scenario("load-skew", nodes=8, partitions=128, duration_s=700.0, seed=3, system="swim-exclusive",
                     params={"period_s": 300.0, "first_s": 30.0, "balance_by": "pins"})
    assert r["plans_agree"] is True
    assert r["dual_ownership_partition_s"] == 0.0
    rounds = r["load_rounds"]
    assert all(x["loads_at"] == [x["at"]] and len(x["views"]) == 1 and x["members_planned"] == 8 for x in rounds)
    first = rounds[0]
    assert first["planned"] and first["moved_planned"] > 0
    assert first["moved_seen"] == first["moved_planned"]
    # Under the trigger by the committed one-byte figures; by the true rates within their 2.2 %.
    assert first["expected"] <= 1.1 < first["static"] and first["ratio_settled_figures"] <= 1.1 * 1.022
    assert r["moved_fraction_max_step"] <= 0.09 + 1 / 128


def test_static_weights_only_measure():
    r = run_scenario("load-skew", nodes=8, partitions=128, duration_s=400.0, seed=3, system="swim-exclusive",
                     params={"load_aware": False})
    assert r["moved_partitions"] == 0 and r["load_max_over_mean"] == r["load_max_over_mean_static"]


def test_the_load_model_is_reproducible_and_drifts():
    a, b = LoadModel(1024, 7), LoadModel(1024, 7)
    assert np.array_equal(a.rates(0), b.rates(0))
    hot0 = set(a.hot().tolist())
    assert len(hot0) == round(0.05 * 1024)
    later = a.rates(600.0)
    assert np.array_equal(later, b.rates(600.0))
    hot1 = set(a.hot().tolist())
    assert len(hot1) == len(hot0) and 0 < len(hot0 - hot1) <= 3 * 2  # 3 drifts of 2 partitions
