"""Hosts with their own addresses on one machine: Linux network namespaces on a bridge.

Layout (nothing is added to the machine's own namespace, so concurrent runs and the host's
network are untouched)::

    namespace <prefix>-hub:  bridge br0 10.77.0.254/24 --- veth --- <prefix>-n1: eth0 10.77.0.1
                                                       --- veth --- <prefix>-n2: eth0 10.77.0.2 ...

Each node process runs in its own namespace (``ip netns exec``), so it binds its own IP and the
same ports as the others. Faults are iptables rules in the *receiving* node's namespace (INPUT
chain): a cut link drops everything from one address, loss drops UDP at random with the
``statistic`` match (Debian's ``iptables``; ``tc netem`` needs a kernel module these machines
lack). The test process reaches the nodes' HTTP APIs from a thread that has entered the hub
namespace (``enter_netns``).

Namespace names carry the test process's pid; ``remove_stale`` deletes those of dead processes,
so a run killed before its cleanup leaves nothing behind for long.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path

from host_cluster import Hosts

SUBNET = "10.77.0"
HUB_IP = f"{SUBNET}.254"
_CLONE_NEWNET = 0x40000000
_NAME = re.compile(r"^plns(\d+)-")


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=10)


def unavailable_reason() -> str | None:
    """Why namespace tests cannot run here (None: they can): not root, no ``ip netns``, no iptables."""
    if os.geteuid() != 0:
        return "network-namespace tests need root (ip netns add, iptables)"
    for tool, package in (("ip", "iproute2"), ("iptables", "iptables")):
        if shutil.which(tool) is None:
            return f"{tool} not found: install Debian's {package} (make test installs it)"
    probe = f"plns{os.getpid()}-probe"
    try:
        _ip("netns", "add", probe)
        subprocess.run(["ip", "netns", "exec", probe, "iptables", "-A", "INPUT", "-p", "udp", "-m", "statistic",
                        "--mode", "random", "--probability", "0.1", "-j", "DROP"],
                       check=True, capture_output=True, text=True, timeout=10)
    except subprocess.CalledProcessError as exc:
        return f"{' '.join(exc.cmd[:4])}... failed: {(exc.stderr or '').strip() or exc}"
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):
            _ip("netns", "del", probe)
    return None


def remove_stale() -> None:
    """Delete namespaces (and kill their processes) left by test processes that no longer run."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for line in listed.splitlines():
        name = line.split()[0] if line.split() else ""
        m = _NAME.match(name)
        if m and not Path(f"/proc/{m.group(1)}").exists():
            _kill_all_in(name)
            with contextlib.suppress(subprocess.CalledProcessError):
                _ip("netns", "del", name)


def _kill_all_in(ns: str) -> None:
    pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)


def enter_netns(ns: str) -> None:
    """Move the calling *thread* into namespace ``ns`` (``setns(2)`` changes only the caller's);
    sockets it creates from then on live there."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/run/netns/{ns}", os.O_RDONLY)
    try:
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns into {ns}: {os.strerror(err)}")
    finally:
        os.close(fd)


class Lab(Hosts):
    """``n`` hosts ``n1..nN`` at ``10.77.0.1..N`` on one bridge, each its own network namespace."""

    GOSSIP_PORT, HTTP_PORT = 7001, 8001

    def __init__(self, n: int) -> None:
        super().__init__()
        prefix = f"plns{os.getpid()}-"
        self.hub = prefix + "hub"
        self.names = [f"n{i + 1}" for i in range(n)]
        self.ns = {name: f"{prefix}{name}" for name in self.names}
        self.ip = {name: f"{SUBNET}.{i + 1}" for i, name in enumerate(self.names)}
        self._created: list[str] = []

    def gossip(self, name: str) -> str:
        return f"{self.ip[name]}:{self.GOSSIP_PORT}"

    def http(self, name: str) -> str:
        return f"{self.ip[name]}:{self.HTTP_PORT}"

    def enter(self) -> None:
        enter_netns(self.hub)

    def command_prefix(self, name: str) -> list[str]:
        # ip netns exec execs the command: the pid is the node's own, so kill -9 hits the node.
        return ["ip", "netns", "exec", self.ns[name]]

    def up(self) -> None:
        remove_stale()
        self._add_ns(self.hub)
        _ip("-n", self.hub, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.hub, "addr", "add", f"{HUB_IP}/24", "dev", "br0")
        _ip("-n", self.hub, "link", "set", "br0", "up")
        for i, name in enumerate(self.names):
            ns, veth = self.ns[name], f"v{i + 1}"
            self._add_ns(ns)
            _ip("-n", self.hub, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip("-n", self.hub, "link", "set", veth, "master", "br0", "up")
            _ip("-n", ns, "addr", "add", f"{self.ip[name]}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")

    def _add_ns(self, ns: str) -> None:
        _ip("netns", "add", ns)
        self._created.append(ns)

    def iptables(self, name: str, *rule: str) -> None:
        subprocess.run(["ip", "netns", "exec", self.ns[name], "iptables", *rule],
                       check=True, capture_output=True, text=True, timeout=10)

    def cut(self, a: str, b: str) -> None:
        """Drop everything between hosts ``a`` and ``b`` (both directions)."""
        self.iptables(a, "-A", "INPUT", "-s", self.ip[b], "-j", "DROP")
        self.iptables(b, "-A", "INPUT", "-s", self.ip[a], "-j", "DROP")

    def split(self, side_a: Sequence[str], side_b: Sequence[str]) -> None:
        for a in side_a:
            for b in side_b:
                self.cut(a, b)

    def udp_loss(self, probability: float) -> None:
        """Every host drops this share of the UDP datagrams it receives, at random."""
        for name in self.names:
            self.iptables(name, "-A", "INPUT", "-p", "udp", "-m", "statistic", "--mode", "random",
                          "--probability", str(probability), "-j", "DROP")

    def heal(self) -> None:
        for name in self.names:
            self.iptables(name, "-F", "INPUT")

    def down(self) -> None:
        """Kill every node process, delete every namespace (the rules go with them)."""
        super().down()
        for ns in reversed(self._created):
            _kill_all_in(ns)
            with contextlib.suppress(subprocess.CalledProcessError):
                _ip("netns", "del", ns)
        self._created.clear()
