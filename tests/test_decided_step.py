"""``DecidedStep``: a chosen view sent as its change from the view before (issue 34, crash-many).
Checked against the simple reference, the whole view: the step rebuilds exactly the view it
was made from, on the wire too, and nothing else; proposers send it to the members of the view
before and the whole view to new members."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from ownership.lease import QuorumLease
from ownership.views import Decided, DecidedStep, StableViews, View, ViewMessage
from ownership.wire import Reassembler, decode_many, encode_many

IDS = [f"m{i:02d}" for i in range(40)]


@st.composite
def step_pairs(draw) -> tuple[View, View]:
    """A view and a successor: members removed and added, weights changed, load figures kept,
    changed, added or dropped."""
    base_ids = draw(st.lists(st.sampled_from(IDS), min_size=1, max_size=30, unique=True))
    weight = st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.25])
    base_w = {m: draw(weight) for m in base_ids}
    loads = st.sampled_from([b"", b"\x01\x02\x03", b"\x07" * 64])
    base = View.of(draw(st.integers(1, 10**6)), base_w, 5, draw(loads), draw(st.integers(0, 3)))
    new_w = {m: w for m, w in base_w.items() if not draw(st.booleans())}
    for m in draw(st.lists(st.sampled_from(IDS), max_size=6)):
        new_w[m] = draw(weight)
    new_w = new_w or {base_ids[0]: base_w[base_ids[0]]}  # (a view has a member)
    if draw(st.booleans()):
        v = View.of(base.num + 1, new_w, 5, base.loads, base.loads_at)
    else:
        v = View.of(base.num + 1, new_w, 5, draw(loads), draw(st.integers(0, 3)))
    return base, v


@settings(max_examples=300, deadline=None)
@given(step_pairs())
def test_a_step_rebuilds_exactly_its_view_and_survives_the_wire(pair: tuple[View, View]) -> None:
    base, v = pair
    step = DecidedStep.between(base, v)
    changed = sum(base.by_member.get(m) != w for m, w in v.by_member.items())
    if step is None:
        assert 2 * changed > len(v.members)  # only when it would not be much smaller
        return
    assert step.apply(base) == v
    (datagram,) = encode_many("n1", [step], cluster="c")
    decoded = decode_many(datagram, cluster="c", reassembler=Reassembler())
    assert decoded is not None
    _, (back,) = decoded
    assert back == step and back.apply(base) == v
    # Not from any other view: one numbered differently, or the same number with other contents.
    assert step.apply(v) is None
    other = View.of(base.num, {**base.by_member, "zz": 1.0}, 5, base.loads, base.loads_at)
    assert step.apply(other) is None


def test_a_mangled_step_is_refused() -> None:
    base = View.of(4, {"a": 1.0, "b": 1.0, "c": 1.0})
    v = View.of(5, {"a": 1.0, "b": 2.0})
    step = DecidedStep.between(base, v)
    assert step is not None and step.removed == ("c",) and step.ids == ("b",) and step.same_loads
    assert step.apply(base) == v
    from dataclasses import replace
    assert replace(step, weights=(3.0,)).apply(base) is None  # not the view it names (ck)
    assert replace(step, removed=("d",)).apply(base) is None  # removes a member base lacks
    assert replace(step, weights=()).apply(base) is None
    assert replace(step, weights=(float("nan"),), ck=step.ck).apply(base) is None


def test_a_proposer_sends_the_step_to_the_view_before_and_the_whole_view_to_new_members() -> None:
    sent: list[tuple[str, str, ViewMessage]] = []
    log: list[tuple[str, str, ViewMessage]] = []
    installed: dict[str, list[int]] = {}

    def node(me: str) -> StableViews:
        installed[me] = []

        def send(dst: str, msg: ViewMessage) -> None:
            sent.append((me, dst, msg))
            log.append((me, dst, msg))
        return StableViews(me, witnesses=3, resend_s=0.5, quiet_until=0.0, send=send,
                           on_install=lambda old, new, now: installed[me].append(new.num))

    members = [f"n{i}" for i in range(8)]
    nodes = {m: node(m) for m in [*members, "new"]}
    first = View.of(1, dict.fromkeys(members, 1.0))
    for m in members:
        nodes[m].install(first, 0.0)
    nodes["n0"].propose({**dict.fromkeys(members[:-1], 1.0), "new": 1.0}, 0.0, rank=0)  # n7 out, "new" in
    for _ in range(20):
        batch, sent[:] = list(sent), []
        for src, dst, msg in batch:
            reply = nodes[dst].receive(src, msg, 0.0)
            if reply is not None:
                sent.append((dst, src, reply))
    assert all(installed[m] == [1, 2] for m in members) and installed["new"] == [2]
    told = {dst: type(msg) for src, dst, msg in log if src == "n0" and isinstance(msg, (Decided, DecidedStep))}
    assert told == {**dict.fromkeys(members[1:], DecidedStep), "new": Decided}
    assert all(n.steps_missed == 0 for n in nodes.values())


def test_a_member_holding_another_view_ignores_a_step_and_counts_it() -> None:
    n = StableViews("x", witnesses=3, resend_s=0.5, quiet_until=0.0, send=lambda d, m: None,
                    on_install=lambda old, new, now: None)
    n.install(View.of(3, {"a": 1.0, "x": 1.0}), 0.0)
    base = View.of(4, {"a": 1.0, "b": 1.0, "x": 1.0})
    step = DecidedStep.between(base, View.of(5, {"a": 1.0, "x": 1.0}))
    assert step is not None
    n.receive("a", step, 1.0)
    assert n.view.num == 3 and n.steps_missed == 1
    n.receive("a", Decided.of(base), 1.0)
    n.receive("a", step, 1.0)
    assert n.view.num == 5 and n.steps_missed == 1


def _leases() -> tuple[list[str], dict[str, QuorumLease]]:
    """Seven members under one stable view, rolling lease rounds."""
    members = [f"m{i}" for i in range(7)]
    nodes = {m: QuorumLease(m, witnesses=5, lease_s=5.5, renew_s=1.0, resend_s=0.5, max_drift=1e-3, now=0.0,
                            fence_s=1.0) for m in members}
    for q in nodes.values():
        q.set_stable(members, 0.0)
    return members, nodes


def _pump(nodes: dict[str, QuorumLease], now: float, delivered: Callable[[str, str, object], bool]) -> None:
    """Tick every member, then deliver what they send (and what that answers) where
    ``delivered(src, dst, msg)`` says so."""
    for q in nodes.values():
        q.tick(now)
    for _ in range(8):
        for m, q in nodes.items():
            for dst, msg in q.messages():
                if delivered(m, dst, msg):
                    nodes[dst].receive(m, msg, now)


def _settle(pump: Callable[[float], None], until: float = 3.0, step: float = 0.25) -> float:
    """``pump`` every ``step`` from 0 while under ``until`` (leases held); the time it stopped at."""
    t = 0.0
    while t < until:
        pump(t)
        t += step
    return t


def test_a_member_that_drops_steps_learns_the_view_from_its_next_lease_reply() -> None:
    """An older version skips ``DecidedStep`` (an unknown kind, counted): in a rolling upgrade
    its members learn each new view from the witnesses' answers to their next lease request,
    as after a lost ``Decided``, within a renewal."""
    members, nodes = _leases()
    old = next(m for m in members if m not in nodes[members[0]].witnesses)
    dropped = []

    def delivered(src: str, dst: str, msg: object) -> bool:
        if dst == old and isinstance(msg, DecidedStep):
            dropped.append(msg)
            return False
        return True

    def pump(now: float) -> None:
        _pump(nodes, now, delivered)

    t = _settle(pump)
    proposer = nodes[members[0]]
    proposer.propose(dict.fromkeys(members[:-1] if members[-1] != old else members[1:], 1.0), t, 0)
    pump(t)
    assert dropped and all(q.num == 2 for m, q in nodes.items() if m != old and m in q.stable)
    assert nodes[old].num == 1
    learned_by = t + 1.0 + 0.25  # its next round, within a renewal
    while nodes[old].num == 1 and t < learned_by:
        t += 0.25
        pump(t)
    assert nodes[old].num == 2, t


def test_a_witness_one_step_behind_is_sent_the_step_not_the_whole_view() -> None:
    """A witness that missed the ``Decided`` answers lease requests from behind: its members
    send it the step (a few ids) and ask again, instead of the whole view in their requests (at
    N=512 that was seven fragments from every member of its group at once, and its reassembler
    gave up thousands). It learns the view within a renewal and grants again."""
    from ownership.lease import LeaseReq

    members, nodes = _leases()
    proposer = members[0]
    behind = next(w for w in nodes[proposer].witnesses if w != proposer)
    sent: list[tuple[str, str, object]] = []

    def delivered(src: str, dst: str, msg: object) -> bool:
        sent.append((src, dst, msg))
        return not (src == proposer and dst == behind and isinstance(msg, (Decided, DecidedStep)))

    def pump(now: float) -> None:
        _pump(nodes, now, delivered)

    t = _settle(pump)
    gone = next(m for m in reversed(members) if m not in (proposer, behind))
    nodes[proposer].propose(dict.fromkeys([m for m in members if m != gone], 1.0), t, 0)
    del sent[:]
    pump(t)
    assert nodes[behind].num == 1 and nodes[proposer].num == 2  # (it missed the decision)
    while nodes[behind].num == 1 and t < 5.0:
        t += 0.25
        pump(t)
    assert nodes[behind].num == 2, t
    to_it = [(m, msg) for m, dst, msg in sent if dst == behind]
    assert any(isinstance(msg, DecidedStep) and m != proposer for m, msg in to_it)
    assert not any(isinstance(msg, LeaseReq) and msg.members for _, msg in to_it)  # no whole view
    t += 2.0
    pump(t)
    assert all(q.valid(t) for m, q in nodes.items() if m != gone)
