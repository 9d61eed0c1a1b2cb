"""``ownership.states``: a partition's state at a member as one type, the table of moves, and the
simulator's invariant that holds every run to that table."""

from __future__ import annotations

from dataclasses import dataclass, field

from ownership import ExclusiveConfig, Ownership
from ownership.states import TRANSITIONS, PartitionState, state_of, states_of
from placement import PlacementTable
from simulations.invariants import PartitionMoves
from simulations.scenarios import run_scenario

P = 16


def _founder() -> Ownership:
    own = Ownership("a", ExclusiveConfig(), lambda view: PlacementTable.build(dict(view), P, 1, 0), 0.0, founder=True)
    own.set_view({"a": 1.0}, (), 0.0)
    return own


def test_every_move_changes_the_state_and_names_its_rule():
    assert all(a is not b for a, b in TRANSITIONS)
    assert all("rule" in why for why in TRANSITIONS.values())
    # Every state is entered and left by some move, and none is a dead end.
    assert {b for _, b in TRANSITIONS} == {a for a, _ in TRANSITIONS} == set(PartitionState)


def test_a_founder_owns_every_partition_and_the_layered_states_match_one_by_one():
    own = _founder()
    assert states_of(own) == {p: PartitionState.OWNED for p in range(P)}
    assert state_of(own, P) is PartitionState.NONE  # (not a partition of this table: nothing known)
    # Entries in several dicts at once (as the rules make them): precedence as state_of's.
    own.free[1] = (1, None, "b")
    own.waiting[2] = own.waiting[20] = object()  # type: ignore[assignment]
    own.free[20] = (1, None, "b")
    own._to_pass[3] = own._to_pass[2] = (object(), 1)  # type: ignore[assignment]
    own._passed.update({4: "b", 20: "b", 3: None})
    own.owned[5].releasing = True
    own.waiting[21] = object()  # type: ignore[assignment]
    own._to_pass[21] = own._to_pass[22] = (object(), 1)  # type: ignore[assignment]
    own._passed.update({21: "b", 22: None, 23: "c"})
    assert states_of(own) == {p: state_of(own, p) for p in set(range(P)) | {20, 21, 22, 23}}
    assert [state_of(own, p) for p in (1, 2, 3, 4, 5, 20, 21, 22, 23)] == [
        PartitionState.OWNED, PartitionState.OWNED, PartitionState.OWNED, PartitionState.OWNED,
        PartitionState.RELEASING, PartitionState.HELD, PartitionState.WAITING, PartitionState.TO_PASS,
        PartitionState.PASSED]


@dataclass(eq=False)
class _Node:
    own: Ownership
    node_id: str = "a"
    up: bool = True


@dataclass
class _Sim:
    touched: list = field(default_factory=list)


def test_the_invariant_names_a_move_the_table_does_not_list():
    own = _founder()
    sim = _Sim([_Node(own)])
    check = PartitionMoves()
    assert check(sim) is None  # NONE -> OWNED for every partition: listed
    del own.owned[3]  # owned, then nothing at all: no rule does that (it would lose the right)
    what = check(sim)
    assert what is not None and "partition 3 went from owned to none" in what


def test_a_crash_and_restart_schedule_keeps_to_the_table():
    # The invariant runs after every step of every exclusive run with the cores' checks on (the
    # fuzzer's too); this run would raise InvariantViolation on a move the table lacks.
    result = run_scenario("crash-many", nodes=6, duration_s=40.0, seed=3, partitions=64, system="swim-exclusive",
                          params={"count": 3, "every_s": 8.0})
    assert result["dual_owned_partition_s_exact"] == 0
