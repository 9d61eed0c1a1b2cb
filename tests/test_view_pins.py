"""Stable views that commit pins (issue 33, rule 13): ``View.pins``, its checksum and wire form,
the durable record, and the rule (a member proposes its view again with the pins a rebalance
planned from it; the pinned partitions move by handoff, one owner at a time)."""

from __future__ import annotations

import dataclasses

import pytest

from ownership import ExclusiveConfig, Ownership
from ownership.durable import decode as decode_record
from ownership.durable import encode as encode_record
from ownership.lease import LeaseReply, LeaseReq, WitnessState
from ownership.views import Accept, AcceptorState, Decided, DecidedStep, Promise, View
from ownership.wire import decode, encode
from placement.pins import encode_pins

from test_view_loads import P, _run, _tables
from test_view_loads import _pair as _settled


def test_pins_are_part_of_the_checksum_and_travel_in_every_view_message() -> None:
    plain = View.of(7, {"a": 1.0, "b": 1.0}, loads=b"\x01\x02", loads_at=60)
    pinned = View.of(7, {"a": 1.0, "b": 1.0}, loads=b"\x01\x02", loads_at=60, pins=encode_pins({3: "b"}))
    assert pinned.ck != plain.ck
    assert View.of(7, {"a": 1.0, "b": 1.0}, loads=b"\x01\x02", loads_at=60, pins=encode_pins({3: "a"})).ck != pinned.ck
    only_pins = View.of(7, {"a": 1.0, "b": 1.0}, pins=encode_pins({3: "b"}))  # pins without figures
    v = pinned
    msgs: list[Decided | Accept | Promise | LeaseReq | LeaseReply] = [
        Decided.of(v), Decided.of(only_pins),
        Accept(7, 2, 123, v.members, v.weights, 0, v.loads, v.loads_at, v.pins),
        Promise(7, 2, True, 1, "b", v.members, v.weights, 0, v.loads, v.loads_at, v.pins),
        LeaseReq(5, 1, v.ck, 0, v.members, 10, 7, v.weights, 0, v.loads, v.loads_at, v.pins),
        LeaseReply(5, v.ck, False, 0, v.members, 7, v.weights, False, 0, 0, v.loads, v.loads_at, v.pins)]
    for msg in msgs:
        data = encode("a", msg, cluster="c")
        assert decode(data, cluster="c") == ("a", msg)
        # An older decoder ignores the fields it does not know (``wire._REQUIRED``).
        assert len(data) > len(encode("a", dataclasses.replace(msg, pins=b""), cluster="c"))
    d = decode(encode("a", Decided.of(only_pins), cluster="c"), cluster="c")
    assert d is not None and isinstance(d[1], Decided)
    assert View.checked(d[1].num, d[1].members, d[1].weights, d[1].inc, d[1].loads, d[1].loads_at,
                        d[1].pins) == only_pins


def test_a_step_carries_changed_pins_and_leaves_out_unchanged_ones() -> None:
    base = View.of(7, {"a": 1.0, "b": 1.0, "c": 1.0}, pins=encode_pins({1: "a"}))
    same = View.of(8, {"a": 1.0, "b": 1.0, "c": 2.0}, pins=base.pins)
    moved = View.of(8, {"a": 1.0, "b": 1.0, "c": 1.0}, pins=encode_pins({1: "a", 5: "c"}))
    for new in (same, moved):
        step = DecidedStep.between(base, new)
        assert step is not None and step.same_pins == (new.pins == base.pins)
        got = decode(encode("a", step, cluster="c"), cluster="c")
        assert got is not None and got[1] == step and step.apply(base) == new
    unchanged = DecidedStep.between(base, same)
    assert unchanged is not None and unchanged.pins == b""


def test_the_durable_record_keeps_a_views_pins() -> None:
    pinned = View.of(4, {"a": 1.0, "b": 1.0}, inc=9, pins=encode_pins({0: "b"}))
    both = View.of(5, {"a": 1.0, "b": 1.0}, inc=9, loads=b"\x01\xff", loads_at=30, pins=pinned.pins)
    for view, accepted in ((pinned, None), (pinned, ((2, "a"), both)), (both, None)):
        state = WitnessState(AcceptorState(view, (2, "a"), accepted))
        data = encode_record(state, cluster="c", node="a")
        assert decode_record(data, cluster="c", node="a").views == state.views


def _pair() -> tuple[Ownership, Ownership, float]:
    """Two members settled (``test_view_loads._pair``), then a view committing figures (rule 12)."""
    a, b, now, _ = _settled(ExclusiveConfig(loads_every_s=60.0))
    for c in (a, b):
        c.set_loads(bytes(range(P)), 100, now)
    now = _run(a, b, now, 10.0, [])
    assert a.owned and b.owned and a.lease.views.view.loads_at == b.lease.views.view.loads_at == 100
    return a, b, now


def test_pins_planned_from_the_stable_view_are_committed_and_move_their_partitions() -> None:
    """Rule 13: given the pins planned from the stable view, its members propose it again with
    them; the view is chosen and the pinned partitions move to their pinned members by handoff."""
    a, b, now = _pair()
    v = a.lease.views.view
    theirs = sorted(b.owned)[:3]
    pins = {p: "n1" for p in theirs}
    for c in (a, b):
        c.set_pins(encode_pins(pins), v.pins, v.loads_at, now)
    now = _run(a, b, now, 20.0, [])
    for c in (a, b):
        w = c.lease.views.view
        assert w.num == v.num + 1 and w.pins == encode_pins(pins) and (w.loads, w.loads_at) == (v.loads, v.loads_at)
        assert c.table is not None and all(c.table.owner(p) == "n1" for p in theirs)
    assert set(theirs) <= set(a.owned) and not set(theirs) & set(b.owned)
    # Newer figures keep the pins (rule 12's view carries the stable view's).
    for c in (a, b):
        c.set_loads(bytes(reversed(range(P))), 200, now)
    now = _run(a, b, now, 70.0, [])
    w = a.lease.views.view
    assert w.loads_at == 200 and w.pins == encode_pins(pins)


def test_pins_planned_from_another_view_are_not_proposed() -> None:
    """Pins planned from a view whose pins or figures are no longer the stable view's would undo
    a newer plan: nobody proposes them."""
    a, b, now = _pair()
    v = a.lease.views.view
    num = v.num
    for c in (a, b):
        c.set_pins(encode_pins({0: "n2"}), encode_pins({1: "n1"}), v.loads_at, now)  # other base pins
    now = _run(a, b, now, 20.0, [])
    assert a.lease.views.view.num == num
    for c in (a, b):
        c.set_pins(encode_pins({0: "n2"}), v.pins, v.loads_at - 1, now)  # older figures
    now = _run(a, b, now, 20.0, [])
    assert a.lease.views.view.num == num and a.lease.views.view.pins == b""


def test_a_plan_is_proposed_once_even_when_its_base_comes_back() -> None:
    """Two plans that undo each other (one from the view without pins, one from the view with
    them) must not take turns for ever: a plan is dropped once committed or overtaken, so when
    its base pins come back it stays dropped (fuzz --wide --pins seed 460: a view every 2 s)."""
    a, b, now = _pair()
    v = a.lease.views.view
    theirs = encode_pins({p: "n1" for p in sorted(b.owned)[:2]})
    a.set_pins(theirs, v.pins, v.loads_at, now)  # planned from the view without pins
    now = _run(a, b, now, 20.0, [])
    assert a.lease.views.view.pins == theirs
    w = b.lease.views.view
    b.set_pins(b"", w.pins, w.loads_at, now)  # planned from the view with them: undoes them
    now = _run(a, b, now, 20.0, [])
    settled = a.lease.views.view
    assert settled.pins == b"" and settled.num == v.num + 2
    # a's plan's base (no pins) is back, but its plan was committed once: not proposed again.
    now = _run(a, b, now, 30.0, [])
    assert a.lease.views.view.num == b.lease.views.view.num == settled.num


@pytest.mark.parametrize("bad", [b"\xc1not msgpack", encode_pins({P + 5: "n1"})])
def test_pins_that_do_not_decode_or_fit_place_as_if_unpinned_and_are_counted(bad: bytes) -> None:
    """Pins a peer's bug (or a forged view) made: bytes that are not pins, a partition out of
    range. Every member places as if there were none, and counts them; nothing raises."""
    a, b, now = _pair()
    v = a.lease.views.view
    for c in (a, b):
        c.set_pins(bad, v.pins, v.loads_at, now)
    now = _run(a, b, now, 20.0, [])
    assert a.lease.views.view.pins == bad
    assert a.table == _tables(a.lease.weights) and a.bad_pins >= 1 and b.bad_pins >= 1
