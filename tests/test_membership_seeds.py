"""Seeds found by DNS (``--join dns:NAME[:PORT]``): resolved at start and again before every join
retry, through a stub resolver and real UDP sockets on loopback."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from membership import MembershipConfig
from membership.aio import start_member
from membership.seeds import DnsSeed, SeedFinder
from placement import argtypes

FAST = MembershipConfig(probe_interval_s=0.2, probe_timeout_s=0.1, join_retry_interval_s=0.2,
                        join_retry_max_interval_s=0.4)


async def eventually(predicate, timeout_s=10.0, what="condition"):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        await asyncio.sleep(0.02)


class StubResolver:
    """Answers name lookups from a list of answers, one per call (the last one repeats)."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.calls: list[tuple[str, int]] = []

    async def __call__(self, name, port):
        self.calls.append((name, port))
        answer = self.answers[min(len(self.calls), len(self.answers)) - 1]
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_dns_seeds_are_resolved_again_before_each_retry():
    """The name first points at an address where nobody listens (a pod that is gone), then at the
    live seed: the joiner gets in only because it resolved again."""

    async def main():
        seed = await start_member(FAST, "seed")
        dead = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        dead.bind(("127.0.0.1", 0))
        resolver = StubResolver([dead.getsockname()], [seed.bound])
        joiner = await start_member(FAST, "joiner", seeds=[DnsSeed("seeds.test", 7001)], resolver=resolver)
        try:
            await eventually(lambda: len(joiner.live_members()) == 2, what="joined through the re-resolved name")
            assert len(resolver.calls) >= 2 and resolver.calls[0] == ("seeds.test", 7001)
            assert joiner.core.stats["join_attempts"] >= 2
        finally:
            joiner.close()
            seed.close()
            dead.close()

    asyncio.run(main())


def test_a_name_with_no_other_member_is_resolved_again_until_it_has_one():
    """No record yet (the first pod of a StatefulSet, DNS not yet updated): the core has nobody
    to retry, so the driver keeps resolving with backoff and starts the join once it finds one."""

    async def main():
        seed = await start_member(FAST, "seed")
        resolver = StubResolver(OSError("temporary failure in name resolution"), [], [seed.bound])
        joiner = await start_member(FAST, "joiner", seeds=[DnsSeed("seeds.test", 7001)], resolver=resolver)
        try:
            await eventually(lambda: len(joiner.live_members()) == 2, what="joined once the name had a member")
            assert len(resolver.calls) == 3
        finally:
            joiner.close()
            seed.close()

    asyncio.run(main())


def test_the_finder_keeps_fixed_seeds_drops_other_families_and_duplicates(caplog):
    resolver = StubResolver([("10.0.0.1", 7001), ("fd00::1", 7001), ("10.0.0.1", 7001), ("10.0.0.2", 7001)])
    finder = SeedFinder([("10.9.9.9", 1), DnsSeed("seeds.test", 7001), DnsSeed("gone.test", 7001)],
                        False, resolver)
    assert asyncio.run(finder.resolve()) == [("10.9.9.9", 1), ("10.0.0.1", 7001), ("10.0.0.2", 7001)]
    six = SeedFinder([DnsSeed("seeds.test", 7001)], True, StubResolver([("fd00::1", 7001)]))
    assert asyncio.run(six.resolve()) == [("fd00::1", 7001)]
    broken = SeedFinder([DnsSeed("gone.test", 7001)], False, StubResolver(OSError("no such host")))
    assert asyncio.run(broken.resolve()) == []
    assert "seed dns:gone.test:7001 does not resolve: no such host" in caplog.text


@pytest.mark.parametrize("text, seed", [
    ("dns:seeds.placement.svc.cluster.local", DnsSeed("seeds.placement.svc.cluster.local", 7001)),
    ("dns:seeds:7005", DnsSeed("seeds", 7005)),
    ("dns:seeds.example.:7005", DnsSeed("seeds.example.", 7005)),
    ("10.0.0.1:7001", ("10.0.0.1", 7001)),
])
def test_join_flag_takes_dns_names(text, seed):
    assert argtypes.seed(text) == seed
