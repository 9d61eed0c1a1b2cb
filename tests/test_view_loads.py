"""Stable views that commit load figures (issue 33 item 1): ``View.loads``, its checksum and wire
form, the durable record, and rule 12 (a member proposes its view again with newer figures)."""

from __future__ import annotations

import dataclasses

from ownership import ExclusiveConfig, Ownership, Release
from ownership.durable import decode as decode_record
from ownership.durable import encode as encode_record
from ownership.lease import LeaseReply, LeaseReq, WitnessState
from ownership.views import Accept, AcceptorState, Decided, Promise, View, view_checksum
from ownership.wire import Reassembler, decode, decode_many, encode, encode_many
from placement import PlacementTable

# Today's encodings, taken from the tree before views carried loads (4e065d4): a view without
# load figures must keep its checksum and its bytes, so mixed versions and the fingerprints agree.
GOLDEN_CK = 4292024742
GOLDEN: dict[Decided | Accept | Promise | LeaseReq | LeaseReply, str] = {
    Decided(7, ("a", "b", "c"), (1.0, 0.5, 2.0), 99):
        "c15093a163a16191950c0793a161a162a16393cb3ff0000000000000cb3fe0000000000000cb400000000000000063",
    Accept(7, 2, 123, ("a", "b"), (1.0, 1.0), 99):
        "c15093a163a16191970a07027b92a161a16292cb3ff0000000000000cb3ff000000000000063",
    Promise(7, 2, True, 1, "b", ("a", "b"), (1.0, 1.0), 99):
        "c15093a163a1619199090702c301a16292a161a16292cb3ff0000000000000cb3ff000000000000063",
    LeaseReq(5, 1, 123, 0, ("a", "b"), 10, 7, (1.0, 1.0), 99):
        "c15093a163a161919a0405017b0092a161a1620a0792cb3ff0000000000000cb3ff000000000000063",
    LeaseReply(5, 123, False, 0, ("a", "b"), 7, (1.0, 1.0), False, 0, 99):
        "c15093a163a161919b05057bc20092a161a1620792cb3ff0000000000000cb3ff0000000000000c20063",
}


def test_a_view_without_loads_keeps_its_checksum_and_wire_bytes() -> None:
    assert view_checksum(7, ("a", "b", "c"), (1.0, 0.5, 2.0)) == GOLDEN_CK
    assert View.of(7, {"c": 2.0, "a": 1.0, "b": 0.5}).ck == GOLDEN_CK
    for msg, hexed in GOLDEN.items():
        assert encode("a", msg, cluster="c").hex() == hexed
        assert decode(bytes.fromhex(hexed), cluster="c") == ("a", msg)


def test_loads_are_part_of_the_checksum_and_travel_in_every_view_message() -> None:
    plain = View.of(7, {"a": 1.0, "b": 1.0})
    loaded = View.of(7, {"a": 1.0, "b": 1.0}, loads=bytes([3, 200, 0, 255]), loads_at=600)
    assert loaded.ck != plain.ck
    assert View.of(7, {"a": 1.0, "b": 1.0}, loads=bytes([3, 200, 0, 254]), loads_at=600).ck != loaded.ck
    assert View.of(7, {"a": 1.0, "b": 1.0}, loads=bytes([3, 200, 0, 255]), loads_at=900).ck != loaded.ck
    assert View.of(7, {"a": 1.0}, loads_at=600) == View.of(7, {"a": 1.0})  # a time without figures: none
    v = loaded
    msgs: list[Decided | Accept | Promise | LeaseReq | LeaseReply] = [
        Decided.of(v), Accept(7, 2, 123, v.members, v.weights, 0, v.loads, v.loads_at),
        Promise(7, 2, True, 1, "b", v.members, v.weights, 0, v.loads, v.loads_at),
        LeaseReq(5, 1, v.ck, 0, v.members, 10, 7, v.weights, 0, v.loads, v.loads_at),
        LeaseReply(5, v.ck, False, 0, v.members, 7, v.weights, False, 0, 0, v.loads, v.loads_at)]
    for msg in msgs:
        data = encode("a", msg, cluster="c")
        assert decode(data, cluster="c") == ("a", msg)
        # An older decoder reads the fields it knows and ignores the rest (``wire._REQUIRED``):
        # it sees the view without its figures, which it cannot use anyway (a checksum mismatch).
        assert len(data) > len(encode("a", dataclasses.replace(msg, loads=b"", loads_at=0), cluster="c"))
    got = decode(encode("a", msgs[0], cluster="c"), cluster="c")
    assert got is not None and isinstance(got[1], Decided)
    d = got[1]
    assert View.checked(d.num, d.members, d.weights, d.inc, d.loads, d.loads_at) == v


def test_a_view_with_4096_load_figures_and_64_members_round_trips_in_fragments() -> None:
    weighted = {f"member-{i:03d}": 1.0 + i / 64 for i in range(64)}
    v = View.of(12, weighted, inc=5, loads=bytes(i % 256 for i in range(4096)), loads_at=3_600)
    datagrams = encode_many("member-000", [Decided.of(v)], cluster="c")
    assert len(datagrams) > 3
    r = Reassembler()
    got = [m for d in reversed(datagrams) for m in (decode_many(d, cluster="c", reassembler=r) or ("", []))[1]]
    assert len(got) == 1 and isinstance(got[0], Decided)
    d = got[0]
    assert View.checked(d.num, d.members, d.weights, d.inc, d.loads, d.loads_at) == v


def test_the_durable_record_keeps_a_views_loads_and_is_unchanged_without_them() -> None:
    plain = View.of(3, {"a": 1.0}, inc=9)
    loaded = View.of(4, {"a": 1.0}, inc=9, loads=b"\x01\xff", loads_at=30)
    for view, accepted in ((plain, None), (plain, ((2, "a"), loaded)), (loaded, None)):
        state = WitnessState(AcceptorState(view, (2, "a"), accepted))
        data = encode_record(state, cluster="c", node="a")
        assert decode_record(data, cluster="c", node="a").views == state.views
    assert b'"view":[3,["a"],[1.0],9]' in encode_record(WitnessState(AcceptorState(plain)), cluster="c", node="a")


P = 64


def _tables(view, pins=None):
    return PlacementTable.build(dict(view), P, 1, 0, pins=pins)


def _pair(cfg: ExclusiveConfig) -> tuple[Ownership, Ownership, float, list]:
    """A founder and a joiner, settled (both hold leases and own their shares)."""
    now = 0.0
    a = Ownership("n1", cfg, _tables, now, founder=True)
    b = Ownership("n2", cfg, _tables, now, founder=False)
    view = {"n1": 1.0, "n2": 1.0}
    a.set_view({"n1": 1.0}, (), now)
    now += 0.1
    a.set_view(view, (), now)
    b.set_view(view, (), now)
    actions: list = []
    now = _run(a, b, now, 20.0, actions)
    assert a.owned and b.owned and a.lease.num == b.lease.num
    return a, b, now, actions


def _run(a: Ownership, b: Ownership, now: float, seconds: float, actions: list) -> float:
    """Drive both; every 0.25 s check no partition is owned by both (the handoff's promise)."""
    end = now + seconds
    while now < end:
        now += 0.25
        for c in (a, b):
            c.handle_timer(now)
            for x in c.actions():
                actions.append((c.me, x))
                if isinstance(x, Release):
                    c.release_done(x.partition, now)
        for src, dst in ((a, b), (b, a), (a, b)):
            for _to, msg in src.messages(now):
                dst.receive(src.me, msg, now)
        both = set(a.owned) & set(b.owned)
        assert not both, f"owned twice at {now}: {sorted(both)}"
    return now


def test_a_view_that_changes_only_its_loads_is_a_step_that_moves_nothing() -> None:
    """Rule 12: with ``loads_every_s`` set, a member holding a lease proposes its view again
    with its newer figures; the view is chosen, both members install it, and nothing is
    released or ended (a step: everything carries over), every lease still valid."""
    cfg = ExclusiveConfig(loads_every_s=60.0)
    a, b, now, _ = _pair(cfg)
    before = (a.lease.num, dict(a.owned), dict(b.owned), a.lease.weights)
    codes = bytes(range(P))
    for c in (a, b):
        c.set_loads(codes, 100, now)
    actions: list = []
    now = _run(a, b, now, 10.0, actions)
    for c in (a, b):
        v = c.lease.views.view
        assert (v.num, v.loads, v.loads_at) == (before[0] + 1, codes, 100)
        assert c.lease.weights == before[3] and c.lease.valid(now)
    assert (dict(a.owned), dict(b.owned)) == before[1:3]
    assert actions == []  # nothing released, ended or acquired
    # Newer figures are committed again only loads_every_s after these were learned.
    for c in (a, b):
        c.set_loads(bytes(reversed(codes)), 130, now)
    now = _run(a, b, now, 40.0, [])
    assert a.lease.views.view.loads_at == 100
    now = _run(a, b, now, 30.0, actions)
    assert a.lease.views.view.loads_at == b.lease.views.view.loads_at == 130
    assert actions == []


def test_without_loads_every_s_figures_wait_for_a_view_proposed_for_another_reason() -> None:
    a, b, now, _ = _pair(ExclusiveConfig())
    num = a.lease.num
    a.set_loads(bytes(P), 100, now)
    b.set_loads(bytes(P), 100, now)
    now = _run(a, b, now, 30.0, [])
    assert a.lease.num == num and a.lease.views.view.loads == b""
