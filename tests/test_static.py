"""mypy and ruff on the paths kept clean so far (their settings: pyproject.toml).

Checked: mypy and ruff on placement/ (placement/service/ included), spark_jobs/, membership/,
simulations/, benchmarks/ and tests/, and ownership/. A failure prints the checker's own report.
A checker that is not installed is a failure too (both are in the ``dev`` extra, which ``make
test`` installs): a check that skips could pass without checking anything.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# mypy and ruff
CLEAN_PATHS = ("placement", "placement_cli", "ownership", "spark_jobs", "membership", "simulations", "benchmarks",
               "tests")
LINT_CLEAN_PATHS = CLEAN_PATHS  # ruff checks the same paths


def _run(module: str, *args: str) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.fail(f"{module} is not installed (it is in the dev extra: pip install -e '.[dev]')")
    r = subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"{module} {' '.join(args)} found problems:\n{r.stdout}{r.stderr}"


def test_mypy_finds_no_type_errors():
    _run("mypy", *CLEAN_PATHS)


def test_ruff_finds_no_lint_errors():
    _run("ruff", "check", *LINT_CLEAN_PATHS)
