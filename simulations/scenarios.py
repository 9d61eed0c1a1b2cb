"""Named, parameterised scenarios, and ``run_scenario`` which builds, runs and measures one.

A scenario is a function ``fn(cluster, duration_s, **params)`` called once the cluster has
settled (time 0 of the measurement); it schedules fault actions with ``cluster.sim.at`` and
draws any randomness from ``cluster.sim.scenario_rng``. ``SCENARIOS`` maps names to
``Scenario`` records (the CLI lists them with their defaults).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

from membership import MembershipConfig
from ownership import ExclusiveConfig

from .cluster import Cluster, SwimSystem
from .engine import LinkModel, Network

__all__ = ["Scenario", "SCENARIOS", "SYSTEMS", "make_system", "run_scenario"]


@dataclass(frozen=True)
class Scenario:
    name: str
    fn: Callable[..., None]
    help: str
    nodes: int = 16
    duration_s: float = 120.0
    params: dict[str, Any] = field(default_factory=dict)  # defaults of the extra parameters
    #: The ownership rules' settings the scenario needs, from the system's and the parameters
    #: (None: the system's as they are).
    rules: Callable[[ExclusiveConfig, dict[str, Any]], ExclusiveConfig] | None = None


SCENARIOS: dict[str, Scenario] = {}


def scenario(name: str, help: str, nodes: int = 16, duration_s: float = 120.0,
             rules: Callable[[ExclusiveConfig, dict[str, Any]], ExclusiveConfig] | None = None):
    def register(fn: Callable[..., None]) -> Callable[..., None]:
        sig = inspect.signature(fn)
        params = {k: p.default for k, p in list(sig.parameters.items())[2:]}
        SCENARIOS[name] = Scenario(name, fn, help, nodes, duration_s, params, rules)
        return fn
    return register


def _ids(cluster: Cluster) -> list[str]:
    return [n.node_id for n in cluster.nodes.values() if n.up and not n.leaving]


def _pick(cluster: Cluster, k: int, exclude: Collection[str] = frozenset()) -> list[str]:
    ids = [i for i in _ids(cluster) if i not in exclude]
    return cluster.sim.scenario_rng.sample(ids, min(k, len(ids)))


def _later(cluster: Cluster, dt: float, fn: Callable[..., None], *args: Any) -> None:
    cluster.sim.at(cluster.sim.now + dt, fn, *args)


def _join(cluster: Cluster) -> None:
    """One brand-new node (the engine's events return nothing: its id is not needed)."""
    cluster.join()


# ---------------------------------------------------------------------------- scenarios

@scenario("steady", "no faults: background load, false positives, balance")
def steady(cluster: Cluster, duration_s: float) -> None:
    pass


@scenario("crash-one", "kill -9 one random node at t=at_s")
def crash_one(cluster: Cluster, duration_s: float, at_s: float = 10.0) -> None:
    _later(cluster, at_s, lambda: cluster.crash(_pick(cluster, 1)))


@scenario("crash-many", "kill -9 `count` random nodes, one every `every_s` seconds from t=10",
          nodes=32, duration_s=180.0)
def crash_many(cluster: Cluster, duration_s: float, count: int = 8, every_s: float = 10.0) -> None:
    for i in range(count):
        _later(cluster, 10.0 + i * every_s, lambda: cluster.crash(_pick(cluster, 1)))


@scenario("join-one", "one new node joins at t=at_s")
def join_one(cluster: Cluster, duration_s: float, at_s: float = 10.0) -> None:
    _later(cluster, at_s, _join, cluster)


@scenario("leave", "one random node leaves gracefully at t=at_s")
def leave(cluster: Cluster, duration_s: float, at_s: float = 10.0) -> None:
    _later(cluster, at_s, lambda: cluster.leave(_pick(cluster, 1)))


@scenario("scale-out", "grow from --nodes to `to` nodes, one join every `every_s` s from t=10",
          nodes=8, duration_s=120.0)
def scale_out(cluster: Cluster, duration_s: float, to: int = 32, every_s: float = 2.0) -> None:
    for i in range(max(0, to - len(_ids(cluster)))):
        _later(cluster, 10.0 + i * every_s, _join, cluster)


@scenario("scale-in", "shrink from --nodes to `to` nodes by graceful leaves every `every_s` s",
          nodes=32, duration_s=120.0)
def scale_in(cluster: Cluster, duration_s: float, to: int = 8, every_s: float = 2.0) -> None:
    for i in range(max(0, len(_ids(cluster)) - to)):
        _later(cluster, 10.0 + i * every_s, lambda: cluster.leave(_pick(cluster, 1)))


@scenario("rolling-restart", "restart every node in turn (down `down_s`, next after `every_s`)",
          nodes=8, duration_s=240.0)
def rolling_restart(cluster: Cluster, duration_s: float, down_s: float = 5.0, every_s: float = 20.0) -> None:
    for i, node_id in enumerate(_ids(cluster)):
        t = 10.0 + i * every_s
        _later(cluster, t, cluster.crash, [node_id])
        _later(cluster, t + down_s, cluster.restart, [node_id])


@scenario("restart-all", "kill -9 every node at t=10, start them again in random order over `spread_s` "
          "seconds from `down_s` later (with rejoin_files: each through the members it knew, none founding "
          "while another holds a view)", nodes=8, duration_s=90.0)
def restart_all(cluster: Cluster, duration_s: float, down_s: float = 3.0, spread_s: float = 5.0) -> None:
    ids = _ids(cluster)
    _later(cluster, 10.0, cluster.crash, ids)
    rng = cluster.sim.scenario_rng
    for node_id in ids:
        _later(cluster, 10.0 + down_s + rng.uniform(0, spread_s), cluster.restart, [node_id])


@scenario("split", "network partition at t=10 for `split_s` seconds, then heal; `fraction` of the nodes "
          "on one side (0.5: 50/50, 0.7: 70/30)", nodes=16, duration_s=120.0)
def split(cluster: Cluster, duration_s: float, split_s: float = 60.0, fraction: float = 0.5) -> None:
    def cut() -> None:
        ids = _ids(cluster)
        k = round(fraction * len(ids))
        cluster.partition(ids[:k], ids[k:])
    _later(cluster, 10.0, cut)
    _later(cluster, 10.0 + split_s, cluster.heal)


@scenario("oneway", "asymmetric partition at t=10 for `cut_s` seconds: what `fraction` of the nodes send "
          "no longer reaches the others, who still reach them", nodes=16, duration_s=120.0)
def oneway(cluster: Cluster, duration_s: float, cut_s: float = 30.0, fraction: float = 0.25) -> None:
    def cut() -> None:
        ids = _ids(cluster)
        k = max(1, round(fraction * len(ids)))
        cluster.partition(ids[:k], ids[k:], both_ways=False)
    _later(cluster, 10.0, cut)
    _later(cluster, 10.0 + cut_s, cluster.heal)


@scenario("weight-change", "one node's weight becomes `weight` at t=at_s (its share moves by handoff)",
          nodes=16, duration_s=90.0)
def weight_change(cluster: Cluster, duration_s: float, weight: float = 2.0, at_s: float = 10.0) -> None:
    _later(cluster, at_s, lambda: cluster.set_weight(_pick(cluster, 1), weight))


@scenario("load-skew", "skewed partition loads (lognormal sigma 0.5, 5 % hot at 10x, drifting every `drift_every_s`); "
          "every `period_s` each member plans from its stable view the pins that move hot partitions "
          "(`balance_by=weights`: its own weight; static: `load_aware=False`)",
          nodes=16, duration_s=3600.0,
          # Stable views commit the figures each round reports (rule 12); any value below the
          # period does (the figures change once a round).
          rules=lambda cfg, params: dataclasses.replace(cfg, loads_every_s=params["period_s"] / 2))
def load_skew(cluster: Cluster, duration_s: float, period_s: float = 300.0, first_s: float = 30.0,
              drift_every_s: float = 180.0, load_aware: bool = True, balance_by: str = "pins") -> None:
    """Issue 33 item 3 (``simulations.rebalancing``): static max/mean is measured beside the
    load-aware one on the same loads in either case. ``balance_by``: "pins" (chosen partitions
    pinned by the stable view, rule 13; what nodes do by default) or "weights" (each member plans
    its own weight)."""
    from .load_model import LoadModel, LoadShape
    from .rebalancing import LoadRounds
    model = LoadModel(cluster.placement.partitions, cluster.sim.seed, LoadShape(drift_every_s=drift_every_s))
    LoadRounds(cluster, model, period_s=period_s, first_s=first_s, load_aware=load_aware, by=balance_by).start()


@scenario("loss", "packet loss `loss` on every link from t=0, one crash at t=`crash_at_s`",
          nodes=16, duration_s=300.0)
def loss(cluster: Cluster, duration_s: float, loss: float = 0.05, crash_at_s: float = 60.0) -> None:
    cluster.set_loss(loss)
    if crash_at_s >= 0:
        _later(cluster, crash_at_s, lambda: cluster.crash(_pick(cluster, 1)))


@scenario("stalls", "`fraction` of the nodes stall for 1-4 s at random (mean gap `gap_s`)",
          nodes=32, duration_s=300.0)
def stalls(cluster: Cluster, duration_s: float, fraction: float = 0.1, gap_s: float = 10.0,
           min_s: float = 1.0, max_s: float = 4.0) -> None:
    rng = cluster.sim.scenario_rng
    slow = _pick(cluster, max(1, round(fraction * len(_ids(cluster)))))

    def stall_later(node_id: str) -> None:
        # Each stall starts an exponential gap after the previous one ended.
        length = rng.uniform(min_s, max_s)
        cluster.stall([node_id], length)
        _later(cluster, length + rng.expovariate(1.0 / gap_s), stall_later, node_id)

    for node_id in slow:
        _later(cluster, rng.expovariate(1.0 / gap_s), stall_later, node_id)


@scenario("freeze", "one random node's process is frozen (SIGSTOP) for `freeze_s` seconds at t=at_s",
          nodes=16, duration_s=90.0)
def freeze(cluster: Cluster, duration_s: float, freeze_s: float = 20.0, at_s: float = 10.0) -> None:
    _later(cluster, at_s, lambda: cluster.stall(_pick(cluster, 1), freeze_s))


@scenario("slow", "`count` nodes handle every datagram `lag_s` late (CPU starvation) from t=10",
          nodes=16, duration_s=180.0)
def slow(cluster: Cluster, duration_s: float, count: int = 1, lag_s: float = 1.0) -> None:
    _later(cluster, 10.0, lambda: cluster.slow(_pick(cluster, count), lag_s))


@scenario("flapping", "one node's links go down for `down_s` every `period_s` seconds",
          nodes=16, duration_s=240.0)
def flapping(cluster: Cluster, duration_s: float, down_s: float = 8.0, period_s: float = 30.0) -> None:
    victim = _pick(cluster, 1)

    def down() -> None:
        others = [i for i in cluster.nodes if i != victim[0]]
        cluster.partition(victim, others)
        _later(cluster, down_s, cluster.heal)
        _later(cluster, period_s, down)

    _later(cluster, 10.0, down)


# ---------------------------------------------------------------------------- systems

def _swim(lifeguard: bool, exclusive: bool = False) -> Callable[[], Any]:
    """SWIM + placement; ``exclusive``: ownership through ``ownership.core`` (handoffs, quorum
    leases, fencing: the node's default and ``placement simulate``'s); otherwise the
    availability-first mode (a node's ``--ownership available``: two owners during splits)."""
    name = ("swim" if lifeguard else "swim-nolifeguard") + ("-exclusive" if exclusive else "")
    config = MembershipConfig(lifeguard=lifeguard)
    rules = ExclusiveConfig() if exclusive else None
    return lambda: SwimSystem(config, name=name, exclusive=rules)


def _lease(name: str) -> Callable[[], Any]:
    def make() -> Any:
        from . import leases  # the baselines
        return leases.SYSTEMS[name]()
    return make


SYSTEMS: dict[str, Callable[[], Any]] = {
    "swim": _swim(True),
    "swim-nolifeguard": _swim(False),
    "swim-exclusive": _swim(True, exclusive=True),
    "eventhubs": _lease("eventhubs"),
    "durabletask": _lease("durabletask"),
    "redis-race": _lease("redis-race"),
}


def make_system(name: str) -> Any:
    try:
        return SYSTEMS[name]()
    except KeyError:
        raise ValueError(f"unknown system {name!r}; choose one of {', '.join(SYSTEMS)}") from None


def run_scenario(name: str, *, nodes: int | None = None, duration_s: float | None = None,
                 seed: int = 1, system: str = "swim", loss: float | None = None,
                 partitions: int = 1024, replicas: int = 1, sample_interval_s: float = 0.5,
                 latency_s: float = 0.0005, jitter_s: float = 0.0005, clock_skew_s: float = 0.0,
                 params: dict[str, Any] | None = None, progress=None,
                 config: MembershipConfig | None = None,
                 before_run: Callable[[Cluster], None] | None = None,
                 check_cores: bool = True, durable_state: bool | str = False, bootstrap: bool = False,
                 rejoin_files: bool = False, exclusive: dict[str, Any] | None = None) -> dict[str, Any]:
    """Build a cluster, settle it, apply scenario ``name`` and return its metrics.
    ``exclusive``: ``ExclusiveConfig`` fields to set (e.g. ``witness_group_members``).
    ``durable_state``: witnesses keep their promises across restarts (``SwimSystem.durable``);
    ``"yields"``: as a node's default record, which yields to another incarnation.
    ``rejoin_files``: restarts rejoin through the members they knew and may found, as nodes
    restarted without ``--join`` (``SwimSystem.rejoin_files``).
    ``bootstrap``: nobody founds the cluster; the first three nodes are the ``--bootstrap`` list
    (README, "Forming a cluster").

    The system's invariants (``simulations.invariants``) are checked after every step and a
    violation raises ``InvariantViolation``; ``check_cores`` (the default: tests, the fuzzer)
    includes every touched membership core's own index check, O(members) per step."""
    try:
        sc = SCENARIOS[name]
    except KeyError:
        raise ValueError(f"unknown scenario {name!r}; `placement simulate --list` lists them") from None
    nodes = nodes or sc.nodes
    duration_s = duration_s if duration_s is not None else sc.duration_s
    unknown = set(params or {}) - set(sc.params)
    if unknown:
        raise ValueError(f"scenario {name!r} has no parameter(s) {sorted(unknown)}; it takes {sc.params}")
    kwargs = {**sc.params, **(params or {})}
    sys_ = make_system(system)
    if config is not None:
        sys_.config = config
    if clock_skew_s:
        if not hasattr(sys_, "clock_skew_s"):
            raise ValueError(f"system {system!r} has no clocks to skew")
        sys_.clock_skew_s = clock_skew_s
    if durable_state:
        if not hasattr(sys_, "durable"):
            raise ValueError(f"system {system!r} has no witnesses to keep state for")
        sys_.durable = {}
        sys_.durable_yields = durable_state == "yields"
    if rejoin_files:
        if getattr(sys_, "exclusive", None) is None:
            raise ValueError(f"system {system!r} has no members files (exclusive ownership only)")
        sys_.rejoin_files = True
    if bootstrap:
        if getattr(sys_, "exclusive", None) is None:
            raise ValueError(f"system {system!r} has no stable views to bootstrap")
        listed = tuple(Cluster.node_id(i) for i in range(min(3, nodes)))
        sys_.exclusive = dataclasses.replace(sys_.exclusive, bootstrap=listed)
    if exclusive:
        if getattr(sys_, "exclusive", None) is None:
            raise ValueError(f"system {system!r} has no exclusive ownership to configure")
        sys_.exclusive = dataclasses.replace(sys_.exclusive, **exclusive)
    if sc.rules is not None and getattr(sys_, "exclusive", None) is not None:
        sys_.exclusive = sc.rules(sys_.exclusive, kwargs)
    if loss is not None and "loss" in kwargs:
        kwargs["loss"] = loss
    network = Network(LinkModel(latency_s, jitter_s, 0.0))
    cluster = Cluster(sys_, seed=seed, partitions=partitions, replicas=replicas, network=network,
                      sample_interval_s=sample_interval_s, check_cores=check_cores)
    cluster.bootstrap(nodes)
    if loss is not None and "loss" not in kwargs:
        cluster.sim.network.default.loss = loss
    sc.fn(cluster, duration_s, **kwargs)
    if before_run is not None:
        before_run(cluster)
    result = cluster.run(duration_s, progress)
    head = {"scenario": name, "system": sys_.name, "nodes": nodes, "seed": seed,
            "partitions": partitions, "replicas": replicas, "params": kwargs,
            "loss": cluster.sim.network.default.loss,
            "lifeguard": getattr(getattr(sys_, "config", None), "lifeguard", None),
            "clock_skew_s": clock_skew_s}
    return {**head, **result}


def describe() -> list[str]:
    """One line per scenario for ``--list``."""
    lines = []
    for sc in SCENARIOS.values():
        extra = " ".join(f"{k}={v}" for k, v in sc.params.items())
        lines.append(f"{sc.name:<16} {sc.help} [default --nodes {sc.nodes} --duration {sc.duration_s:g}"
                     f"{'; ' + extra if extra else ''}]")
    return lines

