"""asyncio UDP driver for the sans-I/O ``Swim`` core (the shape of aioquic's asyncio/protocol.py).

The driver owns the socket, the clock and the timers; the core owns the protocol. After every
input (a datagram, a timer, an API call) the driver sends what the core queued, hands the core's
events to subscribers (both through ``membership.driver.drain``, the step the simulator's node
models share), and re-arms a single ``loop.call_at(core.get_timer())``.

It also measures event-loop lag, so a member whose own loop is starved (GC, CPU contention, a
blocking call) raises its Lifeguard local health score and waits longer before accusing others,
instead of declaring healthy peers dead: how late the core's timer ran after its deadline, and
how long each datagram waited in the socket's buffer (the kernel's receive time, see
``membership.udp``), reported to ``core.report_loop_lag`` once per stall (``StallMeter``). Neither
needs a wake-up of its own; where the kernel does not stamp datagrams a callback every
``lag_check_interval_s`` checks how late it runs instead.

Usage::

    member = await start_member(MembershipConfig(), "n1", bind=("0.0.0.0", 7001),
                                advertise=("10.0.0.1", 7001), meta=Meta(http="http://10.0.0.1:8001"),
                                seeds=[("10.0.0.2", 7001)])
    async for event in member.subscribe():   # MemberEvent | JoinRefused | JoinAttempt | ...
        ...
    member.members(); member.live_members()
    member.on_flush = fn     # fn(now) after every datagram/timer handled (see Member)
    await member.update_meta(Meta(weight=2.0))
    await member.leave()     # announce, give the gossip a moment, close
    member.close()           # abrupt stop (as if the process died)
"""

from __future__ import annotations

import asyncio
import logging
import random
import socket
import time
from collections.abc import Callable, Iterable

from .config import MembershipConfig
from .core import Swim
from .driver import drain
from .messages import Addr, Event, JoinAttempt, MemberInfo, Meta
from .seeds import DnsSeed, Resolver, SeedFinder
from .udp import StallMeter, UdpSocket, bind_udp

__all__ = ["Member", "Subscription", "SubscriptionOverflow", "start_member", "system_resolver"]

_UNSPECIFIED_HOSTS = {"0.0.0.0", "::", ""}


class SubscriptionOverflow(Exception):
    """The subscriber fell more than ``max_backlog`` events behind and events were dropped:
    read the current view (``Member.members()``) and subscribe again."""


_OVERFLOW = object()


class Subscription:
    """Async iterator of events from one member; ends when the member closes.

    Events wait in a queue of at most ``max_backlog``; a subscriber that falls further behind
    (or never reads) is cut off rather than growing the queue without bound: its iteration
    raises ``SubscriptionOverflow`` once it has read what was queued before the cut.
    ``max_backlog=None`` is unbounded: for a reader that never stops reading, since one
    push-pull with a large cluster delivers an event per member at once."""

    def __init__(self, member: Member, max_backlog: int | None = 10_000) -> None:
        self._member = member
        self._max_backlog = max_backlog
        self._queue: asyncio.Queue[object] = asyncio.Queue()

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Event:
        event = await self._queue.get()
        if event is None:
            raise StopAsyncIteration
        if event is _OVERFLOW:
            raise SubscriptionOverflow(f"more than {self._max_backlog} unread membership events; "
                                       "read members() and subscribe again")
        return event  # type: ignore[return-value]

    def _deliver(self, event: Event) -> None:
        if self._max_backlog is None or self._queue.qsize() < self._max_backlog:
            self._queue.put_nowait(event)
            return
        self._member.core.stats["subscriptions_overflowed"] += 1
        self._end(_OVERFLOW)

    def close(self) -> None:
        self._end(None)

    def _end(self, last: object) -> None:
        self._member._subscriptions.discard(self)
        self._queue.put_nowait(last)


class Member:
    """A running member: one UDP socket driving one ``Swim`` core.

    ``on_flush``, if set, is called with the loop's time at the end of every flush: after each
    datagram, timer or API call the driver handed the core, once what it queued was sent and the
    timer re-armed. Work the owner must do now and then can ride on these wake-ups (at least one
    a probe period while in a cluster) instead of a timer of its own: on the project's test
    machine each wake-up of an idle thread costs ~240 us of CPU (docs/benchmarks-log.md, "Idle CPU
    side by side with Serf, third pass"). It runs for every datagram, so it must be cheap; an
    exception is logged and the member carries on.
    """

    def __init__(self, core: Swim, loop: asyncio.AbstractEventLoop, sock: socket.socket,
                 lag_check_interval_s: float, *, stamp: bool = True) -> None:
        self.core = core
        self._loop = loop
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        self._timer_armed = 0.0  # when the timer was armed: a deadline already past then is not lag
        self._stalls = StallMeter(core.config.loop_lag_threshold_s)
        self._lag_interval = lag_check_interval_s
        self._lag_handle: asyncio.TimerHandle | None = None
        self._subscriptions: set[Subscription] = set()
        self._left = asyncio.Event()
        self._channels: dict[bytes, Callable[[bytes, Addr], None]] = {}
        self._finder: SeedFinder | None = None  # set when seeds are found by DNS
        self._resolving: asyncio.Task | None = None
        self._empty_resolutions = 0  # DNS found no seed but us, this many times in a row
        self.closed = False
        self.on_flush: Callable[[float], None] | None = None
        self._udp = UdpSocket(loop, sock, self._arrived, self._count, stamp=stamp)

    # --- the socket ---

    def _arrived(self, data: bytes, addr: Addr, arrival: float | None) -> None:
        if self.closed:
            return
        if arrival is not None:
            now = self._loop.time()
            self._late(now - (time.time() - arrival), now)
        elif self._udp.stamped:  # the option was accepted but stamps nothing (another value on this CPU?)
            self._udp.stamped = False
            self._schedule_lag_check()
        self.datagram_received(data, addr)

    def datagram_received(self, data: bytes, addr: Addr) -> None:
        if self.closed:
            return
        handler = self._channels.get(data[:2])
        if handler is not None:
            handler(data, addr)
            return
        self.core.receive_datagram(data, addr, self._loop.time())
        self._flush()

    def _send(self, data: bytes, addr: Addr) -> None:
        self._udp.sendto(data, addr)

    def _count(self, what: str) -> None:
        self.core.stats[what] += 1

    def _late(self, due: float, now: float) -> None:
        lag = self._stalls.late(due, now)
        if lag is not None:
            self.core.report_loop_lag(lag, now)
            self._flush()  # as after any input (a handoff datagram is not followed by one)

    # --- public API ---

    @property
    def node_id(self) -> str:
        return self.core.node_id

    @property
    def bound(self) -> Addr:
        return self._udp.address

    def members(self) -> list[MemberInfo]:
        return self.core.members()

    def live_members(self) -> list[MemberInfo]:
        """Alive and suspect members (the set placement owns partitions from)."""
        return self.core.live_members()

    def subscribe(self, max_backlog: int | None = 10_000) -> Subscription:
        """Events from now on (``async for event in member.subscribe()``); see ``Subscription``."""
        sub = Subscription(self, max_backlog)
        self._subscriptions.add(sub)
        return sub

    def add_channel(self, magic: bytes, handler: Callable[[bytes, Addr], None]) -> None:
        """Hand datagrams that start with the two bytes ``magic`` to ``handler`` instead of the
        core: another protocol (ownership handoffs) shares the gossip port, its firewall rule
        and its address in the member list. Gossip datagrams start with ``b"SW"``."""
        if len(magic) != 2 or magic == b"SW":
            raise ValueError(f"a channel needs two magic bytes other than b'SW', got {magic!r}")
        self._channels[magic] = handler

    def send_datagram(self, data: bytes, addr: Addr) -> None:
        """Send one datagram of a channel from the gossip socket (dropped once closed)."""
        if not self.closed:
            self._send(data, addr)

    async def update_meta(self, meta: Meta) -> None:
        self.core.update_meta(meta, self._loop.time())
        self._flush()

    async def leave(self, timeout_s: float = 2.0) -> None:
        """Announce the leave, wait (bounded) until it was gossiped, then close."""
        if self.closed:
            return
        self.core.leave(self._loop.time())
        self._flush()
        try:
            await asyncio.wait_for(self._left.wait(), timeout_s)
        except TimeoutError:
            pass
        self.close()

    def close(self) -> None:
        """Stop at once, without telling anyone (others will detect the failure)."""
        if self.closed:
            return
        self.closed = True
        for handle in (self._timer, self._lag_handle, self._resolving):
            if handle is not None:
                handle.cancel()
        self._udp.close()
        for sub in list(self._subscriptions):
            sub.close()

    # --- driving the core ---

    def _start(self, seeds: Iterable[Addr]) -> None:
        self.core.join(seeds, self._loop.time())
        self._flush()
        if not self._udp.stamped:
            self._schedule_lag_check()

    def _on_timer(self) -> None:
        due = self._timer_at
        self._timer = None
        self._timer_at = None
        if not self.closed:
            now = self._loop.time()
            if due is not None:
                self._late(max(due, self._timer_armed), now)
            self.core.handle_timer(now)
            self._flush()

    def _flush(self) -> None:
        drain(self.core, self._send, self._on_event)
        if self.core.leave_broadcast_done:
            self._left.set()
        deadline = self.core.get_timer()
        if deadline != self._timer_at:
            if self._timer is not None:
                self._timer.cancel()
            self._timer_at = deadline
            self._timer_armed = self._loop.time()
            self._timer = None if deadline is None else self._loop.call_at(deadline, self._on_timer)
        hook = self.on_flush
        if hook is not None:
            try:
                hook(self._loop.time())
            except Exception:
                logging.getLogger("membership").exception("on_flush hook %r raised (the member carries on)", hook)

    def _on_event(self, event: Event) -> None:
        if isinstance(event, JoinAttempt) and self._finder is not None and self._resolving is None:
            self._resolving = self._loop.create_task(self._resolve_seeds(0.0))
        for sub in list(self._subscriptions):
            sub._deliver(event)

    async def _resolve_seeds(self, delay_s: float) -> None:
        """Resolve the DNS seeds again (after a failed join attempt, or after a delay while they
        named nobody) and give the core the fresh addresses."""
        assert self._finder is not None
        await asyncio.sleep(delay_s)  # a driver timer (the core never waits)
        addrs = await self._finder.resolve()
        self._resolving = None
        if not self.closed:
            self._use_seeds(addrs)

    def _use_seeds(self, addrs: list[Addr]) -> None:
        """While the DNS seeds name no member but us the core has nobody to retry, so the
        driver retries the resolution itself, with the core's join backoff."""
        addrs = [a for a in addrs if a != self.core.advertise]
        if addrs:
            if self._empty_resolutions:
                self.core.join(addrs, self._loop.time())  # its join loop had stopped: start it
            else:
                self.core.set_seeds(addrs)
            self._empty_resolutions = 0
            self._flush()
            return
        assert self._finder is not None
        config = self.core.config
        self._empty_resolutions += 1
        retry_s = min(config.join_retry_max_interval_s,
                      config.join_retry_interval_s * 2 ** min(self._empty_resolutions - 1, 32))
        logging.getLogger("membership.seeds").warning(
            "seeds %s give no address but this member's own; resolving again in %.0f s",
            ", ".join(map(str, self._finder.names)), retry_s)
        self._resolving = self._loop.create_task(self._resolve_seeds(retry_s))

    def _schedule_lag_check(self) -> None:
        """The fallback where datagrams are not stamped: a callback every ``lag_check_interval_s``."""
        due = self._loop.time() + self._lag_interval
        self._lag_handle = self._loop.call_at(due, self._check_lag, due)

    def _check_lag(self, due: float) -> None:
        if self.closed:
            return
        self._late(due, self._loop.time())  # (flushes when it reports: nothing else changed)
        self._schedule_lag_check()


async def system_resolver(name: str, port: int) -> list[Addr]:
    """Every address ``name`` resolves to (A and AAAA), through the loop's thread pool."""
    infos = await asyncio.get_running_loop().getaddrinfo(name, port, type=socket.SOCK_DGRAM)
    return [(str(info[4][0]), int(info[4][1])) for info in infos]


async def start_member(config: MembershipConfig, node_id: str, *, bind: Addr = ("127.0.0.1", 0),
                       advertise: Addr | None = None, meta: Meta | None = None,
                       seeds: Iterable[Addr | DnsSeed] = (), rng: random.Random | None = None,
                       incarnation: int = 0, lag_check_interval_s: float = 0.1,
                       resolver: Resolver | None = None, stamp: bool = True) -> Member:
    """Bind a UDP socket, start a core and join ``seeds``.

    A ``DnsSeed`` stands for every address its name resolves to (``resolver``, by default the
    system's ``getaddrinfo``), resolved again after each failed join attempt (``seeds.py``).

    ``advertise`` is the address others should use; it defaults to the bound address and is
    required when binding to a wildcard address (0.0.0.0 / ::). ``incarnation`` lets the caller
    start above any incarnation the cluster may hold (e.g. derived from wall-clock seconds);
    without it a restarted member learns the old incarnation at join and refutes it.

    ``stamp=False`` measures loop lag with a callback every ``lag_check_interval_s`` even where
    the kernel stamps datagrams (tests compare the two ways).
    """
    loop = asyncio.get_running_loop()
    if advertise is None and bind[0] in _UNSPECIFIED_HOSTS:
        raise ValueError(f"bound to the wildcard address {bind[0]!r}: pass advertise=(routable_host, port)")
    sock = await bind_udp(loop, bind)
    bound = sock.getsockname()[:2]
    advertise = advertise or (bound[0], bound[1])
    if advertise[1] == 0:  # bound to port 0: the port the system chose (issue 31: port 0 was advertised)
        advertise = (advertise[0], bound[1])
    try:
        now = loop.time()
        # Unix time aligns the members' probe schedules (see core's "Probe schedule"); the core's
        # timers stay on the loop's monotonic clock.
        core = Swim(config, node_id, advertise, meta=meta, rng=rng or random.Random(),
                    now=now, incarnation=incarnation, clock_offset_s=time.time() - now)
        member = Member(core, loop, sock, lag_check_interval_s, stamp=stamp)
    except BaseException:
        sock.close()
        raise
    finder = SeedFinder(seeds, sock.family == socket.AF_INET6,
                        resolver or system_resolver)
    addrs: list[Addr] = list(finder.fixed)
    if finder.names:
        member._finder = finder
        addrs = await finder.resolve()
    member._start(addrs)
    if finder.names and not [a for a in addrs if a != core.advertise]:
        member._use_seeds([])
    return member
