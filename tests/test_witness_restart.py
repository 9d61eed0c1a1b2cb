"""A witness that restarts keeps its promises when its driver kept them (``--state-dir``,
issue 29 item 5): the acceptor state (ownership.views, "Restarts") and the lease's witness
records (ownership.lease.WitnessState), and what protects a witness without them (the quiet time)."""

from __future__ import annotations

import random
from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from ownership.lease import Condemn, LeaseReq, QuorumLease, WitnessState
from ownership.views import (
    Accept,
    Accepted,
    AcceptorState,
    Decided,
    Prepare,
    Promise,
    StableViews,
    View,
    ViewMessage,
    witnesses_of,
)

from test_stable_views import MEMBERS, Net, _one_history

CONTROL_SEEDS = 300
FIRST = View.of(1, dict.fromkeys(MEMBERS, 1.0))
W1, W2, W3 = witnesses_of(FIRST.members, 3)
X = View.of(2, dict.fromkeys(MEMBERS[:4], 1.0))  # what proposer "p1" gets chosen
Y = View.of(2, dict.fromkeys(MEMBERS[1:], 1.0))  # what a later proposer "p2" would propose


def _acceptor(me: str, *, quiet_until: float = 0.0, restored: AcceptorState | None = None,
              installed: list[View] | None = None) -> StableViews:
    seen = installed if installed is not None else []
    sv = StableViews(me, witnesses=3, resend_s=0.5, quiet_until=quiet_until, send=lambda dst, msg: None,
                     on_install=lambda old, new, now: seen.append(new), restored=restored)
    return sv


def _choose_x(w1: StableViews, w2: StableViews) -> None:
    """Proposer p1, ballot (1, p1): promises and acceptances of w1 and w2, a quorum of the
    three witnesses, so X is chosen. Nobody but p1 knows yet (its Decided is not delivered)."""
    for w in (w1, w2):
        assert w.receive("p1", Prepare(2, 1, FIRST.ck), 1.0) == Promise(2, 1, True)
    for w in (w1, w2):
        assert w.receive("p1", Accept(2, 1, FIRST.ck, X.members, X.weights), 1.1) == Accepted(2, 1, True)


def _run_p2(witnesses: list[StableViews], now: float) -> View | None:
    """Proposer p2, ballot (2, p2), asks ``witnesses``; the value it gets chosen (Paxos: the
    value accepted in the highest ballot among the promises, else its own Y), or None."""
    promises: list[ViewMessage] = [r for w in witnesses if (r := w.receive("p2", Prepare(2, 2, FIRST.ck), now))]
    oks = [p for p in promises if isinstance(p, Promise) and p.ok]
    if 2 * len(oks) <= 3:
        return None
    best = max(oks, key=lambda p: (p.acc_rnd, p.acc_by))
    value = View.of(2, dict(zip(best.members, best.weights))) if best.acc_rnd else Y
    accepted = [w.receive("p2", Accept(2, 2, FIRST.ck, value.members, value.weights), now) for w in witnesses]
    return value if 2 * sum(a == Accepted(2, 2, True) for a in accepted) > 3 else None


def test_a_restarted_witness_with_its_state_keeps_its_acceptance_and_votes_at_once() -> None:
    w1, w2, w3 = (_acceptor(w) for w in (W1, W2, W3))
    for w in (w1, w2, w3):
        w.install(FIRST, 0.0)
    _choose_x(w1, w2)
    kept = w2.durable_state()
    assert kept == AcceptorState(FIRST, (1, "p1"), ((1, "p1"), X))
    # w2 restarts with what it wrote; w1 is away. It learns view 1 again and votes at once
    # (no quiet time): p2's quorum {w2, w3} finds X accepted and finishes X, never Y.
    w2 = _acceptor(W2, quiet_until=0.0, restored=kept)
    w2.install(FIRST, 2.0)
    assert w2.durable_state() == kept and w2.pending
    assert _run_p2([w2, w3], 2.1) == X


def test_without_its_state_only_the_quiet_time_keeps_a_restarted_witness_from_a_second_choice() -> None:
    w1, w2, w3 = (_acceptor(w) for w in (W1, W2, W3))
    for w in (w1, w2, w3):
        w.install(FIRST, 0.0)
    _choose_x(w1, w2)
    # Forgotten, voting at once: a second value is chosen for view 2 (what the quiet time is for).
    forgetful = _acceptor(W2, quiet_until=0.0)
    forgetful.install(FIRST, 2.0)
    w3_copy = _acceptor(W3)
    w3_copy.install(FIRST, 0.0)
    assert _run_p2([forgetful, w3_copy], 2.1) == Y  # X was chosen: two views numbered 2
    # Today's protection: the restarted witness takes no part for the quiet time, so p2 finds
    # no quorum until then (and by assumption X has reached the others by then).
    quiet = _acceptor(W2, quiet_until=2.0 + 6.0)
    quiet.install(FIRST, 2.0)
    assert _run_p2([quiet, w3], 2.1) is None


def test_a_restarted_witness_refuses_what_it_promised_to_refuse() -> None:
    w2 = _acceptor(W2)
    w2.install(FIRST, 0.0)
    assert w2.receive("p2", Prepare(2, 5, FIRST.ck), 1.0) == Promise(2, 5, True)
    w2 = _acceptor(W2, restored=w2.durable_state())
    w2.install(FIRST, 2.0)
    # A lower ballot than the one it promised: refused, with the round it promised.
    assert w2.receive("p1", Prepare(2, 3, FIRST.ck), 2.1) == Promise(2, 5, False)
    assert w2.receive("p1", Accept(2, 3, FIRST.ck, X.members, X.weights), 2.2) == Accepted(2, 3, False)
    assert not w2.pending


def test_a_restarted_witness_installs_no_view_older_than_the_one_it_held() -> None:
    installed: list[View] = []
    later = View.of(3, dict.fromkeys(MEMBERS[:3], 1.0))
    w = _acceptor(W1, restored=AcceptorState(X, (0, ""), None), installed=installed)
    assert w.durable_state().view == X  # what it would write before it learns anything
    assert not w.install(FIRST, 1.0) and w.view.num == 0  # view 1 was followed by X, chosen
    # A stale proposer of view 2 is told the view it held (chosen), not a vote.
    assert w.receive("p2", Prepare(2, 9, FIRST.ck), 1.0) == Decided(2, X.members, X.weights)
    assert w.receive("p2", Prepare(3, 9, X.ck), 1.0) is None  # later slots: once it has learned X
    assert w.install(later, 2.0) and installed == [later]
    assert w.durable_state() == AcceptorState(later, (0, ""), None)


def test_the_durable_counter_rises_with_every_change_and_only_then() -> None:
    w = _acceptor(W1)
    changes = [w.durable_changes]
    w.install(FIRST, 0.0)
    changes.append(w.durable_changes)
    w.receive("p1", Prepare(2, 1, FIRST.ck), 1.0)
    changes.append(w.durable_changes)
    w.receive("p0", Prepare(2, 1, FIRST.ck), 1.0)  # a lower ballot ((1, "p0") < (1, "p1")): refused
    changes.append(w.durable_changes)
    w.receive("p1", Accept(2, 1, FIRST.ck, X.members, X.weights), 1.1)
    changes.append(w.durable_changes)
    assert changes == [0, 2, 3, 3, 4]  # (installing its first view with no quiet time: no longer forgetful)


def _lease(me: str, restored: WitnessState | None = None, quiet_s: float = 6.0,
           yields: bool = False) -> QuorumLease:
    return QuorumLease(me, witnesses=3, lease_s=3.0, renew_s=1.0, resend_s=0.5, max_drift=1e-3, now=0.0,
                       quiet_s=quiet_s, restored=restored, restored_yields=yields)


def test_a_restarted_witness_keeps_reserves_and_condemnations() -> None:
    w = _lease(W1, quiet_s=0.0)  # (as a founder: it votes at once)
    w.set_stable(dict.fromkeys(MEMBERS, 1.0), 0.0)
    before = w.durable_changes
    req = LeaseReq(1, 1, w.stable_ck, reserve=1 << 16, num=w.num)
    assert w.on_request("d", req, 1.0).granted
    after_grant = w.durable_changes
    assert after_grant > before
    assert w.on_request("d", LeaseReq(2, 1, w.stable_ck, reserve=1 << 16, num=w.num), 2.0).granted
    assert w.durable_changes == after_grant  # the same reserve: nothing new to write
    reply = w.on_condemn("c", Condemn("e", w.stable_ck, 7), 2.5)
    assert reply.ok and w.durable_changes > after_grant
    kept = w.durable_state()
    assert kept.reserves == {"d": 1 << 16} and kept.condemnations == {"e": 1}

    back = _lease(W1, restored=kept)
    back.set_stable(dict.fromkeys(MEMBERS, 1.0), 10.0)  # (in a cluster it would learn view 1)
    assert back.views.quiet_until == float("-inf")  # restored: it votes at once
    # The condemnation stands (e is refused until it echoes the nonce) ...
    refused = back.on_request("e", LeaseReq(1, 1, back.stable_ck, num=back.num), 10.1)
    assert not refused.granted and refused.condemned == 1
    # ... and a taker still learns the reserve d was granted, so its epochs stay above it.
    assert back.on_condemn("c", Condemn("d", back.stable_ck, 8), 10.2).reserve == 1 << 16
    assert back.durable_state().nonce_seq >= 2  # a new nonce, never 1 again


def test_without_state_a_restarted_witness_waits_the_quiet_time() -> None:
    w = _lease(W1)
    w.set_stable(dict.fromkeys(MEMBERS, 1.0), 10.0)  # its first view names it: a restart
    assert w.views.quiet_until == 16.0


def test_a_restarted_witness_counts_the_older_views_it_refuses() -> None:
    w = _acceptor(W1, restored=AcceptorState(X, (0, ""), None))
    assert w.older_refused == 0
    w.install(FIRST, 1.0)
    assert w.older_refused == 1 and w.view.num == 0


INC = 0x1CE
FIRST_I = View.of(1, dict.fromkeys(MEMBERS, 1.0), INC)
ALONE = View.of(2, {W1: 1.0}, INC)  # W1 alone: a view the others never learned (below)


def test_a_restarted_witness_installs_its_view_when_a_member_of_its_cluster_is_behind_it() -> None:
    """Fuzz --wide --durable-state seed 275's shape: W1, a quorum of view 1's witnesses by the
    tie-break, got a view of itself alone chosen, then restarted before anyone learned it. The
    others, still at view 1, ask it to choose view 2 again; it tells them the view it restored,
    and installs that view itself (it was chosen, in their history: the same incarnation), so
    it can take part in choosing view 3. It used to wait for someone to teach it a view that
    new, which nobody could: the whole cluster stalled."""
    installed: list[View] = []
    w = _acceptor(W1, restored=AcceptorState(ALONE, (0, ""), None), installed=installed)
    reply = w.receive("p1", Prepare(2, 1, FIRST_I.ck, INC), 1.0)
    assert reply == Decided(2, ALONE.members, ALONE.weights, INC)
    assert w.view == ALONE and installed == [ALONE]
    # p1 learned view 2 from that answer and proposes view 3, W1 being view 2's only witness:
    assert w.receive("p1", Prepare(3, 1, ALONE.ck, INC), 1.1) == Promise(3, 1, True)


def test_a_restarted_witness_installs_its_view_on_a_lease_request_of_its_cluster() -> None:
    w = _lease(W1, restored=WitnessState(AcceptorState(ALONE, (0, ""), None)))
    behind = w.on_request("d", LeaseReq(1, 1, FIRST_I.ck, members=FIRST_I.members, num=1,
                                        weights=FIRST_I.weights, inc=INC), 1.0)
    assert w.views.view == ALONE
    assert not behind.granted and (behind.num, behind.members, behind.inc) == (2, ALONE.members, INC)  # taught


def test_witnesses_that_all_restarted_with_their_state_install_their_views_from_each_other() -> None:
    """Fuzz --wide --durable-state seed 1074's shape: every member restarted, each with a view it
    restored and none installed, so no one had a view to speak from. Their first lease requests
    (to the witnesses of the gossip view) say the incarnation restored, which is enough."""
    ws = {m: _lease(m, restored=WitnessState(AcceptorState(ALONE if m == W1 else FIRST_I, (0, ""), None)))
          for m in (W1, W2)}
    for w in ws.values():
        w.hint(MEMBERS)
        w.tick(1.0)
    for src, w in ws.items():
        for dst, msg in w.messages():
            if dst in ws:
                assert isinstance(msg, LeaseReq) and msg.num == 0 and msg.inc == INC
                reply = ws[dst].on_request(src, msg, 1.1)
                w.on_reply(dst, reply, 1.2)
    assert ws[W1].views.view == ALONE and ws[W2].views.view == ALONE  # W2 restored view 1, learned 2


def test_a_restarted_witness_is_not_convinced_by_its_own_requests() -> None:
    """Its own lease requests (it may be one of the witnesses it asks) carry the incarnation it
    restored: that proves nothing about the cluster it is in. Taking it as proof installed the
    view of a state file left by an earlier cluster at once, and taught it to the new one."""
    w = _lease(W1, restored=WitnessState(AcceptorState(ALONE, (0, ""), None)))
    w.on_request(W1, LeaseReq(1, 1, 0, num=0, inc=INC), 1.0)
    assert w.views.view.num == 0
    w.hint(MEMBERS)
    w.tick(1.0)  # (asks the witnesses of its gossip view, itself among them)
    assert w.views.view.num == 0


def test_a_restarted_witness_keeps_out_of_a_cluster_founded_anew_under_its_name() -> None:
    """A record left from an earlier cluster of the same name: its view is not of the new
    cluster's history (another incarnation), so the witness neither installs nor tells it;
    ``foreign_inc`` lets the driver log what to do (delete the file)."""
    installed: list[View] = []
    w = _acceptor(W1, restored=AcceptorState(ALONE, (0, ""), None), installed=installed)
    assert w.receive("p1", Prepare(2, 1, FIRST_I.ck, INC + 1), 1.0) is None
    assert w.receive("p1", Decided(1, FIRST_I.members, FIRST_I.weights, INC + 1), 1.1) is None
    assert installed == [] and w.view.num == 0 and w.foreign_inc == INC + 1


NEW_INC = INC + 1
NEW_FIRST = View.of(1_000, dict.fromkeys(MEMBERS, 1.0), NEW_INC)  # founded anew: numbered by the clock


OLD = View.of(2, dict.fromkeys(MEMBERS, 1.0), INC)  # the earlier cluster's view a default record holds


def _kept_by_default() -> WitnessState:
    """A node's default record (no ``--state-dir``): view ``OLD`` of incarnation INC, a
    reserve, a condemnation, and a promise and an acceptance for the view's successor."""
    w = _lease(W1, quiet_s=0.0)
    w.views.install(OLD, 0.5)
    assert w.on_request("d", LeaseReq(1, 1, OLD.ck, reserve=1 << 16, num=OLD.num), 0.6).granted
    assert w.on_condemn("c", Condemn("e", OLD.ck, 7), 0.7).ok
    w.views.receive("p1", Prepare(3, 4, OLD.ck, INC), 0.8)
    w.views.receive("p1", Accept(3, 4, OLD.ck, X.members, X.weights, INC), 0.9)
    state = w.durable_state()
    assert state.views.accepted is not None and state.reserves and state.condemnations
    return state


@given(via=st.sampled_from(["prepare", "decided", "request"]))
@settings(max_examples=12, deadline=None)
def test_a_default_record_yields_to_a_cluster_founded_anew(via: str) -> None:
    """A record the node kept without being asked (no ``--state-dir``) yields to another
    incarnation: the member drops it and goes on as one that kept nothing, forgetful, so the
    view of the new cluster that names it makes it wait the quiet time, as a restart without
    a record would. It keeps none of the old cluster's reserves or condemnations, and answers
    nothing of the old incarnation's history (its promise and acceptance are gone with it, and
    it only ever installs the new cluster's views, numbered above)."""
    w = _lease(W1, restored=_kept_by_default(), yields=True)
    before = w.durable_changes
    if via == "prepare":
        assert w.views.receive("p1", Prepare(NEW_FIRST.num + 1, 1, NEW_FIRST.ck, NEW_INC), 1.0) is None
    elif via == "decided":
        w.views.receive("p1", Decided(NEW_FIRST.num, NEW_FIRST.members, NEW_FIRST.weights, NEW_INC), 1.0)
    else:  # taught in a lease request of the new cluster's member
        w.on_request(W2, LeaseReq(1, 1, NEW_FIRST.ck, num=NEW_FIRST.num, members=NEW_FIRST.members,
                                  weights=NEW_FIRST.weights, inc=NEW_INC), 1.0)
    assert w.views.yielded and w.views.foreign_inc == NEW_INC
    assert w.durable_changes > before  # (the driver writes the record down again: forgetful, empty)
    state = w.durable_state()
    assert state.views.forgetful and "d" not in state.reserves and not state.condemnations  # (the old ones)
    assert state.views.accepted is None and state.views.promised == (0, "")
    if via == "prepare":  # not taught yet: it learns the new view, and is quiet in it
        w.views.receive("p1", Decided(NEW_FIRST.num, NEW_FIRST.members, NEW_FIRST.weights, NEW_INC), 1.5)
    assert w.views.view == NEW_FIRST
    assert w.views.quiet_until >= 1.0 + 6.0 and w.views.forgetful
    assert w.views.receive("p1", Prepare(NEW_FIRST.num + 1, 1, NEW_FIRST.ck, NEW_INC), 2.0) is None  # quiet
    # The old cluster's proposer for the restored view's successor gets no promise from it.
    reply = w.views.receive("p9", Prepare(3, 9, OLD.ck, INC), 2.1)
    assert not (isinstance(reply, Promise) and reply.ok)


def test_a_default_record_still_resumes_its_own_cluster() -> None:
    """Yielding changes nothing when the member hears its own incarnation: it installs the
    view it restored and keeps its promises (no quiet time), as a ``--state-dir`` record."""
    kept = _kept_by_default()
    w = _lease(W1, restored=kept, yields=True)
    w.views.receive("p1", Prepare(3, 5, OLD.ck, INC), 1.0)
    assert w.views.view == OLD and not w.views.yielded and not w.views.forgetful
    assert w.durable_state().views.accepted == kept.views.accepted
    assert w.durable_state().reserves == kept.reserves


def test_a_default_record_does_not_yield_to_a_first_view_that_lost() -> None:
    """A late ``Accept`` for view 1 from a bootstrap proposer that lost carries its own
    incarnation, not the chosen view's: it is no cluster founded anew (not numbered above the
    record's view), so the record stays."""
    first = View.of(1, dict.fromkeys(MEMBERS, 1.0), INC)
    w = _lease(W1, restored=WitnessState(AcceptorState(first, (0, ""), None)), yields=True)
    w.views.receive("p2", Accept(1, 3, 0, first.members, first.weights, INC + 5), 1.0)
    assert not w.views.yielded and w.views.durable_state().view == first


def test_a_default_record_does_not_yield_to_an_older_view_of_another_incarnation() -> None:
    """A view of another incarnation numbered at or below the record's (a replayed datagram of a
    cluster older still, or a cluster recreated with --bootstrap from view 1) is refused as a
    binding record refuses it: only a cluster founded anew, numbered by the clock above, wins."""
    w = _lease(W1, restored=_kept_by_default(), yields=True)
    older = View.of(OLD.num, dict.fromkeys(MEMBERS, 1.0), NEW_INC)
    w.views.receive("p1", Decided(older.num, older.members, older.weights, NEW_INC), 1.0)
    w.on_request(W2, LeaseReq(1, 1, older.ck, num=older.num, members=older.members, weights=older.weights,
                              inc=NEW_INC), 1.1)
    assert not w.views.yielded and w.views.view.num == 0 and w.views.foreign_inc == NEW_INC
    assert w.durable_state().views.accepted is not None


def test_a_record_that_binds_does_not_yield() -> None:
    """``--state-dir``: the same record refuses the other incarnation (the node logs what to do)."""
    w = _lease(W1, restored=_kept_by_default())
    w.views.receive("p1", Decided(NEW_FIRST.num, NEW_FIRST.members, NEW_FIRST.weights, NEW_INC), 1.0)
    assert w.views.view.num == 0 and not w.views.yielded and w.views.foreign_inc == NEW_INC
    assert w.durable_state().views.accepted is not None


def test_a_restarted_witness_of_a_record_without_incarnation_waits_to_be_taught() -> None:
    """A record written before views carried their incarnation (0): as before, the witness
    installs nothing older than its view and waits to learn a view at least as late."""
    old = View.of(2, {W1: 1.0})
    w = _acceptor(W1, restored=AcceptorState(old, (0, ""), None))
    assert w.receive("p1", Prepare(2, 1, FIRST_I.ck, INC), 1.0) == Decided(2, old.members, old.weights, 0)
    assert w.view.num == 0 and w.foreign_inc == 0
    assert w.receive("p1", Decided(2, old.members, old.weights, INC), 1.1) is None
    assert w.view.num == 2  # taught


def test_a_witness_that_forgot_stays_forgetful_in_its_record_until_it_may_vote() -> None:
    """A restart whose state was lost (no file: ``AcceptorState.forgetful``) waits the quiet
    time; if it restarts again before voting, the record it wrote says so, and the next
    process waits the quiet time too (not a record of 'promised nothing')."""
    w = _lease(W1, restored=WitnessState(AcceptorState(forgetful=True)))
    w.set_stable(dict.fromkeys(MEMBERS, 1.0), 1.0)  # its first view names it: a restart
    assert w.views.quiet_until == 7.0
    kept = w.durable_state()
    assert kept.views.forgetful and kept.views.view == FIRST
    again = _lease(W1, restored=kept)
    again.set_stable(dict.fromkeys(MEMBERS, 1.0), 3.0)
    assert again.views.quiet_until == 9.0  # still waits
    assert again.views.receive("p1", Prepare(2, 1, FIRST.ck), 8.0) is None  # quiet
    assert again.views.receive("p1", Prepare(2, 1, FIRST.ck), 9.5) == Promise(2, 1, True)
    assert not again.durable_state().views.forgetful  # it voted: past the quiet time
    assert _lease(W1, restored=again.durable_state())._quiet_s == 0.0


def test_a_new_member_is_not_forgetful_once_it_learns_a_view_without_it() -> None:
    w = _lease("f", restored=WitnessState(AcceptorState(forgetful=True)))
    w.set_stable(dict.fromkeys(MEMBERS, 1.0), 1.0)  # (a view that does not name it)
    assert not w.durable_state().views.forgetful


def _run_with_restarts(seed: int, keep: bool, propose: float = 0.2, restart: float = 0.1,
                       loss: float = 0.3) -> dict[int, View]:
    """The random schedule of tests/test_stable_views.py (competing proposers, loss, duplicates,
    reordering) with witnesses restarting at random, voting at once (no quiet time). ``keep``:
    each gets back the state its previous process had when it last said anything (the state
    is taken after every step, and a process is only restarted between steps)."""
    net = Net(seed, loss, 0.2)
    saved = {m: n.durable_state() for m, n in net.nodes.items()}
    rng = random.Random(seed ^ 0xC0FFEE)
    now = 0.0

    def installer(me: str) -> Callable[[View, View, float], None]:
        seen = net.installed[me]
        return lambda old, new, at: seen.append(new) if not seen or new.num > seen[-1].num else None

    for _ in range(400):
        now += 0.05
        if rng.random() < propose:
            m = rng.choice(MEMBERS[:3])
            weighted = {x: 1.0 for x in MEMBERS if rng.random() < 0.8} | {m: 1.0}
            net.nodes[m].propose(weighted, now, rank=MEMBERS.index(m))
        if rng.random() < restart:  # a process restarts; it learns the view its predecessor held
            m = rng.choice(MEMBERS)
            held = net.nodes[m].view
            net.nodes[m] = StableViews(m, witnesses=3, resend_s=0.5, quiet_until=0.0, send=net._sender(m),
                                       on_install=installer(m), restored=saved[m] if keep else None)
            net.nodes[m].install(held, now)
        for n in net.nodes.values():
            n.tick(now)
        for _ in range(3):
            net.step(now)
        saved = {m: n.durable_state() for m, n in net.nodes.items()}
    return _one_history(net.installed)


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_restarted_witnesses_with_their_state_never_let_two_views_share_a_number(seed: int) -> None:
    _run_with_restarts(seed, keep=True)


def test_restarted_witnesses_without_their_state_and_without_the_quiet_time_do() -> None:
    """The control: the same schedules with forgetting witnesses that vote at once find two
    views under one number (what ``--state-dir``, or else the quiet time, prevents)."""
    failures = 0
    for seed in range(CONTROL_SEEDS):
        try:
            _run_with_restarts(seed, keep=False)
        except AssertionError as exc:
            assert "two views numbered" in str(exc)
            failures += 1
    assert failures > 0  # (8 of these 300 schedules when written)
