"""End-to-end: real UDP sockets on loopback, asyncio driver, short probe intervals."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from membership import DEAD, IdConflict, MemberEvent, MemberInfo, MembershipConfig, Meta
from membership.aio import Member, start_member

FAST = MembershipConfig(probe_interval_s=0.2, probe_timeout_s=0.1, gossip_interval_s=0.05,
                        suspicion_mult=1.0, suspicion_min_floor_s=0.6, join_retry_interval_s=0.3)


def _info(member: Member, node_id: str) -> MemberInfo:
    """member.core.member(node_id) for a member the test expects it to know."""
    info = member.core.member(node_id)
    assert info is not None, node_id
    return info


async def wait_for(pred, timeout_s: float, what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not pred():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for: {what}")
        await asyncio.sleep(0.02)  # polling a condition with a deadline, not waiting for an effect


@pytest.mark.slow
def test_udp_members_converge_and_detect_an_abrupt_close():
    async def scenario():
        first = await start_member(FAST, "m0", meta=Meta(http="http://127.0.0.1:8000"))
        members = [first]
        for i in range(1, 5):
            members.append(await start_member(FAST, f"m{i}", seeds=[first.bound],
                                              meta=Meta(http=f"http://127.0.0.1:{8000 + i}")))
        events = members[1].subscribe()
        try:
            everyone = {f"m{i}" for i in range(5)}
            await wait_for(lambda: all({m.node_id for m in x.live_members()} == everyone for x in members),
                           5.0, "convergence")
            await members[0].update_meta(Meta(weight=2.0, http="http://127.0.0.1:8000"))
            await wait_for(lambda: all(_info(x, "m0").meta.weight == 2.0 for x in members), 3.0,
                           "metadata update")

            victim = members.pop(3)
            victim.close()
            await wait_for(lambda: all(_info(x, "m3").status == DEAD for x in members), 8.0,
                           "m3 declared dead by all")

            leaver = members.pop(3)  # m4
            await leaver.leave()
            await wait_for(lambda: all(_info(x, "m4").status == "left" for x in members), 3.0,
                           "m4 left everywhere")
            for x in members:
                assert x.core.stats["dropped"] == 0
        finally:
            for x in members:
                x.close()
        seen = []
        async for event in events:  # the subscription ends when the member closes
            if isinstance(event, MemberEvent):
                seen.append((event.kind, event.member.node_id))
        assert ("dead", "m3") in seen and ("left", "m4") in seen and ("updated", "m0") in seen

    asyncio.run(scenario())


def test_two_processes_with_one_id_are_reported_as_a_conflict():
    # The others hold the id at one address, so the loser of each round hears of the other only
    # through anti-entropy: a short push-pull interval makes the rounds quick.
    cfg = dataclasses.replace(FAST, push_pull_min_interval_s=0.5)

    async def scenario():
        first = await start_member(cfg, "m0")
        a = await start_member(cfg, "dup", seeds=[first.bound])
        b = await start_member(cfg, "dup", seeds=[first.bound])
        conflicts = [x.subscribe() for x in (a, b)]
        try:
            await wait_for(lambda: a.core.stats["id_conflicts"] + b.core.stats["id_conflicts"] > 0, 10.0,
                           "an id conflict reported")
        finally:
            for x in (first, a, b):
                x.close()
        seen = []
        for sub in conflicts:  # each subscription ends when its member closes
            seen += [e async for e in sub if isinstance(e, IdConflict)]
        assert seen and {e.addr for e in seen} <= {a.bound, b.bound}

    asyncio.run(scenario())


def test_wildcard_bind_requires_an_advertised_address():
    async def scenario():
        with pytest.raises(ValueError, match="advertise"):
            await start_member(FAST, "x", bind=("0.0.0.0", 0))
        member = await start_member(FAST, "x", bind=("0.0.0.0", 0), advertise=("127.0.0.1", 7999))
        assert member.core.advertise == ("127.0.0.1", 7999)
        member.close()

    asyncio.run(scenario())
