"""End-to-end: the six forged datagrams of issue 31 against 3 real keyless members on loopback.

A stranger with a UDP socket of its own sends each member a join with a wrong cluster name and
a ping with the right one (the default name, or guessed), reads the member's epoch from the
answers, then sends one envelope 'from' each member with that epoch, ``seq = 2**63`` and no
messages, to each other member. Before the fix every later real datagram was dropped as
replayed and each member declared the other two dead (three one-member clusters); now the
cluster stays whole. With keys the same datagrams are dropped (``test_forged_datagrams.py``).
"""

from __future__ import annotations

import asyncio

import pytest

from membership import DEAD, LEFT, MemberEvent
from membership.aio import start_member
from membership.messages import Ack, Ping, PushPull, Refuse
from membership.wire import Codec, Keyring

from test_membership_udp import FAST, wait_for  # short periods: a split shows within seconds


def _craft(messages, *, sender: str, epoch: int, seq: int, cluster: str) -> bytes:
    codec = Codec(cluster=cluster, settings="", sender=sender, epoch=epoch, keyring=Keyring(), mtu_bytes=1400,
                  max_receive_bytes=8192)
    codec._seq = seq - 1
    return codec.seal([codec.encode_message(m) for m in messages])


class _Ear(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.heard: list[tuple[bytes, tuple]] = []

    def datagram_received(self, data, addr) -> None:
        self.heard.append((data, addr[:2]))


@pytest.mark.slow
def test_six_forged_datagrams_do_not_split_three_real_keyless_members():
    opener = Codec(cluster="?", settings="", sender="?", epoch=0, keyring=Keyring(), mtu_bytes=1400,
                   max_receive_bytes=8192)

    async def scenario():
        loop = asyncio.get_running_loop()
        first = await start_member(FAST, "m0")
        members = [first] + [await start_member(FAST, f"m{i}", seeds=[first.bound]) for i in (1, 2)]
        events = {m.node_id: m.subscribe() for m in members}
        transport, ear = await loop.create_datagram_endpoint(_Ear, local_addr=("127.0.0.1", 0))
        try:
            ids = {m.node_id for m in members}
            await wait_for(lambda: all({x.node_id for x in m.live_members()} == ids for m in members), 5.0,
                           "convergence")
            # What a stranger learns: a refusal (the way) and an ack to its own ping.
            epochs = {}
            for i, m in enumerate(members):
                transport.sendto(_craft([PushPull(7, True)], sender="intruder", epoch=5, seq=1 + 2 * i,
                                        cluster="intruders"), m.bound)
                transport.sendto(_craft([Ping(1, m.node_id)], sender="intruder", epoch=5, seq=2 + 2 * i,
                                        cluster=m.core.config.cluster_name), m.bound)
            await wait_for(lambda: len(ear.heard) >= 6, 2.0, "the members' answers")
            for data, _ in ear.heard:
                env = opener.open(data)
                if env.sender in ids and any(isinstance(x, (Refuse, Ack)) for x in env.messages):
                    epochs[env.sender] = env.epoch
            assert set(epochs) == ids
            # The six datagrams.
            for a in members:
                for b in members:
                    if b is not a:
                        transport.sendto(_craft([], sender=a.node_id, epoch=epochs[a.node_id], seq=2**63,
                                                cluster=a.core.config.cluster_name), b.bound)
            await asyncio.sleep(6.0)  # the suspicion timeout is 0.6..3.6 s with FAST
            views = {m.node_id: sorted(x.node_id for x in m.live_members()) for m in members}
            replayed = {m.node_id: m.core.stats["dropped_replayed"] for m in members}
            # The forged envelopes were read as valid (only the stranger's join was dropped, as
            # from another cluster): the members simply no longer let them decide anything.
            other_drops = {m.node_id: m.core.stats["dropped"] - m.core.stats["dropped_wrong_cluster"]
                           for m in members}
        finally:
            transport.close()
            for m in members:
                m.close()
        deaths = []
        for node_id, sub in events.items():
            deaths += [(node_id, e.member.node_id) async for e in sub
                       if isinstance(e, MemberEvent) and e.kind in (DEAD, LEFT)]
        return views, replayed, other_drops, deaths

    views, replayed, other_drops, deaths = asyncio.run(scenario())
    assert deaths == [], (deaths, views, replayed)
    assert all(v == ["m0", "m1", "m2"] for v in views.values()), views
    assert set(replayed.values()) == {0}, replayed
    assert set(other_drops.values()) == {0}, other_drops
