"""Free ports for the node processes and servers the tests start: the one helper they all use.

A port handed out here is free on 127.0.0.1 for both TCP and UDP when it is handed out, is below
the kernel's ephemeral range (so no outgoing connection, of this run or another, is given it
between now and the moment a node binds it), and is never handed out twice by one process. Under
pytest-xdist each worker draws from its own block of that range, so concurrent workers never
pick the same port; a run beside this one (another checkout's suite) is unlikely to, as each
process starts at a random place in its block, and the bind check skips what is taken already.
"""

from __future__ import annotations

import os
import random
import socket
import threading

_LOW, _HIGH = 20000, 32768  # [low, high): below Linux's default ephemeral range (32768-60999)
_lock = threading.Lock()
_given: set[int] = set()
_next: int | None = None


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return _HIGH


def _block() -> tuple[int, int]:
    """This process's [low, high): the whole range, or the xdist worker's share of it."""
    high = min(_HIGH, _ephemeral_low())
    worker, count = os.environ.get("PYTEST_XDIST_WORKER", ""), os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if worker.startswith("gw") and worker[2:].isdigit() and count.isdigit() and int(count) > 0:
        size = (high - _LOW) // int(count)
        low = _LOW + int(worker[2:]) * size
        return low, low + size
    return _LOW, high


def _free_now(port: int) -> bool:
    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
        with socket.socket(socket.AF_INET, kind) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                return False
    return True


def _bind_0(n: int) -> int:
    """The fallback where the range is unusable: ports the kernel chose (TCP and UDP free)."""
    for _ in range(200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            first = s.getsockname()[1]
        ports = range(first, first + n)
        if first + n <= 65536 and not _given.intersection(ports) and all(map(_free_now, ports)):
            return first
    raise AssertionError(f"no {n} consecutive free ports")


def free_block(n: int) -> int:
    """The first of ``n`` consecutive ports, each free for TCP and UDP on 127.0.0.1 (for commands
    that number their nodes' ports from a base, as the documented ones do)."""
    global _next
    with _lock:
        low, high = _block()
        first = None
        if high - low >= 16 * n:
            if _next is None or not low <= _next < high:
                _next = random.randrange(low, high)
            for _ in range(high - low):
                candidate = _next if _next + n <= high else low
                _next = (candidate + 1 - low) % (high - low) + low
                ports = range(candidate, candidate + n)
                if not _given.intersection(ports) and all(map(_free_now, ports)):
                    first, _next = candidate, (candidate + n - low) % (high - low) + low
                    break
        if first is None:
            first = _bind_0(n)
        _given.update(range(first, first + n))
        return first


def free_port() -> int:
    """A port free for TCP and UDP on 127.0.0.1 (gossip is UDP, HTTP is TCP: either may use it)."""
    return free_block(1)


def free_ports(n: int) -> list[int]:
    """``n`` distinct free ports (not necessarily consecutive)."""
    return [free_port() for _ in range(n)]
