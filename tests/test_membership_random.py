"""Random fault schedules (hypothesis): whatever happens, once the faults stop the view heals.

Like a (tiny) VOPR run: crashes, restarts, partitions, packet loss, metadata updates and leaves
in random order and at random times on the simulated network; afterwards every member that is
up must see exactly the members that are up and have not left, with the same checksum.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from membership import MembershipConfig, Meta
from simulations.members import build_cluster

NODES = [f"n{i}" for i in range(5)]
CONFIG = MembershipConfig(dead_retry_interval_s=5.0)

op = st.one_of(
    st.tuples(st.just("crash"), st.sampled_from(NODES)),
    st.tuples(st.just("restart"), st.sampled_from(NODES)),
    st.tuples(st.just("partition"), st.sets(st.sampled_from(NODES), min_size=1, max_size=4)),
    st.tuples(st.just("heal"), st.none()),
    st.tuples(st.just("meta"), st.sampled_from(NODES)),
    st.tuples(st.just("leave"), st.sampled_from(NODES)),
    st.tuples(st.just("loss"), st.sampled_from([0.0, 0.2, 0.5])),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(op, st.floats(0.0, 8.0)), min_size=1, max_size=6), st.integers(0, 2**16))
def test_cluster_heals_after_any_fault_schedule(schedule, seed):
    net = build_cluster(len(NODES), seed=seed, config=CONFIG)
    gone: set[str] = set()  # left gracefully: must never come back as live
    for (kind, arg), pause in schedule:
        if kind == "crash" and arg not in gone:
            net.crash(arg)
        elif kind == "restart" and arg not in gone and not net.nodes[arg].up:
            seeds = [n.node_id for n in net.up_nodes() if n.node_id not in gone][:1]
            net.add(arg, seeds=seeds)
        elif kind == "partition":
            net.partition(sorted(arg), [n for n in NODES if n not in arg])
        elif kind == "heal":
            net.heal()
        elif kind == "loss":
            net.loss = arg
        elif kind == "meta" and net.nodes[arg].up and arg not in gone:
            net.call(arg, lambda c, now: c.update_meta(Meta(weight=c.meta.weight + 1), now))
        elif kind == "leave" and net.nodes[arg].up and arg not in gone:
            net.call(arg, lambda c, now: c.leave(now))
            net.run_for(1.0)
            net.crash(arg)
            gone.add(arg)
        net.run_for(pause)
    net.heal()
    net.loss = 0.0
    up = [n.node_id for n in net.up_nodes()]
    if not up:
        return

    def healed() -> bool:
        return net.converged(up) and len({net.nodes[i].core.view_checksum for i in up}) == 1

    assert net.run_until_true(healed, 120.0), (
        f"seed={seed} schedule={schedule}: " +
        "; ".join(f"{i}: {[(m.node_id, m.status, m.incarnation) for m in net.nodes[i].core.members()]}"
                  for i in up))
