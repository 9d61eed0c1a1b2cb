"""A placement node: gossip membership + the placement table it implies + ownership events.

This is the composition root the issue calls "the node process": it starts the asyncio gossip
member (``membership.aio``), recomputes the ``PlacementTable`` from the live view on every
membership change (incrementally), and tells the embedding application which partitions it
acquired and released. The HTTP API (``placement.service.http_api``) and the CLI wrap it.

The gossip member and the exclusive-ownership runner run on a thread of their own
(``placement.service.node_thread``), so a blocked application loop delays neither probes and refutations
nor lease renewals: a busy worker is not declared dead and its partitions do not move (issue 15).
Everything the application sees - callbacks, ``ownership_changes()``, ``leadership()``, the
snapshot - lives on the loop that called ``start()``; ``placement.service.node_sync.NodeThread`` is the
same node for programs without asyncio.

Ownership has two modes (``NodeConfig.ownership``):

``"exclusive"`` (the default) runs the exclusive-ownership core (``ownership.core``, its
rules and guarantees in docs/ownership.md) through ``placement.service.node_ownership``: a partition is
owned only under a quorum lease, moves by handoff (the old owner's ``released`` handler drains,
may be ``async`` and returns a payload the new owner receives in ``grant(p).payload``), and a
node cut off from a witness majority stops owning before anyone can take its partitions.

``"available"`` (opt-in, the behaviour before exclusive ownership) owns what the local view's
table says, at once; during a split or a freeze two nodes can own a partition. Its rules:

* Members that are *alive or suspect* own partitions; dead and left members do not. Suspicion
  alone never moves a partition (that is what sank the lease designs: a slow node lost its
  leases and partitions jumped between hosts).
* A node that joins through seeds owns nothing until it has heard from the cluster: alone,
  its own view would give it every partition, and it would process them twice with their
  real owners.
* A node that learns the cluster declared it dead (it was frozen, or cut off) releases every
  partition at once - the others have already given them away - and takes none back for
  ``rejoin_holddown_s`` after refuting, so the others see it alive again first. The hold-down
  also damps a node that flaps because it is too slow to answer in time.
* A change is delivered as one ``OwnershipChange``: callbacks get ``released`` before
  ``acquired``. On a graceful leave the node releases everything *before* it announces that it
  leaves, so the new owners acquire after the old one released.

Embedding::

    async with Node(NodeConfig("n1", join=[("10.0.0.2", 7001)])) as node:
        node.owns("order-42"); node.owned_partitions()
        async for change in node.ownership_changes():
            start(change.acquired); stop(change.released)
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import inspect
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from membership import (
    DeclaredDead,
    IdConflict,
    JoinAttempt,
    JoinRefused,
    MemberEvent,
    MemberInfo,
    MembershipConfig,
    Meta,
    RefusedPeer,
)
from membership.aio import Member, start_member
from membership.messages import ZONE_TAG
from membership.seeds import DnsSeed
from ownership import ExclusiveConfig
from ownership.lease import WitnessState
from ownership.survival import Survival, assess
from ownership.views import View, witnesses_of

from ..changes import OwnershipChange, diff, led_by
from ..errors import InvalidConfigError, InvalidMembershipError, PlacementError
from ..snapshot import PlacementSnapshot
from ..table import PlacementTable, TableConfig
from ..zones import check_zone
from .background import detach
from .console.events import EventLog
from .members_file import MembersFile
from .node_ownership import ExclusiveRunner, Grant, _Hooks
from .node_thread import MembershipThread
from .witness_state import StateFile

Addr = tuple[str, int]


class JoinRefusedError(PlacementError):
    """The cluster refused this node: its cluster name, partition count, replicas or seed differ
    (or it has no gossip keys and the cluster encrypts). Only a node that never joined is refused."""


class LeadershipLost(PlacementError):
    """Raised out of ``async with node.leadership(name)`` when leadership moved elsewhere."""


@dataclass(frozen=True)
class NodeConfig:
    """Settings of one node. ``partitions``, ``replicas``, ``seed`` and ``capacity_factor``
    are cluster-wide: a node whose values differ is refused at join."""

    node_id: str
    gossip_bind: Addr = ("127.0.0.1", 7001)
    gossip_advertise: Addr | None = None
    http_advertise: str = ""  # base URL others use to reach this node's HTTP API
    join: tuple[Addr | DnsSeed, ...] = ()  # DnsSeed: every address of a DNS name (membership.seeds)
    weight: float = 1.0
    tags: Mapping[str, str] = field(default_factory=dict)
    #: Failure domain (``placement node --zone``; "" = none): replica sets span zones (``placement.zones``).
    zone: str = ""
    partitions: int = 4096
    replicas: int = 1
    seed: int = 0
    capacity_factor: float | None = None
    cluster: str = "placement"
    keys: tuple[bytes, ...] = field(default=(), repr=False)
    admin_token: str | None = field(default=None, repr=False)
    #: PEM certificate (chain) and private key files: the HTTP API serves HTTPS (``placement
    #: node --tls-cert --tls-key``; the node itself only carries them to its server).
    tls_cert: str | None = None
    tls_key: str | None = None
    settle_s: float = 1.0  # ready once joined and the view has not changed for this long
    # After being declared dead: own nothing this long after refuting (several times the p99
    # time for an update to reach every member, 0.4-0.6 s at N=256: BENCHMARKS.md).
    rejoin_holddown_s: float = 3.0
    #: ``placement node`` exits (status 5) if it has not joined after this long; 0: keeps trying.
    join_timeout_s: float = 0.0
    membership: MembershipConfig = field(default_factory=MembershipConfig)
    #: "exclusive" (never two owners; module docstring) or "available" (owns what its own view
    #: says, at once; two owners possible during splits and freezes).
    ownership: str = "exclusive"
    exclusive: ExclusiveConfig = field(default_factory=ExclusiveConfig)
    #: Where the witness keeps what it promised across restarts (``witness_state``); None:
    #: it forgets, and a restart waits the quiet time before voting (docs/ownership.md).
    state_dir: str | None = None
    #: Found a new cluster even if this node's members file lists members of one it was in
    #: (``placement node --new-cluster``): without it, a node started with no ``join`` seeds
    #: that was a member of a cluster rejoins that cluster (``members_file``).
    new_cluster: bool = False
    #: Where nodes without ``state_dir`` keep their members file; None: ``$PLACEMENT_STATE_HOME``,
    #: else ``$XDG_STATE_HOME/placement``, else ``~/.local/state/placement``.
    state_home: str | None = None

    def __post_init__(self) -> None:
        if self.ownership not in ("exclusive", "available"):
            raise InvalidConfigError(f"ownership must be 'exclusive' or 'available', got {self.ownership!r}")
        if self.new_cluster and self.join:
            raise InvalidConfigError("--new-cluster founds a new cluster, and --join joins a running one: drop one")
        if self.state_dir is not None and self.ownership != "exclusive":
            raise InvalidConfigError("--state-dir keeps a witness's promises, and only exclusive ownership has "
                                     "witnesses: drop --state-dir or --ownership available")
        TableConfig(self.partitions, self.replicas, self.seed, self.capacity_factor)  # validates
        if not self.node_id or not self.node_id.isprintable() or self.node_id != self.node_id.strip():
            raise InvalidConfigError(f"node id must be a non-empty printable string, got {self.node_id!r}")
        try:
            check_zone(self.zone, "--zone")
        except InvalidMembershipError as exc:
            raise InvalidConfigError(str(exc)) from None
        if self.zone and self.capacity_factor is not None:
            raise InvalidConfigError("--zone and a capacity factor do not combine (placement.zones): drop one")
        if ZONE_TAG in self.tags:
            raise InvalidConfigError(f"the tag {ZONE_TAG!r} is reserved for the zone: give --zone instead")
        Meta(weight=self.weight, http=self.http_advertise, tags=self.tags, zone=self.zone)  # validates weight

    @property
    def table_config(self) -> TableConfig:
        return TableConfig(self.partitions, self.replicas, self.seed, self.capacity_factor)

    def cluster_settings(self) -> str:
        """The fingerprint every member must share (checked by the gossip layer at join)."""
        c = self.capacity_factor
        return f"partitions={self.partitions},replicas={self.replicas},seed={self.seed},capacity={c}"

    def membership_config(self) -> MembershipConfig:
        return replace(self.membership, cluster_name=self.cluster, cluster_settings=self.cluster_settings(),
                       keys=self.keys or self.membership.keys)


def read_key_file(path: str) -> tuple[bytes, ...]:
    """Keys for gossip encryption: one per line, hex or base64, 16/24/32 bytes; first is primary."""
    keys = []
    with open(path, encoding="ascii") as fh:
        for n, line in enumerate(fh, 1):
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            try:
                key = bytes.fromhex(text) if len(text) in (32, 48, 64) else base64.b64decode(text, validate=True)
            except (ValueError, binascii.Error):
                raise InvalidConfigError(f"{path}:{n}: a key must be hex or base64") from None
            if len(key) not in (16, 24, 32):
                raise InvalidConfigError(f"{path}:{n}: a key must be 16, 24 or 32 bytes, got {len(key)}")
            keys.append(key)
    if not keys:
        raise InvalidConfigError(f"{path}: no key found")
    return tuple(keys)


Listener = Callable[[int], object]


_log = logging.getLogger("placement.node")
#: One line per join, suspicion, death, refutation and leave another member makes (rate-limited:
#: ``_MembershipLog``); ``placement node`` shows its INFO lines too.
_membership_log = logging.getLogger("placement.membership")
#: What the cluster survives, logged when it changes (``placement node`` shows its INFO lines too).
_survival_log = logging.getLogger("placement.survival")
# The core reports a persisting id conflict at most once a minute: hold "not ready" a little
# longer than that, so it does not flap while the conflict lasts.
_ID_CONFLICT_HOLD_S = 90.0


class _MembershipLog:
    """``_membership_log`` lines, at most ``burst`` at once and ``per_s`` a second after that
    (a token bucket): a split of a large cluster changes hundreds of members in a second. What
    is dropped is counted and said in the next line that is written; ``GET /v1/events`` holds
    every change."""

    def __init__(self, observer: str, burst: int = 20, per_s: float = 2.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.observer = observer
        self.burst, self.per_s, self._clock = burst, per_s, clock
        self._tokens = float(burst)
        self._at = clock()
        self.dropped = 0

    def write(self, level: int, text: str) -> bool:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.per_s)
        self._at = now
        if self._tokens < 1:
            self.dropped += 1
            return False
        self._tokens -= 1
        if self.dropped:
            text += f" ({self.dropped} membership changes not logged before this: too many at once; see GET /v1/events)"
            self.dropped = 0
        _membership_log.log(level, "%s", text)
        return True

    def event(self, event: MemberEvent) -> None:
        """The line for one change of another member (``updated`` has none: metadata)."""
        m, by, me = event.member, event.by, self.observer
        where = f"{m.addr[0]}:{m.addr[1]}"
        heard = ("never heard from directly" if m.heard_at is None
                 else f"last heard {max(0.0, time.monotonic() - m.heard_at):.1f} s ago")
        if event.kind == "joined":
            self.write(logging.INFO, f"member {m.node_id} joined: gossip {where}, http {m.meta.http or '-'}, "
                                     f"weight {m.meta.weight:g}, incarnation {m.incarnation}")
        elif event.kind == "suspect":
            why = ("it did not answer this node's probes, direct or through other members" if by in ("", me)
                   else f"{by} suspects it (its probes went unanswered)")
            self.write(logging.WARNING, f"member {m.node_id} at {where} is suspect: {why}; {heard}; it is declared "
                                        "dead unless it refutes in time")
        elif event.kind == "alive":
            self.write(logging.INFO, f"member {m.node_id} at {where} refuted the suspicion: alive at incarnation "
                                     f"{m.incarnation}")
        elif event.kind == "dead":
            why = ("its suspicion ran out here without a refutation" if by in ("", me)
                   else f"declared dead by {by} (its suspicion ran out there without a refutation)")
            self.write(logging.WARNING, f"member {m.node_id} at {where} is dead: {why}; {heard}")
        elif event.kind == "left":
            self.write(logging.INFO, f"member {m.node_id} at {where} left: it announced its leave")


class _ChangeStream:
    """One ``ownership_changes`` reader's unread changes, merged into one (``OwnershipChange.then``):
    a reader that is slow, or never reads, holds at most one partition set, not a queue."""

    def __init__(self, first: OwnershipChange) -> None:
        self._pending: OwnershipChange | None = first  # the first is yielded even when empty
        self._first = True
        self._closed = False
        self._error: BaseException | None = None  # raised to the reader once it has read the rest
        self._ready = asyncio.Event()

    def put(self, change: OwnershipChange) -> None:
        merged = change if self._pending is None else self._pending.then(change)
        self._pending = merged if (merged or self._first) else None  # back where the reader is
        self._ready.set()

    def close(self, error: BaseException | None = None) -> None:
        self._closed = True
        self._error = self._error or error
        self._ready.set()

    async def get(self) -> OwnershipChange | None:
        while self._pending is None:
            if self._closed:
                if self._error is not None:
                    raise self._error
                return None
            self._ready.clear()
            await self._ready.wait()
        change, self._pending, self._first = self._pending, None, False
        return change


class Node:
    """One member of the cluster, embedded in an application process (see module docstring)."""

    def __init__(self, config: NodeConfig) -> None:
        self.config = config
        self._member: Member | None = None
        self._closed = False  # close() was called: leave() has nothing left to do
        self._thread: MembershipThread | None = None  # runs the member and the runner
        self._snapshot: PlacementSnapshot | None = None
        self._changed = asyncio.Event()  # replaced on every new snapshot: long-poll waiters
        self._streams: set[_ChangeStream] = set()
        self._acquired_cbs: list[Listener] = []
        self._released_cbs: list[Listener] = []
        self._leaderships: dict[str, list[Callable[[], None]]] = {}
        self._refused: JoinRefusedError | None = None
        self._join_settled = asyncio.Event()  # set once joined, or refused (wait_joined)
        self._id_conflict: tuple[str, float] | None = None  # (message, monotonic time)
        self._last_view_change = 0.0
        self._has_peer = False
        self._leaving = False
        self._owned_table: PlacementTable | None = None  # what ownership was last published for; None: owns nothing
        self._holddown: asyncio.TimerHandle | None = None  # set while declared dead and waiting
        self._runner: ExclusiveRunner | None = None  # exclusive mode only
        self._survival: tuple[int, Survival] | None = None  # (stable view number, what it survives)
        self._published: set[int] = set()  # exclusive mode: announced acquired, not yet released
        self._leaders_checked = asyncio.Event()  # set and replaced whenever leadership may have changed
        self.declared_dead_count = 0
        self.placement_changes = 0
        self.callback_errors = 0  # exceptions raised by ownership callbacks (isolated)
        self.events = EventLog()  # what happened, for the console's timeline (GET /v1/events)
        self._state: tuple[StateFile | None, WitnessState | None] = (None, None)  # --state-dir (start)
        self._seeds: tuple[Addr | DnsSeed, ...] = config.join  # join, or the members on file (start)
        self._members_file: MembersFile | None = None  # exclusive mode (start)
        self._membership_log = _MembershipLog(config.node_id)

    # ----- lifecycle --------------------------------------------------------------------
    async def start(self) -> Node:
        c = self.config
        if c.ownership == "exclusive":
            # Read (and checked) before anything starts: a bad file is a configuration error.
            self._members_file = MembersFile(cluster=c.cluster, node=c.node_id, state_dir=c.state_dir,
                                             home=c.state_home)
            self._seeds = self._members_file.start_seeds(c.join, new_cluster=c.new_cluster)
        if c.state_dir is not None and c.ownership == "exclusive":
            state_file = StateFile(c.state_dir, cluster=c.cluster, node=c.node_id)
            restored = state_file.load()
            if not self._seeds:
                state_file.check_founder(restored)
            self._state = (state_file, restored)
        self._thread = MembershipThread(self.config.node_id, self._on_event)
        # What happened on the thread meanwhile (the founder's acquisitions) follows this first view.
        self._on_event(None, await self._thread.start(self._open))
        if self.security_warning is not None:  # (once the node runs: not for one that failed to bind)
            _log.warning("%s", self.security_warning)
        if not self._seeds and c.ownership == "exclusive":
            assert self._members_file is not None
            # Bound, so no other process of this node runs: the old cluster's members, if any,
            # are no way back to this new one.
            self._members_file.found()
            _survival_log.info("founded a new cluster %r (no --join). Started again with the same command, this "
                               "node rejoins it through the members it knew (%s)", c.cluster,
                               self._members_file.path)
        if self.joined:
            self._join_settled.set()
        return self

    async def wait_joined(self, timeout_s: float | None = None) -> None:
        """Return once this node has joined (heard from a member through its seeds; at once
        without seeds). Raises ``JoinRefusedError`` if the cluster refused it (other cluster
        name or settings, or keys), naming both sides' values, and ``TimeoutError`` after
        ``timeout_s``. ``start()`` does not wait: a seed may come up later."""
        if not self.joined and self._refused is None:
            await asyncio.wait_for(self._join_settled.wait(), timeout_s)
        if self._refused is not None:
            raise self._refused

    async def _open(self) -> tuple[Member, ExclusiveRunner | None]:
        """On the membership thread: bind the gossip socket, join, build the runner."""
        c = self.config
        meta = Meta(weight=c.weight, http=c.http_advertise, tags=c.tags, zone=c.zone)
        # Seconds since the epoch: a restarted node starts above any incarnation the cluster
        # holds for its old self, so it is not mistaken for its dead predecessor.
        member = await start_member(
            c.membership_config(), c.node_id, bind=c.gossip_bind, advertise=c.gossip_advertise,
            meta=meta, seeds=self._seeds, incarnation=int(time.time()),
        )
        runner = None
        if c.ownership == "exclusive":
            state_file, restored = self._state
            runner = ExclusiveRunner(
                c.node_id, c.exclusive, c.table_config, founder=not self._seeds, weight=c.weight, member=member,
                cluster=c.cluster, keys=c.membership_config().keys,
                hooks=_Hooks(self._t_acquired, self._t_release, self._t_ended, self._t_view),
                state_file=state_file, restored=restored, members_file=self._members_file,
                may_found=bool(self._seeds) and not c.join)
        self._member, self._runner = member, runner  # before the founder's first acquisitions reach the app
        return member, runner

    async def __aenter__(self) -> Node:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.leave()

    async def leave(self, timeout_s: float = 2.0) -> None:
        """Graceful leave: release every partition, announce the leave, stop."""
        if self._member is None or self._thread is None or self._leaving or self._closed:
            return  # not started, already leaving, or stopped abruptly (close): nothing to hand on
        self._leaving = True
        # Say so first (issue 30): open long-polls answer now (the HTTP API answers them with a
        # 503 that names the leave, so a client moves its long-poll to another node) and event
        # streams end after this event, so nothing open holds the process after the leave.
        self.events.append("leaving", self.node_id, "leaving the cluster: handing its partitions over, then "
                           "stopping; ask another node", time.time())
        self._changed.set()
        runner, thread = self._runner, self._thread
        if runner is not None:
            # Hand every partition on first (bounded by the release deadline), then leave.
            async def hand_on() -> None:
                await runner.leave(self.config.exclusive.handoff_timeout_s + timeout_s)
                runner.close()

            await thread.run(hand_on())
        else:
            self._publish(diff(self._owned_table, None, self.config.node_id))
            self._owned_table = None
        self._check_leaderships()
        await thread.run(self._member.leave(timeout_s))
        thread.stop()
        self._end_streams()

    def close(self) -> None:
        """Abrupt stop, as if the process died (others will detect it)."""
        self._closed = True
        if self._thread is not None:
            self._thread.close()
        self._end_streams()
        self._check_leaderships()

    def _end_streams(self) -> None:
        if self._holddown is not None:
            self._holddown.cancel()
        for stream in self._streams:
            stream.close()
        self.events.close()

    # ----- state ------------------------------------------------------------------------
    @property
    def node_id(self) -> str:
        return self.config.node_id

    @property
    def member(self) -> Member:
        if self._member is None:
            raise RuntimeError("node is not started")
        return self._member

    @property
    def snapshot(self) -> PlacementSnapshot:
        if self._snapshot is None:
            raise RuntimeError("node is not started")
        return self._snapshot

    @property
    def table(self) -> PlacementTable:
        return self.snapshot.table

    def members(self) -> list[MemberInfo]:
        """The member list as the membership thread last published it (after every change)."""
        if self._thread is None:
            raise RuntimeError("node is not started")
        return list(self._thread.members)

    @property
    def app_loop_lag_s(self) -> float:
        """How late the application's loop would run a timer (``loop_lag.AppLoopLag``): its
        longest busy run of the last minute, or how long it has been busy right now (seconds)."""
        return self._thread.app_lag.lag_s if self._thread is not None else 0.0

    @property
    def lease_valid_until(self) -> float | None:
        """Exclusive mode: the ``time.monotonic()`` instant this node's quorum lease ends, as last
        renewed (work started on a partition must end by then: ``may_work`` turns False the
        instant it passes); None in available mode."""
        return None if self._runner is None else self._runner.holding.valid_until

    @property
    def seeds(self) -> tuple[Addr | DnsSeed, ...]:
        """The seeds this node joins through: ``join``, else the members it last knew in its
        cluster (``members_file``; known once started), else none: it founded a cluster."""
        return self._seeds

    @property
    def joined(self) -> bool:
        """Heard from another member (or alone by design: started without seeds)."""
        return self._has_peer or not self._seeds

    @property
    def ready(self) -> bool:
        """Joined and the view has settled."""
        if self._refused or self._leaving or self._member is None or self.id_conflict:
            return False
        if self.paused is not None:
            return False
        return self.joined and time.monotonic() - self._last_view_change >= self.config.settle_s

    @property
    def paused(self) -> str | None:
        """Exclusive mode: why this node owns nothing now (no stable view yet, no quorum lease:
        cut off from a majority of the witnesses), or None."""
        if self._runner is None:
            return None
        reason = self._runner.own.fenced_reason
        if reason is not None and self._seeds and not self.config.join and not self._runner.own.lease.stable:
            assert self._members_file is not None
            reason += (f"; rejoining cluster {self.config.cluster!r} through the members this node last knew in it "
                       f"({self._members_file.path}): it founds a new cluster once every member it reaches says it "
                       "holds no view (they all restarted), and waits while it reaches none. To found one now, "
                       "start it with --new-cluster")
        return reason

    @property
    def survival(self) -> Survival | None:
        """Exclusive mode: what the cluster survives, from the stable view this node holds
        (``ownership.survival``); None before it holds one, or in available mode."""
        return None if self._survival is None else self._survival[1]

    @property
    def security_warning(self) -> str | None:
        """Set when gossip runs without keys (no ``--key-file``): what that allows, and the fix.
        Logged at start, in ``/readyz`` and ``/v1/ownership`` (the console, ``placement status``)."""
        if self.config.membership_config().keys:
            return None
        return ("gossip runs without keys (no --key-file): it is neither encrypted nor authenticated, so anyone "
                "who can send UDP to the gossip port can join, read the member list, and declare members dead "
                "until they refute; make a key with `placement keygen --out FILE` and give every node "
                "--key-file FILE (README, \"Gossip without --key-file\")")

    @property
    def leaving(self) -> bool:
        """A graceful leave has started: this node takes no new work."""
        return self._leaving

    @property
    def refused(self) -> JoinRefusedError | None:
        return self._refused

    @property
    def id_conflict(self) -> str | None:
        """Set while another live process uses this node's id (reported within the last
        ``_ID_CONFLICT_HOLD_S``): the node is not ready until the duplicate is gone."""
        if self._id_conflict is None or time.monotonic() - self._id_conflict[1] > _ID_CONFLICT_HOLD_S:
            return None
        return self._id_conflict[0]

    def owns(self, key: str | bytes) -> bool:
        """May this node work on the key's partition now? (Exclusive: it holds it under a
        valid lease and is not releasing it. Available: it leads it, joined, not leaving.)"""
        if self._runner is not None:
            return self.table.partition_of(key) in self._runner.owned_now()
        owners = self.table.lookup(key)
        return self._owning() and bool(owners) and owners[0] == self.node_id

    def owned_partitions(self) -> frozenset[int]:
        """Partitions this node may work on now (exclusive: held under a valid lease and not
        being released; available: led as last published - none before it joined, while held
        down after being declared dead, or once it is leaving)."""
        if self._runner is not None:
            return self._runner.owned_now()
        return led_by(self._owned_table, self.node_id)

    def may_work(self, partition: int, epoch: int = 0) -> bool:
        """The check before each unit of work on ``partition`` (exclusive: still held at
        ``epoch``, draining included, under a quorum lease valid *now* - False the moment it
        lapses, even if no callback has run yet; available: led by this node)."""
        if self._runner is not None:
            return self._runner.holds(partition, epoch)
        return partition in self.owned_partitions()

    def release_deadline(self, partition: int) -> float | None:
        """Exclusive mode: ``loop.time()`` by which the drain of ``partition`` must end."""
        return self._runner.release_deadline(partition) if self._runner is not None else None

    def releasing_partitions(self) -> frozenset[int]:
        """Exclusive mode: partitions whose ``released`` handlers are draining them."""
        return self._runner.releasing() if self._runner is not None else frozenset()

    def grant(self, partition: int) -> Grant | None:
        """The fencing epoch and handed-over payload of a partition this node holds under a lease
        valid now, draining included (exclusive mode; None otherwise). Pass ``epoch`` to the
        store with every write."""
        return self._runner.grant(partition) if self._runner is not None else None

    def ownership_status(self) -> dict[str, object]:
        """What the ownership layer is doing (for /v1/ownership, /readyz and the console)."""
        if self._runner is None:
            return {"mode": "available", "owned": len(self.owned_partitions())}
        return {"mode": "exclusive", **self._runner.status()}

    def _leads(self, name: str) -> bool:
        if self._closed:
            return False
        if self._runner is not None:
            return self.table.partition_of(name) in self._runner.owned_now()
        return self._owning() and self.leader(name) == self.node_id

    def _owning(self) -> bool:
        return self.joined and not self._leaving and self._holddown is None

    def leader(self, name: str) -> str:
        """The top-ranked live member for ``name`` (the leader of its partition): every node
        that shares the view computes the same answer, so no lease store is needed."""
        return self.table.owner(self.table.partition_of(name))

    # ----- ownership events -----------------------------------------------------------------
    def on_ownership(self, acquired: Listener | None = None, released: Listener | None = None) -> None:
        """Register callbacks ``acquired(partition)`` / ``released(partition)``."""
        if acquired is not None:
            self._acquired_cbs.append(acquired)
        if released is not None:
            self._released_cbs.append(released)

    async def ownership_changes(self) -> AsyncIterator[OwnershipChange]:
        """Every ownership change from now on; the first item is the current ownership. A
        reader that falls behind gets the changes it missed merged into one net change."""
        stream = _ChangeStream(OwnershipChange(self.owned_partitions(), frozenset(), self.table.checksum))
        self._streams.add(stream)
        try:
            while (change := await stream.get()) is not None:
                yield change
        finally:
            self._streams.discard(stream)

    @contextlib.asynccontextmanager
    async def leadership(self, name: str) -> AsyncIterator[None]:
        """Wait until this node leads ``name``, then run the body while it does.

        The wait yields to the loop until this node becomes the leader: cancel it, or put
        ``asyncio.timeout`` around it, to stop waiting. If the node leaves or stops before it
        leads, ``LeadershipLost`` is raised. If leadership moves away during the body, the body
        is cancelled and ``LeadershipLost`` is raised.
        """
        while not self._leads(name):
            if self._refused is not None:
                raise self._refused
            if self._leaving or self._closed:
                raise LeadershipLost(f"node {self.node_id!r} stopped before it led {name!r}")
            await self._leaders_checked.wait()  # every point where leadership may change sets it
        task = asyncio.current_task()
        assert task is not None
        lost = False

        def check() -> None:
            nonlocal lost
            if not lost and not self._leads(name):
                lost = True
                task.cancel()

        self._leaderships.setdefault(name, []).append(check)
        try:
            yield
        except asyncio.CancelledError:
            if lost and task.uncancel() == 0:
                raise LeadershipLost(f"leadership of {name!r} moved to {self.leader(name)!r}") from None
            raise
        finally:
            self._leaderships[name].remove(check)

    async def wait_for_change(self, etag: str, timeout_s: float) -> PlacementSnapshot:
        """Return the snapshot once its etag differs from ``etag`` (or after the timeout), or at
        once when this node is leaving (then the answer would not change before it is gone)."""
        if self.snapshot.etag == etag and not self._leaving:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout_s)
        return self.snapshot

    # ----- internals --------------------------------------------------------------------
    def _on_event(self, event: object, members: tuple[MemberInfo, ...]) -> None:
        """A membership event, on the application loop (the runner has already seen it, on the
        membership thread); ``members`` is the member list right after it. ``event`` None: the
        first view, at start."""
        if isinstance(event, JoinRefused):
            self._refused = JoinRefusedError(
                f"cluster at {event.addr[0]}:{event.addr[1]} refused this node: {event.reason} "
                f"(this node: {self.config.cluster_settings()})"
            )
            self.events.append("refused", "", str(self._refused), time.time())
            _log.error("%s", self._refused)
            # An embedding application hears it as an error: wait_joined(), ownership_changes()
            # and leadership() raise it (issue 31: it only saw join attempts logged). The node
            # keeps asking its seeds until closed (`placement node` exits with status 3).
            self._join_settled.set()
            for stream in self._streams:
                stream.close(self._refused)
            self._check_leaderships()
            return
        if isinstance(event, (RefusedPeer, JoinAttempt)):
            self._log_join_event(event)
            return
        if isinstance(event, DeclaredDead):
            self.events.append("declared-dead", self.node_id, f"declared dead at incarnation {event.incarnation}; "
                               "refuted", time.time())
            if self._runner is not None:
                self.declared_dead_count += 1
            else:
                self._declared_dead()
            return
        if isinstance(event, IdConflict):
            message = (f"another process at {event.addr[0]}:{event.addr[1]} uses node id "
                       f"{self.node_id!r}: give every process its own id (both own its partitions)")
            _log.error("%s", message)
            self._id_conflict = (message, time.monotonic())
            self.events.append("id-conflict", self.node_id, message, time.time())
            return
        if isinstance(event, MemberEvent):
            m = event.member
            if m.node_id != self.node_id:
                self._has_peer = True
                self._join_settled.set()
            self.events.append(event.kind, m.node_id, f"incarnation {m.incarnation} at {m.addr[0]}:{m.addr[1]}"
                               + (f" (by {event.by})" if event.by and event.by != m.node_id else ""), time.time())
            if m.node_id != self.node_id:
                self._membership_log.event(event)
        self._last_view_change = time.monotonic()
        self._recompute(members)

    def _log_join_event(self, event: RefusedPeer | JoinAttempt) -> None:
        if isinstance(event, RefusedPeer):
            _log.warning("refused a join from %r at %s:%d (it stops; this node carries on): %s",
                         event.node, *event.addr, event.reason)
            return
        seeds = ", ".join(f"{h}:{p}" for h, p in event.seeds)
        _log.warning("join attempt %d to %s failed: %s; next attempt in %.0f s",
                     event.attempt, seeds, event.reason, event.retry_at - event.at)

    def _recompute(self, members: tuple[MemberInfo, ...]) -> None:
        live = [m for m in members if m.is_live]
        weights = {m.node_id: m.meta.weight for m in live}
        addresses = {m.node_id: m.meta.http for m in live}
        # (capacity_factor is cluster-wide and refuses --zone on every member: no zones then)
        zones = {m.node_id: m.meta.zone for m in live if m.meta.zone and self.config.capacity_factor is None}
        old = self._snapshot.table if self._snapshot is not None else None
        table = old.with_members(weights, zones) if old is not None else PlacementTable.from_config(
            self.config.table_config, weights, zones)
        snapshot = PlacementSnapshot(table, addresses)
        if self._snapshot is not None and snapshot.etag == self._snapshot.etag:
            return
        self._snapshot = snapshot
        if old is not None and table.checksum != old.checksum:
            self.placement_changes += 1
            self.events.append("placement", "", f"{len(old.moved(table, leaders=True))} leaderships moved; "
                               f"{len(weights)} live members; checksum {table.checksum[:12]}", time.time())
        self._sync_ownership()
        self._changed.set()
        self._changed = asyncio.Event()
        self._check_leaderships()

    def _sync_ownership(self) -> None:
        """Publish what changed since ownership was last published (if this node may own)."""
        if self._runner is None and self._owning():
            self._publish(diff(self._owned_table, self.table, self.node_id))
            self._owned_table = self.table

    def _declared_dead(self) -> None:
        self.declared_dead_count += 1
        if self._holddown is not None:
            self._holddown.cancel()
        self._publish(diff(self._owned_table, None, self.node_id))  # a no-op if nothing is owned
        self._owned_table = None
        self._holddown = asyncio.get_running_loop().call_later(self.config.rejoin_holddown_s, self._end_holddown)
        self._check_leaderships()

    def _end_holddown(self) -> None:
        self._holddown = None
        self._sync_ownership()
        self._check_leaderships()

    def _check_leaderships(self) -> None:
        """Called wherever leadership may change: wakes the waiting ``leadership()`` calls and
        cancels the bodies whose leadership moved."""
        self._leaders_checked.set()
        self._leaders_checked = asyncio.Event()
        for checks in list(self._leaderships.values()):
            for check in list(checks):
                check()

    def _publish(self, change: OwnershipChange) -> list[object]:
        """Tell the application; returns what the ``released`` handlers returned (exclusive
        mode awaits those that are awaitable before it hands the partition on)."""
        if not change:
            return []
        results: list[object] = []
        for p in sorted(change.released):  # release before acquire
            for cb in self._released_cbs:
                results.append(self._call(cb, p, "released"))
        for p in sorted(change.acquired):
            for cb in self._acquired_cbs:
                self._call(cb, p, "acquired")
        for stream in self._streams:
            stream.put(change)
        self.events.ownership(self.node_id, len(change.acquired), len(change.released), time.time())
        return results

    def _call(self, cb: Listener, partition: int, what: str) -> object:
        """Run an application callback; its exception is logged with the partition and counted
        (``callback_errors``, in /metrics), and never aborts a leave, a release or the pump."""
        try:
            return cb(partition)
        except Exception:
            self.callback_errors += 1
            _log.exception("%s callback %s raised for partition %d (the node carries on)",
                           what, getattr(cb, "__qualname__", repr(cb)), partition)
            return None

    # ----- exclusive mode: from the runner's thread to the application loop -------------------
    def _t_acquired(self, grant: Grant) -> None:
        self._to_app(self._x_acquired, grant)

    def _t_release(self, partition: int, reason: str) -> Awaitable[Any]:
        """The runner awaits the payload on its loop; cancelling that wait (the release deadline
        passed) cancels the drain on the application loop."""
        thread = self._thread
        assert thread is not None
        payload: asyncio.Future = thread.loop.create_future()
        release = _Release(partition, reason, lambda value: thread.to_member(_resolve, payload, value))
        payload.add_done_callback(lambda f: f.cancelled() and thread.to_app(release.cancel))
        self._to_app(self._x_release, release)
        return payload

    def _t_ended(self, partition: int) -> None:
        self._to_app(self._x_ended, partition)

    def _t_view(self, view: View) -> None:
        self._to_app(self._x_view, view)

    def _to_app(self, fn: Callable[..., object], *args: object) -> None:
        assert self._thread is not None
        self._thread.to_app(fn, *args)

    # ----- exclusive mode: what the runner tells the application ------------------------------
    def _x_acquired(self, grant: Grant) -> None:
        assert self._runner is not None
        if self._closed:
            return  # stopped as a process that died: it starts nothing (queued before the close)
        if self._runner.holding.grants.get(grant.partition) is not grant:
            return  # ended (or acquired again) before this loop got to it: nothing to start
        self._published.add(grant.partition)
        self._publish(OwnershipChange(frozenset({grant.partition}), frozenset(), self.table.checksum))
        self._check_leaderships()

    def _x_releasing(self, partition: int, reason: str) -> list[object]:
        if partition not in self._published:
            return []
        self._published.discard(partition)
        _log.debug("releasing partition %d (%s)", partition, reason)
        results = self._publish(OwnershipChange(frozenset(), frozenset({partition}), self.table.checksum))
        self._check_leaderships()
        return results

    def _x_release(self, release: _Release) -> None:
        """Run the ``released`` handlers of a partition being handed on; the payload goes back to
        the runner once the awaitable ones finished (``release.cancel``: stop draining)."""
        if release.cancelled:
            return  # the deadline passed before this loop ran: ownership ended (``_x_ended`` follows)
        results = self._x_releasing(release.partition, release.reason)
        pending = [r for r in results if inspect.isawaitable(r)]
        if not pending:
            release.resolve(next((r for r in results if r is not None), None))
            return
        release.drain = asyncio.ensure_future(self._drain(release.partition, pending))
        release.drain.add_done_callback(lambda t: release.resolve(None if t.cancelled() else t.result()))

    async def _drain(self, partition: int, pending: list[Awaitable[Any]]) -> Any:
        payload = None
        for result in await asyncio.gather(*pending, return_exceptions=True):
            if isinstance(result, BaseException):
                if isinstance(result, asyncio.CancelledError):
                    raise result
                _log.error("released handler for partition %d raised %r (handing it on anyway)", partition, result)
            elif payload is None:
                payload = result
        return payload

    def _x_view(self, view: View) -> None:
        """A new stable view: what the cluster survives now, logged and put in the event log
        when that changed (not per view, and never per lease renewal)."""
        if self._survival is not None and view.num <= self._survival[0]:
            return  # (views reach this loop in order; an older one is no news)
        survival = assess(view.weighted(), witnesses_of(view.members, self.config.exclusive.witnesses))
        old = self._survival[1] if self._survival is not None else None
        self._survival = (view.num, survival)
        if old is not None and old.summary == survival.summary:
            return
        text = f"stable view {view.num} ({len(view.members)} members, {len(survival.workers)} with weight > 0): " \
               f"{survival.summary}"
        if survival.warning is not None:
            _survival_log.warning("%s", text)
        else:
            _survival_log.info("%s", text)
        self.events.append("survival", "", text, time.time())

    def _x_ended(self, partition: int) -> None:
        """Ownership ended without a drain (lease lost, declared dead): stop at once. An async
        handler still runs (its cleanup), but nothing waits for it: the partition may already
        be someone else's."""
        for result in self._x_releasing(partition, "ended"):
            if inspect.isawaitable(result):
                detach(result)


@dataclass
class _Release:
    """One partition being handed on, as the application loop sees it."""

    partition: int
    reason: str
    resolve: Callable[[Any], None]  # sends the payload to the runner (its thread)
    cancelled: bool = False
    drain: asyncio.Future | None = None

    def cancel(self) -> None:
        """The runner gave up (release deadline): stop the drain; ownership is over."""
        self.cancelled = True
        if self.drain is not None:
            self.drain.cancel()


def _resolve(payload: asyncio.Future, value: Any) -> None:
    """On the membership thread: hand the payload to the runner unless it gave up waiting."""
    if not payload.done():
        payload.set_result(value)


if TYPE_CHECKING:  # nothing runs: mypy proves that a Node is what these modules are typed against
    from .guard import OwnerNode
    from .http_api import NodeLike

    def _node_satisfies_the_protocols(node: Node) -> tuple[NodeLike, OwnerNode]:
        return node, node
