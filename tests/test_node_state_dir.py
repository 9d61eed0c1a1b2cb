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


def test_a_cluster_of_one_restarted_founds_anew_with_its_epochs_above(tmp_path: Path) -> None:
    """Its record binds nobody else: the founder sets it aside and founds again, its first view
    numbered by the clock above the old one (so its fencing epochs are above the old ones)."""
    async def run() -> int:
        first = await Node(config("n1", state_dir=str(tmp_path))).start()
        await eventually(lambda: _view_num(first) >= 1, what="the founder's view")
        num = _view_num(first)
        await first.leave()
        return num

    before = asyncio.run(run())

    async def again() -> None:
        node = await Node(config("n1", state_dir=str(tmp_path))).start()
        assert _view_num(node) >= before
        assert node.ownership_status()["stable_members"] == 1
        await node.leave()

    asyncio.run(again())
    assert (tmp_path / (FILE_NAME + ".replaced")).exists()


def test_a_founder_refuses_to_found_over_promises_to_others_unless_told_new_cluster(tmp_path: Path) -> None:
    """Its view named others and none of them is on file (the members file was lost): it may
    not found beside them without the operator's word (``--new-cluster``)."""
    held = WitnessState(AcceptorState(View.of(9, {"n1": 1.0, "n2": 1.0}, 0x01D), (0, ""), None))
    StateFile(str(tmp_path), cluster="placement", node="n1").save(held)
    with pytest.raises(InvalidConfigError, match=r"holds stable view 9 .*--join.*--new-cluster"):
        asyncio.run(Node(config("n1", state_dir=str(tmp_path))).start())

    async def run() -> None:
        node = await Node(config("n1", state_dir=str(tmp_path), new_cluster=True)).start()
        assert _view_num(node) > 9
        await node.leave()

    asyncio.run(run())
    assert _state(tmp_path / (FILE_NAME + ".replaced"), "n1") == held


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


def test_a_node_keeps_its_witness_state_by_default_and_warns_only_when_it_keeps_none(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Without --state-dir the record lives beside the members file (under the state home):
    a user who never read docs/ownership.md still gets epochs that never fall. Only a node
    that keeps none (``--no-state-dir``) says, at start, what it risks and the fix."""
    from placement.service.node_exclusive import NO_STATE_DIR_WARNING

    home = tmp_path / "home"

    async def run() -> None:
        for keep, state_dir in ((True, None), (True, str(tmp_path / "n1")), (False, None)):
            caplog.clear()
            with caplog.at_level(logging.WARNING, logger="placement.node"):
                node = await Node(config("n1", state_dir=state_dir, keep_state=keep, state_home=str(home))).start()
                if keep and state_dir is None:
                    default = home / "placement" / "n1.witness.state"
                    state = _state(default, "n1")
                    assert state.views.view.num == _view_num(node) > 0  # (the founder's first view)
                await node.leave()
            said = [r.getMessage() for r in caplog.records if r.name == "placement.node"]
            assert any(NO_STATE_DIR_WARNING in m for m in said) == (not keep), said
        assert "fencing epochs can fall" in NO_STATE_DIR_WARNING and "--state-dir DIR" in NO_STATE_DIR_WARNING

    asyncio.run(run())


def test_no_state_dir_and_state_dir_do_not_combine(tmp_path: Path) -> None:
    with pytest.raises(InvalidConfigError, match="--no-state-dir keeps none"):
        config("n1", state_dir=str(tmp_path), keep_state=False)


def test_a_default_record_of_an_earlier_cluster_yields_to_the_new_one(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A whole cluster founded anew under the same name (``make run`` twice: n1 --new-cluster,
    the others --join it), its joiners holding default records of the cluster before: they
    join the new cluster as members that kept no promises, with a warning (a --state-dir
    record refuses instead: the test above)."""
    home = tmp_path / "home"
    old = WitnessState(AcceptorState(View.of(50, {"n1": 1.0, "n2": 1.0}, 0x01D), (0, ""), None), {"n1": 1 << 17})
    (home / "placement").mkdir(parents=True)
    StateFile.beside(str(home / "placement" / "n2.json"), cluster="placement", node="n2").save(old)

    async def run() -> None:
        first = await Node(config("n1", new_cluster=True, state_home=str(home))).start()
        second = await Node(config("n2", join=[first.member.bound], state_home=str(home))).start()
        await eventually(lambda: _view_num(second) == _view_num(first) > 50
                         and second.ownership_status()["stable_members"] == 2,
                         timeout_s=30, what="the joiner in the new cluster's view")
        await second.leave()
        await first.leave()

    with caplog.at_level(logging.WARNING, logger="placement.survival"):
        asyncio.run(run())
    assert "held what this node promised in an earlier cluster named 'placement'" in caplog.text
    kept = _state(home / "placement" / "n2.witness.state", "n2")
    assert kept.views.view.inc != 0x01D and kept.reserves.get("n1") != 1 << 17


def test_a_second_process_of_the_same_node_is_refused_its_state(tmp_path: Path) -> None:
    """The same command started twice (two terminals): the second may not share the first's
    witness record; it stops with an error naming the file. Once the first stopped, the same
    node starts again in this process (the lock went with it)."""
    from placement.service.witness_state import StateInUse

    home = str(tmp_path / "home")

    async def run() -> None:
        first = await Node(config("n1", state_home=home)).start()
        with pytest.raises(StateInUse, match=r"n1\.witness\.state is in use by another process of node 'n1'"):
            await Node(config("n1", state_home=home, new_cluster=True)).start()
        await first.leave()
        again = await Node(config("n1", state_home=home, new_cluster=True)).start()
        await again.leave()

    asyncio.run(run())


def test_a_default_place_it_cannot_use_runs_without_state_and_says_so(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A home that cannot hold the default record (here a file where the directory would be;
    a read-only home in a container) is no configuration error: the node runs as without
    witness state and says what that risks. An explicit --state-dir there is an error."""
    from placement.service.node_exclusive import NO_STATE_DIR_WARNING

    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")

    async def run() -> None:
        node = await Node(config("n1", state_home=str(blocker))).start()
        assert "state_writes" not in node.ownership_status()  # (no state file)
        await node.leave()

    with caplog.at_level(logging.WARNING, logger="placement.node"):
        asyncio.run(run())
    assert "running without witness state" in caplog.text and NO_STATE_DIR_WARNING in caplog.text
    with pytest.raises(InvalidConfigError, match="--state-dir"):
        asyncio.run(Node(config("n1", state_dir=str(blocker / "state"))).start())
