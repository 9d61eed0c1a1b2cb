"""The pure placement code needs only numpy, mmh3 and msgpack (issue 17 item 1): checked by
importing it in a fresh interpreter where the service's packages cannot be imported at all, so
a module that starts importing one of them fails here, with or without them installed.

The same check against a wheel in a fresh virtualenv (which needs PyPI) is a manual one:
``BENCHMARKS.md``, "The pure wheel".
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

# Service side only: the web framework and server, the HTTP client, metrics, gossip encryption,
# the gossip code itself, and the service subpackage.
_SERVICE_ONLY = ("fastapi", "uvicorn", "starlette", "pydantic", "httpx", "prometheus_client", "cryptography",
                 "membership", "placement.service")

_PURE_MODULES = (
    *(f"placement.{m}" for m in ("argtypes", "bounded", "changes", "codec", "errors", "hashing", "rebalance",
                                 "rendezvous", "snapshot", "table", "zones")),
    # The ownership protocol is pure too: the simulator and a Spark sweep need no service package.
    *(f"ownership.{m}" for m in ("config", "core", "lease", "messages", "protocol", "states", "views", "wire")),
)


def _without(blocked: tuple[str, ...], then: str = "") -> str:
    """Python code that makes every module in ``blocked`` unimportable, imports the pure modules,
    routes a key three ways (table, owner of its partition, a snapshot's round trip), then runs ``then``."""
    return f"""
import importlib, sys
BLOCKED = {blocked!r}
class Blocker:
    def find_spec(self, name, path=None, target=None):
        if any(name == b or name.startswith(b + ".") for b in BLOCKED):
            raise ImportError(f"{{name}} is service-only")
sys.meta_path.insert(0, Blocker())
import placement
for name in {_PURE_MODULES!r}:
    importlib.import_module(name)
from placement import PlacementTable
from placement.snapshot import PlacementSnapshot
t = PlacementTable.build({{"n1": 1.0, "n2": 2.0, "n3": 1.0}}, partitions=256, replicas=2, seed=0)
s = PlacementSnapshot.from_msgpack(PlacementSnapshot(t, {{}}).to_msgpack(), verify=True)
print(t.owner(t.partition_of("order-42")), s.table.lookup("order-42")[0], t.lookup("order-42")[0])
{then}
"""


def test_the_pure_modules_import_and_route_keys_without_any_service_package():
    r = subprocess.run([sys.executable, "-c", _without(_SERVICE_ONLY)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    owner, from_snapshot, leader = r.stdout.split()
    assert owner == from_snapshot == leader and owner in ("n1", "n2", "n3")


def test_the_client_and_what_spark_route_runs_on_executors_need_httpx_but_no_server_package():
    code = _without(tuple(m for m in _SERVICE_ONLY if m != "httpx"),
                    then="import placement.client, spark_jobs.route, spark_jobs.deliver, spark_jobs.arrow_hash")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def test_without_numba_large_builds_fall_back_to_numpy_and_only_a_forced_numba_fails():
    """The ``fast`` extra is optional: with numba unimportable, ``auto`` builds with numpy (the
    threshold lowered so a small table would take the compiled screen), ``numba`` says why."""
    code = _without((*_SERVICE_ONLY, "numba", "llvmlite"), then="""
from placement import rendezvous
rendezvous._NUMBA_MIN_PAIRS = 0
big = PlacementTable.build({f"m{i}": 1.0 + i for i in range(50)}, partitions=512, replicas=2)
rendezvous.kernel = "numba"
try:
    PlacementTable.build({"a": 1.0}, partitions=8)
except ImportError as exc:
    print("forced:", exc)
""")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "forced: numba is service-only" in r.stdout


# ----- layers and cycles (issue 32 item 3) ------------------------------------------------------

_ROOT = Path(__file__).resolve().parents[1]
_PACKAGES = ("membership", "placement", "ownership", "simulations", "spark_jobs", "placement_cli")

#: What each layer may import of the project (besides itself). Layers point down: gossip and the
#: placement math at the bottom; the ownership protocol on the math and gossip, the client library on the math; the
#: simulator and the service on those; the Spark jobs on the simulator and the client; the
#: ``placement`` command (placement_cli) above everything, gathering every layer's subcommands.
_ALLOWED = {
    "membership": set(),
    "placement": {"membership"},  # argtypes parses dns: seeds with membership.seeds (lazily)
    "placement.client": {"placement"},
    "ownership": {"placement", "membership"},  # ownership.driver joins the two protocol cores
    "simulations": {"membership", "ownership", "placement"},
    "placement.service": {"membership", "ownership", "placement", "placement.client"},
    "spark_jobs": {"placement", "placement.client", "simulations"},
    "placement_cli": {"membership", "ownership", "placement", "placement.client", "simulations",
                      "placement.service", "spark_jobs"},
}
#: Scripts run as files, not imported: each is a root of its own.
_ENTRY_SCRIPTS = {"spark_jobs.submit": "spark-submit takes a file; it runs the `placement` command"}


def _layer(module: str) -> str | None:
    for prefix in ("placement.service", "placement.client", "placement_cli", *_PACKAGES):
        if module == prefix or module.startswith(prefix + "."):
            return prefix
    return None


def _modules() -> dict[str, Path]:
    out = {}
    for package in _PACKAGES:
        for path in sorted((_ROOT / package).rglob("*.py")):
            parts = path.relative_to(_ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imports(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The project modules ``module`` imports anywhere in its file (function-level imports
    included: a lazy import is still an arrow), resolved to modules that exist."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*up, base] if base else up)
            # "from pkg import name": the submodule pkg.name if there is one, else pkg itself
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != module:
                found.add(name)
    return found


def _graph() -> dict[str, set[str]]:
    known = _modules()
    return {m: _imports(m, p, known) for m, p in known.items()}


def test_layers_point_down():
    wrong = sorted((m, i) for m, imported in _graph().items() if m not in _ENTRY_SCRIPTS for i in imported
                   if _layer(i) != _layer(m) and _layer(i) not in _ALLOWED[_layer(m) or ""])
    assert not wrong, f"imports against the layers (tests/test_layout.py, _ALLOWED): {wrong}"


def test_no_import_cycles():
    """No module reaches itself through imports, lazy ones included (a package's ``__init__``
    re-exporting its own modules is no cycle: those modules never import the package back)."""
    graph = _graph()
    cycles = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        path.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                cycles.append([*path[path.index(n):], n])
            elif n not in state:
                visit(n)
        path.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)
    assert not cycles, f"import cycles: {cycles}"
