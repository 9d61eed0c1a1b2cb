"""The pure placement code needs only numpy, mmh3 and msgpack (issue 17 item 1): checked by
importing it in a fresh interpreter where the service's packages cannot be imported at all, so
a module that starts importing one of them fails here, with or without them installed.

The same check against a wheel in a fresh virtualenv (which needs PyPI) is a manual one:
``BENCHMARKS.md``, "The pure wheel".
"""

from __future__ import annotations

import subprocess
import sys

# Service side only: the web framework and server, the HTTP client, metrics, gossip encryption,
# the gossip code itself, and the service subpackage.
_SERVICE_ONLY = ("fastapi", "uvicorn", "starlette", "pydantic", "httpx", "prometheus_client", "cryptography",
                 "membership", "placement.service")

_PURE_MODULES = (
    *(f"placement.{m}" for m in ("argtypes", "bounded", "changes", "codec", "errors", "hashing", "rendezvous",
                                 "snapshot", "table")),
    # The ownership protocol is pure too: the simulator and a Spark sweep need no service package.
    *(f"ownership.{m}" for m in ("config", "core", "lease", "messages", "views", "wire")),
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
