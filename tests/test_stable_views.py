"""The linear history of stable views (placement.stable_views): whatever the message order, loss,
duplication and competing proposers, no two members ever install different views under one
number, and a witness that accepted a successor grants no lease under its view any more."""

from __future__ import annotations

import random
from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from placement.quorum_lease import LeaseReq, QuorumLease
from placement.stable_views import Decided, StableViews, View, ViewMessage, is_quorum, witnesses_of

MEMBERS = ("a", "b", "c", "d", "e")


class Net:
    """StableViews of every member wired through one queue that a seeded random schedule
    delivers out of order, drops and duplicates."""

    def __init__(self, seed: int, loss: float, dup: float, witnesses: int = 3) -> None:
        self.rng = random.Random(seed)
        self.loss, self.dup = loss, dup
        self.queue: list[tuple[str, str, ViewMessage]] = []
        self.installed: dict[str, list[View]] = {m: [] for m in MEMBERS}
        self.nodes = {m: StableViews(m, witnesses=witnesses, resend_s=0.5, quiet_until=0.0,
                                     send=self._sender(m), on_install=self._installer(m))
                      for m in MEMBERS}
        first = View.of(1, dict.fromkeys(MEMBERS, 1.0))
        for n in self.nodes.values():
            n.install(first, 0.0)

    def _sender(self, src: str) -> Callable[[str, ViewMessage], None]:
        return lambda dst, msg: self.queue.append((src, dst, msg))

    def _installer(self, me: str) -> Callable[[View, View, float], None]:
        return lambda old, new, now: self.installed[me].append(new)

    def step(self, now: float) -> None:
        if not self.queue:
            return
        src, dst, msg = self.queue.pop(self.rng.randrange(len(self.queue)))
        if self.rng.random() < self.loss:
            return
        if self.rng.random() < self.dup:
            self.queue.append((src, dst, msg))
        reply = self.nodes[dst].receive(src, msg, now)
        if reply is not None:
            self.queue.append((dst, src, reply))


def _one_history(installed: dict[str, list[View]]) -> dict[int, View]:
    by_num: dict[int, View] = {}
    for views in installed.values():
        nums = [v.num for v in views]
        assert nums == sorted(set(nums)), f"installs out of order: {nums}"
        for v in views:
            assert by_num.setdefault(v.num, v) == v, f"two views numbered {v.num}: {by_num[v.num]} and {v}"
    return by_num


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), loss=st.sampled_from([0.0, 0.1, 0.3]), dup=st.sampled_from([0.0, 0.2]),
       proposers=st.integers(2, 4))
def test_no_two_members_install_different_views_under_one_number(seed: int, loss: float, dup: float,
                                                                  proposers: int) -> None:
    net = Net(seed, loss, dup)
    rng = random.Random(seed ^ 0x5EED)
    now = 0.0
    for _ in range(400):
        now += 0.05
        if rng.random() < 0.05:  # some member proposes its own idea of the next view
            m = rng.choice(MEMBERS[:proposers])
            weighted = {x: 1.0 for x in MEMBERS if rng.random() < 0.8} | {m: 1.0}
            net.nodes[m].propose(weighted, now, rank=MEMBERS.index(m))
        for n in net.nodes.values():
            n.tick(now)
        for _ in range(3):
            net.step(now)
    history = _one_history(net.installed)
    assert all(v.num == n for n, v in history.items())


def test_a_lone_proposer_gets_its_view_chosen_and_everyone_learns_it() -> None:
    net = Net(seed=1, loss=0.0, dup=0.0)
    net.nodes["a"].propose({"a": 1.0, "b": 1.0, "c": 2.0, "d": 1.0}, 0.1, rank=0)
    for i in range(200):
        for n in net.nodes.values():
            n.tick(0.1 + i * 0.01)
        net.step(0.1 + i * 0.01)
    assert {m: n.view.num for m, n in net.nodes.items()} == dict.fromkeys(MEMBERS, 2)
    assert net.nodes["e"].view.weighted() == {"a": 1.0, "b": 1.0, "c": 2.0, "d": 1.0}


def test_a_witness_that_accepted_a_successor_grants_no_lease_under_the_old_view() -> None:
    """Point 3 of the module docstring: after accepting, a request under the old view is refused
    (and says a successor is pending, so the requester helps finish it)."""
    w = QuorumLease("a", witnesses=3, lease_s=3.0, renew_s=1.0, resend_s=0.5, max_drift=1e-3, now=0.0)
    w.set_stable(["a", "b", "c"])
    v = w.views.view
    req = LeaseReq(1, 0, v.ck, num=v.num)
    assert w.on_request("b", req, 0.1).granted
    from placement.stable_views import Accept

    nxt = View.of(2, {"a": 1.0, "b": 1.0})
    w.views.receive("c", Accept(2, 1, v.ck, nxt.members, nxt.weights), 0.2)
    reply = w.on_request("b", LeaseReq(2, 0, v.ck, num=v.num), 0.3)
    assert not reply.granted and reply.pending


def test_a_member_jumping_over_a_view_must_drop_what_it_owns() -> None:
    """Ownership carries over only a step from the view the lease was granted under."""
    q = QuorumLease("a", witnesses=1, lease_s=3.0, renew_s=1.0, resend_s=0.5, max_drift=1e-3, now=0.0)
    q.set_stable({"a": 1.0}, 0.0)
    q.tick(0.0)  # a is its own witness: the lease is granted at once
    assert q.valid(0.1) and q.lease_num == 1
    q.installs.clear()
    q.views.receive("b", Decided(2, ("a", "b"), (1.0, 1.0)), 0.2)
    q.views.receive("b", Decided(3, ("a", "b", "c"), (1.0, 1.0, 1.0)), 0.3)
    step, second = q.installs
    assert step.stepped and step.carried  # 1 -> 2 on a lease of view 1
    assert second.stepped and not second.carried  # 2 -> 3 still on the lease of view 1


def test_quorums_of_one_witness_set_always_intersect() -> None:
    rng = random.Random(7)
    for _ in range(500):
        members = rng.sample([f"m{i}" for i in range(12)], rng.randint(1, 12))
        ws = witnesses_of(members, rng.randint(1, 7))
        a = [w for w in ws if rng.random() < 0.6]
        b = [w for w in ws if rng.random() < 0.6]
        if is_quorum(a, ws) and is_quorum(b, ws):
            assert set(a) & set(b)
