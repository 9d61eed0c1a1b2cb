"""Event streams to slow readers: merged ownership changes, bounded membership subscriptions."""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from membership import Meta
from membership.aio import Subscription, SubscriptionOverflow
from membership.messages import Event, MemberEvent, MemberInfo
from placement.changes import OwnershipChange
from placement.service.change_stream import ChangeStream

owned_sets = st.lists(st.frozensets(st.integers(0, 15)), min_size=1, max_size=8)


def _change(before: frozenset[int], after: frozenset[int], tag: str) -> OwnershipChange:
    return OwnershipChange(after - before, before - after, tag)


@given(start=st.frozensets(st.integers(0, 15)), states=owned_sets)
def test_merged_changes_equal_the_net_change_of_the_sequence(start, states):
    # Reference: the reader's owned set after applying each change one by one.
    seq = [start, *states]
    changes = [_change(a, b, f"t{i}") for i, (a, b) in enumerate(itertools.pairwise(seq))]
    merged = changes[0]
    for c in changes[1:]:
        merged = merged.then(c)
    assert merged == _change(start, states[-1], f"t{len(changes) - 1}")


def test_a_slow_reader_gets_one_net_change_and_nothing_for_a_round_trip():
    async def scenario():
        stream = ChangeStream(OwnershipChange(frozenset({1, 2}), frozenset(), "a"))
        assert await stream.get() == OwnershipChange(frozenset({1, 2}), frozenset(), "a")
        for i in range(1000):  # partition 3 comes and goes; 2 goes; 4 comes
            stream.put(OwnershipChange(frozenset({3}), frozenset(), f"x{i}"))
            stream.put(OwnershipChange(frozenset(), frozenset({3}), f"y{i}"))
        stream.put(OwnershipChange(frozenset({4}), frozenset({2}), "z"))
        assert await stream.get() == OwnershipChange(frozenset({4}), frozenset({2}), "z")
        stream.put(OwnershipChange(frozenset({5}), frozenset(), "p"))
        stream.put(OwnershipChange(frozenset(), frozenset({5}), "q"))  # back where the reader is
        stream.close()
        assert await stream.get() is None

    asyncio.run(scenario())


def test_the_first_change_is_yielded_even_when_nothing_is_owned():
    async def scenario():
        stream = ChangeStream(OwnershipChange(frozenset(), frozenset(), "a"))
        stream.put(OwnershipChange(frozenset({1}), frozenset(), "b"))
        stream.put(OwnershipChange(frozenset(), frozenset({1}), "c"))
        assert await stream.get() == OwnershipChange(frozenset(), frozenset(), "c")

    asyncio.run(scenario())


def _event(i: int) -> MemberEvent:
    return MemberEvent("joined", MemberInfo(f"m{i}", ("10.0.0.1", 7000 + i), "alive", 0, Meta()), float(i))


def _node_id(e: Event) -> str:
    assert isinstance(e, MemberEvent), e  # only MemberEvents are delivered here
    return e.member.node_id


@pytest.mark.parametrize("backlog", [3, None])
def test_a_subscriber_that_falls_too_far_behind_is_cut_off_not_buffered_forever(backlog):
    async def scenario():
        member = SimpleNamespace(core=SimpleNamespace(stats=Counter()), _subscriptions=set())
        sub = Subscription(member, max_backlog=backlog)  # type: ignore[arg-type]
        member._subscriptions.add(sub)
        for i in range(5):
            for s in list(member._subscriptions):
                s._deliver(_event(i))
        got = []
        if backlog is None:
            sub.close()
            got = [_node_id(e) async for e in sub]
            assert got == [f"m{i}" for i in range(5)]
            return
        with pytest.raises(SubscriptionOverflow, match="subscribe again"):
            async for e in sub:
                got.append(_node_id(e))
        assert got == ["m0", "m1", "m2"]  # what was queued before the cut, then the error
        assert member._subscriptions == set() and member.core.stats["subscriptions_overflowed"] == 1

    asyncio.run(scenario())
