"""Node start-up (issue 14 item 5): spawn -> first ``/healthz`` 200 and -> first ``/readyz`` 200.

    .venv/bin/python benchmarks/bench_startup.py [--runs 10] [--poll-ms 10] [--checkout DIR ...]

The goal is ``/healthz`` 200 <= 1 s after the process is started. A wall time alone says little
on a shared 2-core box, so each run also measures references the node cannot beat, and every
figure is printed as a ratio to the floor (a minimal FastAPI app's spawn -> first 200):

1. ``python -c pass``, ``python -c "import fastapi, uvicorn"`` and a minimal FastAPI app (one
   route, served by uvicorn as the node is: spawn -> its first 200): the floor;
2. ``import placement_cli.main`` + ``build_parser()``: what every ``placement`` command pays before
   it parses its flags;
3. ``python -m placement_cli node ...`` alone (a new cluster), then a second node joining it
   (a fresh pair each run): spawn -> ``/healthz`` 200 and -> ``/readyz`` 200 (which also waits
   for the view to settle, ``settle_s`` = 1 s, and in exclusive mode for a quorum lease);
4. the node path under ``python -X importtime`` once: the costliest top-level imports
   (cumulative) and the sum of all, i.e. what deferring an import could save. (In checkouts
   before issue 17 the CLI loaded its subcommand modules through ``importlib.import_module``;
   those are not timed themselves, so what they import shows up as top-level entries.)

``--checkout DIR`` (repeatable; default: the checkout holding this script) measures the code in
DIR; with several, each run measures every checkout in turn, so a before/after comparison sees
the same machine load. The processes run in DIR: ``python -m`` and ``-c`` put the working
directory first on ``sys.path``, ahead of ``PYTHONPATH`` and of an editable install.
"""

from __future__ import annotations

import argparse
import http.client
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from fresh_state import fresh_state_home  # (a sibling script, not a package)

PY = sys.executable
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _free_port(kind: int) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _status(port: int, path: str) -> int | None:
    """HTTP status of ``GET path`` on loopback, or None while nothing answers."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1.0)
    try:
        conn.request("GET", path)
        return conn.getresponse().status
    except OSError:
        return None
    finally:
        conn.close()


def _wait_200(proc: subprocess.Popen, port: int, path: str, t0: float, poll_s: float, deadline_s: float) -> float:
    """Seconds from ``t0`` to the first 200 on ``path`` (polled every ``poll_s``)."""
    deadline = t0 + deadline_s
    while time.perf_counter() < deadline:
        if _status(port, path) == 200:
            return time.perf_counter() - t0
        if proc.poll() is not None:
            raise RuntimeError(f"process exited with status {proc.returncode} before {path} answered 200")
        time.sleep(poll_s)  # the poll interval, not a wait for an effect: the deadline bounds it
    raise RuntimeError(f"{path} did not answer 200 within {deadline_s} s")


def _node_cmd(node_id: str, gossip: int, http_port: int, join: int | None, importtime: bool = False) -> list[str]:
    cmd = [PY, *(["-X", "importtime"] if importtime else []), "-m", "placement_cli", "node", "--id", node_id,
           "--gossip", f"127.0.0.1:{gossip}", "--http", f"127.0.0.1:{http_port}"]
    return cmd + (["--join", f"127.0.0.1:{join}"] if join is not None else ["--new-cluster"])


def _start(cmd: list[str], root: str, stderr: Any = subprocess.DEVNULL) -> subprocess.Popen:
    return subprocess.Popen(cmd, cwd=root, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr)


def _stop(proc: subprocess.Popen) -> None:
    """Graceful leave (SIGTERM), as an operator would stop it; kill if it hangs."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _spawn(root: str, node_id: str, join: int | None) -> tuple[subprocess.Popen, float, int, int]:
    """Start a node process: (process, spawn time, gossip port, HTTP port)."""
    gossip, http_port = _free_port(socket.SOCK_DGRAM), _free_port(socket.SOCK_STREAM)
    t0 = time.perf_counter()
    return _start(_node_cmd(node_id, gossip, http_port, join), root), t0, gossip, http_port


def time_pair(root: str, poll_s: float) -> list[float]:
    """A node alone, then a second node joining it: spawn -> /healthz 200 and spawn -> /readyz
    200 of each, in seconds. A fresh pair every time: each run sees the same cluster."""
    first, t0, gossip, port = _spawn(root, "n1", None)
    try:
        times = [_wait_200(first, port, path, t0, poll_s, 30.0) for path in ("/healthz", "/readyz")]
        second, t0, _, port = _spawn(root, "n2", gossip)
        try:
            times += [_wait_200(second, port, path, t0, poll_s, 30.0) for path in ("/healthz", "/readyz")]
        finally:
            _stop(second)
    finally:
        _stop(first)
    return times


# The floor of "a Python process answers HTTP": FastAPI + uvicorn, nothing of this project.
_MINIMAL_APP = """
import sys, fastapi, uvicorn
app = fastapi.FastAPI()
@app.get("/healthz")
async def healthz() -> dict:
    return {"status": "ok"}
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", lifespan="off")
"""


def time_minimal_app(poll_s: float) -> float:
    port = _free_port(socket.SOCK_STREAM)
    t0 = time.perf_counter()
    proc = _start([PY, "-c", _MINIMAL_APP, str(port)], HERE)
    try:
        return _wait_200(proc, port, "/healthz", t0, poll_s, 30.0)
    finally:
        _stop(proc)


def time_command(code: str, root: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([PY, "-c", code], cwd=root, check=True)
    return time.perf_counter() - t0


def import_offenders(root: str, poll_s: float) -> list[tuple[str, float, float]]:
    """(module, self ms, cumulative ms) of the top-level imports of a node that is started
    until its ``/healthz`` answers, costliest first (``-X importtime`` writes to stderr)."""
    gossip, http_port = _free_port(socket.SOCK_DGRAM), _free_port(socket.SOCK_STREAM)
    with tempfile.TemporaryFile("w+") as err:  # a file, not a pipe: the report outgrows a pipe's buffer
        t0 = time.perf_counter()
        proc = _start(_node_cmd("it", gossip, http_port, None, importtime=True), root, stderr=err)
        try:
            _wait_200(proc, http_port, "/healthz", t0, poll_s, 30.0)
        finally:
            _stop(proc)
        err.seek(0)
        lines = err.read().splitlines()
    rows = []
    for line in lines:  # "import time: self [us] | cumulative | imported package"
        if not line.startswith("import time:") or "imported package" in line:
            continue
        self_us, cum_us, name = line[len("import time:"):].split("|")
        if not name[1:].startswith(" "):  # top level: not imported from inside another module's import
            rows.append((name.strip(), int(self_us) / 1000, int(cum_us) / 1000))
    return sorted(rows, key=lambda r: -r[2])


def _check_checkout(root: str) -> None:
    """The processes started in ``root`` must run its code (not an installed copy)."""
    found = subprocess.run([PY, "-c", "import placement; print(placement.__file__)"], cwd=root, check=True,
                           capture_output=True, text=True).stdout.strip()
    if not found.startswith(root + os.sep):
        raise SystemExit(f"processes started in {root} import {found}, not the code there")


REFERENCES = (("pass", "`python -c pass`"), ("fastapi", '`python -c "import fastapi, uvicorn"`'),
              ("minimal", "minimal FastAPI app on uvicorn: spawn -> 200"))
PER_CHECKOUT = (("cli", "`import placement_cli.main` + `build_parser()`"),
                ("h1", "node alone: spawn -> `/healthz` 200"), ("r1", "node alone: spawn -> `/readyz` 200"),
                ("h2", "node joining it: spawn -> `/healthz` 200"), ("r2", "node joining it: spawn -> `/readyz` 200"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--poll-ms", type=float, default=10.0)
    ap.add_argument("--top", type=int, default=12, help="import offenders to list")
    ap.add_argument("--checkout", action="append", help="a checkout to measure (repeatable; default: this one)")
    args = ap.parse_args()
    fresh_state_home()  # (a first start each run: benchmarks/fresh_state.py)
    poll_s = args.poll_ms / 1000
    roots = [os.path.abspath(r) for r in args.checkout or [HERE]]
    for root in roots:
        _check_checkout(root)

    print(f"# Node start-up: {args.runs} runs, polled every {args.poll_ms:g} ms; load average "
          f"{os.getloadavg()[0]:.2f} at the start\n")
    # Interleaved, so the references and every checkout see the same machine over the run.
    ref: dict[str, list[float]] = {k: [] for k, _ in REFERENCES}
    got: dict[str, dict[str, list[float]]] = {r: {k: [] for k, _ in PER_CHECKOUT} for r in roots}
    for _ in range(args.runs):
        ref["pass"].append(time_command("pass", HERE))
        ref["fastapi"].append(time_command("import fastapi, uvicorn", HERE))
        ref["minimal"].append(time_minimal_app(poll_s))
        for root in roots:
            got[root]["cli"].append(time_command("import placement_cli.main as c; c.build_parser()", root))
            for key, t in zip(("h1", "r1", "h2", "r2"), time_pair(root, poll_s)):
                got[root][key].append(t)
    floor = statistics.median(ref["minimal"])

    def cells(times: list[float]) -> str:
        med = statistics.median(times)
        return f"{1000 * med:.0f} ms | {1000 * max(times):.0f} ms | {med / floor:.2f}"

    print("| what | " + " | ".join(f"`{r}`: median | max | / floor" for r in roots) + " |")
    print("|---|" + "---|---|---|" * len(roots))
    for key, what in REFERENCES:
        print(f"| {what} | {cells(ref[key])} |" + " | | |" * (len(roots) - 1))  # measured once per run
    for key, what in PER_CHECKOUT:
        print(f"| {what} | " + " | ".join(cells(got[r][key]) for r in roots) + " |")
    print(f"\n(floor: the minimal FastAPI app's median, {1000 * floor:.0f} ms; load average "
          f"{os.getloadavg()[0]:.2f} at the end)")
    for root in roots:
        worst = max(got[root]["h1"] + got[root]["h2"])
        print(f"`{root}`: /healthz <= 1 s in every run: {'yes' if worst <= 1.0 else 'NO'} "
              f"(worst {1000 * worst:.0f} ms)")
    for root in roots:
        imports = import_offenders(root, poll_s)
        print(f"\nTop-level imports of `placement_cli.main node` in `{root}` up to `/healthz` 200 (one run, "
              f"-X importtime): {len(imports)} taking {sum(r[2] for r in imports):.0f} ms in all; the costliest:\n")
        print("| module | self | cumulative |\n|---|---|---|")
        for name, self_ms, cum_ms in imports[:args.top]:
            print(f"| {name} | {self_ms:.1f} ms | {cum_ms:.1f} ms |")


if __name__ == "__main__":
    main()
