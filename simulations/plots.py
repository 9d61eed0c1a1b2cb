"""PNG plots of one run (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

import os
from typing import Any

__all__ = ["write_plots"]


def write_plots(result: dict[str, Any], series: dict[str, list], out_dir: str) -> list[str]:
    """Write the run's plots into ``out_dir``; return the file names written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = series["t"]
    title = f"{result['scenario']} · {result['system']} · N={result['nodes']} · seed {result['seed']}"
    written = []

    def save(fig, name: str) -> None:
        fig.suptitle(title, fontsize=9)
        fig.tight_layout()
        path = os.path.join(out_dir, name)
        fig.savefig(path, dpi=80)
        plt.close(fig)
        written.append(name)

    def mark_events(ax) -> None:
        for e in result.get("events", []):
            ax.axvline(e["at"], color="grey", lw=0.5, ls=":")

    fig, ax = plt.subplots(figsize=(7, 3))
    ax.plot(t, series["members"], label="running members (truth)")
    if any(v is not None for v in series["mean_view"]):
        ax.plot(t, [v if v is not None else float("nan") for v in series["mean_view"]],
                label="mean view size")
    ax.set_xlabel("simulated s")
    ax.set_ylabel("members")
    ax.legend(fontsize=8)
    mark_events(ax)
    save(fig, "membership.png")

    det = result.get("detection_samples_s") or []
    fig, ax = plt.subplots(figsize=(7, 3))
    if det:
        ax.hist(det, bins=min(30, max(5, len(det))))
    ax.set_xlabel("crash -> dead in every live view (s)")
    ax.set_ylabel("crashes")
    save(fig, "detection.png")

    fig, ax = plt.subplots(figsize=(7, 3))
    ax.plot(t, series["moved"], label="partitions moved (cumulative)")
    ax.axhline(result["optimal_moves"], color="green", ls="--", lw=0.8, label="optimal moves")
    ax.set_xlabel("simulated s")
    ax.legend(fontsize=8)
    mark_events(ax)
    save(fig, "moved.png")

    fig, ax = plt.subplots(figsize=(7, 3))
    ax.plot(t, series["balance"])
    ax.set_xlabel("simulated s")
    ax.set_ylabel("max / mean leader load")
    mark_events(ax)
    save(fig, "balance.png")

    fig, ax = plt.subplots(figsize=(7, 3))
    ax.plot(t, series["dual"], label="dual-owned partitions")
    ax.plot(t, series["orphan"], label="orphan partitions")
    ax.set_xlabel("simulated s")
    ax.set_ylabel("partitions")
    ax.legend(fontsize=8)
    mark_events(ax)
    save(fig, "ownership.png")
    return written
