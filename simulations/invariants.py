"""The invariants checked after every simulation step on nodes that run the membership core.

Each check is a callable ``check(sim) -> str | None`` registered in ``sim.invariants`` (see
``simulations.engine``); a message is a violation, raised by the engine as
``InvariantViolation`` with the check's name, the simulated time and the seed. They only read
state - no randomness, no scheduling - so a run is the same with or without them
(``benchmarks/fingerprint.py`` proves it), and each looks only at what the step changed:

``swim_core_indexes``   ``Swim.check_invariants()`` of every node the step touched (its
                        indexes agree with its view). O(members) per touched node: the
                        costly one at hundreds of nodes (docs/simulations.md, "Invariants").
``SelfView``            a running process never holds itself dead, and its incarnation never falls.
``OneLeaderPerView``    members whose views agree compute the same owner for every partition.
``NoDualOwnership``     exclusive ownership: no partition has two owners at once, by the exact
                        intervals ``simulations.intervals`` accounts.
``EpochsRise``          exclusive ownership: each acquisition of a partition carries a fencing
                        epoch above every earlier one of that partition, whatever the path
                        (note, takeover, take-back, restart, census; docs/ownership.md rule 8).
``PartitionMoves``      exclusive ownership: every change of a partition's state at a member is
                        a move listed in ``ownership.states.TRANSITIONS``. O(partitions a member
                        knows) per touched node: with ``swim_core_indexes``, tests and the fuzzer.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ownership import Acquired, Ended
from ownership.states import TRANSITIONS, PartitionState, states_of

from .nodes import SwimNode

__all__ = ["EPOCHS_RISE", "EpochsRise", "NoDualOwnership", "OneLeaderPerView", "PartitionMoves", "SelfView",
           "swim_core_indexes"]


def _touched_once(sim) -> list[Any]:
    """The nodes the step touched, each once, in the order they were first touched."""
    touched = sim.touched
    return touched if len(touched) < 2 else list(dict.fromkeys(touched))


def swim_core_indexes(sim) -> str | None:
    """``Swim.check_invariants`` (an AssertionError naming the index that disagrees) of every
    running node the step touched."""
    for node in _touched_once(sim):
        core = getattr(node, "core", None)
        if core is None or not node.up:
            continue
        try:
            core.check_invariants()
        except AssertionError as exc:
            return f"{node.node_id}: its membership core failed its own check ({exc or 'indexes'})"
    return None


swim_core_indexes.__name__ = "swim core indexes"


class SelfView:
    """A running process never holds itself dead, and its incarnation never falls (a restart is
    a new process: it may start lower).

    Checked after every step on every touched node, so it reads the core's own member record
    (``Swim._self``, which ``Swim.status`` and ``Swim.incarnation`` read) directly: through the
    two properties this check was 8% of a 256-node loss run's instructions."""

    __name__ = "self view"

    def __init__(self) -> None:
        #: node -> [its core, the core's own record, the incarnation last seen] (a new core: a
        #: new process).
        self._last: dict[Any, list] = {}

    def __call__(self, sim) -> str | None:
        touched = sim.touched
        if not touched:
            return None
        last = self._last
        for node in touched if len(touched) == 1 else dict.fromkeys(touched):
            core = node.core
            if core is None or not node.up:
                continue
            seen = last.get(node)
            if seen is None or seen[0] is not core:
                seen = last[node] = [core, core._self, core.incarnation]
            me = seen[1]
            status = me.status
            if status != "alive" and status != "left":
                return f"{node.node_id} considers itself {status}"
            inc = me.incarnation
            if inc < seen[2]:
                return f"{node.node_id}'s incarnation fell from {seen[2]} to {inc}"
            seen[2] = inc
        return None


class OneLeaderPerView:
    """Members whose views agree compute the same owner for every partition.

    A node's owners come from its placement table (``node._table``): the table of its view
    (availability first) or of its stable view (exclusive ownership). Tables are computed
    incrementally from whatever table the node held before and shared through a bounded cache,
    so two nodes with equal views may hold tables computed along different histories; this
    checks that they agree all the same. Whenever a touched node holds a table it did not hold
    at its last check, the table is compared with the first table seen for the same members and
    settings (``PlacementTable.checksum``): the same object costs nothing, another one is
    compared partition by partition. A node placing from its own view (``own is None``) must
    also hold the table *of* that view once it has computed one for it. (``SwimNode`` computes
    that table lazily, when the metrics sample what it leads: the check runs then, since that
    is when the node's claims exist.) A node that sets a table marks itself touched and counts
    it in ``SwimNode.tables_set``; while that count is unchanged since the last check, no
    touched node can hold a table not seen yet, so the check returns at once (it was 5% of a
    256-node loss run's instructions, looking at every touched node after every step).
    """

    __name__ = "one leader per partition among equal views"

    def __init__(self, max_tables: int = 512) -> None:
        self._first: dict[str, tuple[Any, str]] = {}  # table checksum -> (table, node that held it)
        #: id(table) -> (table, its member ids): tables already compared (most nodes share one).
        self._checked: dict[int, tuple[Any, frozenset]] = {}
        self._held: dict[Any, Any] = {}  # node -> the table checked last
        self._max_tables = max_tables
        self._tables_set = -1  # SwimNode.tables_set when every touched node was last checked

    def __call__(self, sim) -> str | None:
        touched = sim.touched
        if not touched or SwimNode.tables_set == self._tables_set:
            return None
        held = self._held
        for node in touched if len(touched) == 1 else dict.fromkeys(touched):
            table = getattr(node, "_table", None)
            if table is None or held.get(node) is table:
                continue
            held[node] = table
            checked = self._checked.get(id(table))
            if checked is None or checked[0] is not table:
                what = self._compare(node.node_id, table)
                if what is not None:
                    return what
                if len(self._checked) >= self._max_tables:
                    self._checked.clear()
                checked = self._checked[id(table)] = (table, frozenset(table.members))
            if node.own is None and node._table_version == node._view_version:
                ids, view = checked[1], node.view
                if len(ids) != len(view) or not ids.issuperset(view):
                    differ = sorted(ids.symmetric_difference(view))[:4]
                    return (f"{node.node_id} leads from a table of another view than its own "
                            f"(members differing: {differ})")
        self._tables_set = SwimNode.tables_set
        return None

    def _compare(self, holder_id: str, table) -> str | None:
        """Compare ``table`` with the first table seen for the same members and settings."""
        first = self._first.get(table.checksum)
        if first is None:
            if len(self._first) >= self._max_tables:
                self._first.clear()
            self._first[table.checksum] = (table, holder_id)
            return None
        ref, holder = first
        if ref is table:
            return None
        ids, idx = table.owner_indices()
        ref_ids, ref_idx = ref.owner_indices()
        if not idx.shape[1] or not ref_idx.shape[1]:
            if idx.shape[1] == ref_idx.shape[1]:
                return None
            return f"{holder_id} and {holder} hold tables of equal views, one with no owners"
        mine = np.asarray(ids, dtype=object)[idx[:, 0]]
        theirs = np.asarray(ref_ids, dtype=object)[ref_idx[:, 0]]
        differ = np.flatnonzero(mine != theirs)
        if len(differ):
            p = int(differ[0])
            return (f"{holder_id} and {holder} hold equal views but disagree on {len(differ)} "
                    f"partition(s): partition {p} is led by {mine[p]} for {holder_id}, "
                    f"by {theirs[p]} for {holder}")
        return None


class NoDualOwnership:
    """Exclusive ownership: no partition has two owners at once.

    Fed every ownership action the metrics record (``OwnershipLog.on_record``), so it sees the
    intervals the exact accounting (``simulations.intervals``) measures. An interval's end can
    be learned late: a node frozen past its lease reports, on waking, that it stopped owning
    when its lease ran out. So an open interval counts as owned only up to what is already
    certain, ``min(now, lease end, release deadline)``, and two intervals overlap when both
    certainly cover some time after the later start (touching is fine, as in the accounting).
    Checked when an interval ends (against every other interval of its partition) and, while a
    partition was acquired from a holder whose lease was still valid, after every step until one
    of them stops. Overlaps the accounting could only see at the end of a run (a holder frozen
    past the end) are left to the metrics (``dual_owned_partition_s_exact``).
    """

    __name__ = "no dual ownership"

    def __init__(self, cluster) -> None:
        self.cluster = cluster
        self._new: list[tuple[int, Any]] = []
        self._open: dict[int, dict[int, float]] = {}  # partition -> {node index: start}
        self._watch: set[int] = set()  # partitions acquired from a holder still owning
        self._nodes: dict[int, Any] = {}
        cluster.metrics.ownership_log.on_record = self._record

    def _record(self, node: int, action: Any) -> None:
        if isinstance(action, (Acquired, Ended)):
            self._new.append((node, action))

    def _node(self, index: int) -> Any:
        node = self._nodes.get(index)
        if node is None:
            self._nodes = {n.index: n for n in self.cluster.nodes.values()}
            node = self._nodes[index]
        return node

    def _certain_until(self, index: int, p: int, now: float) -> float:
        """How long ``index``'s open interval of ``p`` surely lasts, as far as is known now."""
        node = self._node(index)
        own = getattr(node, "own", None)
        if not node.up or own is None:
            return now  # (a crash ends its intervals and reports it at once)
        end = min(now, own.valid_until)
        o = own.owned.get(p)
        if o is not None and o.releasing:
            end = min(end, o.deadline)
        return end

    def _may_own_after(self, index: int, p: int, t: float) -> bool:
        """Whether ``index`` still owns ``p`` at ``t`` and may go on owning it after ``t``."""
        node = self._node(index)
        own = getattr(node, "own", None)
        if not node.up or own is None:
            return False
        o = own.owned.get(p)
        return o is not None and own.valid_until > t and not (o.releasing and o.deadline <= t)

    def _name(self, index: int) -> str:
        return self._node(index).node_id

    def __call__(self, sim) -> str | None:
        if not self._new and not self._watch:
            return None
        now = sim.now
        new, self._new = self._new, []
        for index, action in new:
            p = action.partition
            holders = self._open.setdefault(p, {})
            if isinstance(action, Acquired):
                if any(self._may_own_after(other, p, action.at) for other in holders):
                    self._watch.add(p)
                holders[index] = action.at
                continue
            start = holders.pop(index, None)
            if start is None:
                continue
            end = action.at
            closed = self.cluster.metrics.ownership_log.closed.get(p, ())
            for s, e, who in closed:
                if who == index and s == start and e == end:
                    continue
                if min(end, e) > max(start, s):
                    return (f"partition {p} was owned by {self._name(index)} over [{start:.6f}, {end:.6f}) "
                            f"and by {self._name(who)} over [{s:.6f}, {e:.6f})")
            for other, s in holders.items():
                e = self._certain_until(other, p, now)
                if min(end, e) > max(start, s):
                    return (f"partition {p} was owned by {self._name(index)} over [{start:.6f}, {end:.6f}) "
                            f"and is owned by {self._name(other)} since {s:.6f}")
        for p in sorted(self._watch):
            holders = self._open.get(p, {})
            spans = [(s, self._certain_until(i, p, now), i) for i, s in holders.items()]
            for k, (s1, e1, a) in enumerate(spans):
                for s2, e2, b in spans[k + 1:]:
                    if min(e1, e2) > max(s1, s2):
                        return (f"partition {p} is owned by {self._name(a)} (since {s1:.6f}) and by "
                                f"{self._name(b)} (since {s2:.6f}) at once")
            if sum(self._may_own_after(i, p, now) for i in holders) < 2:
                self._watch.discard(p)  # (an interval capped by its lease is final: see above)
        return None


#: The name ``InvariantViolation.invariant`` gives a failed ``EpochsRise``.
EPOCHS_RISE = "epochs rise"


class EpochsRise:
    """Exclusive ownership: each partition's successive acquisitions carry strictly rising
    fencing epochs, whatever the path (a note, a crash takeover, a take-back, a restart, the
    census), across processes and restarts. A store fenced by epoch (``ctx.epoch``) remembers
    the highest epoch per partition and refuses an owner whose epoch fell: that partition would
    stall.

    Reads what ``simulations.intervals.OwnershipLog`` counts (``epoch_regressions``: it compares
    every ``Acquired`` with the highest epoch any earlier acquisition of the partition carried),
    so the check costs one length test per step, and the count stays the metric it was."""

    __name__ = EPOCHS_RISE

    def __init__(self, cluster) -> None:
        self.cluster = cluster
        self._seen = 0

    def _name(self, index: int) -> str:
        for node in self.cluster.nodes.values():
            if node.index == index:
                return node.node_id
        return f"#{index}"

    def __call__(self, sim) -> str | None:
        regressions = self.cluster.metrics.ownership_log.epoch_regressions
        if len(regressions) == self._seen:
            return None
        r = regressions[self._seen]
        self._seen = len(regressions)
        return (f"partition {r['partition']} acquired by {self._name(r['node'])} at {r['at']:.3f} with epoch "
                f"{r['epoch']}, not above epoch {r['previous']} acquired by {self._name(r['previous_node'])} "
                f"at {r['previous_at']:.3f}")


class PartitionMoves:
    """Exclusive ownership: a partition's state at a member (``ownership.states.state_of``)
    changes only by a move of ``ownership.states.TRANSITIONS``, the table that names each move's
    rule. Compared after every step on every node the step touched; a new process (a restart)
    starts from nothing."""

    __name__ = "partition moves"

    def __init__(self) -> None:
        #: node -> (its ownership core, the states seen after the last step it was touched in)
        self._last: dict[Any, tuple[Any, dict[int, PartitionState]]] = {}

    def __call__(self, sim) -> str | None:
        none = PartitionState.NONE
        for node in _touched_once(sim):
            own = getattr(node, "own", None)
            if own is None or not node.up:
                self._last.pop(node, None)
                continue
            seen = self._last.get(node)
            before = seen[1] if seen is not None and seen[0] is own else {}
            after = states_of(own)
            if after != before:
                moves = [(p, before.get(p, none), s) for p, s in after.items() if before.get(p) is not s]
                moves += [(p, s, none) for p, s in before.items() if p not in after]
                for p, a, b in moves:
                    if (a, b) not in TRANSITIONS:
                        return (f"{node.node_id}: partition {p} went from {a.value} to {b.value}, "
                                f"a move ownership.states.TRANSITIONS does not list")
            self._last[node] = (own, after)
        return None
