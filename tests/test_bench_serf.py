"""The /proc parsing of benchmarks/bench_serf.py (the benchmark itself takes minutes and needs serf)."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "bench_serf", Path(__file__).resolve().parents[1] / "benchmarks" / "bench_serf.py")
assert _spec is not None and _spec.loader is not None
bench_serf = importlib.util.module_from_spec(_spec)
sys.modules["bench_serf"] = bench_serf  # (dataclasses look their module up there)
_spec.loader.exec_module(bench_serf)


def test_parse_stat_counts_fields_from_the_last_parenthesis():
    ticks = bench_serf.TICKS
    # A command name with spaces and parentheses; utime 300, stime 100, cutime 20, cstime 10 ticks.
    text = "4242 (odd) name (x)) S 17 4242 4242 0 -1 4194560 1 2 3 4 300 100 20 10 20 0 3 0 99 0 0\n"
    assert bench_serf.parse_stat(text) == (17, 430 / ticks)


def test_parse_stat_reads_this_process():
    with open(f"/proc/{os.getpid()}/stat") as fh:
        ppid, cpu = bench_serf.parse_stat(fh.read())
    assert ppid == os.getppid() and cpu >= 0


def test_tree_cpu_adds_descendants_not_siblings():
    stats = {10: (1, 1.0), 11: (10, 0.5), 12: (11, 0.25), 20: (1, 2.0), 21: (20, 4.0)}
    assert bench_serf.tree_cpu(stats, [10, 20, 11, 99]) == {10: 1.75, 20: 6.0, 11: 0.75, 99: 0.0}
