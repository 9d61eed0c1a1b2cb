"""SWIM gossip membership with the Lifeguard refinements, as a sans-I/O core plus an asyncio driver.

Layout (one concern per module, as in hashicorp/memberlist; sans-I/O as in aioquic/h11):

``config.MembershipConfig``  every knob, with units and LAN defaults
``status``                   member statuses and event kinds (``Literal`` types), update precedence table
``messages``                 ``Meta``, ``MemberInfo``, wire messages, events
``wire``                     datagram codec (msgpack, versioned, strict), ``Keyring`` (AES-GCM)
``core.Swim``                the protocol state machine (theory of operation in its docstring): a
                             facade over its parts ``view`` (member table, checksum, probe ring),
                             ``dissemination`` (piggyback, gossip, push-pull), ``probing``,
                             ``updates`` (Alive/Suspect/Dead, suspicions), ``conflicts`` (duplicate
                             ids), ``joining`` (seeds, refusals); ``sampling`` (``Random.sample``)
``suspicion``/``awareness``  Lifeguard suspicion timer and local health awareness
``queue``                    piggyback broadcast queue with retransmit limit
``aio``                      asyncio UDP driver: ``start_member(...) -> Member``
``udp``                      the driver's socket: datagrams with the kernel's receive time (loop
                             lag without a periodic wake-up), a bounded send backlog
``driver.drain``             the flush step every driver (asyncio, the simulator) runs after an input

Core API (no I/O, no clock, injected RNG; the asyncio driver, the simulator and the tests all
drive it the same way)::

    core = Swim(config, "n1", ("10.0.0.1", 7001), meta=Meta(weight=1.0, http="http://..."),
                rng=random.Random(seed), now=0.0)
    core.join([("10.0.0.2", 7001)], now)          # seed addresses
    core.receive_datagram(data, addr, now)         # never raises; bad input dropped + counted
    core.handle_timer(now)                         # run work that is due
    core.datagrams_to_send() -> [(bytes, addr)]    # drain the outbox (each <= mtu_bytes)
    core.next_event() / core.events()              # MemberEvent(kind, member, at) | JoinRefused | RefusedPeer
                                                   # | JoinAttempt | DeclaredDead | IdConflict
    core.set_seeds(addrs)                          # where the next join retries go (DNS re-resolution)
    core.get_timer() -> float | None               # when to call handle_timer next
    core.members() / core.live_members()           # MemberInfo; live = alive + suspect
    core.member(node_id) -> MemberInfo | None; core.incarnation; core.meta
    core.view_checksum                             # sum of CRC-32s of live ids+incarnations (on acks)
    core.update_meta(meta, now); core.leave(now); core.leave_broadcast_done
    core.report_loop_lag(lag_s, now); core.local_health   # Lifeguard awareness score
    core.stats                                     # Counter: probes_sent, dropped_<reason>, ...
    core.keyring.install(key) / .use(key) / .remove(key)  # key rotation

``DeclaredDead(incarnation, at)``: another member declared *this* one dead (the core refutes at
once); whatever this member owned may already have been given to others.
``IdConflict(addr, bumps, at)``: another live process at ``addr`` uses this member's id (at most
one event a minute while it lasts).

Placement must own partitions from ``live_members()`` (alive *and* suspect): suspicion is the
protocol's way of giving a slow member time, not a verdict.

``MembershipConfig.cluster_settings`` is an opaque fingerprint (e.g. "partitions=4096,replicas=3,
seed=7") carried on every datagram: members with a different fingerprint (or cluster name) are
refused. Only the newcomer is: a member that never had a live peer and tries to join such a
cluster gets a ``JoinRefused(addr, reason, at)`` event (a node process should stop on the
first one); the member it contacted reports ``RefusedPeer(addr, node, reason, at)`` and carries
on. ``JoinAttempt(attempt, seeds, reason, retry_at, at)`` reports each join attempt that got no
member to answer.
"""

from .config import MembershipConfig
from .core import Swim
from .messages import (
    ALIVE,
    DEAD,
    LEFT,
    LIVE_STATUSES,
    SUSPECT,
    Addr,
    DeclaredDead,
    Event,
    IdConflict,
    JoinAttempt,
    JoinRefused,
    MemberEvent,
    MemberInfo,
    Meta,
    RefusedPeer,
)
from .wire import PROTOCOL_VERSION, Keyring

__all__ = [
    "MembershipConfig", "Swim", "Meta", "MemberInfo", "MemberEvent", "JoinRefused", "RefusedPeer", "JoinAttempt",
    "DeclaredDead", "IdConflict",
    "Event",
    "Addr", "ALIVE", "SUSPECT", "DEAD", "LEFT", "LIVE_STATUSES", "Keyring", "PROTOCOL_VERSION",
]
