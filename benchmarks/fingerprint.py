"""Simulator fingerprints: prove that a refactor meant as a pure move changes no behaviour.

Runs a fixed set of simulations (the real membership core, the availability-first node and the
exclusive-ownership node) with fixed seeds and hashes each run's metrics.json without its
wall-clock fields. Save the hashes before a change and check them after it (issue 17, "Measure"):

    PYTHONPATH=. .venv/bin/python benchmarks/fingerprint.py --save /tmp/fp-before.json
    # ... the change ...
    PYTHONPATH=. .venv/bin/python benchmarks/fingerprint.py --check /tmp/fp-before.json

The set takes about 30 s on the 2-core box. Any difference is printed per run, with the keys
that differ, and makes the exit status 1. The per-step invariants (``simulations.invariants``)
are on in every run; ``--check-cores`` adds the membership cores' own checks (slower), which
must not change a fingerprint either. The runs start with ``python -P``, so PYTHONPATH, not the
current directory, decides which build runs (``PYTHONPATH=build/mypyc:.`` checks the compiled
core).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import time

#: (label, argv after `placement simulate`): membership alone, ownership in both modes, loss. Each names
#: its system: ``simulate``'s default (exclusive since issue 32) is not what the earliest labels measured.
RUNS: list[tuple[str, list[str]]] = [
    ("crash-one", ["crash-one", "--nodes", "16", "--duration", "40", "--seed", "3", "--system", "swim"]),
    ("split", ["split", "--nodes", "16", "--duration", "90", "--seed", "4", "--system", "swim"]),
    ("leave", ["leave", "--nodes", "16", "--duration", "40", "--seed", "5", "--system", "swim"]),
    ("loss", ["loss", "--nodes", "32", "--duration", "90", "--seed", "6", "--system", "swim"]),
    ("split-exclusive", ["split", "--nodes", "16", "--duration", "90", "--seed", "7",
                         "--system", "swim-exclusive"]),
    ("freeze-exclusive", ["freeze", "--nodes", "16", "--duration", "60", "--seed", "8",
                          "--system", "swim-exclusive"]),
    ("scale-in-nolifeguard", ["scale-in", "--nodes", "16", "--duration", "40", "--seed", "9",
                              "--param", "to=8", "--system", "swim-nolifeguard"]),
    ("stalls", ["stalls", "--nodes", "32", "--duration", "120", "--seed", "10", "--system", "swim"]),
    ("flapping-exclusive", ["flapping", "--nodes", "16", "--duration", "120", "--seed", "11",
                            "--system", "swim-exclusive"]),
    ("loss-128", ["loss", "--nodes", "128", "--duration", "120", "--seed", "12", "--system", "swim"]),
]

_WALL_KEYS = {"wall_s", "wall", "elapsed_wall_s"}


def _strip(obj):
    """The metrics without wall-clock fields (the only part allowed to differ between runs)."""
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if k not in _WALL_KEYS}
    if isinstance(obj, list):
        return [_strip(v) for v in obj]
    return obj


def run_one(argv: list[str]) -> dict:
    out = subprocess.run(
        [sys.executable, "-P", "-m", "placement_cli", "simulate", *argv, "--json", "--quiet"],
        capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"simulate {' '.join(argv)} failed ({out.returncode}):\n{out.stderr}")
    return _strip(json.loads(out.stdout))


def digest(metrics: dict) -> str:
    return hashlib.sha256(json.dumps(metrics, sort_keys=True).encode()).hexdigest()[:16]


def _diff_keys(a, b, path=""):
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            yield from _diff_keys(a.get(k), b.get(k), f"{path}.{k}" if path else k)
    elif a != b:
        yield f"{path}: {a!r:.60} -> {b!r:.60}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--save", metavar="FILE", help="write the metrics of every run here")
    g.add_argument("--check", metavar="FILE", help="compare every run against a saved file")
    ap.add_argument("--only", nargs="*", help="run only these labels")
    ap.add_argument("--check-cores", action="store_true",
                    help="run with `--check-cores` (every membership core's own check after every step): "
                         "the same fingerprints prove the checks change nothing")
    args = ap.parse_args()
    saved = json.load(open(args.check)) if args.check else {}
    results: dict[str, dict] = {}
    bad = 0
    for label, argv in RUNS:
        if args.only and label not in args.only:
            continue
        t0 = time.perf_counter()
        results[label] = m = run_one([*argv, "--check-cores"] if args.check_cores else argv)
        line = f"{label:22s} {digest(m)}  ({time.perf_counter() - t0:.1f} s)"
        if args.check:
            if label not in saved:
                line += "  (not in the saved file)"
            elif saved[label] == m:
                line += "  identical"
            else:
                bad += 1
                line += "  DIFFERS\n    " + "\n    ".join(list(_diff_keys(saved[label], m))[:12])
        print(line, flush=True)
    if args.save:
        with open(args.save, "w") as f:
            json.dump(results, f, sort_keys=True)
        print(f"saved {len(results)} runs to {args.save}")
    if args.check:
        print(f"{len(results) - bad} identical, {bad} differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
