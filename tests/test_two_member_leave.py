"""A two-member cluster where one member leaves gracefully: the other must end up owning every
partition (issue 16 follow-up; in the simulator, with the exclusive-ownership cores).

The hard case is the first witness leaving - the tie-breaker of ``lease.is_quorum``: the
survivor alone holds one witness of two without the first, so it can neither renew its lease nor
get a view without the leaver chosen. It owned nothing ever again (also with two `placement node`
processes: nothing owned 120 s after the leave) until a leaving member got a stable view
without itself chosen before announcing the leave (``Ownership.left_ready``).
"""

from ownership.lease import witnesses_of
from simulations.scenarios import run_scenario

P, DURATION_S, LEAVE_AT_S = 64, 40.0, 10.0


def orphaned_after_a_leave(leaver: int) -> float:
    """Partition-seconds nobody owned, in a run where node ``leaver`` (0 or 1) leaves at 10 s."""
    def leave(cluster) -> None:
        cluster.sim.at(cluster.sim.now + LEAVE_AT_S, cluster.leave, [sorted(cluster.nodes)[leaver]])

    r = run_scenario("steady", nodes=2, duration_s=DURATION_S, seed=1, partitions=P, system="swim-exclusive",
                     before_run=leave)
    assert r["dual_owned_partition_s_exact"] == 0
    return r["orphan_partition_s_exact"]


def test_the_survivor_takes_everything_when_the_second_witness_leaves():
    assert witnesses_of(["n000", "n001"], 5)[1] == "n001"
    assert orphaned_after_a_leave(1) < P * 6  # all of the leaver's partitions within ~6 s


def test_the_survivor_takes_everything_when_the_first_witness_leaves():
    assert witnesses_of(["n000", "n001"], 5)[0] == "n000"
    assert orphaned_after_a_leave(0) < P * 6
