"""``ownership.driver.MemberOwnership``: the glue the node and the simulator share, driven here by
hand with two real membership cores and two ownership cores on a loop of a few lines (what each
driver adds: a clock and a socket)."""

from __future__ import annotations

import random

from membership import LEFT, MembershipConfig, Meta, Swim
from membership.driver import drain
from ownership import ExclusiveConfig, Ownership, OwnershipProtocol, wire
from ownership.driver import MemberOwnership
from placement import PlacementTable

P = 32
ADDR = {"a": ("10.0.0.1", 1), "b": ("10.0.0.2", 2)}


def _tables(view):
    return PlacementTable.build(dict(view), P, 1, 0)


class Pair:
    """Members a (the founder) and b, each a Swim core and its glue; datagrams are delivered at
    once, in order, and the clock moves by 10 ms steps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.swim: dict[str, Swim] = {}
        self.glue: dict[str, MemberOwnership] = {}
        self.sent_left_at: float | None = None  # when b's membership leave first went out
        self.b_owned_at_leave: int | None = None
        self.a_held_at_leave: int | None = None  # partitions a owned or held notes for then
        for i, me in enumerate("ab"):
            swim = Swim(MembershipConfig(), me, ADDR[me], meta=Meta(weight=1.0), rng=random.Random(i), now=0.0)
            own = Ownership(me, ExclusiveConfig(), _tables, 0.0, founder=me == "a")
            self.swim[me], self.glue[me] = swim, MemberOwnership(OwnershipProtocol(own), swim)
            self.glue[me].feed_view(0.0)
        self.swim["b"].join([ADDR["a"]], 0.0)

    def step(self) -> None:
        self.now += 0.01
        queue: list[tuple[str, bytes]] = []
        by_addr = {a: m for m, a in ADDR.items()}
        for me in "ab":
            swim, glue = self.swim[me], self.glue[me]
            swim.handle_timer(self.now)
            glue.handle_timer(self.now)
            drain(swim, lambda data, addr: queue.append((by_addr[addr], data)), lambda ev: glue.event(ev, self.now))
            glue.feed_view(self.now)
            glue.actions()
            queue += [(by_addr[addr], data) for data, addr in glue.datagrams_to_send(self.now)]
            if glue.membership_leave_due():
                self.b_owned_at_leave = len(glue.core.owned)
                other = self.glue["a"].core
                self.a_held_at_leave = len(other.owned.keys() | other.free.keys())
                swim.leave(self.now)
                self.sent_left_at = self.now
        for dst, data in queue:
            src = "b" if dst == "a" else "a"
            if data[:2] == wire.MAGIC:
                self.glue[dst].receive_datagram(data, self.now)
            else:
                self.swim[dst].receive_datagram(data, ADDR[src], self.now)

    def run_until(self, cond, limit_s: float) -> bool:
        end = self.now + limit_s
        while self.now < end:
            if cond():
                return True
            self.step()
        return cond()


def test_two_members_share_the_partitions_through_the_glue_and_b_leaves_after_handing_on():
    pair = Pair()
    a, b = pair.glue["a"], pair.glue["b"]
    assert pair.run_until(lambda: len(a.core.owned) + len(b.core.owned) == P and a.core.owned and b.core.owned
                          and not any(o.releasing for o in a.core.owned.values()), 60.0)
    assert a.sent > 0 and b.sent > 0  # every datagram went to an address the membership core holds
    b.leave(pair.now)
    assert not b.membership_leave_due()  # partitions first
    assert pair.run_until(lambda: pair.sent_left_at is not None, 30.0)
    assert pair.b_owned_at_leave == 0 and pair.a_held_at_leave == P  # handed on, then announced
    assert not b.membership_leave_due()  # once
    assert pair.run_until(lambda: getattr(pair.swim["a"].member("b"), "status", None) == LEFT
                          and len(a.core.owned) == P, 10.0)


def test_a_datagram_to_an_id_the_membership_core_does_not_know_is_counted_not_sent():
    pair = Pair()
    a = pair.glue["a"]
    # Before b's arrival reaches a's membership core, a's rules cannot address b: feed a view
    # naming b (as a stale view could) and a's census or views may target it.
    a.feed_view(0.0, live=[m for m in pair.swim["a"].live_members()])
    a.proto.core.set_view({"a": 1.0, "b": 1.0}, (), 0.0)
    for t in (1.0, 2.0, 3.0, 4.0, 5.0):
        a.handle_timer(t)
        assert all(addr != ADDR["b"] for _, addr in a.datagrams_to_send(t))
    assert a.no_address > 0


def test_actions_come_one_at_a_time_or_all_at_once_in_the_same_order():
    def founder() -> OwnershipProtocol:
        own = Ownership("a", ExclusiveConfig(), _tables, 0.0, founder=True)
        proto = OwnershipProtocol(own)
        proto.set_view({"a": 1.0}, (), 0.0)
        return proto

    one, batch = founder(), founder()
    first = one.next_event()
    rest = []
    while (action := one.next_event()) is not None:
        rest.append(action)
    assert [first, *rest] == batch.actions() and len(rest) == P - 1  # the founder acquires every partition
    assert one.next_event() is None and one.actions() == []
