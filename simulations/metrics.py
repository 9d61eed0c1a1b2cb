"""What a run measures. The JSON schema is documented in docs/simulations.md.

Two kinds of observation:

* **Exact, event-driven** (SWIM models only): every ``MemberEvent`` of every node is seen as
  it happens, giving detection latencies of real crashes (first suspicion anywhere, first
  death anywhere, dead in every live view) and false suspicions / false deaths, counted as
  distinct (member, incarnation) episodes about a member whose process was running when the
  episode began.
* **Sampled** every ``sample_interval_s`` (all models): each running process says which
  partitions it believes it leads. Per partition: no claimant = orphan, two or more =
  dual ownership (both accumulate partition-seconds), exactly one = its owner. A partition
  moves when its single owner differs from its previous single owner; a move away from a
  *healthy* node (never crashed, stalled, slowed, cut off or left) to a node that was already
  a member at the start is a ``healthy_moves``; a move back to the owner before the last one,
  between two healthy nodes, is a ``flaps`` (ping-pong). Views converge when every running
  member has the same view checksum and that view is exactly the set of running members.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from membership import MemberEvent
from ownership import Acquired, Ended, Release

from .engine import TRAFFIC_FIELDS
from .intervals import OwnershipLog
from .stats import percentiles

__all__ = ["Recorder", "witnesses_now"]

#: A node's traffic counters, in the order of ``TRAFFIC_FIELDS``.
_counters = operator.attrgetter(*TRAFFIC_FIELDS)


def witnesses_now(nodes) -> tuple[str, ...]:
    """Exclusive ownership: the witnesses of the stable view that the most of ``nodes`` (running
    processes) hold (``()``: no node runs the ownership rules). Read from each node's rules
    (``Lease.witnesses``: ``ownership.views.witnesses_of`` of its stable view), as the settling
    check reads their stable view; nothing about how leases are renewed."""
    held: dict[tuple[str, ...], int] = {}
    for n in nodes:
        own = getattr(n, "own", None)
        if own is not None:
            w = own.lease.witnesses
            held[w] = held.get(w, 0) + 1
    return max(held, key=held.__getitem__) if held else ()


def _rates(totals, seconds: float) -> dict[str, float]:
    """Per second of ``seconds`` (member-seconds or witness-seconds), by ``TRAFFIC_FIELDS``:
    datagrams to 3 decimals, bytes to 1."""
    s = seconds or 1.0
    return {key: round(v / s, 1 if key.endswith("bytes_s") else 3) for key, v in zip(_RATE_KEYS, totals)}


#: The keys of ``_rates``: ``sent_datagrams_s``, ``sent_bytes_s``, ``ownership_sent_datagrams_s``...
_RATE_KEYS = tuple(name.replace("own_", "ownership_") + ("_s" if name.endswith("bytes") else "_datagrams_s")
                   for name in TRAFFIC_FIELDS)


class _TrafficMark(NamedTuple):
    """The traffic counters at one moment: per-node totals summed, member-seconds so far, and
    per witness node index its counters and seconds as a witness so far."""

    at: float
    totals: tuple[int, ...]
    node_s: float
    witness: dict[int, tuple[float, ...]]


class _Crash:
    __slots__ = ("at", "everywhere", "first_dead", "first_suspect", "led", "node_id", "takeover")

    def __init__(self, node_id: str, at: float, led: np.ndarray) -> None:
        self.node_id = node_id
        self.at = at
        self.first_suspect: float | None = None
        self.first_dead: float | None = None
        self.everywhere: float | None = None
        self.led = led  # partitions it led at the crash (for the takeover time)
        self.takeover: float | None = None


class Recorder:
    """Collects the metrics of one run (from ``begin()`` on) for a ``Cluster``."""

    def __init__(self, cluster, sample_interval_s: float = 0.5) -> None:
        self.cluster = cluster
        self.sim = cluster.sim
        self.dt = sample_interval_s
        p = cluster.placement.partitions
        self.partitions = p
        self.active = False
        self.t0 = 0.0
        self.last_owner = np.full(p, -1, dtype=np.int64)
        self.prev_owner = np.full(p, -1, dtype=np.int64)
        self._last_state: tuple[np.ndarray, np.ndarray] | None = None
        # (nodes, their claim arrays, counts, owner) of the last tally (claim arrays are
        # replaced, never changed in place, when a node's claims change).
        self._last_claims: tuple[list, list, np.ndarray, np.ndarray] | None = None
        self.moved = 0
        self.healthy_moves = 0
        self.flaps = 0
        self.dual_ps = 0.0
        self.orphan_ps = 0.0
        self.node_seconds = 0.0
        self.faulted: set[int] = set()
        self.newcomers: set[int] = set()
        self.crashes: list[_Crash] = []
        self._open: dict[str, _Crash] = {}
        self.suspicions: dict[tuple[str, int], float] = {}  # episode -> first seen
        self.false_suspicions: set[tuple[str, int]] = set()
        self.false_deaths: set[tuple[str, int]] = set()
        self.healthy_false_deaths: set[tuple[str, int]] = set()
        self.events: list[dict[str, Any]] = []
        self.change_times: list[float] = []
        self.series: dict[str, list] = {k: [] for k in (
            "t", "members", "mean_view", "dual", "orphan", "balance", "moved", "converged")}
        self.optimal_moves = 0
        self._datagrams0 = 0
        self._bytes0 = 0
        #: Traffic snapshots (``_TrafficMark``): at ``begin``, and those asked for with
        #: ``mark_traffic`` (taken at the first sample at or after the time asked).
        self._traffic0: _TrafficMark | None = None
        self.traffic_marks: dict[str, _TrafficMark] = {}
        self._marks_due: list[tuple[float, str]] = []
        # Witness traffic: the witnesses of the stable view at each sample, with their counters
        # then; per witness node index, its traffic while it was one and for how long.
        self._witness_snap: list[tuple[Any, tuple[int, ...]]] = []
        self._witness_acc: dict[int, list[float]] = {}
        self.ownership_log = OwnershipLog()
        # Exclusive ownership: (node, partition) being released -> the release's reason, and per
        # node the partitions it dropped while measuring: ended without a handoff (lease lost or
        # about to end, declared dead, a jump to a newer stable view, condemned).
        self._releasing: dict[tuple[int, int], str] = {}
        self._dropped: dict[int, int] = {}
        #: A scenario's own measurements: each is called by ``result`` and its keys merged in.
        self.reporters: list[Callable[[], dict[str, Any]]] = []

    # ------------------------------------------------------------------ lifecycle

    def begin(self) -> None:
        """Start measuring now (after warm-up); sampling runs every ``dt`` from here."""
        self.active = True
        self.t0 = self.sim.now
        self._datagrams0 = self.sim.datagrams
        self._bytes0 = self.sim.datagram_bytes
        self._traffic0 = self._traffic_mark()
        self._sample()

    def action(self, kind: str, node_ids: list[str], membership_change: bool = True) -> None:
        """A scenario action happened now (crash, join, leave, stall, partition, heal...)."""
        if not self.active:
            return
        now = self.sim.now
        self.events.append({"kind": kind, "at": round(now - self.t0, 3), "nodes": node_ids[:8],
                            "n": len(node_ids), "_t": now, "_membership": membership_change})
        nodes = self.cluster.nodes
        if kind in ("crash", "leave", "stall", "slow", "partition", "flap", "restart"):
            self.faulted.update(nodes[i].index for i in node_ids)
        if kind in ("join", "restart"):
            self.newcomers.update(nodes[i].index for i in node_ids)
        if kind == "crash":
            for i in node_ids:
                led = np.flatnonzero(self.last_owner == nodes[i].index)
                rec = _Crash(i, now, led)
                self.crashes.append(rec)
                self._open[i] = rec
        elif kind == "restart":
            for i in node_ids:
                self._open.pop(i, None)  # back before it was detected everywhere: no verdict

    # ------------------------------------------------------------------ exact: member events

    def member_event(self, observer, ev: MemberEvent) -> None:
        if not self.active:
            return
        kind = ev.kind
        if kind not in ("suspect", "dead"):
            return
        subject = ev.member.node_id
        now = self.sim.now
        episode = (subject, ev.member.incarnation)
        began = self.suspicions.setdefault(episode, now)
        node = self.cluster.nodes.get(subject)
        running = node is not None and node.up and not node.leaving and began >= node.started_at
        rec = self._open.get(subject)
        if kind == "suspect":
            if running:
                self.false_suspicions.add(episode)
            if rec is not None and rec.first_suspect is None:
                rec.first_suspect = now
        else:
            if running:
                self.false_deaths.add(episode)
                if node.index not in self.faulted:
                    self.healthy_false_deaths.add(episode)
            if rec is not None:
                if rec.first_dead is None:
                    rec.first_dead = now
                self._check_everywhere(rec)

    def _check_everywhere(self, rec: _Crash) -> None:
        for n in self.cluster.nodes.values():
            if n.up and n.node_id != rec.node_id and rec.node_id in n.view:
                return
        rec.everywhere = self.sim.now
        self._open.pop(rec.node_id, None)

    # ------------------------------------------------------------------ exact: ownership intervals

    def ownership(self, node, action) -> None:
        """An ownership action of a node running ``ownership.core`` (all of the run,
        warm-up included: an interval may start before measuring does)."""
        self.ownership_log.record(node.index, action, self.sim.now)
        key = (node.index, action.partition)
        if isinstance(action, Release):
            self._releasing[key] = action.reason
        elif isinstance(action, Ended):
            # A release because the lease was about to end ("fenced") is a drop too: the
            # member lost its lease, and took the partition back (if at all) only afterwards.
            if self._releasing.pop(key, "fenced") == "fenced" and self.active:
                self._dropped[node.index] = self._dropped.get(node.index, 0) + 1
        elif isinstance(action, Acquired):
            self._releasing.pop(key, None)

    def _drops(self) -> dict[str, int]:
        """Exclusive ownership: partitions dropped (ownership ended without a handoff, or by a
        release because the lease was about to end: ``Release.reason`` "fenced") while
        measuring, in all and by *healthy* members (never crashed, stalled, slowed, cut off,
        restarted or left). A healthy member should never drop a partition because another
        member died (issue 29 item 6)."""
        if not self.ownership_log.records:
            return {}
        return {"dropped_partitions": sum(self._dropped.values()),
                "healthy_dropped_partitions": sum(n for i, n in self._dropped.items() if i not in self.faulted)}

    def _lease_ends(self) -> dict[int, float]:
        """Per node still owning at the end: when its lease ends. A node frozen until after the
        run never reported the end of its ownership; it would say, on waking, that it ended
        with its lease (``Ended.at``), as a crash while frozen does (``SwimNode.crash``)."""
        return {n.index: n.own.valid_until for n in self.cluster.nodes.values()
                if getattr(n, "own", None) is not None}

    # ------------------------------------------------------------------ sampled: ownership

    def _sample(self) -> None:
        now = self.sim.now
        cl = self.cluster
        up = [n for n in cl.nodes.values() if n.up]
        leads = [n.leads() for n in up]
        p = self.partitions
        last = self._last_claims
        if last is not None and len(last[0]) == len(up) and all(map(operator.is_, last[0], up)) \
                and all(map(operator.is_, last[1], leads)):
            # Nobody's claims changed since the last sample (the usual case): same tally.
            counts, owner = last[2], last[3]
        else:
            claims = np.concatenate(leads) if leads else np.zeros(0, dtype=np.int64)
            counts = np.bincount(claims, minlength=p)
            owner = np.full(p, -1, dtype=np.int64)
            for n, a in zip(up, leads):
                owner[a] = n.index
            self._last_claims = (up, leads, counts, owner)
        dual = int((counts >= 2).sum())
        orphan = int((counts == 0).sum())
        first = not self.series["t"]
        if not first:
            self.dual_ps += dual * self.dt
            self.orphan_ps += orphan * self.dt
            self.node_seconds += len(up) * self.dt
        self._witness_step(up, first)
        if self._marks_due and self._marks_due[0][0] <= now:
            while self._marks_due and self._marks_due[0][0] <= now:
                self.traffic_marks[self._marks_due.pop(0)[1]] = self._traffic_mark()
        single = counts == 1
        changed = single & (owner != self.last_owner) & (self.last_owner >= 0)
        n_changed = int(changed.sum())
        if n_changed:
            prev = self.last_owner[changed]
            new = owner[changed]
            healthy = np.array([i not in self.faulted for i in prev.tolist()])
            healthy_new = np.array([i not in self.faulted for i in new.tolist()])
            joiner = np.array([i in self.newcomers for i in new.tolist()])
            self.moved += n_changed
            self.healthy_moves += int((healthy & ~joiner).sum())
            # Ping-pong between healthy nodes (a restarted node taking its partitions back is
            # not a flap: it was faulted).
            self.flaps += int((healthy & healthy_new & (new == self.prev_owner[changed])).sum())
            self.prev_owner[changed] = prev
        self.last_owner[single] = owner[single]
        state = (owner, counts)
        if self._last_state is not None and not (np.array_equal(owner, self._last_state[0])
                                                 and np.array_equal(counts, self._last_state[1])):
            self.change_times.append(now)
        self._last_state = state
        members = [n for n in up if not n.leaving and n.weight > 0]
        total_w = sum(n.weight for n in members) or 1.0
        balance = max((len(a) / (p * n.weight / total_w) for n, a in zip(up, leads)
                       if not n.leaving and n.weight > 0), default=0.0)
        has_views = bool(members) and members[0].has_view
        mean_view = float(np.mean([len(n.view) for n in members])) if has_views else None
        s = self.series
        s["t"].append(round(now - self.t0, 3))
        s["members"].append(len(members))
        s["mean_view"].append(mean_view)
        s["dual"].append(dual)
        s["orphan"].append(orphan)
        s["balance"].append(round(balance, 4))
        s["moved"].append(self.moved)
        s["converged"].append(self._converged(members))
        for rec in self.crashes:
            if rec.takeover is None and (len(rec.led) == 0 or (counts[rec.led] > 0).all()):
                rec.takeover = now
        for rec in list(self._open.values()):
            if rec.first_dead is not None:
                self._check_everywhere(rec)
        self.sim.at(now + self.dt, self._sample)

    # ------------------------------------------------------------------ traffic

    def _traffic_totals(self) -> tuple[int, ...]:
        """The engine's per-node counters summed over every node (each id over all its
        processes); the ``sent`` total is the engine's ``datagrams``."""
        sums = [0] * len(TRAFFIC_FIELDS)
        for n in self.cluster.nodes.values():
            for i, v in enumerate(_counters(n)):
                sums[i] += v
        return tuple(sums)

    def _witness_step(self, up: list, first: bool) -> None:
        """Charge the last ``dt`` of traffic of the witnesses chosen at the previous sample to
        them (a witness counts for the whole interval when it ran at its start), then choose
        the witnesses for the next interval: those of the stable view most running processes
        hold. O(running processes) per sample, nothing per datagram."""
        if not first:
            acc = self._witness_acc
            width = len(TRAFFIC_FIELDS)
            for node, before in self._witness_snap:
                a = acc.get(node.index)
                if a is None:
                    a = acc[node.index] = [0.0] * (width + 1)
                for i, v in enumerate(_counters(node)):
                    a[i] += v - before[i]
                a[width] += self.dt
        nodes = self.cluster.nodes
        self._witness_snap = [(nodes[w], _counters(nodes[w])) for w in witnesses_now(up)
                              if w in nodes and nodes[w].up]

    def _traffic_mark(self) -> _TrafficMark:
        acc = {i: tuple(a) for i, a in self._witness_acc.items()}
        return _TrafficMark(self.sim.now, self._traffic_totals(), self.node_seconds, acc)

    def mark_traffic(self, name: str, at: float) -> None:
        """Snapshot the traffic counters at the first sample at or after simulated time ``at``
        (absolute), for ``traffic(since=name)`` or ``traffic(until=name)``: a window of a run
        (the quiet part after the bootstrap's gossip has drained, say)."""
        self._marks_due.append((at, name))
        self._marks_due.sort()

    def traffic(self, since: str | None = None, until: str | None = None) -> dict[str, Any]:
        """Traffic per member and per witness (``traffic`` in docs/simulations.md): datagrams and
        bytes a second, sent and received, all and the ownership datagrams among them; from
        ``begin`` (or the mark ``since``) to now (or the mark ``until``)."""
        assert self._traffic0 is not None, "measuring has not begun"
        a = self._traffic0 if since is None else self.traffic_marks[since]
        b = self._traffic_mark() if until is None else self.traffic_marks[until]
        width = len(TRAFFIC_FIELDS)
        members = [y - x for x, y in zip(a.totals, b.totals)]
        node_s = b.node_s - a.node_s
        out: dict[str, Any] = {"window_s": round(b.at - a.at, 3), "member_s": round(node_s, 3),
                               "member": _rates(members, node_s)}
        zero = (0.0,) * (width + 1)
        acc = {i: [y - x for x, y in zip(a.witness.get(i, zero), w)] for i, w in b.witness.items()}
        acc = {i: v for i, v in acc.items() if v[width] > 0}
        if not acc:
            return out
        witness = [sum(v[i] for v in acc.values()) for i in range(width)]
        witness_s = sum(v[width] for v in acc.values())
        # The busiest witness (by datagrams received) among those that were one for a tenth of
        # the witness-seconds or more (a witness for one interval says little).
        long_enough = [v for v in acc.values() if v[width] >= 0.1 * witness_s] or list(acc.values())
        busiest = max(long_enough, key=lambda v: v[4] / v[width])
        out.update({
            "witness_s": round(witness_s, 3), "witness_nodes": len(acc),
            "witness": _rates(witness, witness_s),
            "busiest_witness": _rates(busiest[:width], busiest[width]),
            "non_witness": _rates([m - w for m, w in zip(members, witness)], node_s - witness_s),
        })
        return out

    def _converged(self, members) -> bool | None:
        if not members or not members[0].has_view:
            return None
        token = members[0].view_token()
        if any(n.view_token() != token for n in members):
            return False
        return members[0].live_view() == frozenset(n.node_id for n in members)

    def _exact_takeovers(self) -> dict[str, Any] | None:
        log = self.ownership_log
        if not log.records:
            return None
        done = [log.takeover_after(r.led.tolist(), r.at) for r in self.crashes]
        return percentiles([t - r.at for t, r in zip(done, self.crashes) if t is not None])

    def note_optimal(self, moves: int) -> None:
        if self.active:
            self.optimal_moves += moves

    # ------------------------------------------------------------------ result

    def result(self) -> dict[str, Any]:
        """The metrics dict (see docs/simulations.md); ``series`` holds the time series."""
        sim, t0 = self.sim, self.t0
        end = sim.now
        s = self.series
        detection = [r.everywhere - r.at for r in self.crashes if r.everywhere is not None]
        events = []
        membership_events = [e for e in self.events if e["_membership"]]
        for i, e in enumerate(membership_events):
            t_end = membership_events[i + 1]["_t"] if i + 1 < len(membership_events) else end
            events.append(self._event_summary(e, t_end))
        for e in self.events:
            if not e["_membership"]:
                events.append({k: v for k, v in e.items() if not k.startswith("_")})
        events.sort(key=lambda e: e["at"])
        conv = [e["converged_s"] for e in events if e.get("converged_s") is not None]
        rebal = [e["rebalance_s"] for e in events if e.get("rebalance_s") is not None]
        simulated = end - t0
        datagrams = sim.datagrams - self._datagrams0
        bytes_ = sim.datagram_bytes - self._bytes0
        node_s = self.node_seconds or 1.0
        return {
            "simulated_s": round(simulated, 3),
            "detection_s": percentiles(detection),
            "detection_samples_s": [round(d, 3) for d in detection],
            "first_suspect_s": percentiles([r.first_suspect - r.at for r in self.crashes
                                            if r.first_suspect is not None]),
            "first_dead_s": percentiles([r.first_dead - r.at for r in self.crashes
                                         if r.first_dead is not None]),
            "takeover_s": percentiles([r.takeover - r.at for r in self.crashes if r.takeover is not None]),
            # Exclusive ownership: from the acquisitions themselves, not 0.5 s samples.
            "takeover_exact_s": self._exact_takeovers(),
            # Crashed and neither detected everywhere nor restarted before the run ended.
            "undetected_crashes": len(self._open),
            "false_suspicions": len(self.false_suspicions),
            "false_deaths": len(self.false_deaths),
            "false_death_members": len({m for m, _ in self.false_deaths}),
            "healthy_false_deaths": len(self.healthy_false_deaths),
            "convergence_s": max(conv) if conv else None,
            "rebalance_s": percentiles(rebal),
            "moved_partitions": self.moved,
            "optimal_moves": self.optimal_moves,
            "healthy_moves": self.healthy_moves,
            "flaps": self.flaps,
            "balance_max_over_mean": s["balance"][-1] if s["balance"] else None,
            "balance_max_over_mean_worst": max(s["balance"]) if s["balance"] else None,
            "dual_ownership_partition_s": round(self.dual_ps, 3),
            "orphan_partition_s": round(self.orphan_ps, 3),
            **self.ownership_log.summary(t0, end, self.partitions, self._lease_ends()),
            **self._drops(),
            "datagrams_per_member_s": round(datagrams / node_s, 3),
            "bytes_per_member_s": round(bytes_ / node_s, 1),
            "max_datagram_bytes": sim.max_datagram,
            "traffic": self.traffic(),
            "events": events,
            "series": self.series,
            **{k: v for report in self.reporters for k, v in report().items()},
        }

    def _event_summary(self, e: dict[str, Any], t_end: float) -> dict[str, Any]:
        """Per membership event: time to view convergence and to ownership settling."""
        t = e["_t"]
        out = {k: v for k, v in e.items() if not k.startswith("_")}
        s = self.series
        conv = None
        for ts, c in zip(s["t"], s["converged"]):
            abs_t = ts + self.t0
            if t <= abs_t < t_end and c:
                conv = round(abs_t - t, 3)
                break
        out["converged_s"] = conv
        changes = [c for c in self.change_times if t <= c < t_end]
        clean_at_end = None
        for ts, d, o in zip(reversed(s["t"]), reversed(s["dual"]), reversed(s["orphan"])):
            if ts + self.t0 < t_end:
                clean_at_end = d == 0 and o == 0
                break
        if clean_at_end:
            out["rebalance_s"] = round(changes[-1] - t, 3) if changes else 0.0
        else:
            out["rebalance_s"] = None
        return out
