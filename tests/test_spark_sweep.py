"""A tiny churn sweep on Spark produces one row per grid point with the expected columns."""

import pandas as pd
import pytest

from spark_jobs.sweep import expand_grid, run_sweep

pytestmark = pytest.mark.slow

TINY = {"scenario": ["crash-one"], "nodes": [5, 8], "loss": [0.0], "lifeguard": [True, False], "seed": [1],
        "duration_s": 20.0, "partitions": 64}


def test_grid_expands_to_the_product_and_rejects_unknown_axes():
    points = expand_grid(TINY)
    assert len(points) == 4 and {p["system"] for p in points} == {"swim", "swim-nolifeguard"}
    with pytest.raises(ValueError, match="unknown grid keys"):
        expand_grid({"node": [3]})


def test_tiny_sweep_writes_table_and_plots(spark, tmp_path):
    table = run_sweep(spark, {**TINY, "scenario": ["crash-one", "no-such-scenario"]}, str(tmp_path))
    assert len(table) == 8
    good = table[table["error"].isna()]
    assert len(good) == 4 and table[table["error"].notna()]["scenario"].eq("no-such-scenario").all()
    for column in ("scenario", "system", "lifeguard", "nodes", "loss", "seed", "detection_s_p50",
                   "detection_s_max", "false_deaths", "false_suspicions", "moved_partitions", "task_wall_s"):
        assert column in table.columns
    assert sorted(zip(good["nodes"], good["lifeguard"])) == [(5, False), (5, True), (8, False), (8, True)]
    assert (good["detection_s_n"] == 1).all()  # crash-one: one crash, detected
    assert pd.read_parquet(tmp_path / "metrics.parquet").shape == table.shape
    assert len(pd.read_csv(tmp_path / "metrics.csv")) == 8
    assert {p.name for p in tmp_path.glob("*.png")} == {"detection_vs_nodes.png", "false_deaths_vs_loss.png",
                                                        "lifeguard_on_off.png"}
