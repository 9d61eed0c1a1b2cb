"""benchmarks/bench_load_plan.py replays load-skew's rounds without the cluster; its figures stand
for the simulator's (docs/benchmarks-log.md, "drift or quantisation?") only while they are the
same, which this checks on a small run."""

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from simulations.scenarios import run_scenario

_spec = importlib.util.spec_from_file_location(
    "bench_load_plan", Path(__file__).resolve().parents[1] / "benchmarks" / "bench_load_plan.py")
assert _spec is not None and _spec.loader is not None
bench = importlib.util.module_from_spec(_spec)
sys.modules["bench_load_plan"] = bench
_spec.loader.exec_module(bench)


@pytest.mark.parametrize("by,variant", [("weights", "quantised"), ("pins", "pins")])
def test_the_replay_gives_the_simulators_figures(by: str, variant: str):
    r = run_scenario("load-skew", nodes=8, partitions=128, duration_s=700.0, seed=3, system="swim-exclusive",
                     params={"balance_by": by})
    rounds = r["load_rounds"]
    replayed = bench.replay(8, 128, 3, variant, 700.0)
    simulated = (rounds[0]["ratio_settled"], rounds[1]["ratio_settled"], rounds[1]["ratio_settled_figures"],
                 r["load_max_over_mean"], r["load_max_over_mean_static"])
    assert simulated == pytest.approx([replayed[k] for k in ("step1", "step2", "known2", "end", "static_end")],
                                      abs=1e-4)  # (the simulator rounds to 4 decimals)


def test_pinned_moves_stay_within_the_allowance_and_never_raise_the_maximum():
    rng = np.random.default_rng(5)
    rates = rng.lognormal(0.0, 0.5, 256)
    owners = rng.integers(0, 8, 256)
    before = np.bincount(owners, weights=rates, minlength=8).max()
    moved = bench.pin_moves(owners, rates, 8, 5, 1.0)
    after = np.bincount(owners, weights=rates, minlength=8).max()
    assert 0 < moved <= 5 and after < before
