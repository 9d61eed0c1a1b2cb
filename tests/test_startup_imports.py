"""What a node process imports before it answers HTTP (issue 14 item 5: ``/healthz`` 200 within
1 s of the start), checked by name rather than by a timing: a module that comes back onto the
start-up path fails here on any machine, however fast or busy.

The deferred ones (``benchmarks/bench_startup.py`` measured them): httpx (~50 ms; only the
``members``/``owners``/``cluster``/``status`` commands and the first ``/v1/agreement`` use it),
prometheus_client (~10 ms; the first ``/metrics``). Spark, pandas, pyarrow, matplotlib and the
simulator itself were never loaded by a node; they stay that way. numba (the ``fast`` extra, ~0.3 s
to import) loads only at a table build of 2**26 pairs or more (``rendezvous._numba_screen``).
"""

from __future__ import annotations

import subprocess
import sys

# Optional or heavy packages no ``placement`` command imports to parse its flags, nor a node
# to serve; simulations and spark_jobs contribute only their ``cli`` modules (the subcommands).
_NEVER_AT_START = {"httpx", "prometheus_client", "pyspark", "pandas", "pyarrow", "matplotlib", "numba", "llvmlite"}
_SUBCOMMAND_ONLY = {"simulations": "simulations.cli", "spark_jobs": "spark_jobs.cli"}

# Runs ``placement node`` for real (ephemeral ports) and reports sys.modules at the moment
# uvicorn starts serving, i.e. everything imported before the first HTTP answer, then exits.
_NODE_UNTIL_SERVING = """
import os, sys, uvicorn
async def report(self, sockets=None):
    print(" ".join(sys.modules), flush=True)
    os._exit(0)
uvicorn.Server.startup = report
from placement_cli.main import main
main(["node", "--id", "n1", "--gossip", "127.0.0.1:0", "--http", "127.0.0.1:0"])
"""


def _modules(code: str) -> set[str]:
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return set(r.stdout.split())


def _unwanted(modules: set[str]) -> list[str]:
    bad = sorted(m for m in modules if m.split(".")[0] in _NEVER_AT_START)
    for package, allowed in _SUBCOMMAND_ONLY.items():
        bad += sorted(m for m in modules if m.split(".")[0] == package and m not in (package, allowed))
    return bad


def test_the_command_line_parser_imports_no_web_framework_and_nothing_optional():
    modules = _modules('import sys, placement_cli.main as c; c.build_parser(); print(" ".join(sys.modules))')
    web = sorted(m for m in modules if m.split(".")[0] in ("fastapi", "starlette", "uvicorn", "pydantic"))
    assert _unwanted(modules) == [] and web == []


def test_a_node_serves_before_it_imports_what_only_other_commands_or_later_requests_need():
    modules = _modules(_NODE_UNTIL_SERVING)
    assert "placement.service.http_api" in modules and "placement.service.node" in modules  # it did get that far
    assert _unwanted(modules) == []
