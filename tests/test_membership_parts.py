"""Unit tests of the small pure parts: suspicion timeout, awareness, broadcast queue, config."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from membership import MembershipConfig
from membership.awareness import Awareness
from membership.queue import BroadcastQueue
from membership.suspicion import Suspicion, suspicion_timeout


def test_suspicion_timeout_formula_falls_from_max_to_min():
    # Lifeguard IV-B: max - (max - min) * log(c + 1) / log(k + 1)
    assert suspicion_timeout(0, 3, 2.0, 12.0) == 12.0
    assert suspicion_timeout(1, 3, 2.0, 12.0) == pytest.approx(12.0 - 10.0 * math.log(2) / math.log(4))
    assert suspicion_timeout(3, 3, 2.0, 12.0) == pytest.approx(2.0)
    assert suspicion_timeout(9, 3, 2.0, 12.0) == 2.0
    assert suspicion_timeout(0, 0, 2.0, 12.0) == 2.0
    timeouts = [suspicion_timeout(c, 5, 1.0, 6.0) for c in range(7)]
    assert timeouts == sorted(timeouts, reverse=True)


def test_suspicion_counts_only_new_independent_accusers():
    s = Suspicion(incarnation=1, accuser="a", start=10.0, k=2, min_s=1.0, max_s=5.0)
    assert s.deadline == 15.0
    assert not s.confirm("a")
    assert s.confirm("b") and not s.confirm("b")
    assert s.confirm("c")
    assert s.deadline == pytest.approx(11.0)
    assert not s.confirm("d")  # k reached: nothing more to gain
    assert s.confirmations == 2


def test_awareness_saturates_and_scales():
    a = Awareness(max_multiplier=3)
    a.apply(-1)
    assert a.score == 0
    a.apply(10)
    assert a.score == 2 and a.scale(0.5) == 1.5
    off = Awareness(max_multiplier=3, enabled=False)
    off.apply(5)
    assert off.score == 0


def test_queue_sends_least_sent_newest_first_within_budget_and_limit():
    q = BroadcastQueue()
    q.push("a", b"A" * 10)
    q.push("b", b"B" * 10)
    assert q.take(15, limit=2) == [b"B" * 10]  # newest first, only one fits
    assert q.take(100, limit=2) == [b"A" * 10, b"B" * 10]  # A sent 0 times, B once
    assert q.take(100, limit=2) == [b"A" * 10]  # B hit the limit and was dropped
    assert len(q) == 0


def test_queue_newer_update_replaces_older_with_a_fresh_budget():
    q = BroadcastQueue()
    q.push("a", b"old")
    q.take(100, limit=3)
    assert q.transmits("a") == 1
    q.push("a", b"new")
    assert q.transmits("a") == 0
    assert q.take(100, limit=3) == [b"new"]


def test_queue_fresh_follows_each_updates_push_budget():
    q = BroadcastQueue()
    q.push("a", b"A", push_below=1)
    q.push("b", b"B", push_below=2)
    assert q.fresh()
    q.take(100, limit=5)
    assert q.fresh() and q.fresh(below=2) and not q.fresh(below=1)
    q.take(100, limit=5)
    assert not q.fresh() and q.fresh(below=3)  # a leaving member pushes everything


def _reference_take(items: dict, budget: int, limit: int) -> list[bytes]:
    """The queue's rule spelled out: sort every time, least sent then newest first."""
    chosen = []
    for key, it in sorted(items.items(), key=lambda kv: (kv[1]["transmits"], -kv[1]["order"])):
        if len(it["blob"]) > budget:
            continue
        budget -= len(it["blob"])
        chosen.append(it["blob"])
        it["transmits"] += 1
        if it["transmits"] >= limit:
            del items[key]
    return chosen


@given(st.lists(st.one_of(
    st.tuples(st.just("push"), st.sampled_from("abcdefgh"), st.integers(1, 40)),
    st.tuples(st.just("take"), st.integers(0, 120), st.integers(1, 5))), max_size=60))
def test_queue_keeps_its_order_between_takes_exactly_as_a_fresh_sort_would(ops):
    q, ref, order = BroadcastQueue(), {}, 0
    for op, a, b in ops:
        if op == "push":
            order += 1
            blob = f"{a}{order}".encode().ljust(b, b".")
            q.push(a, blob)
            ref[a] = {"blob": blob, "transmits": 0, "order": order}
        else:
            assert q.take(a, b) == _reference_take(ref, a, b)
        assert sorted(q) == sorted(ref)


@pytest.mark.parametrize("seed", range(6))
def test_a_long_queue_keeps_the_same_order_as_a_fresh_sort(seed):
    """Queues longer than the heap threshold (a bootstrap queues news of every member) take
    through a heap kept between takes; they must hand out what a sort would, also across
    growing past the threshold and shrinking below it again."""
    rng = random.Random(seed)
    q, ref, order = BroadcastQueue(), {}, 0
    keys = [f"k{i}" for i in range(300)]
    for step in range(3000):
        op = rng.random()
        if op < (0.7 if step % 1000 < 500 else 0.2):  # grow, then shrink, three times
            key, order = rng.choice(keys), order + 1
            blob = f"{key}/{order}".encode().ljust(rng.randint(1, 60), b".")
            q.push(key, blob)
            ref[key] = {"blob": blob, "transmits": 0, "order": order}
        elif op < 0.55:  # a newer update about a queued member replaces it
            key = rng.choice(keys)
            if key in ref:
                order += 1
                blob = f"{key}r{order}".encode().ljust(rng.randint(1, 60), b".")
                q.push(key, blob)
                ref[key] = {"blob": blob, "transmits": 0, "order": order}
        else:
            budget, limit = rng.randint(0, 300), rng.randint(2, 12)
            assert q.take(budget, limit) == _reference_take(ref, budget, limit)
        assert sorted(q) == sorted(ref)


@given(st.integers(0, 300), st.integers(0, 7), st.integers(0, 2**32))
def test_core_sample_draws_exactly_what_random_sample_draws(n, k, seed):
    from membership.sampling import sample as _sample
    k = min(k, n)
    a, b = random.Random(seed), random.Random(seed)
    population = [f"m{i}" for i in range(n)]
    assert _sample(a, population, k) == b.sample(population, k)
    assert a.random() == b.random()  # and leaves the generator in the same state


def test_config_derived_values_and_validation():
    cfg = MembershipConfig()
    assert cfg.retransmit_limit(256) == 4 * 3
    assert cfg.suspicion_min_s(256) == pytest.approx(1.25 * math.log10(256))  # 3.01 s
    assert cfg.suspicion_min_s(16) == 3.0  # the floor
    assert MembershipConfig(suspicion_min_floor_s=0).suspicion_min_s(3) == pytest.approx(1.25)
    assert cfg.suspicion_max_s(256) == pytest.approx(6 * cfg.suspicion_min_s(256))
    with pytest.raises(ValueError):
        MembershipConfig(probe_timeout_s=2.0)
    with pytest.raises(ValueError):
        MembershipConfig(keys=(b"short",))


def test_the_core_modules_import_no_io_clock_or_threads():
    import ast
    import pathlib

    import membership

    forbidden = {"asyncio", "socket", "time", "threading", "selectors"}
    package = pathlib.Path(membership.__file__).parent
    for path in package.glob("*.py"):
        if path.name in ("aio.py", "udp.py"):  # the driver and its socket are the one place for I/O
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module.split(".")[0]]
            assert not forbidden & set(names), f"{path.name} imports {names}"
            # random is allowed only as a type: no module-level random.<function>() calls
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "random":
                raise AssertionError(f"{path.name} calls random.{node.func.attr}()")


def test_meta_is_immutable_and_hashable():
    from membership import Meta

    tags = {"zone": "a"}
    meta = Meta(weight=2, http="http://h:1", tags=tags)
    tags["zone"] = "b"  # the caller's dict is copied
    assert meta.tags["zone"] == "a" and meta.weight == 2.0
    with pytest.raises(TypeError):
        meta.tags["zone"] = "c"  # type: ignore[index]
    assert meta == Meta(weight=2.0, http="http://h:1", tags={"zone": "a"})
    assert hash(meta) == hash(Meta(weight=2.0, http="http://h:1", tags={"zone": "a"}))
    with pytest.raises(ValueError):
        Meta(weight=float("nan"))
    import pickle

    assert pickle.loads(pickle.dumps(meta)) == meta


def test_values_receivers_would_drop_are_refused_up_front():
    import random

    from membership import Meta, Swim

    cfg = MembershipConfig()
    ok: dict[str, Any] = dict(rng=random.Random(0), now=0.0)
    with pytest.raises(ValueError, match="dropped by every receiver"):
        Swim(cfg, "x" * 200, ("10.0.0.1", 1), **ok)
    with pytest.raises(ValueError, match="dropped by every receiver"):
        Swim(cfg, "n1", ("10.0.0.1", 1), meta=Meta(tags={str(i): "" for i in range(65)}), **ok)
    with pytest.raises(ValueError):
        MembershipConfig(cluster_name="")
    core = Swim(cfg, "n1", ("10.0.0.1", 1), **ok)
    with pytest.raises(ValueError):
        core.update_meta(Meta(tags={str(i): "" for i in range(65)}), 0.0)
