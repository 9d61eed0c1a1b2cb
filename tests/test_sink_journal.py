"""The work sink's journal: what it acknowledged, written before the 200, readable after a kill."""

import pytest

from placement.service.work_sink import WorkBatch, WorkItem, WorkLog, main, read_journal


def batch(job: str, ids: list[int]) -> WorkBatch:
    return WorkBatch(job=job, items=[WorkItem(id=i, key=f"k{i}") for i in ids])


def test_journal_holds_new_items_and_duplicates_per_job(tmp_path):
    path = str(tmp_path / "sink.jsonl")
    log = WorkLog(path)
    assert log.accept(batch("a", [1, 2, 3])) == (3, 0)
    assert log.accept(batch("b", [1])) == (1, 0)
    assert log.accept(batch("a", [3, 4, 4])) == (1, 2)  # 3 seen before, 4 twice in one batch
    # Read while the log is still open: each line is flushed when accept returns.
    assert read_journal(path, "a") == ({1: "k1", 2: "k2", 3: "k3", 4: "k4"}, 2)
    assert read_journal(path, "b") == ({1: "k1"}, 0)
    assert read_journal(path, "c") == ({}, 0)


def test_a_line_cut_short_by_a_kill_is_ignored(tmp_path):
    path = tmp_path / "sink.jsonl"
    WorkLog(str(path)).accept(batch("a", [1, 2]))
    with open(path, "a", encoding="utf-8") as fh:
        fh.write('{"job": "a", "items": [[3, "k3"]')  # the process died mid-write: never acknowledged
    assert read_journal(str(path), "a") == ({1: "k1", 2: "k2"}, 0)


def test_an_unwritable_journal_is_a_one_line_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--id", "n1", "--journal", str(tmp_path / "no-such-dir" / "sink.jsonl")])
    assert exc.value.code == 2 and "--journal" in capsys.readouterr().err
