"""The linear history of stable views (ownership.views): whatever the message order, loss,
duplication and competing proposers, no two members ever install different views under one
number, and a witness that accepted a successor grants no lease under its view any more."""

from __future__ import annotations

import random
from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from ownership.lease import LeaseReq, QuorumLease
from ownership.views import Decided, StableViews, View, ViewMessage, is_quorum, witnesses_of

MEMBERS = ("a", "b", "c", "d", "e")


class Net:
    """StableViews of every member wired through one queue that a seeded random schedule
    delivers out of order, drops and duplicates."""

    def __init__(self, seed: int, loss: float, dup: float, witnesses: int = 3, genesis: View | None = None) -> None:
        """``genesis``: no first view installed; the members bootstrap one from it."""
        self.rng = random.Random(seed)
        self.loss, self.dup = loss, dup
        self.queue: list[tuple[str, str, ViewMessage]] = []
        self.installed: dict[str, list[View]] = {m: [] for m in MEMBERS}
        self.nodes = {m: StableViews(m, witnesses=witnesses, resend_s=0.5, quiet_until=0.0,
                                     send=self._sender(m), on_install=self._installer(m), genesis=genesis)
                      for m in MEMBERS}
        if genesis is None:
            first = View.of(1, dict.fromkeys(MEMBERS, 1.0))
            for n in self.nodes.values():
                n.install(first, 0.0)

    def _sender(self, src: str) -> Callable[[str, ViewMessage], None]:
        return lambda dst, msg: self.queue.append((src, dst, msg))

    def _installer(self, me: str) -> Callable[[View, View, float], None]:
        return lambda old, new, now: self.installed[me].append(new)

    def propose_at_random(self, rng: random.Random, proposers: int, steps: int = 400) -> None:
        """Every 50 ms, one of the first ``proposers`` members may propose its own idea of the next
        view (a first view from the genesis carries an incarnation of its own); ticks and three
        deliveries a step."""
        now = 0.0
        for _ in range(steps):
            now += 0.05
            if rng.random() < 0.05:
                m = rng.choice(MEMBERS[:proposers])
                weighted = {x: 1.0 for x in MEMBERS if rng.random() < 0.8} | {m: 1.0}
                self.nodes[m].propose(weighted, now, rank=MEMBERS.index(m), inc=1 + MEMBERS.index(m))
            for n in self.nodes.values():
                n.tick(now)
            for _ in range(3):
                self.step(now)

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
    net.propose_at_random(random.Random(seed ^ 0x5EED), proposers)
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
    from ownership.views import Accept

    nxt = View.of(2, {"a": 1.0, "b": 1.0})
    w.views.receive("c", Accept(2, 1, v.ck, nxt.members, nxt.weights), 0.2)
    reply = w.on_request("b", LeaseReq(2, 0, v.ck, num=v.num), 0.3)
    assert not reply.granted and reply.pending


def test_a_member_jumping_over_a_view_must_drop_what_it_owns() -> None:
    """Ownership carries over only a step from the view the lease was granted under. A step
    whose witnesses still hold a quorum of the lease's grants makes it a lease of the new view
    (``QuorumLease._carry_grants``), so the next step carries too; one whose new witness set
    does not leaves it a lease of the old view, so a second step on it does not carry."""
    q = QuorumLease("a", witnesses=1, lease_s=3.0, renew_s=1.0, resend_s=0.5, max_drift=1e-3, now=0.0)
    q.set_stable({"a": 1.0}, 0.0)
    q.tick(0.0)  # a is its own witness: the lease is granted at once
    assert q.valid(0.1) and q.lease_num == 1
    q.installs.clear()
    q.views.receive("b", Decided(2, ("a", "b"), (1.0, 1.0)), 0.2)  # witness: a, as before
    assert q.lease_num == 2 and q.valid_until == 3.0  # the same grant, now under view 2
    q.views.receive("b", Decided(3, ("a", "b", "e"), (1.0, 1.0, 1.0)), 0.3)  # witness: e
    assert q.witnesses == ("e",) and q.lease_num == 2 and q.valid_until == 3.0
    q.views.receive("b", Decided(4, ("a", "b", "e", "f"), (1.0,) * 4), 0.4)
    first, second, third = q.installs
    assert first.stepped and first.carried  # 1 -> 2 on a lease of view 1
    assert second.stepped and second.carried  # 2 -> 3 on the lease carried into view 2
    assert third.stepped and not third.carried  # 3 -> 4 still on the lease of view 2
    q.installs.clear()
    q.views.receive("b", Decided(6, ("a", "b"), (1.0, 1.0)), 0.5)
    (jump,) = q.installs
    assert not jump.stepped and not jump.carried


def test_quorums_of_one_witness_set_always_intersect() -> None:
    rng = random.Random(7)
    for _ in range(500):
        members = rng.sample([f"m{i}" for i in range(12)], rng.randint(1, 12))
        ws = witnesses_of(members, rng.randint(1, 7))
        a = [w for w in ws if rng.random() < 0.6]
        b = [w for w in ws if rng.random() < 0.6]
        if is_quorum(a, ws) and is_quorum(b, ws):
            assert set(a) & set(b)


def _deliver_all(net: Net, now: float, keep: Callable[[str, str, ViewMessage], bool] = lambda s, d, m: True) -> None:
    """Deliver the queue in order (replies too) until it is empty, dropping what ``keep`` refuses."""
    while net.queue:
        src, dst, msg = net.queue.pop(0)
        if keep(src, dst, msg):
            reply = net.nodes[dst].receive(src, msg, now)
            if reply is not None:
                net.queue.append((dst, src, reply))


def test_a_proposer_whose_view_changed_pushes_its_new_view_not_the_old_one() -> None:
    """Fuzz seed 514: a proposal kept retrying its old value for 30 s and got it chosen after
    every member's view had moved on; then nobody had news to propose, and partitions stayed
    orphaned. A new value for the same slot now starts a higher ballot with it."""
    net = Net(seed=1, loss=0.0, dup=0.0)
    old, new = {"a": 1.0, "b": 1.0, "c": 1.0}, {"a": 1.0, "b": 1.0, "c": 1.0, "d": 1.0}
    net.nodes["a"].propose(old, 0.1, rank=0)
    net.queue.clear()  # lost, say, in a split
    net.nodes["a"].propose(new, 0.2, rank=0)
    _deliver_all(net, 0.2)
    for t in (0.8, 1.4):
        for n in net.nodes.values():
            n.tick(t)
        _deliver_all(net, t)
    assert net.nodes["a"].view.num == 2 and net.nodes["a"].view.weighted() == new


def test_a_proposer_whose_view_lost_to_an_older_accepted_one_knows_it_is_superseded() -> None:
    """Paxos makes a proposer finish a value a witness already accepted. That view is then not
    news to the proposer, whose own view differs: ``superseded`` lets it propose again
    (``Ownership._maybe_propose``) instead of waiting for a change that never comes."""
    net = Net(seed=1, loss=0.0, dup=0.0)
    w1, w2, _ = witnesses_of(MEMBERS, 3)
    older = {m: 1.0 for m in MEMBERS if m != "e"}
    b = next(m for m in MEMBERS if m not in (w1, w2))
    net.nodes[b].propose(older, 0.1, rank=1)
    # b's Accept reaches w1 only, then b goes quiet: w1 holds an accepted, unchosen value.
    _deliver_all(net, 0.1, keep=lambda s, d, m: not (s == b and type(m).__name__ == "Accept" and d != w1))
    assert net.nodes[w1].pending
    proposer = next(m for m in MEMBERS if m not in (b, w1))
    mine = {m: 1.0 for m in MEMBERS if m != "d"}
    net.nodes[proposer].propose(mine, 0.2, rank=0)
    for i in range(40):  # (a ballot below b's is refused; the proposer retries higher)
        t = 0.2 + 0.25 * i
        net.nodes[proposer].tick(t)
        _deliver_all(net, t, keep=lambda s, d, m: s != b and d != b)
    chosen = net.nodes[proposer].view
    assert chosen.num == 2 and chosen.weighted() == older  # Paxos: the accepted value wins
    superseded = net.nodes[proposer].superseded
    assert superseded is not None and superseded.weighted() == mine
    net.nodes[proposer].install(View.of(3, mine), 0.3)
    assert net.nodes[proposer].superseded is None


def test_a_proposer_whose_view_moved_on_withdraws_its_stale_attempt() -> None:
    """Fuzz seed 405: an attempt retried through a split got its outdated value chosen just after
    the views had changed. ``withdraw`` stops it; the same view withdraws nothing."""
    net = Net(seed=1, loss=0.0, dup=0.0)
    old = {"a": 1.0, "b": 1.0, "c": 1.0}
    a = net.nodes["a"]
    a.propose(old, 0.1, rank=0)
    net.queue.clear()
    a.withdraw(dict(old))
    a.tick(0.7)
    assert net.queue, "the same view: the attempt goes on"
    net.queue.clear()
    a.withdraw({**old, "d": 1.0})
    for t in (1.3, 1.9, 2.5, 5.0):
        a.tick(t)
    assert not net.queue and a.next_time() == float("inf")
    _deliver_all(net, 5.0)
    assert all(n.view.num == 1 for n in net.nodes.values())


def test_witnesses_finish_a_view_whose_proposer_died_after_its_accepts() -> None:
    """Issue 29 item 6: the proposer of view 2 dies once its ``Accept``s reached the witnesses,
    before it heard them accept. The witnesses grant no lease under view 1 any more (point 3),
    and the members it beat in phase 1 wait out their back-off (2 s and more), longer than a
    lease lasts past its last renewal: every healthy member dropped all it owned. A witness
    that accepted and has not learned the choice after ``resend_s``/2 times one plus its rank
    among the witnesses now finishes it: everyone has view 2 within 1 s of the death."""
    net = Net(seed=1, loss=0.0, dup=0.0)
    ws = witnesses_of(MEMBERS, 3)
    proposer = next(m for m in MEMBERS if m not in ws)
    value = {m: 1.0 for m in MEMBERS if m != "e"}
    net.nodes[proposer].propose(value, 0.1, rank=0)
    # Its Prepares, the promises and its Accepts arrive; it dies before any Accepted does.
    _deliver_all(net, 0.1, keep=lambda s, d, m: not (d == proposer and type(m).__name__ == "Accepted"))
    assert all(net.nodes[w].pending for w in ws) and all(n.view.num == 1 for n in net.nodes.values())
    t = 0.1
    while t < 1.1:
        t = round(t + 0.05, 2)
        for m, n in net.nodes.items():
            if m != proposer:
                n.tick(t)
        _deliver_all(net, t, keep=lambda s, d, m: proposer not in (s, d))
    views = {m: n.view for m, n in net.nodes.items() if m != proposer}
    assert all(v.num == 2 and v.weighted() == value for v in views.values()), views
