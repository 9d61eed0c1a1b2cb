"""HTTP and client benchmark (issue 4 goals), all in one run on this machine.

    .venv/bin/python benchmarks/bench_http.py        # needs wrk (apt-get install wrk)

1. ``GET /v1/owners`` throughput against a no-op FastAPI route on the *same* server process
   (one uvicorn worker), loaded by wrk (a separate process, 1 thread, 32 connections).
2. ``POST /v1/route`` with 10,000 keys: server-side time (ASGI in-process, no network).
3. Client library lookups from a cached snapshot, against a plain dict lookup.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import socket
import subprocess
import sys
import time

import httpx

from placement.service.node import Node, NodeConfig

PARTITIONS = 4096


def _free_port(kind: int) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(port: int) -> None:
    """Child process: one node (a cluster of one) serving its API plus a no-op route."""
    import uvicorn

    from placement.service.http_api import create_app

    async def main() -> None:
        node = await Node(NodeConfig("n1", gossip_bind=("127.0.0.1", 0), partitions=PARTITIONS)).start()
        app = create_app(node)

        @app.get("/noop")
        async def noop() -> dict:
            return {}

        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error", lifespan="off"))
        await server.serve()

    asyncio.run(main())


def wrk(url: str, seconds: int = 8) -> float:
    out = subprocess.run(["wrk", "-t1", "-c32", f"-d{seconds}s", url], capture_output=True, text=True,
                         check=True).stdout
    m = re.search(r"Requests/sec:\s+([\d.]+)", out)
    assert m is not None, out
    return float(m.group(1))


def bench_throughput() -> None:
    if shutil.which("wrk") is None:
        print("wrk not installed: skipping the throughput comparison")
        return
    port = _free_port(socket.SOCK_STREAM)
    proc = subprocess.Popen([sys.executable, __file__, "--serve", str(port)])
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                httpx.get(base + "/healthz", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        wrk(base + "/noop", 2)  # warm up
        results = []
        for _ in range(2):  # alternate, to spread the machine's noise over both
            results.append((wrk(base + "/noop"), wrk(base + "/v1/owners?key=order-42")))
        noop = max(r[0] for r in results)
        owners = max(r[1] for r in results)
        print("| route | requests/s (best of 2 x 8 s, wrk -t1 -c32) |\n|---|---|")
        print(f"| no-op FastAPI route `GET /noop` | {noop:,.0f} |")
        print(f"| `GET /v1/owners?key=order-42` | {owners:,.0f} |")
        print(f"| ratio owners / no-op | {owners / noop:.2f} |")
    finally:
        proc.terminate()
        proc.wait(10)


def bench_route_and_client() -> None:
    from placement.client import AsyncPlacementClient
    from placement.service.http_api import create_app

    async def main() -> None:
        node = await Node(NodeConfig("n1", gossip_bind=("127.0.0.1", 0), partitions=PARTITIONS)).start()
        app = create_app(node)
        transport = httpx.ASGITransport(app=app)
        keys = [f"order-{i}" for i in range(10_000)]
        body = json.dumps({"keys": keys}).encode()
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            times = []
            for _ in range(20):
                t0 = time.perf_counter()
                r = await client.post("/v1/route", content=body, headers={"Content-Type": "application/json"})
                times.append(time.perf_counter() - t0)
                assert r.status_code == 200
        times.sort()
        print(f"\n`POST /v1/route` with 10,000 keys (in-process ASGI, JSON in and out, includes decoding and "
              f"encoding): median {1000 * times[10]:.1f} ms, best {1000 * times[0]:.1f} ms over 20 requests.")

        pc = await AsyncPlacementClient.connect("http://t", refresh=False, transport=transport)
        lookup_keys = [f"order-{i}" for i in range(1_000_000)]
        owner = pc.owner
        t0 = time.perf_counter()
        for k in lookup_keys:
            owner(k)
        t_client = time.perf_counter() - t0
        d = {k: "n1" for k in lookup_keys[:100_000]}
        get = d.get
        t0 = time.perf_counter()
        for k in lookup_keys[:100_000]:
            get(k)
        t_dict = (time.perf_counter() - t0) * 10
        print(f"\nClient `owner(key)` from the cached snapshot: {1e6 / t_client / 1e6:.2f} M keys/s; "
              f"a plain `dict.get` loop in the same run: {1e6 / t_dict / 1e6:.2f} M keys/s "
              f"(ratio {t_client / t_dict:.1f}x).")
        await pc.aclose()
        await node.leave()

    asyncio.run(main())


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--serve":
        serve(int(sys.argv[2]))
    else:
        bench_throughput()
        bench_route_and_client()
