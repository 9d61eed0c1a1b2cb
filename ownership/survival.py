"""What a cluster survives, from its stable view alone (pure: no clock, no I/O).

Work goes on after a loss only where the survivors hold a quorum of the stable view's witnesses
(``views.is_quorum``: more than half, or exactly half including the first witness) *and* a
member with a positive weight: the next view is chosen by that quorum, the survivors' leases
and the dead owner's condemnation need it, and only a weighted member owns partitions.

``assess`` answers three questions about one stable view:

* which single members' *crash* stops all work (``fatal``), and what to add about it;
* how many simultaneous crashes of *any* members are always survived (``crashes``): a quorum
  must remain whichever witnesses fail, and a weighted member too. Crashes one at a time, each
  followed by a new stable view, may be survived further: every view is assessed afresh;
* a network *split* (``split``): the side holding a witness quorum goes on (with a weighted
  member), the other side stops owning within its lease; on an even witness set, an even split
  goes to the side of the first witness.

A witness in the sense of ``placement witness`` is a member of weight 0: it votes when it is
one of the view's ``k`` witnesses (``views.witnesses_of``), and owns nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .views import is_quorum

__all__ = ["Survival", "assess"]


@dataclass(frozen=True)
class Survival:
    members: tuple[str, ...]  # the stable view's members, sorted
    workers: tuple[str, ...]  # those with a positive weight (they own partitions)
    witnesses: tuple[str, ...]  # the view's witnesses, first witness first
    fatal: tuple[str, ...]  # members whose crash alone stops all work, sorted
    crashes: int  # simultaneous crashes of any members always survived (0: some single crash is fatal)
    split: str  # what a network split does, one sentence
    warning: str | None  # set when some single crash stops all work: what it is and what to add

    @property
    def summary(self) -> str:
        """One line for a log, /readyz, ``placement status``."""
        if self.warning is not None:
            return self.warning
        if self.crashes == 1:
            return "survives the crash of any one member"
        return f"survives the crash of any {self.crashes} members at once"

    def to_dict(self) -> dict[str, object]:
        return {"members": list(self.members), "workers": list(self.workers), "witnesses": list(self.witnesses),
                "fatal": list(self.fatal), "crashes_survived": self.crashes, "split": self.split,
                "warning": self.warning, "summary": self.summary}


def _works(alive: set[str], workers: Sequence[str], groups: Sequence[tuple[str, ...]]) -> bool:
    return all(is_quorum(alive, g) for g in groups) and any(w in alive for w in workers)


def assess(weights: Mapping[str, float], witnesses: Sequence[str],
           groups: Sequence[Sequence[str]] | None = None) -> Survival:
    """What the stable view ``weights`` (member -> weight) with ``witnesses`` (in their order:
    the first breaks ties) survives (module docstring). ``groups``: the witness groups
    (``views.WitnessSet``; None: one group, ``witnesses``): work goes on where a quorum of every
    group survives."""
    members = tuple(sorted(weights))
    wit = tuple(witnesses)
    grouped = [tuple(g) for g in groups] if groups else [wit]
    workers = tuple(m for m in members if weights[m] > 0)
    everyone = set(members)
    if not workers:
        return Survival(members, workers, wit, members, 0, "no member owns partitions",
                        "no member has a positive weight, so no partition is owned: start a node (placement node)")
    fatal = tuple(m for m in members if not _works(everyone - {m}, workers, grouped))
    # Whichever f witnesses fail, a quorum remains iff 2 (k - f) > k (losing the first witness
    # with exactly half left is the worst case), in every group (they may all fail in the
    # smallest); and f < the number of weighted members.
    crashes = 0 if fatal else min(min((len(g) - 1) // 2 for g in grouped), len(workers) - 1)
    split = _split(members, workers, wit) if len(grouped) == 1 else (
        f"the side with a quorum of each of the {len(grouped)} witness groups goes on working, the other side "
        "stops within its lease")
    return Survival(members, workers, wit, fatal, crashes, split, _warning(members, workers, fatal))


def _split(members: tuple[str, ...], workers: tuple[str, ...], wit: tuple[str, ...]) -> str:
    if len(members) == 1:
        return "a single member: nothing to split"
    k = len(wit)
    need = k // 2 + 1
    side = f"the side with {need} of the {k} witnesses ({', '.join(wit)})"
    if k % 2 == 0:
        side += f", or with {k // 2} including the first witness {wit[0]},"
    text = f"{side} goes on working, the other side stops within its lease"
    if len(workers) < len(members):
        text += "; a side without a member of positive weight owns nothing"
    return text


def _warning(members: tuple[str, ...], workers: tuple[str, ...], fatal: tuple[str, ...]) -> str | None:
    if not fatal:
        return None
    who = " or ".join(fatal)
    if len(members) == 1:
        return (f"a crash of {who} stops all work (a single member): add two nodes, or a node and a witness "
                "(placement witness)")
    if len(workers) == 1 and fatal == workers:
        return f"a crash of {who} stops all work (the only member with weight > 0): add a node (placement node)"
    if len(workers) == 1:
        return (f"a crash of {who} stops all work (the only member with weight > 0, and a tie of the witnesses "
                "goes to the first): add a node (placement node)")
    return (f"a crash of {who} stops all work: add a witness (placement witness) or a node, so that "
            f"{len(members) + 1} members vote")
