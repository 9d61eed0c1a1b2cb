"""Timing of the exclusive-ownership rules (``ownership.core``), with units in the names.

The relations between them that the safety argument needs (``renew_s + fence_drain_s <
lease_s``; a bound on clock-rate drift) are checked here, so a bad setting is refused at start,
not discovered as a fenced member (docs/ownership.md, "What is guaranteed").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["ExclusiveConfig"]


@dataclass(frozen=True)
class ExclusiveConfig:
    """Timing of the ownership rules (module docstring). Units in the names."""

    #: Longest a graceful release may drain before ownership ends anyway.
    handoff_timeout_s: float = 5.0
    #: A takeover from a dead holder waits at least this long after the death is known.
    takeover_grace_s: float = 0.25
    #: A member whose lease is about to end starts releasing this long before it does.
    fence_drain_s: float = 1.0
    #: Length of a lease, from the latest send time at which a witness quorum granted. Long
    #: enough for rolling renewal (``ownership.lease``, ``QuorumLease._targets``): with a
    #: quorum of q witnesses, rounds ask one witness each while ``lease_s`` >= (q + 1)
    #: ``renew_s`` + ``fence_drain_s`` + ``resend_s`` / 2 (q = 3 of 5: 6.25 s), a quorum otherwise.
    #: Issue 34's curve (docs/ownership.md, "What leases cost"): 1.25 / 6.5 s is 3.6 datagrams per
    #: member-second at N=256 against 8.0 for 1 / 3 s, and a crash takeover still waits for
    #: detection, not for the lease.
    lease_s: float = 6.5
    #: A lease round every this often: one witness a round in the steady state (above).
    renew_s: float = 1.25
    #: Witnesses per stable view (a majority of them must grant a lease); per group, with
    #: ``witness_group_members``.
    witnesses: int = 5
    #: Members per witness group: a view of N members has ceil(N / this) groups of
    #: ``witnesses`` witnesses (as many as the members fill); a member's lease is held by a
    #: quorum of its group, a successor view is chosen by a quorum of every group, so a
    #: witness's load stays bounded as N grows (``ownership.views.WitnessSet``;
    #: docs/ownership.md, "Witness groups"). 0 (the default): one group, whatever N. A
    #: cluster-wide setting: every member must use the same.
    witness_group_members: int = 0
    #: The view must be unchanged, without suspects, this long to become the stable view.
    stable_after_s: float = 2.0
    #: The driver is asked to call in at least this often (``get_timer``) while a rule that
    #: depends on time may fire; in the steady state only when the lease's timers are due.
    tick_s: float = 0.25
    #: Unacknowledged notes, redirects and queries are resent this often.
    resend_s: float = 0.5
    #: Waiting this long for a partition from a live holder: ask it (``Query``).
    query_after_s: float = 8.0
    #: Bound on the relative clock *rate* difference between members (1e-3 = 1 ms/s; quartz
    #: oscillators are specified at 20-100 ppm). No synchronised wall clock is assumed.
    max_drift: float = 1e-3
    #: Ids of the members that may choose the cluster's first stable view when nobody founds it
    #: (every member started with ``--join``, as in a StatefulSet): the same on every member
    #: (``ownership.views``, "genesis"). Empty: a member without seeds founds the cluster.
    bootstrap: tuple[str, ...] = ()
    #: A member holding a lease proposes its stable view again, unchanged but for its latest load
    #: figures (``Ownership.set_loads``), when the stable view's were committed at least this
    #: long ago (or it has none) and its own are newer and differ: a load-aware rebalance then
    #: plans from figures a view committed, the same at every member (docs/ownership.md, "Load
    #: figures"). 0: never (load figures then only travel with views proposed for other reasons).
    loads_every_s: float = 0.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.loads_every_s) and self.loads_every_s >= 0):
            raise ValueError(f"loads_every_s must be 0 (off) or positive seconds, got {self.loads_every_s!r}")
        for name in ("handoff_timeout_s", "takeover_grace_s", "fence_drain_s", "lease_s", "renew_s",
                     "stable_after_s", "tick_s", "resend_s", "query_after_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
        if not 0 <= self.max_drift < 0.1:
            raise ValueError(f"max_drift must be in [0, 0.1), got {self.max_drift!r}")
        if type(self.witnesses) is not int or not 1 <= self.witnesses <= 15:
            raise ValueError(f"witnesses must be an integer in 1..15, got {self.witnesses!r}")
        if type(self.witness_group_members) is not int or not (
                self.witness_group_members == 0 or self.witness_group_members >= self.witnesses):
            raise ValueError(f"members per witness group (--witness-groups, witness_group_members) must be 0 "
                             f"(one group) or at least the witnesses per group ({self.witnesses}), got "
                             f"{self.witness_group_members!r}")
        if not (isinstance(self.bootstrap, tuple) and all(isinstance(m, str) and m for m in self.bootstrap)
                and len(set(self.bootstrap)) == len(self.bootstrap)):
            raise ValueError(f"bootstrap must be distinct member ids, got {self.bootstrap!r}")
        if self.renew_s + self.fence_drain_s >= self.lease_s:
            raise ValueError("need renew_s + fence_drain_s < lease_s, or a healthy member would fence "
                             "itself between two renewals")
