"""The asyncio driver's socket (membership/udp.py): kernel receive times, the send backlog, and
loop-lag reports without a periodic wake-up."""

from __future__ import annotations

import asyncio
import socket
import struct
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from membership import MembershipConfig
from membership.aio import start_member
from membership.udp import SO_TIMESTAMPNS, StallMeter, UdpSocket, arrival_time, bind_udp

from test_membership_udp import wait_for


def test_arrival_time_reads_a_timespec_of_either_word_size():
    assert arrival_time([(socket.SOL_SOCKET, SO_TIMESTAMPNS, struct.pack("qq", 1_700_000_000, 250_000_000))]) \
        == pytest.approx(1_700_000_000.25)
    assert arrival_time([(socket.SOL_SOCKET, SO_TIMESTAMPNS, struct.pack("ii", 1_700_000_000, 500_000_000))]) \
        == pytest.approx(1_700_000_000.5)
    assert arrival_time([(socket.SOL_SOCKET, SO_TIMESTAMPNS, b"\0" * 12)]) is None  # malformed: no time
    assert arrival_time([(socket.IPPROTO_IP, SO_TIMESTAMPNS, struct.pack("qq", 1, 0))]) is None
    assert arrival_time([]) is None


def test_stall_meter_reports_once_per_stall():
    meter = StallMeter(0.2)
    assert meter.late(10.0, 10.1) is None  # on time (within the threshold)
    # A stall from 10.1 to 11.0: the timer due at 10.3 and the datagrams that arrived during it.
    assert meter.late(10.3, 11.0) == pytest.approx(0.7)
    assert meter.late(10.2, 11.0) is None  # the same stall's backlog
    assert meter.late(10.9, 11.01) is None
    # Work that fell due after that report and ran late again: another stall.
    assert meter.late(11.5, 12.0) == pytest.approx(0.5)
    # A loop that keeps running late reports each time.
    assert meter.late(12.1, 12.4) == pytest.approx(0.3)


@given(st.lists(st.tuples(st.floats(0, 100), st.floats(0, 5)), max_size=40))
def test_stall_meter_against_a_reference(work):
    """Against the rule written out: report when lag > threshold and due >= the last report's time."""
    meter, last = StallMeter(0.2), -float("inf")
    now = 0.0
    for step, wait in work:
        now += step  # time moves forward
        due = now - wait
        lag = now - due  # (the same float the meter computes)
        expect = lag if lag > 0.2 and due >= last else None
        if expect is not None:
            last = now
        got = meter.late(due, now)
        assert (got is None) == (expect is None)
        if got is not None:
            assert got == pytest.approx(expect)


class _FullBuffer(socket.socket):
    """A UDP socket whose kernel send buffer is 'full' for the first ``full`` sends."""

    full = 0

    def sendto(self, data, addr):  # type: ignore[override]
        if self.full:
            self.full -= 1
            raise BlockingIOError
        return super().sendto(data, addr)


def test_a_full_send_buffer_queues_in_order_and_drops_beyond_the_backlog():
    async def main():
        loop = asyncio.get_running_loop()
        errors: list[str] = []
        got: list[bytes] = []
        receiver = UdpSocket(loop, await bind_udp(loop, ("127.0.0.1", 0)), lambda d, a, t: got.append(d),
                             errors.append)
        sock = _FullBuffer(socket.AF_INET, socket.SOCK_DGRAM)
        sock.setblocking(False)
        sock.bind(("127.0.0.1", 0))
        sock.full = 1
        sender = UdpSocket(loop, sock, lambda d, a, t: None, errors.append, max_backlog=3)
        for i in range(5):  # the first fails and queues, two more queue, two are dropped
            sender.sendto(b"d%d" % i, receiver.address)
        assert errors == ["send_dropped", "send_dropped"]
        await wait_for(lambda: len(got) == 3, 5.0, "the backlog flushed when writable")
        assert got == [b"d0", b"d1", b"d2"]
        sender.sendto(b"d5", receiver.address)  # the backlog is empty again: sent at once
        await wait_for(lambda: len(got) == 4, 5.0, "a send after the backlog")
        assert got[-1] == b"d5"
        sender.close()
        receiver.close()
        sender.sendto(b"late", receiver.address)  # after close: ignored, no error

    asyncio.run(main())


def test_datagrams_carry_the_kernel_receive_time():
    async def main():
        loop = asyncio.get_running_loop()
        got: list[float | None] = []
        udp = UdpSocket(loop, await bind_udp(loop, ("127.0.0.1", 0)), lambda d, a, t: got.append(t),
                        lambda kind: None)
        if not udp.stamped:
            pytest.skip("this kernel does not stamp datagrams (SO_TIMESTAMPNS)")
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as out:
            sent = time.time()
            out.sendto(b"x", udp.address)
            time.sleep(0.3)  # the stall under test: the datagram waits in the buffer
            await wait_for(lambda: got, 5.0, "the datagram")
        udp.close()
        assert got[0] is not None and sent - 0.05 <= got[0] <= sent + 0.2

    asyncio.run(main())


@pytest.mark.parametrize("stamp", [True, False], ids=["kernel-times", "periodic-check"])
def test_a_stalled_loop_is_reported_to_the_core_once(stamp):
    """A datagram waits through a 0.6 s stall of the loop: the member reports the lag to its
    core (local health), with no periodic callback where the kernel stamps datagrams."""
    async def main():
        member = await start_member(MembershipConfig(cluster_name="lag"), "m0", stamp=stamp)
        try:
            assert (member._lag_handle is None) == member._udp.stamped
            before = member.core.stats["loop_lag_reports"]
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as out:
                out.sendto(b"not gossip", member.bound)
                time.sleep(0.6)  # the stall under test
                await wait_for(lambda: member.core.stats["loop_lag_reports"] > before, 5.0, "a lag report")
            assert member.core.stats["dropped_bad_magic"] == 1  # and the datagram was still read
        finally:
            member.close()

    asyncio.run(main())


def test_a_socket_that_stamps_nothing_falls_back_to_the_periodic_check():
    async def main():
        member = await start_member(MembershipConfig(cluster_name="lag"), "m0")
        try:
            if not member._udp.stamped:
                pytest.skip("this kernel does not stamp datagrams (SO_TIMESTAMPNS)")
            assert member._lag_handle is None
            member._arrived(b"not gossip", ("127.0.0.1", 9), None)  # as if the option stamped nothing
            assert not member._udp.stamped and member._lag_handle is not None
        finally:
            member.close()

    asyncio.run(main())


def test_on_flush_runs_after_every_input_once_the_timer_is_armed_and_a_raising_hook_is_only_logged(caplog):
    async def main():
        loop = asyncio.get_running_loop()
        member = await start_member(MembershipConfig(cluster_name="hook"), "m0")
        seen: list[tuple[float, bool, int]] = []

        def hook(now: float) -> None:
            seen.append((now, member._timer_at == member.core.get_timer(), member.core.stats["dropped_bad_magic"]))

        def boom(now: float) -> None:
            raise RuntimeError("a hook bug")
        try:
            member.on_flush = hook
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as out:
                out.sendto(b"not gossip", member.bound)
                await wait_for(lambda: any(dropped for _, _, dropped in seen), 5.0, "a flush after the datagram")
                assert all(armed for _, armed, _ in seen), "called last, after the timer was re-armed"
                assert all(now <= loop.time() for now, _, _ in seen)
                member.on_flush = boom
                out.sendto(b"not gossip", member.bound)
                out.sendto(b"not gossip", member.bound)
                await wait_for(lambda: member.core.stats["dropped_bad_magic"] == 3, 5.0, "both datagrams read")
            assert [r for r in caplog.records if r.name == "membership" and "on_flush hook" in r.getMessage()
                    and r.exc_info is not None]
            assert not member.closed and member._timer is not None and member._timer_at == member.core.get_timer()
        finally:
            member.close()

    asyncio.run(main())
