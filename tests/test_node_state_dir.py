"""``--state-dir`` in the node (issue 29 item 5): the file appears and follows the witness's
promises, a restart reads it back and votes at once (no quiet time), and a bad file stops the
node with an error naming it (in-process nodes on loopback UDP)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from ownership.durable import decode
from ownership.lease import WitnessState
from ownership.views import AcceptorState, View
from placement.errors import InvalidConfigError
from placement.service.node import Node
from placement.service.witness_state import FILE_NAME, StateFile
from placement_cli.main import main

from test_node_exclusive import P, config, eventually


def _view_num(node: Node) -> int:
    num = node.ownership_status()["stable_view"]
    assert isinstance(num, int)
    return num


def _number(node: Node, key: str) -> float:
    value = node.ownership_status()[key]
    assert isinstance(value, (int, float)), (key, value)
    return value


def _state(path: Path, node: str):
    return decode(path.read_bytes(), cluster="placement", node=node)


def test_the_state_file_is_written_read_back_and_spares_the_restart_its_quiet_time(tmp_path: Path) -> None:
    async def run() -> None:
        dirs = {f"n{i}": tmp_path / f"n{i}" for i in (1, 2, 3)}
        first = await Node(config("n1", state_dir=str(dirs["n1"]))).start()
        nodes = [first]
        for i in (2, 3):
            nodes.append(await Node(config(f"n{i}", join=[first.member.bound], state_dir=str(dirs[f"n{i}"]))).start())
        await eventually(lambda: all(n.ownership_status()["stable_members"] == 3 for n in nodes)
                         and sum(len(n.owned_partitions()) for n in nodes) == P, timeout_s=30,
                         what="three members in one stable view, everything owned")
        n3 = nodes[2]
        # Each witness wrote the view it installed (and what it promised choosing it).
        await eventually(lambda: _state(dirs["n3"] / FILE_NAME, "n3").views.view.num
                         == _view_num(n3), what="n3's file to follow its view")
        kept = _state(dirs["n3"] / FILE_NAME, "n3")
        assert kept.views.view.members == ("n1", "n2", "n3")
        assert _number(n3, "state_writes") >= 1
        n3.close()  # as kill -9
        again = Node(config("n3", join=[first.member.bound], state_dir=str(dirs["n3"])))
        await again.start()
        # Its previous promises are back (written again at start), and it takes no quiet time:
        # it votes at once.
        assert _state(dirs["n3"] / FILE_NAME, "n3").views.view.num >= kept.views.view.num
        await eventually(lambda: _view_num(again) >= kept.views.view.num,
                         what="the restarted witness to learn its view")
        assert again.ownership_status()["quiet_for_s"] == 0.0 and again.ownership_status()["forgetful"] is False
        # Without a state dir, the same restart waits the quiet time (2 lease_s) before voting.
        again.close()
        forgetful = await Node(config("n3", join=[first.member.bound])).start()
        await eventually(lambda: _view_num(forgetful) >= kept.views.view.num,
                         what="the forgetful restart to learn its view")
        assert _number(forgetful, "quiet_for_s") > 0 and forgetful.ownership_status()["forgetful"] is True
        forgetful.close()
        for n in nodes[:2]:
            await n.leave()

    asyncio.run(run())


def test_a_corrupt_state_file_stops_the_node_with_an_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / FILE_NAME).write_bytes(b"placement-witness-state 1 2 00\n{}")
    node = Node(config("n9", join=[("127.0.0.1", 9)], state_dir=str(tmp_path)))
    with pytest.raises(InvalidConfigError, match=f"{tmp_path / FILE_NAME}.*checksum mismatch.*delete it"):
        asyncio.run(node.start())


def test_a_founder_refuses_to_found_a_cluster_over_kept_promises(tmp_path: Path) -> None:
    async def run() -> None:
        first = await Node(config("n1", state_dir=str(tmp_path))).start()
        await eventually(lambda: _view_num(first) >= 1, what="the founder's view")
        await first.leave()

    asyncio.run(run())
    with pytest.raises(InvalidConfigError, match=r"holds stable view \d+ .*--join"):
        asyncio.run(Node(config("n1", state_dir=str(tmp_path))).start())


def test_the_witness_command_exits_2_on_a_bad_state_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / FILE_NAME).write_bytes(b"placement-witness-state 1 100 ab")  # truncated in its header
    status = main(["witness", "--id", "w1", "--gossip", "127.0.0.1:0", "--join", "127.0.0.1:9",
                   "--state-dir", str(tmp_path)])
    assert status == 2
    err = capsys.readouterr().err
    assert f"placement witness: error: --state-dir {tmp_path / FILE_NAME}: truncated in its header" in err


def test_a_state_dir_needs_exclusive_ownership(tmp_path: Path) -> None:
    with pytest.raises(InvalidConfigError, match="only exclusive ownership has witnesses"):
        config("n1", ownership="available", state_dir=str(tmp_path))


#: A record without incarnations (an older format) is told apart by its view number only: one
#: above the clock-numbered views of a cluster founded now (``ownership.core``, rule 11).
LEGACY = 1 << 29


@pytest.mark.parametrize(("inc", "num", "said"), [
    (0x01D, 50, "holds stable view 50 of an earlier cluster named 'placement' (incarnation 1d"),
    (0, LEGACY, f"holds stable view {LEGACY}, but the cluster offers view"),
])
def test_a_state_file_from_an_earlier_cluster_of_the_same_name_is_reported(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, inc: int, num: int, said: str) -> None:
    old = WitnessState(AcceptorState(View.of(num, {"n1": 1.0, "n2": 1.0}, inc), (0, ""), None))
    StateFile(str(tmp_path), cluster="placement", node="n2").save(old)

    async def run() -> None:
        first = await Node(config("n1")).start()
        second = await Node(config("n2", join=[first.member.bound], state_dir=str(tmp_path))).start()
        await eventually(lambda: said in caplog.text, what="the error about a state file from an earlier cluster")
        assert _view_num(second) == 0  # it installs none of the new cluster's views
        second.close()
        await first.leave()

    with caplog.at_level(logging.ERROR, logger="placement.node"):
        asyncio.run(run())
    assert "delete the file" in caplog.text


def test_a_node_without_state_dir_says_what_it_risks(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The one default that can let fencing epochs fall is said at start, with the fix."""
    from placement.service.node_exclusive import NO_STATE_DIR_WARNING

    async def run() -> None:
        for state_dir in (None, str(tmp_path / "n1")):
            caplog.clear()
            with caplog.at_level(logging.WARNING, logger="placement.node"):
                node = await Node(config("n1", state_dir=state_dir)).start()
                await node.leave()
            said = [r.getMessage() for r in caplog.records if r.name == "placement.node"]
            assert (NO_STATE_DIR_WARNING in said) == (state_dir is None), said
            if state_dir is None:
                assert "fencing epochs can fall" in NO_STATE_DIR_WARNING and "--state-dir DIR" in NO_STATE_DIR_WARNING

    asyncio.run(run())
