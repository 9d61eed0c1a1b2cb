"""Exclusive ownership (``NodeConfig.ownership = "exclusive"``, the default): a node owns a
partition only under a quorum lease, and partitions move by handoff.

The rules are the pure core's (``ownership.core``, docs/ownership.md); the runner that drives
them with the real clock and socket (``node_ownership.ExclusiveRunner``) lives on the membership
thread. This module is the application's side of it: it builds the runner when the node
starts, answers the node's reads from what the runner publishes (immutable ``Holding``
snapshots, safe from any thread), and turns the runner's news - reached through
``node_bridge.AppBridge`` - into the application's callbacks:

* acquired -> the ``acquired`` handlers (the fencing epoch and payload are in ``grant(p)``);
* release -> the ``released`` handlers; the payload of the awaitable ones goes back to the runner
  once they finished, and travels to the next owner;
* ended (lease lost, declared dead) -> the ``released`` handlers at once, waited for by no one:
  the partition may already be someone else's;
* a new stable view -> what the cluster survives now, logged when that changed.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ownership.lease import WitnessState
from ownership.survival import Survival, assess
from ownership.views import View, witness_set

from ..changes import OwnershipChange
from .background import detach
from .console.events import EventLog
from .members_file import MembersFile
from .node_bridge import AppBridge, PendingRelease
from .node_config import NodeConfig
from .node_mode import Addr, NodeSide
from .node_ownership import ExclusiveRunner, Grant
from .witness_state import StateFile, UnusableStateDir

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from membership.aio import Member
    from membership.seeds import DnsSeed

    from .node_thread import MembershipThread

_log = logging.getLogger("placement.node")
#: What the cluster survives, logged when it changes (``placement node`` shows its INFO lines too).
_survival_log = logging.getLogger("placement.survival")
#: Logged by an exclusive node that keeps no witness state (``--no-state-dir``, or its default
#: place is not writable): what can then let fencing epochs fall (docs/ownership.md rule 8,
#: "Witness state").
NO_STATE_DIR_WARNING = (
    "should this node restart while it is a witness, it forgets what it promised (stable views, "
    "the fencing-epoch reserves it granted), and fencing epochs can fall after that restart (seen in the "
    "simulator's fault schedules; never with witness state). Give every node --state-dir DIR on storage that "
    "survives restarts (docs/ownership.md, \"Witness state\")")


def pause_reason(fenced: str | None, me: str, stable: tuple[str, ...]) -> str | None:
    """Why a member owns nothing now, from its core's fence reason and its stable view: also a
    joiner not yet in that view. It can hold a lease under the view it was taught before its
    witnesses admit it, and owns nothing there, so it is not ready (a load balancer would route
    to it)."""
    if fenced is None and stable and me not in stable:
        return (f"not yet a member of the stable view ({len(stable)} members): waiting for its "
                "witnesses to admit this member")
    return fenced


class ExclusiveOwnership:
    """``OwnershipMode`` for ``"exclusive"`` (module docstring). Its reads raise before the node
    has started, as the node's ``table`` does: there is no runner to ask yet."""

    name = "exclusive"

    def __init__(self, config: NodeConfig, node: NodeSide, events: EventLog) -> None:
        self._config = config
        self._node = node
        self._events = events
        self._runner: ExclusiveRunner | None = None  # built on the membership thread (open)
        self._thread: MembershipThread | None = None  # where the runner runs (open)
        self._seeds: tuple[Addr | DnsSeed, ...] = config.join  # join, or the members on file (prepare)
        self._members_file: MembersFile | None = None  # (prepare)
        self._state: tuple[StateFile | None, WitnessState | None] = (None, None)  # --state-dir (prepare)
        self._survival: tuple[int, Survival] | None = None  # (stable view number, what it survives)
        self._published: set[int] = set()  # announced acquired, not yet released

    @property
    def runner(self) -> ExclusiveRunner:
        if self._runner is None:
            raise RuntimeError("node is not started")
        return self._runner

    # ----- reads ------------------------------------------------------------------------
    def owns(self, key: str | bytes) -> bool:
        return self._node.table().partition_of(key) in self.runner.owned_now()

    def leads(self, name: str) -> bool:
        return self.owns(name)

    def owned_partitions(self) -> frozenset[int]:
        return self.runner.owned_now()

    def may_work(self, partition: int, epoch: int) -> bool:
        return self.runner.holds(partition, epoch)

    def grant(self, partition: int) -> Grant | None:
        return self.runner.grant(partition)

    def release_deadline(self, partition: int) -> float | None:
        return self.runner.release_deadline(partition)

    def releasing_partitions(self) -> frozenset[int]:
        return self.runner.releasing()

    def lease_valid_until(self) -> float | None:
        return self.runner.holding.valid_until

    def paused(self) -> str | None:
        own = self.runner.own
        reason = pause_reason(own.fenced_reason, own.me, own.lease.stable)
        if reason is not None and self._seeds and not self._config.join and not own.lease.stable:
            assert self._members_file is not None
            reason += (f"; rejoining cluster {self._config.cluster!r} through the members this node last knew in it "
                       f"({self._members_file.path}): it founds a new cluster once every member it reaches says it "
                       "holds no view (they all restarted), and waits while it reaches none. To found one now, "
                       "start it with --new-cluster")
        return reason

    def survival(self) -> Survival | None:
        return None if self._survival is None else self._survival[1]

    def status(self) -> dict[str, Any]:
        return {"mode": self.name, **self.runner.status()}

    # ----- lifecycle --------------------------------------------------------------------
    def prepare(self, join: tuple[Addr | DnsSeed, ...]) -> tuple[Addr | DnsSeed, ...]:
        """Read (and check) the members file and the witness state (``--state-dir``, or the
        default file) before anything starts: a bad file is a configuration error."""
        c = self._config
        self._members_file = MembersFile(cluster=c.cluster, node=c.node_id, state_dir=c.state_dir, home=c.state_home)
        self._seeds = self._members_file.start_seeds(join, new_cluster=c.new_cluster)
        if c.state_dir is not None:
            state_file: StateFile | None = StateFile(c.state_dir, cluster=c.cluster, node=c.node_id)
        elif c.keep_state:
            state_file = StateFile.beside(self._members_file.path, cluster=c.cluster, node=c.node_id)
        else:
            state_file = None
        restored = None
        if state_file is not None:
            try:
                state_file.lock()
                restored = state_file.load()
                if not self._seeds:
                    restored = state_file.check_founder(restored, new_cluster=c.new_cluster)
            except UnusableStateDir as exc:
                state_file.unlock()
                if not state_file.implicit:
                    raise
                # The default place cannot be used (a read-only home, as in many containers): run
                # as before the default existed, and say so. A file it can read but not believe
                # still stops the start (it may hold promises).
                _log.warning("%s; running without witness state (%s)", exc, NO_STATE_DIR_WARNING)
                state_file, restored = None, None
            except BaseException:
                state_file.unlock()
                raise
        self._state = (state_file, restored)
        return self._seeds

    def open(self, member: Member, thread: MembershipThread) -> ExclusiveRunner:
        c = self._config
        state_file, restored = self._state
        self._thread = thread
        # --load-aware: the rules commit load figures in stable views at most that often (rule 12).
        exclusive = replace(c.exclusive, loads_every_s=c.load_aware_s) if c.load_aware_s else c.exclusive
        self._runner = ExclusiveRunner(
            c.node_id, exclusive, c.table_config, founder=not self._seeds, weight=c.weight, member=member,
            cluster=c.cluster, keys=c.membership_config().keys, hooks=AppBridge(thread, self).hooks(),
            state_file=state_file, restored=restored, members_file=self._members_file,
            restored_yields=state_file is not None and state_file.implicit,
            may_found=bool(self._seeds) and not c.join)
        return self._runner

    def started(self) -> None:
        if not self._config.keep_state:  # (once running: a start that fails says only why)
            _log.warning("--no-state-dir: %s", NO_STATE_DIR_WARNING)
        if not self._seeds:
            assert self._members_file is not None
            # Bound, so no other process of this node runs: the old cluster's members, if any,
            # are no way back to this new one.
            self._members_file.found()
            _survival_log.info("founded a new cluster %r (no --join). Started again with the same command, this "
                               "node rejoins it through the members it knew (%s)", self._config.cluster,
                               self._members_file.path)

    def view_changed(self) -> None:
        pass  # the runner follows the view on the membership thread

    def declared_dead(self) -> None:
        pass  # the runner heard it first, on the membership thread: it ends what this node held

    async def leave(self, timeout_s: float) -> None:
        """Hand every partition on first (bounded by the release deadline), then stop the runner."""
        runner, thread = self.runner, self._thread
        assert thread is not None

        async def hand_on() -> None:
            await runner.leave(self._config.exclusive.handoff_timeout_s + timeout_s)
            runner.close()

        await thread.run(hand_on())

    def close(self) -> None:
        """The runner stopped with the membership thread (or never started): nothing writes the
        witness state any more, so its lock goes (an in-process restart takes it again)."""
        state_file = self._state[0]
        if state_file is not None:
            state_file.unlock()

    # ----- what the runner tells the application (``node_bridge.AppSide``) ----------------
    def acquired(self, grant: Grant) -> None:
        if self._node.closed():
            return  # stopped as a process that died: it starts nothing (queued before the close)
        if self.runner.holding.grants.get(grant.partition) is not grant:
            return  # ended (or acquired again) before this loop got to it: nothing to start
        self._published.add(grant.partition)
        self._node.publish(OwnershipChange(frozenset({grant.partition}), frozenset(), self._node.table().checksum))
        self._node.leaderships_changed()

    def release(self, release: PendingRelease) -> None:
        """Run the ``released`` handlers of a partition being handed on; the payload goes back to
        the runner once the awaitable ones finished (``release.cancel``: stop draining)."""
        if release.cancelled:
            return  # the deadline passed before this loop ran: ownership ended (``ended`` follows)
        results = self._releasing(release.partition, release.reason)
        pending = [r for r in results if inspect.isawaitable(r)]
        if not pending:
            release.resolve(next((r for r in results if r is not None), None))
            return
        release.drain = asyncio.ensure_future(_drain(release.partition, pending))
        release.drain.add_done_callback(lambda t: release.resolve(None if t.cancelled() else t.result()))

    def ended(self, partition: int) -> None:
        """Ownership ended without a drain (lease lost, declared dead): stop at once. An async
        handler still runs (its cleanup), but nothing waits for it: the partition may already
        be someone else's."""
        for result in self._releasing(partition, "ended"):
            if inspect.isawaitable(result):
                detach(result)

    def view(self, view: View) -> None:
        """A new stable view: what the cluster survives now, logged and put in the event log
        when that changed (not per view, and never per lease renewal)."""
        if self._survival is not None and view.num <= self._survival[0]:
            return  # (views reach this loop in order; an older one is no news)
        self._node.placement_view(view)  # clients are routed by the stable view; load-aware weights plan from it
        ws = witness_set(view.members, self._config.exclusive.witnesses, self._config.exclusive.witness_group_members)
        survival = assess(view.weighted(), ws.all, ws.groups)
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
        self._events.append("survival", "", text, time.time())

    def _releasing(self, partition: int, reason: str) -> list[object]:
        if partition not in self._published:
            return []
        self._published.discard(partition)
        _log.debug("releasing partition %d (%s)", partition, reason)
        results = self._node.publish(OwnershipChange(frozenset(), frozenset({partition}),
                                                     self._node.table().checksum))
        self._node.leaderships_changed()
        return results


async def _drain(partition: int, pending: list[Awaitable[Any]]) -> Any:
    """Await the ``released`` handlers of one partition; the first payload one returned."""
    payload = None
    for result in await asyncio.gather(*pending, return_exceptions=True):
        if isinstance(result, BaseException):
            if isinstance(result, asyncio.CancelledError):
                raise result
            _log.error("released handler for partition %d raised %r (handing it on anyway)", partition, result)
        elif payload is None:
            payload = result
    return payload
