"""The members file (``placement.service.members_file``): a node started again without ``--join``
rejoins the cluster it was in instead of founding a second one beside it; ``--new-cluster``
founds anew. The file itself: what is written when, and a bad file as a clear error."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from pathlib import Path

import pytest

from placement.errors import InvalidConfigError
from placement.service.members_file import FILE_NAME, MembersFile, default_home
from placement.service.node import Node
from placement.service.node_flags import NODE_FLAGS

from test_node_exclusive import Ledger, P, config, eventually, owned_once


def _file(home: Path, node: str = "n1", cluster: str = "placement") -> MembersFile:
    return MembersFile(cluster=cluster, node=node, home=str(home))


def _record(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def test_where_the_file_lives(tmp_path: Path) -> None:
    assert default_home({"PLACEMENT_STATE_HOME": "/x"}) == "/x"
    assert default_home({"XDG_STATE_HOME": "/s"}) == os.path.join("/s", "placement")
    assert default_home({"HOME": str(tmp_path)}).endswith(os.path.join(".local", "state", "placement"))
    odd = MembersFile(cluster="a/b", node="../n 1", home=str(tmp_path))
    assert os.path.dirname(os.path.dirname(odd.path)) == str(tmp_path)  # names cannot climb out
    in_state_dir = MembersFile(cluster="c", node="n", state_dir=str(tmp_path / "sd"))
    assert in_state_dir.path == str(tmp_path / "sd" / FILE_NAME)


def test_the_first_member_is_written_at_once_an_empty_list_only_by_founding(tmp_path: Path) -> None:
    f = _file(tmp_path)
    assert f.load() == {}  # no file: a first start
    f.note([("n1", ("127.0.0.1", 7001))], now=0.0)  # alone: nothing to write
    assert not os.path.exists(f.path)
    f.note([("n1", ("127.0.0.1", 7001)), ("n2", ("127.0.0.1", 7002))], now=0.1)
    assert _record(f.path)["members"] == {"n2": "127.0.0.1:7002"}
    # Another member within REFRESH_S while n2 is live: not urgent, not yet written...
    f.note([("n2", ("127.0.0.1", 7002)), ("n3", ("::1", 7003))], now=0.2)
    assert _record(f.path)["members"] == {"n2": "127.0.0.1:7002"}
    # ... but once nobody on file is live, at once.
    f.note([("n3", ("::1", 7003))], now=0.3)
    assert _record(f.path)["members"] == {"n3": "[::1]:7003"}
    f.note([("n3", ("::1", 7003)), ("n4", ("10.0.0.4", 7004))], now=20.0)  # after REFRESH_S
    assert set(_record(f.path)["members"]) == {"n3", "n4"}
    f.note([], now=40.0)  # everyone gone (or not yet heard from while rejoining): the list stays
    again = _file(tmp_path)
    assert again.load() == {"n3": "[::1]:7003", "n4": "10.0.0.4:7004"}
    assert sorted(again.seeds()) == [("10.0.0.4", 7004), ("::1", 7003)]
    again.found()
    assert _file(tmp_path).load() == {}


def test_a_bad_file_is_an_error_naming_it_and_an_unwritable_place_is_logged(tmp_path: Path, caplog) -> None:
    f = _file(tmp_path)
    os.makedirs(os.path.dirname(f.path))
    Path(f.path).write_text("{not json")
    with pytest.raises(InvalidConfigError, match=f"{f.path} is not a members file.*delete it"):
        f.load()
    Path(f.path).write_text(json.dumps({"format": 1, "cluster": "placement", "node": "n7", "members": {}}))
    with pytest.raises(InvalidConfigError, match="belongs to node 'n7'"):
        f.load()
    blocker = tmp_path / "file-not-dir"
    blocker.write_text("")
    stuck = MembersFile(cluster="c", node="n", home=str(blocker))
    with caplog.at_level(logging.WARNING, logger="placement.node"):
        stuck.note([("n2", ("127.0.0.1", 7002))], now=0.0)
        stuck.note([("n3", ("127.0.0.1", 7003))], now=1.0)
    assert stuck.write_errors == 2 and stuck.members == {}
    assert sum("cannot write the members file" in r.getMessage() for r in caplog.records) == 1  # said once


def test_new_cluster_is_a_switch_with_a_variable_and_does_not_go_with_join() -> None:
    flag = next(f for f in NODE_FLAGS if f.flag == "--new-cluster")
    assert flag.switch and flag.resolve(None, {"PLACEMENT_NEW_CLUSTER": "yes"}) is True
    assert flag.resolve(None, {}) is False
    with pytest.raises(InvalidConfigError, match="--new-cluster founds a new cluster, and --join"):
        config("n1", join=[("127.0.0.1", 9)], new_cluster=True)


async def _two_then_restart_n1(tmp_path: Path, new_cluster: bool) -> tuple[Ledger, list[Node]]:
    """n1 founds, n2 joins; n1 is killed and started again with its own command."""
    ledger = Ledger()
    n1 = Node(config("n1"))
    ledger.attach(n1)
    await n1.start()
    n2 = Node(config("n2", join=[n1.member.bound]))
    ledger.attach(n2)
    await n2.start()
    await eventually(lambda: owned_once([n1, n2]) and all(n.owned_partitions() for n in (n1, n2)),
                     timeout_s=30, what="both own, every partition once")
    on_file = MembersFile(cluster="placement", node="n1").load()
    assert on_file == {"n2": f"{n2.member.bound[0]}:{n2.member.bound[1]}"}
    n1.close()  # as kill -9: its application stops working at once
    ledger.crash("n1")
    again = Node(config("n1", new_cluster=new_cluster))
    ledger.attach(again)
    await again.start()
    return ledger, [again, n2]


def test_a_founder_started_again_with_its_own_command_rejoins_its_cluster(tmp_path: Path) -> None:
    async def run() -> None:
        ledger, (n1, n2) = await _two_then_restart_n1(tmp_path, new_cluster=False)
        assert n1.seeds == (n2.member.bound,)
        await eventually(lambda: n1.ownership_status()["stable_members"] == 2 and owned_once([n1, n2])
                         and n1.owned_partitions(), timeout_s=30, what="n1 back in n2's cluster, owning")
        assert ledger.overlaps() == []
        n1.close()
        await n2.leave()

    asyncio.run(run())


def test_new_cluster_founds_a_second_cluster_the_hazard_the_file_prevents(tmp_path: Path) -> None:
    """The control: the same restart with ``new_cluster`` owns what n2 still owns (so the
    test above could fail), and leaves the file empty for the next start."""
    async def run() -> None:
        ledger, (n1, n2) = await _two_then_restart_n1(tmp_path, new_cluster=True)
        assert n1.seeds == ()
        await eventually(lambda: ledger.overlaps(), what="two owners of a partition")
        assert MembersFile(cluster="placement", node="n1").load() == {}
        n1.close()
        n2.close()

    asyncio.run(run())


def test_a_node_whose_members_are_all_gone_waits_and_says_how_to_found_anew() -> None:
    """The other side of the rule: nobody on file answers (the whole cluster is gone, or out of
    reach). It owns nothing and says what to do; with ``new_cluster`` it founds, and the file
    is emptied."""
    async def run() -> None:
        gone = MembersFile(cluster="placement", node="n1")
        gone.note([("n2", ("127.0.0.1", 9))], now=0.0)
        waiting = await Node(config("n1")).start()
        try:
            assert waiting.seeds == (("127.0.0.1", 9),) and not waiting.joined
            await eventually(lambda: waiting.paused is not None, what="a reason to own nothing")
            reason = waiting.paused or ""
            assert "no stable view yet" in reason and "waits while it reaches none" in reason
            assert "start it with --new-cluster" in reason
            assert waiting.owned_partitions() == frozenset()
        finally:
            waiting.close()
        founder = await Node(config("n1", new_cluster=True)).start()
        try:
            await eventually(lambda: len(founder.owned_partitions()) == P, what="the new founder owns everything")
            assert founder.paused is None and MembersFile(cluster="placement", node="n1").load() == {}
        finally:
            founder.close()

    asyncio.run(run())
