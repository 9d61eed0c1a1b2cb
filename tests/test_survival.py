"""What a cluster survives (ownership.survival, issue 29 item 3), for 1, 2, 2 + witness, 3, 4 and
5 members: each claim checked against the quorum rule itself, by trying every crash and every
two-sided split of the view."""

import itertools

import pytest

from ownership.survival import assess
from ownership.views import is_quorum, witnesses_of


def view(workers, witnesses=()):
    weights = {m: 1.0 for m in workers} | {m: 0.0 for m in witnesses}
    return weights, witnesses_of(weights, 5)


def works(alive, weights, wit):
    """Brute force, independent of ``assess``: a quorum of the witnesses and a weighted member."""
    return is_quorum(alive, wit) and any(weights[m] > 0 for m in alive)


def survived_crashes(weights, wit):
    """Largest f such that every set of f crashed members leaves work going."""
    members = sorted(weights)
    f = 0
    while f < len(members) and all(works(set(members) - set(dead), weights, wit)
                                   for dead in itertools.combinations(members, f + 1)):
        f += 1
    return f


CASES = {
    "1": (["n1"], [], 0),
    "2": (["n1", "n2"], [], 0),
    "1 + witness": (["n1"], ["w1"], 0),
    "2 + witness": (["n1", "n2"], ["w1"], 1),
    "3": (["n1", "n2", "n3"], [], 1),
    "4": (["n1", "n2", "n3", "n4"], [], 1),
    "5": (["n1", "n2", "n3", "n4", "n5"], [], 2),
    "6": (["n1", "n2", "n3", "n4", "n5", "n6"], [], 2),
    "2 + 3 witnesses": (["n1", "n2"], ["w1", "w2", "w3"], 1),
}


@pytest.mark.parametrize("name", CASES)
def test_fatal_members_and_crashes_survived_match_brute_force(name):
    workers, wits, crashes = CASES[name]
    weights, wit = view(workers, wits)
    s = assess(weights, wit)
    assert s.crashes == crashes == survived_crashes(weights, wit)
    assert s.fatal == tuple(m for m in sorted(weights) if not works(set(weights) - {m}, weights, wit))
    assert (s.warning is None) == (not s.fatal)
    assert s.summary
    # Every two-sided split: at most one side works, and it is a side the text names.
    members = sorted(weights)
    for r in range(1, len(members)):
        for side in itertools.combinations(members, r):
            other = set(members) - set(side)
            assert not (works(set(side), weights, wit) and works(other, weights, wit))


def test_one_member_survives_nothing():
    s = assess({"n1": 1.0}, ("n1",))
    assert s.fatal == ("n1",) and s.crashes == 0
    assert s.warning is not None and "add two nodes, or a node and a witness" in s.warning
    assert "nothing to split" in s.split


def test_two_workers_stop_on_the_crash_of_the_first_witness_only():
    weights, wit = view(["n1", "n2"])
    s = assess(weights, wit)
    assert s.fatal == (wit[0],)  # the other's crash leaves the first witness: exactly half, with it
    assert s.warning == (f"a crash of {wit[0]} stops all work: add a witness (placement witness) or a node, "
                         "so that 3 members vote")
    assert f"including the first witness {wit[0]}" in s.split  # a 1|1 split goes to the first witness


def test_two_workers_and_a_witness_survive_any_single_crash_and_a_split_goes_to_the_majority():
    weights, wit = view(["n1", "n2"], ["w"])
    s = assess(weights, wit)
    assert s.fatal == () and s.crashes == 1 and s.warning is None
    assert s.summary == "survives the crash of any one member"
    assert "the side with 2 of the 3 witnesses" in s.split and "first witness" not in s.split
    assert "without a member of positive weight owns nothing" in s.split
    # the witness crashed: the two workers go on (but then the new 2-member view warns again)
    assert works({"n1", "n2"}, weights, wit)
    assert assess({"n1": 1.0, "n2": 1.0}, witnesses_of(["n1", "n2"], 5)).warning is not None


def test_a_lone_worker_with_a_witness_stops_when_the_worker_crashes():
    weights, wit = view(["n1"], ["w1"])
    s = assess(weights, wit)
    assert "n1" in s.fatal and s.crashes == 0
    assert s.warning is not None and "add a node" in s.warning


def test_four_members_survive_one_crash_and_two_only_with_the_first_witness_left():
    weights, wit = view(["n1", "n2", "n3", "n4"])
    s = assess(weights, wit)
    assert s.fatal == () and s.crashes == 1
    assert "or with 2 including the first witness" in s.split
    # Two crashes: survived exactly when the first witness is not among them.
    for dead in itertools.combinations(wit, 2):
        assert works(set(wit) - set(dead), weights, wit) == (wit[0] not in dead)
    # A 2|2 split: the side with the first witness goes on; 3|1 with the first witness alone: the 3.
    assert works({wit[0], wit[1]}, weights, wit) and not works({wit[2], wit[3]}, weights, wit)
    assert not works({wit[0]}, weights, wit) and works(set(wit[1:]), weights, wit)


def test_five_members_survive_two_crashes_and_a_split_needs_three():
    weights, wit = view(["n1", "n2", "n3", "n4", "n5"])
    s = assess(weights, wit)
    assert s.crashes == 2 and s.fatal == ()
    assert s.summary == "survives the crash of any 2 members at once"
    assert "the side with 3 of the 5 witnesses" in s.split and "first witness" not in s.split


def test_witnesses_only_owns_nothing():
    s = assess({"w1": 0.0, "w2": 0.0}, ("w1", "w2"))
    assert s.workers == () and s.warning is not None and "no member has a positive weight" in s.warning


def test_to_dict_is_plain_data():
    weights, wit = view(["n1", "n2"], ["w"])
    d = assess(weights, wit).to_dict()
    assert d["crashes_survived"] == 1 and d["fatal"] == [] and d["warning"] is None
    members = d["members"]
    assert isinstance(members, list) and sorted(members) == ["n1", "n2", "w"] and d["workers"] == ["n1", "n2"]


@pytest.mark.parametrize("name, side_works", [
    # (case, a split side -> whether it goes on), as README's "How many nodes" says
    ("2", lambda wit: [((wit[0],), True), ((wit[1],), False)]),
    ("2 + witness", lambda wit: [(("n1", "w1"), True), (("n2",), False), (("n1", "n2"), True), (("w1",), False)]),
    ("4", lambda wit: [(wit[:3], True), (wit[3:], False), ((wit[0], wit[3]), True), (wit[1:3], False),
                       ((wit[0],), False), (wit[1:], True)]),
    ("5", lambda wit: [(wit[:3], True), (wit[3:], False), (wit[2:], True), (wit[:2], False)]),
])
def test_the_split_sides_the_readme_names(name, side_works):
    workers, wits, _ = CASES[name]
    weights, wit = view(workers, wits)
    for side, expected in side_works(wit):
        assert works(set(side), weights, wit) == expected, (side, wit)
