"""Four `placement node` processes on loopback: agree, survive a kill -9, serve the client library."""

import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

from placement.client import PlacementClient

from ports import free_ports

pytestmark = pytest.mark.slow


def poll(predicate, timeout_s, what):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def checksum(url):
    return httpx.get(f"{url}/v1/placement", timeout=2).json()["checksum"]


@pytest.fixture
def cluster():
    gossip, http = free_ports(4), free_ports(4)
    procs, urls = [], [f"http://127.0.0.1:{p}" for p in http]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    for i in range(4):
        cmd = [sys.executable, "-m", "placement_cli", "node", "--id", f"n{i + 1}",
               "--gossip", f"127.0.0.1:{gossip[i]}", "--http", f"127.0.0.1:{http[i]}", "--partitions", "1024"]
        if i:
            cmd += ["--join", f"127.0.0.1:{gossip[0]}"]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    try:
        yield procs, urls
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait(10)


def test_four_processes_agree_then_survivors_converge_after_kill_9(cluster):
    procs, urls = cluster
    poll(lambda: all(len(httpx.get(f"{u}/v1/members", timeout=2).json()) == 4 for u in urls), 30,
         "4 members everywhere")
    poll(lambda: len({checksum(u) for u in urls}) == 1, 30, "one checksum")
    with PlacementClient(urls, long_poll_s=2) as client:
        assert client.checksum == checksum(urls[0])
        owners = httpx.get(f"{urls[1]}/v1/owners", params={"key": "order-42"}).json()["owners"]
        assert client.owner("order-42") == owners[0]["id"] and client.owner_url("order-42") == owners[0]["http"]

        procs[3].send_signal(signal.SIGKILL)
        survivors = urls[:3]

        def converged_without_n4():
            sums = {checksum(u) for u in survivors}
            members = httpx.get(f"{survivors[0]}/v1/placement", timeout=2).json()["members"]
            return len(sums) == 1 and [m[0] for m in members] == ["n1", "n2", "n3"]

        poll(converged_without_n4, 40, "survivors agree on a placement without n4")
        poll(lambda: client.checksum == checksum(survivors[0]), 10, "client refreshed by long-poll")
        assert "n4" not in {client.owner(f"k{i}") for i in range(2000)}
