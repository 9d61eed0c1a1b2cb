"""Issue 31 item 5: a ``NodeConfig`` with replicas 1 joining a replicas-2 cluster retried for
ever, logging failed join attempts, while the seed logged that the joiner "stops". Two causes:
a seed given by host name ("localhost") was never matched with the address its refusal came
from (keyless, a refusal from an address not contacted is ignored as a possible forgery), and
an embedding application had nothing to catch. Now the name is resolved like a DNS seed, and
``wait_joined()``, ``ownership_changes()`` and ``leadership()`` raise ``JoinRefusedError``."""

from __future__ import annotations

import asyncio

import pytest

from placement.service.node import JoinRefusedError, Node, NodeConfig


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_a_refused_library_join_raises_a_clear_error(host: str):
    async def main() -> None:
        seed = await Node(NodeConfig("n1", gossip_bind=("127.0.0.1", 0), replicas=2, partitions=64)).start()
        joiner = await Node(NodeConfig("n2", gossip_bind=("127.0.0.1", 0), replicas=1, partitions=64,
                                       join=((host, seed.member.bound[1]),))).start()
        try:
            changes = joiner.ownership_changes()
            assert (await anext(changes)).acquired == frozenset()  # the first: owns nothing yet
            with pytest.raises(JoinRefusedError, match=r"refused this node: cluster settings differ: .*"
                                                       r"replicas=2.*replicas=1"):
                await joiner.wait_joined(timeout_s=10)
            with pytest.raises(JoinRefusedError):
                await asyncio.wait_for(anext(changes), 1)
            with pytest.raises(JoinRefusedError):
                async with joiner.leadership("nightly"):
                    pass
            assert not joiner.joined and seed.members()[0].node_id == "n1" and len(seed.members()) == 1
        finally:
            joiner.close()
            seed.close()

    asyncio.run(main())


def test_wait_joined_returns_once_joined_and_times_out_without_an_answer():
    async def main() -> None:
        seed = await Node(NodeConfig("n1", gossip_bind=("127.0.0.1", 0), partitions=64)).start()
        joiner = await Node(NodeConfig("n2", gossip_bind=("127.0.0.1", 0), partitions=64,
                                       join=(seed.member.bound,))).start()
        lonely = await Node(NodeConfig("n3", gossip_bind=("127.0.0.1", 0), partitions=64,
                                       join=(("127.0.0.1", 9),))).start()
        try:
            await seed.wait_joined(timeout_s=0)  # no seeds: joined at once
            await joiner.wait_joined(timeout_s=10)
            assert joiner.joined
            with pytest.raises(TimeoutError):
                await lonely.wait_joined(timeout_s=0.3)
        finally:
            for n in (lonely, joiner, seed):
                n.close()

    asyncio.run(main())
