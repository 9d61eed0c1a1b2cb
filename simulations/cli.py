"""``placement simulate``: the churn simulator's command line (being built, issue 5)."""

from __future__ import annotations

import argparse


def add_subcommands(sub: argparse._SubParsersAction) -> None:
    """Register this package's subcommands on the ``placement`` parser."""
