"""The churn sweep: a grid of simulator runs as Spark tasks, one metrics table, summary plots.

Each grid point (scenario x nodes x loss x system x seed) is one task calling
``simulations.scenarios.run_scenario``; the simulator is deterministic, so a row is reproduced
exactly from its grid point. A run that raises becomes a row with ``error`` set, not a failed job.
Rows are flattened (``detection_s`` -> ``detection_s_p50`` / ``_p99`` / ``_max`` / ``_n``), written
to ``metrics.parquet`` and ``metrics.csv``, and summarised in three PNGs.

Grid file (JSON; a scalar means a one-value list)::

    {"scenario": ["crash-one", "stalls"], "nodes": [8, 16, 32], "loss": [0.0, 0.05],
     "lifeguard": [true, false], "seed": [1, 2], "duration_s": 120, "partitions": 256}

``"system": ["swim", "eventhubs", ...]`` replaces ``lifeguard`` to compare the lease baselines.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from collections.abc import Mapping
from typing import Any

from placement.argtypes import read_json
from placement.errors import InvalidConfigError

DEFAULT_GRID: dict[str, Any] = {
    "scenario": ["crash-one", "stalls"],
    "nodes": [8, 16, 32],
    "loss": [0.0, 0.02, 0.05],
    "lifeguard": [True, False],
    "seed": [1, 2],
    "duration_s": 120.0,
    "partitions": 256,
}
_AXES = ("scenario", "nodes", "loss", "system", "seed", "duration_s", "partitions")
_DROPPED = ("series", "events", "detection_samples_s", "params")


def _listed(value: Any) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def expand_grid(grid: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every grid point as a dict of ``run_scenario`` arguments, in a stable order."""
    unknown = set(grid) - set(_AXES) - {"lifeguard"}
    if unknown:
        raise ValueError(f"unknown grid keys {sorted(unknown)}; use {', '.join((*_AXES, 'lifeguard'))}")
    grid = {**DEFAULT_GRID, **grid}
    systems = grid.get("system") or ["swim" if lg else "swim-nolifeguard" for lg in _listed(grid["lifeguard"])]
    axes = {k: _listed(grid[k]) for k in _AXES if k != "system"} | {"system": _listed(systems)}
    return [dict(zip(axes, values)) for values in itertools.product(*axes.values())]


def load_grid(path: str) -> dict[str, Any]:
    """A grid file, checked (JSON, axis names) before any Spark work starts."""
    grid = read_json(path)
    if not isinstance(grid, dict):
        raise InvalidConfigError(f"{path}: a grid is a JSON object of axis -> value or list of values")
    try:
        expand_grid(grid)
    except ValueError as exc:
        raise InvalidConfigError(f"{path}: {exc}") from None
    return grid


def flatten(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """One table row: percentile dicts become ``<name>_p50`` ... columns, lists are dropped."""
    row: dict[str, Any] = {}
    for key, value in metrics.items():
        if key in _DROPPED:
            continue
        if isinstance(value, Mapping):
            row.update({f"{key}_{k}": v for k, v in value.items()})
        elif not isinstance(value, (list, tuple)):
            row[key] = value
    row["params"] = json.dumps(metrics.get("params", {}), sort_keys=True)
    return row


def run_point(point: Mapping[str, Any]) -> dict[str, Any]:
    """One simulator run (a Spark task): its flattened metrics, or the grid point with ``error``."""
    from simulations.scenarios import run_scenario

    started = time.perf_counter()
    try:
        row = flatten(run_scenario(point["scenario"], nodes=point["nodes"], duration_s=point["duration_s"],
                                   seed=point["seed"], system=point["system"], loss=point["loss"],
                                   partitions=point["partitions"],
                                   check_cores=False))  # as `placement simulate` (docs/simulations.md)
        row["error"] = None
    except Exception as exc:
        row = {**point, "error": f"{type(exc).__name__}: {exc}"}
    row["task_wall_s"] = round(time.perf_counter() - started, 3)
    return row


def run_sweep(spark, grid: Mapping[str, Any], out_dir: str, plots: bool = True):
    """Run the grid on ``spark``; write metrics.parquet, metrics.csv and plots; return the pandas table."""
    import pandas as pd

    points = expand_grid(grid)
    rows = spark.sparkContext.parallelize(points, len(points)).map(run_point).collect()
    table = pd.DataFrame(rows)
    first = ["scenario", "system", "lifeguard", "nodes", "loss", "seed", "error"]
    table = table[[c for c in first if c in table] + [c for c in table if c not in first]]
    os.makedirs(out_dir, exist_ok=True)
    table.to_parquet(os.path.join(out_dir, "metrics.parquet"), index=False)
    table.to_csv(os.path.join(out_dir, "metrics.csv"), index=False)
    if plots:
        plot_summary(table, out_dir)
    return table


def plot_summary(table, out_dir: str) -> list[str]:
    """detection latency vs nodes, false deaths vs loss, Lifeguard on/off; returns the PNG paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = table[table["error"].isna()] if "error" in table else table
    paths = []

    def save(fig, name):
        path = os.path.join(out_dir, name)
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)

    if "detection_s_p50" in ok:
        fig, ax = plt.subplots(figsize=(6, 4))
        crashes = ok[ok["detection_s_n"].fillna(0) > 0]
        for (system, loss), g in crashes.groupby(["system", "loss"]):
            mean = g.groupby("nodes")["detection_s_max"].mean()
            ax.plot(mean.index, mean.values, marker="o", label=f"{system}, loss {loss:g}")
        ax.set(xlabel="cluster size (nodes)", ylabel="detection latency, s (max, mean over seeds)",
               title="Crash detection latency vs cluster size")
        ax.legend(fontsize=7)
        save(fig, "detection_vs_nodes.png")

    if "false_deaths" in ok:
        fig, ax = plt.subplots(figsize=(6, 4))
        for system, g in ok.groupby("system"):
            mean = g.groupby("loss")["false_deaths"].mean()
            ax.plot(mean.index, mean.values, marker="o", label=system)
        ax.set(xlabel="packet loss rate", ylabel="false deaths per run (mean)", title="False deaths vs loss")
        ax.legend(fontsize=7)
        save(fig, "false_deaths_vs_loss.png")

    if "lifeguard" in ok and ok["lifeguard"].notna().any():
        fig, ax = plt.subplots(figsize=(6, 4))
        swim = ok[ok["lifeguard"].notna()]
        counts = swim.groupby(["scenario", "lifeguard"])[["false_suspicions", "false_deaths"]]
        means = counts.mean().unstack("lifeguard")
        means.plot.bar(ax=ax)
        ax.set(ylabel="per run (mean)", title="Lifeguard on (True) vs off (False)")
        ax.legend(fontsize=7)
        save(fig, "lifeguard_on_off.png")
    return paths
