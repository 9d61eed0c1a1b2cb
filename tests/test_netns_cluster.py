"""Five `placement node` processes on five hosts (network namespaces, own IPs, one bridge) under
real link faults: a cut link, 10 % UDP loss, a 2/3 split, kill -9 (issue 13, item 2).

The tests share one cluster and run in file order; each starts by waiting until the cluster has
settled again (all five alive in every view, every partition owned exactly once). A sampler
thread in the bridge's namespace polls every node's ``/v1/ownership`` and ``/v1/members`` all
along; exclusivity is checked on every round it took (``tests/ownership_sampler.py`` says what
such sampling proves and what it cannot). Figures are printed with ``[netns]`` (run with ``-s``).
Needs root, ``ip netns`` and iptables; skipped otherwise with the reason.
"""

from __future__ import annotations

import sys
import time

import pytest

from host_cluster import Cluster, alive
from netns_lab import Lab, unavailable_reason

_REASON = unavailable_reason() if sys.platform == "linux" else "network namespaces are Linux only"
pytestmark = [pytest.mark.slow, pytest.mark.netns,
              pytest.mark.skipif(_REASON is not None, reason=str(_REASON))]

PARTITIONS = 256
NAMES = ["n1", "n2", "n3", "n4", "n5"]
FIGURES: dict[str, float] = {}


def figure(name: str, value: float, unit: str = "s") -> None:
    FIGURES[name] = value
    print(f"[netns] {name}: {value:.2f} {unit}", flush=True)


@pytest.fixture(scope="module")
def cluster():
    c = Cluster(Lab(len(NAMES)), PARTITIONS)
    try:
        t0 = c.boot()
        r = c.wait(lambda r: r.sees(NAMES, alive(NAMES)), t0, 60, "five members alive in every view")
        figure("join: 4 nodes started -> all alive in every view", r.end - t0)
        yield c
    finally:
        c.close()
        print(f"[netns] logs in {c.hosts.logdir}; figures {FIGURES}", flush=True)


def test_hosts_converge_with_each_partition_owned_once(cluster):
    t0 = cluster.joined_at
    answering = cluster.wait(lambda r: all(v is not None for v in r.views.values()), t0, 60, "every node to answer")
    r = cluster.settled(timeout_s=60)
    figure("join: 4 nodes started -> ownership as placed", r.end - t0)
    figure("join: all answering HTTP -> ownership as placed", r.end - answering.end)
    # Process start-up (imports) is excluded: it takes 5-15 s on a loaded 2-core machine.
    assert r.end - answering.end < 20, "ownership should settle within 20 s once every node runs"
    rounds = cluster.assert_exclusive(t0)
    assert not set().union(*(r.dead_anywhere() for r in rounds)), "a member was declared dead while joining"


def test_a_cut_link_between_two_hosts_kills_nobody(cluster):
    cluster.settled()
    t0 = time.monotonic()
    cluster.hosts.cut("n2", "n4")  # SWIM's indirect probes go around the cut through n1, n3, n5
    cluster.hold(t0 + 8)
    cluster.hosts.heal()
    cluster.hold(time.monotonic() + 3)
    rounds = cluster.assert_exclusive(t0)
    dead = set().union(*(r.dead_anywhere() for r in rounds))
    assert not dead, f"one cut link must not kill anybody; (observer, member) dead: {sorted(dead)}"
    expected = cluster.placed(NAMES)
    figure("cut link 8 s: rounds with ownership as placed", 100 * sum(r.owns_exactly(expected) for r in rounds)
           / len(rounds), "%")
    cluster.settled(timeout_s=30)


def test_ten_percent_udp_loss_for_60_s_kills_nobody(cluster):
    cluster.settled()
    t0 = time.monotonic()
    cluster.hosts.udp_loss(0.1)
    cluster.hold(t0 + 60)
    cluster.hosts.heal()
    rounds = cluster.assert_exclusive(t0)
    dead = set().union(*(r.dead_anywhere() for r in rounds))
    assert not dead, f"10 % loss must not kill anybody; (observer, member) dead: {sorted(dead)}"
    expected = cluster.placed(NAMES)
    figure("10% loss 60 s: rounds with ownership as placed", 100 * sum(
        r.owns_exactly(expected) for r in rounds) / len(rounds), "%")
    figure("10% loss 60 s: rounds with a node paused", 100 * sum(
        any(x is not None and x.paused for x in r.second) for r in rounds) / len(rounds), "%")
    figure("10% loss 60 s: sample rounds", len(rounds), "rounds")
    cluster.settled(timeout_s=30)


def test_kill_9_one_host_then_restart_it(cluster):
    victim, survivors = NAMES[-1], NAMES[:-1]
    cluster.settled()
    t0 = time.monotonic()
    cluster.kill(victim)
    seen = cluster.wait(lambda r: r.sees(survivors, alive(survivors)), t0, 30,
                        f"every survivor to see {victim} dead")
    figure("kill -9: dead in every survivor's view", seen.end - t0)
    expected = cluster.placed(survivors)
    took = cluster.wait(lambda r: r.owns_exactly(expected), t0, 30, "the survivors to own every partition as placed")
    figure("kill -9: survivors own what the placement says", took.end - t0)

    t1 = time.monotonic()
    cluster.start(victim)  # same id, new process: it must come back and get its share again
    r = cluster.settled(timeout_s=45)
    figure("restart (same id): ownership as placed for the five", r.end - t1)
    cluster.assert_exclusive(t0)


def test_split_2_3_fences_the_minority_and_merges_within_15_s(cluster):
    minority, majority = NAMES[:2], NAMES[2:]
    cluster.settled()
    t0 = time.monotonic()
    cluster.hosts.split(minority, majority)

    fenced = cluster.wait(lambda r: all(r.views.get(n) is not None for n in minority)
                          and all(not r.owners().get(n, {0}) for n in minority), t0, 20,
                          "the minority to own nothing")
    figure("split: minority owns nothing", fenced.end - t0)
    paused = {x.node: x.paused for x in fenced.second if x is not None and x.node in minority}
    assert all(paused.values()), f"the minority should say why it owns nothing: {paused}"
    seen = cluster.wait(lambda r: r.sees(majority, alive(majority)), t0, 25, "the majority to see the minority dead")
    figure("split: majority sees the minority dead", seen.end - t0)
    expected = cluster.placed(majority)
    took = cluster.wait(lambda r: r.owns_exactly(expected), t0, 28, "the majority to own every partition as placed")
    figure("split: majority owns every partition", took.end - t0)
    cluster.wait(lambda r: r.sees(minority, alive(minority)), t0, 28, "the minority to see the majority dead")

    cluster.hold(t0 + 30)
    cluster.healed_at = healed = time.monotonic()
    cluster.hosts.heal()
    merged = cluster.wait(lambda r: r.sees(NAMES, alive(NAMES)), healed, 15,
                          "all five alive in every view within 15 s of the heal")
    figure("heal: all alive in every view", merged.end - healed)
    cluster.assert_exclusive(t0)


def test_after_the_heal_every_partition_is_owned_as_placed_again(cluster):
    healed = cluster.healed_at
    if healed is None:
        pytest.fail("the split test did not get to its heal")
    # Failed in every run before the handoff-cost fix of 2026-11-23 (docs/benchmarks-log.md).
    try:
        r = cluster.settled(timeout_s=25)
    finally:
        cluster.assert_exclusive(healed)
    figure("heal: ownership as placed for the five", r.end - healed)
    cluster.assert_exclusive(healed)
