"""The asyncio driver's UDP socket: datagrams read with the time the kernel received them, and
sent with a bounded backlog; plus ``StallMeter``, which turns late work into loop-lag reports.

Why not asyncio's datagram transport: it reads with ``recvfrom``, one datagram per loop
iteration, and has no way to hand on ancillary data. The kernel's receive time
(``SO_TIMESTAMPNS``, Linux ``socket(7)``) is how the driver notices that its own loop was
stalled without waking up to check: a datagram that waited in the socket's buffer longer than
``loop_lag_threshold_s`` was read by a loop that could not run. A periodic check (the driver's
former 10 Hz callback) cost as much CPU as the rest of an idle member (issue 14 item 1:
docs/benchmarks-log.md, "Idle CPU ... third pass"). Where the kernel does not stamp datagrams
(``UdpSocket.stamped`` is False) the driver falls back to that periodic check.

What a stall delays is either a datagram (now stamped) or a timer (the driver knows when it was
due), so a stall that delays neither went unseen - and had nothing to be late for. The receive
time is wall-clock time: a step of the clock while a datagram waits (NTP) makes its wait look
longer or shorter by the step; forward, that is one needless report (local health rises by one
and the next verdicts wait a probe interval), backward one missed report of a delay that the
timers may still show.

Sending: ``sendto`` on the non-blocking socket; if the kernel's send buffer is full the
datagram waits in a backlog of at most ``max_backlog`` (then dropped and counted, as a full
network queue would drop it), flushed when the socket is writable again.
"""

from __future__ import annotations

import asyncio
import collections
import platform
import socket
import struct
import sys
from collections.abc import Callable

from .messages import Addr

__all__ = ["SO_TIMESTAMPNS", "StallMeter", "UdpSocket", "arrival_time", "bind_udp"]

#: ``SO_TIMESTAMPNS`` (= ``SCM_TIMESTAMPNS``) from Linux ``<asm-generic/socket.h>`` (the
#: ``_OLD`` name since 5.1: a ``struct timespec`` of the machine's word size); Python's
#: ``socket`` module does not export it. Some architectures number it differently in their own
#: ``asm/socket.h``, so it is set only on those that use the generic numbers (``_GENERIC``); on
#: others the driver uses its periodic check.
SO_TIMESTAMPNS = 35
_GENERIC = {"x86_64", "amd64", "i386", "i686", "aarch64", "arm64", "riscv64"}
_ANCILLARY_SPACE = socket.CMSG_SPACE(16)
_MAX_DATAGRAM = 65535
#: Datagrams read per wake-up at most, so one busy socket cannot starve the loop's other work.
READ_BATCH = 64


async def bind_udp(loop: asyncio.AbstractEventLoop, bind: Addr) -> socket.socket:
    """A non-blocking UDP socket bound to ``bind`` (a host name is resolved; the first address
    that binds wins, as ``loop.create_datagram_endpoint`` does). Raises ``OSError``."""
    infos = await loop.getaddrinfo(bind[0], bind[1], type=socket.SOCK_DGRAM)
    error: OSError = OSError(f"no address for {bind[0]!r}")
    for family, _type, proto, _name, sockaddr in infos:
        sock = socket.socket(family, socket.SOCK_DGRAM, proto)
        try:
            sock.setblocking(False)
            sock.bind(sockaddr)
        except OSError as exc:
            sock.close()
            error = exc
            continue
        return sock
    raise error


def arrival_time(ancillary: list[tuple[int, int, bytes]]) -> float | None:
    """The kernel's receive time (Unix seconds) from ``recvmsg``'s ancillary data, or None."""
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
            if len(data) == 16:
                sec, nsec = struct.unpack("qq", data)
            elif len(data) == 8:
                sec, nsec = struct.unpack("ii", data)
            else:
                return None
            return sec + nsec * 1e-9
    return None


class StallMeter:
    """Decides which late work is a loop stall worth reporting, once per stall.

    ``late(due, now)`` is told that something due at ``due`` (a timer's deadline, a datagram's
    arrival, on the loop's clock) runs at ``now``; it returns the lag to report to
    ``Swim.report_loop_lag`` when it exceeds ``threshold_s`` and the work fell due after the last
    reported stall ended, else None. So the backlog one stall leaves behind (every datagram that
    waited through it, every timer it delayed) raises local health once, as one late periodic
    check did; a loop that keeps running late reports again each time."""

    __slots__ = ("reported_at", "threshold_s")

    def __init__(self, threshold_s: float) -> None:
        self.threshold_s = threshold_s
        self.reported_at = -float("inf")  # when the last reported stall was noticed

    def late(self, due: float, now: float) -> float | None:
        lag = now - due
        if lag > self.threshold_s and due >= self.reported_at:
            self.reported_at = now
            return lag
        return None


class UdpSocket:
    """One bound UDP socket on an asyncio loop (see the module docstring).

    ``on_datagram(data, addr, arrival)`` gets every datagram, ``arrival`` being the kernel's
    receive time (Unix seconds) or None when not ``stamped``; ``on_error(kind)`` counts
    what went wrong (``"socket_errors"``, ``"send_dropped"``)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket,
                 on_datagram: Callable[[bytes, Addr, float | None], None], on_error: Callable[[str], None],
                 *, stamp: bool = True, max_backlog: int = 4096) -> None:
        self._loop = loop
        self.sock = sock
        self._on_datagram = on_datagram
        self._on_error = on_error
        self._max_backlog = max_backlog
        self._backlog: collections.deque[tuple[bytes, Addr]] = collections.deque()
        host, port = sock.getsockname()[:2]
        self.address: Addr = (host, port)  # kept after close
        self.stamped = (stamp and sys.platform.startswith("linux") and platform.machine().lower() in _GENERIC
                        and self._stamp())
        self.closed = False
        loop.add_reader(sock.fileno(), self._read_ready)

    def _stamp(self) -> bool:
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        except OSError:
            return False
        return True

    def sendto(self, data: bytes, addr: Addr) -> None:
        if self.closed:
            return
        if self._backlog:
            self._queue(data, addr)
            return
        try:
            self.sock.sendto(data, addr)
        except (BlockingIOError, InterruptedError):
            self._queue(data, addr)
            self._loop.add_writer(self.sock.fileno(), self._write_ready)
        except OSError:  # e.g. EPERM from a firewall, ENETUNREACH: UDP is lossy anyway
            self._on_error("socket_errors")

    def _queue(self, data: bytes, addr: Addr) -> None:
        if len(self._backlog) >= self._max_backlog:
            self._on_error("send_dropped")
        else:
            self._backlog.append((data, addr))

    def _write_ready(self) -> None:
        backlog = self._backlog
        while backlog:
            data, addr = backlog[0]
            try:
                self.sock.sendto(data, addr)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self._on_error("socket_errors")
            backlog.popleft()
        self._loop.remove_writer(self.sock.fileno())

    def _read_ready(self) -> None:
        recvmsg = self.sock.recvmsg
        space = _ANCILLARY_SPACE if self.stamped else 0
        for _ in range(READ_BATCH):
            if self.closed:
                return
            try:
                data, ancillary, _flags, addr = recvmsg(_MAX_DATAGRAM, space)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # e.g. ICMP port unreachable reported on the socket
                self._on_error("socket_errors")
                continue
            self._on_datagram(data, (addr[0], addr[1]), arrival_time(ancillary) if ancillary else None)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        fd = self.sock.fileno()
        self._loop.remove_reader(fd)
        if self._backlog:
            self._loop.remove_writer(fd)
            self._backlog.clear()
        self.sock.close()

