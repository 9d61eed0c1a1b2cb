"""Issue 31 item 4: operators see what happened. A member killed abruptly appeared neither as
suspect nor as dead in the other nodes' logs (only ownership changes were printed): now every
join, suspicion, death, refutation and leave of another member is one log line saying who and
why, rate-limited."""

from __future__ import annotations

import asyncio
import logging

import pytest

from membership import MemberEvent, MemberInfo, Meta
from placement.service.membership_log import MembershipLog
from placement.service.node import Node

from test_node import config, eventually


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "placement.membership"]


def test_a_killed_member_is_logged_as_suspect_then_dead_and_a_leave_as_left(caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.INFO, logger="placement.membership")

    async def main() -> None:
        n1 = await Node(config("n1")).start()
        n2 = await Node(config("n2", join=[n1.member.bound])).start()
        n3 = await Node(config("n3", join=[n1.member.bound])).start()
        try:
            await eventually(lambda: all(len(n.table.members) == 3 for n in (n1, n2, n3)), what="three members")
            assert any(line.startswith("member n2 joined: gossip ") for line in lines(caplog))
            n3.close()  # as kill -9: no leave
            await eventually(lambda: "n3" not in n1.table.members and "n3" not in n2.table.members,
                             what="n3 declared dead")
            got = lines(caplog)
            assert any(line.startswith("member n3 at ") and " is suspect: " in line for line in got), got
            dead = [line for line in got if line.startswith("member n3 at ") and " is dead: " in line]
            assert dead and all("suspicion ran out" in line and " heard " in line for line in dead), got
            await n2.leave()
            await eventually(lambda: "n2" not in n1.table.members, what="n2 gone")
            assert any(line.startswith("member n2 at ") and "left: it announced its leave" in line
                       for line in lines(caplog)), lines(caplog)
        finally:
            for n in (n1, n2, n3):
                n.close()

    asyncio.run(main())


def test_a_refutation_and_the_rate_limit():
    now = [0.0]
    written: list[str] = []
    log = MembershipLog("n1", burst=3, per_s=1.0, clock=lambda: now[0])
    logging.getLogger("placement.membership").addHandler(handler := logging.Handler())
    handler.emit = lambda record: written.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger("placement.membership").setLevel(logging.INFO)
    try:
        m = MemberInfo("n2", ("10.0.0.2", 7001), "alive", 7, Meta())
        log.event(MemberEvent("alive", m, 0.0, by="n2"))
        assert written == ["member n2 at 10.0.0.2:7001 refuted the suspicion: alive at incarnation 7"]
        for _ in range(10):  # a burst: 2 more written, 8 dropped
            log.event(MemberEvent("suspect", m, 0.0, by="n3"))
        assert len(written) == 3 and "n3 suspects it" in written[-1] and log.dropped == 8
        now[0] = 1.0  # one more line a second, which says what was dropped
        log.event(MemberEvent("dead", m, 0.0, by="n3"))
        assert len(written) == 4 and "declared dead by n3" in written[-1]
        assert "(8 membership changes not logged before this" in written[-1] and log.dropped == 0
    finally:
        logging.getLogger("placement.membership").removeHandler(handler)
