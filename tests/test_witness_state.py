"""The witness state record (ownership.durable) and its file (placement.service.witness_state):
every bad file gives the documented error or fallback, never a state it did not verify."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ownership.durable import StateRecordError, decode, encode
from ownership.lease import WitnessState
from ownership.views import AcceptorState, View
from placement.errors import InvalidConfigError
from placement.service.witness_state import FILE_NAME, StateFile

VIEW = View.of(7, {"a": 1.0, "b": 0.0, "c": 2.5}, inc=0x5EED)
NEXT = View.of(8, {"a": 1.0, "c": 2.5}, inc=0x5EED)
STATE = WitnessState(AcceptorState(VIEW, (4, "c"), ((3, "a"), NEXT)), {"a": 1 << 17, "c": 1 << 16}, {"b": 5}, 9)
DATA = encode(STATE, cluster="prod", node="a")


def test_a_record_round_trips() -> None:
    assert decode(DATA, cluster="prod", node="a") == STATE
    empty = WitnessState()
    assert decode(encode(empty, cluster="prod", node="a"), cluster="prod", node="a") == empty


def _resealed(change: Callable[[dict[str, Any]], None]) -> bytes:
    """``DATA`` with its body changed by ``change`` and sealed again (a writer's doing, not a disk's)."""
    doc = json.loads(DATA[DATA.index(b"\n") + 1:])
    change(doc)
    body = json.dumps(doc).encode()
    return b"placement-witness-state 1 %d %s\n" % (len(body), hashlib.sha256(body).hexdigest().encode()) + body


def test_a_record_written_before_views_carried_their_incarnation_reads_as_unknown() -> None:
    def drop_incarnations(doc: dict[str, Any]) -> None:
        del doc["state"]["view"][3], doc["state"]["accepted"][2][3]

    state = decode(_resealed(drop_incarnations), cluster="prod", node="a")
    view = state.views.view
    assert (view.num, view.members, view.weights, view.ck, view.inc) == (7, VIEW.members, VIEW.weights, VIEW.ck, 0)
    assert state.views.accepted is not None
    assert state.views.accepted[1].inc == 0 and state.views.accepted[1].ck == NEXT.ck


def test_a_record_truncated_at_any_length_is_refused() -> None:
    for n in range(len(DATA)):
        with pytest.raises(StateRecordError):
            decode(DATA[:n], cluster="prod", node="a")
    header = DATA.index(b"\n") + 1
    with pytest.raises(StateRecordError, match="truncated: 10 of"):
        decode(DATA[:header + 10], cluster="prod", node="a")
    with pytest.raises(StateRecordError, match="truncated in its header"):
        decode(DATA[:header - 1], cluster="prod", node="a")


def test_a_flipped_byte_anywhere_is_refused() -> None:
    for i in range(len(DATA)):
        for bit in (0x01, 0x20, 0x80):
            bad = bytearray(DATA)
            bad[i] ^= bit
            with pytest.raises(StateRecordError):
                decode(bytes(bad), cluster="prod", node="a")


def test_bytes_after_the_record_are_refused() -> None:
    with pytest.raises(StateRecordError, match="1 bytes after its end"):
        decode(DATA + b"\n", cluster="prod", node="a")


def test_a_record_of_another_node_cluster_or_version_is_refused() -> None:
    with pytest.raises(StateRecordError, match="written for node 'a', not 'b'"):
        decode(DATA, cluster="prod", node="b")
    with pytest.raises(StateRecordError, match="written for cluster 'prod', not 'test'"):
        decode(DATA, cluster="test", node="a")
    other = DATA.replace(b"placement-witness-state 1 ", b"placement-witness-state 2 ", 1)
    with pytest.raises(StateRecordError, match="format version 2, this program reads version 1"):
        decode(other, cluster="prod", node="a")
    with pytest.raises(StateRecordError, match="not a witness state record"):
        decode(b'{"view": [7]}\n', cluster="prod", node="a")


def test_a_well_sealed_record_with_bad_values_is_refused() -> None:
    # The checksum matches (a writer's bug, not a disk's): the values are checked too.
    def not_following(doc: dict[str, Any]) -> None:
        doc["state"]["accepted"][2][0] = 9  # accepted a value that does not follow view 7

    with pytest.raises(StateRecordError, match="does not follow"):
        decode(_resealed(not_following), cluster="prod", node="a")


def test_a_missing_file_is_a_first_start_and_writes_an_empty_record(tmp_path: Path,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    f = StateFile(str(tmp_path / "state"), cluster="prod", node="a")
    with caplog.at_level(logging.WARNING, logger="placement.node"):
        assert f.load() is None
    assert "the first start of node 'a'" in caplog.text and "quiet time" in caplog.text
    # Marked forgetful (this may have been a restart whose file was lost) until it may vote.
    forgetful = WitnessState(AcceptorState(forgetful=True))
    assert decode((tmp_path / "state" / FILE_NAME).read_bytes(), cluster="prod", node="a") == forgetful
    assert StateFile(str(tmp_path / "state"), cluster="prod", node="a").load() == forgetful


def test_save_replaces_the_file_whole_and_load_reads_it_back(tmp_path: Path) -> None:
    f = StateFile(str(tmp_path), cluster="prod", node="a")
    f.save(WitnessState())
    f.save(STATE)
    assert sorted(os.listdir(tmp_path)) == [FILE_NAME]  # no temp file left behind
    assert StateFile(str(tmp_path), cluster="prod", node="a").load() == STATE
    assert f.writes == 2 and f.max_write_s > 0


@pytest.mark.parametrize("content, why", [
    (DATA[:len(DATA) // 2], "truncated"),
    (b"", "empty"),
    (DATA.replace(b'"nonce_seq":9', b'"nonce_seq":8'), "checksum mismatch"),
])
def test_a_bad_file_is_a_configuration_error_naming_it(tmp_path: Path, content: bytes, why: str) -> None:
    (tmp_path / FILE_NAME).write_bytes(content)
    with pytest.raises(InvalidConfigError) as err:
        StateFile(str(tmp_path), cluster="prod", node="a").load()
    text = str(err.value)
    assert str(tmp_path / FILE_NAME) in text and why in text and "Restore it" in text
    assert (tmp_path / FILE_NAME).read_bytes() == content  # left as it was, for the operator


def test_a_file_of_another_node_is_a_configuration_error(tmp_path: Path) -> None:
    (tmp_path / FILE_NAME).write_bytes(DATA)
    with pytest.raises(InvalidConfigError, match="written for node 'a', not 'b'"):
        StateFile(str(tmp_path), cluster="prod", node="b").load()


def test_a_founder_over_kept_promises_is_refused(tmp_path: Path) -> None:
    f = StateFile(str(tmp_path), cluster="prod", node="a")
    assert f.check_founder(None, new_cluster=False) is None
    assert f.check_founder(WitnessState(), new_cluster=False) == WitnessState()
    f.save(STATE)
    with pytest.raises(InvalidConfigError, match=r"holds stable view 7 .* \(3 members\).* --join .* --new-cluster"):
        f.check_founder(STATE, new_cluster=False)
    assert f.load() == STATE  # (refused: the file is left as it was)


@pytest.mark.parametrize("case", ["new-cluster", "alone"])
def test_a_founder_sets_the_record_aside_when_that_is_safe_or_asked_for(
        tmp_path: Path, case: str, caplog: pytest.LogCaptureFixture) -> None:
    """``--new-cluster`` is the operator's word that the old cluster is done with; a record of
    a cluster of this node alone, with no successor on its way, binds nobody else. Either way
    the record is kept aside (``.replaced``), and a fresh one, forgetful, takes its place."""
    alone = WitnessState(AcceptorState(View.of(7, {"a": 1.0}, inc=0x5EED), (4, "a"), None), {"a": 1 << 17})
    state = STATE if case == "new-cluster" else alone
    f = StateFile(str(tmp_path), cluster="prod", node="a")
    f.save(state)
    with caplog.at_level(logging.WARNING, logger="placement.survival"):
        assert f.check_founder(state, new_cluster=case == "new-cluster") is None
    assert decode((tmp_path / (FILE_NAME + ".replaced")).read_bytes(), cluster="prod", node="a") == state
    fresh = f.load()
    assert fresh is not None and fresh.views.view.num == 0 and fresh.views.forgetful
    assert "kept aside" in caplog.text


def test_a_founder_alone_in_its_view_with_a_successor_on_its_way_is_refused(tmp_path: Path) -> None:
    """Its successor may name others, who could hold leases under it: not a cluster of one."""
    pending = WitnessState(AcceptorState(View.of(7, {"a": 1.0}, inc=1), (3, "a"), ((3, "a"), NEXT)))
    f = StateFile(str(tmp_path), cluster="prod", node="a")
    with pytest.raises(InvalidConfigError, match="holds stable view 7"):
        f.check_founder(pending, new_cluster=False)


def test_the_default_file_lives_beside_the_members_file(tmp_path: Path) -> None:
    f = StateFile.beside(str(tmp_path / "prod" / "a.json"), cluster="prod", node="a")
    assert f.implicit and f.path == str(tmp_path / "prod" / "a.witness.state")
    assert f.load() is None and (tmp_path / "prod" / "a.witness.state").exists()
    (tmp_path / "prod" / "a.witness.state").write_bytes(b"junk")
    with pytest.raises(InvalidConfigError, match=r"^/.*a\.witness\.state: "):  # named by its path, not a flag
        f.load()


def test_a_directory_it_cannot_write_is_a_configuration_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(InvalidConfigError, match=r"--state-dir .*file"):
        StateFile(str(blocker), cluster="prod", node="a").load()


def test_one_process_at_a_time_holds_a_state_file(tmp_path: Path) -> None:
    """Two processes of one node id writing one record would overwrite each other's promises:
    the lock refuses the second (naming the first's pid), and is free again once released."""
    from placement.service.witness_state import StateInUse

    first = StateFile(str(tmp_path), cluster="prod", node="a")
    first.lock()
    second = StateFile(str(tmp_path), cluster="prod", node="a")
    said = rf"in use by another process of node 'a' of cluster 'prod' \(pid {os.getpid()}\)"
    with pytest.raises(StateInUse, match=said):
        second.lock()
    first.unlock()
    second.lock()
    second.unlock()
