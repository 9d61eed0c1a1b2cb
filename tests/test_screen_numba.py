"""The compiled screen (``placement.screen_numba``, the ``fast`` extra) computes exactly what the
numpy screen computes: the k smallest q per row in (q, member index) order and the (k+1)-th q,
bit for bit, against a reference that sorts the whole q matrix. Ranking with it equals the scalar
reference in ``test_rendezvous.py`` and ``test_table.py`` (both run once per screen)."""

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("numba", reason="numba not installed (pip install -e '.[fast]')")

from placement import rendezvous, screen_numba
from placement.hashing import pair_gaps_np, partition_hashes, premix_np
from placement.rendezvous import Members, validate_members


def reference_screen(hp: np.ndarray, ms: Members, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The whole q matrix as numpy computes it (``_top_by_gap_numpy``), stably sorted per row."""
    n = len(ms)
    x, tmp = np.empty((len(hp), n), np.uint64), np.empty((len(hp), n), np.uint64)
    g = pair_gaps_np(premix_np(hp), premix_np(ms.hashes), x, tmp)
    uniform = ms.units.min() == ms.units.max()
    q = g.copy() if uniform else g.astype(np.float32) * (1.0 / ms.units.astype(np.float64)).astype(np.float32)
    order = np.argsort(q, axis=1, kind="stable")  # ties: lower member index first
    top = order[:, :k].astype(np.int32)
    if n == k:
        return top, np.full(len(hp), np.inf)
    q_next = np.take_along_axis(q, order[:, k : k + 1], axis=1)[:, 0].astype(np.float64)
    return top, q_next / float(ms.units[0]) if uniform else q_next


edge_units = st.one_of(
    st.sampled_from([1, 2, 65535, 65536, 65537, 1 << 20, 65536 * 10**6]),
    st.integers(1, 65536 * 10**6),
    st.integers(60000, 70000),
)
edge_hash = st.one_of(st.integers(0, 2**64 - 1), st.sampled_from([0, 1, 2**63, 2**64 - 1]))


@settings(max_examples=120, deadline=None)
@given(st.data(), st.integers(1, 300), st.one_of(st.integers(1, 6), st.integers(7, 32)), st.booleans(),
       st.integers(0, 2**32 - 1))
def test_screen_equals_the_sorted_q_matrix(data, n, k, uniform, seed):
    """Random memberships of 1-300 members (rows padded to a multiple of 128 groups: n below
    and above 128 and 256), k up to ``_MAX_SCREENED_K``, member hashes from a small pool (equal
    q in a row, equal group minima: the index breaks the tie), equal or edge weights (the
    uint32 and the float32 screen)."""
    pool = data.draw(st.lists(edge_hash, min_size=1, max_size=n))
    hashes = data.draw(st.lists(st.sampled_from(pool), min_size=n, max_size=n))
    units = [65536] * n if uniform else data.draw(st.lists(edge_units, min_size=n, max_size=n))
    ms = Members(tuple(f"m{i:03d}" for i in range(n)), np.array(hashes, np.uint64), np.array(units, np.int64))
    k = min(k, n)
    hp = partition_hashes(np.arange(0, 3000, 11), seed)
    top, q_next = screen_numba.top_by_gap(premix_np(hp), premix_np(ms.hashes), ms.units, k)
    want_top, want_next = reference_screen(hp, ms, k)
    assert np.array_equal(top, want_top)
    assert np.array_equal(q_next, want_next)


@pytest.mark.parametrize("k", [1, 3, 32])
@pytest.mark.parametrize("mix", ["equal", "1/2/4", "distinct"])
def test_screen_equals_numpy_at_a_thousand_members(mix, k):
    """The same figures as numpy's own screen (``_top_by_gap_numpy``) at N = 1,000, k up to
    ``_MAX_SCREENED_K``, and as the sorted reference."""
    weights = {
        "equal": lambda i: 1.0, "1/2/4": lambda i: float(1 << (i % 3)), "distinct": lambda i: 1.0 + i / 1000,
    }[mix]
    ms = Members.build(validate_members({f"node-{i:04d}": weights(i) for i in range(1000)}), 9)
    hp = partition_hashes(np.arange(3000), 9)
    got = screen_numba.top_by_gap(premix_np(hp), premix_np(ms.hashes), ms.units, k)
    for want in (rendezvous._top_by_gap_numpy(hp, ms, k), reference_screen(hp, ms, k)):
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


def test_auto_uses_numba_only_for_large_matrices(monkeypatch):
    """Loaded at 2**26 pairs; once loaded, used from 2**20; never when missing or told not to."""
    monkeypatch.setattr(rendezvous, "kernel", "auto")
    monkeypatch.setattr(rendezvous, "_numba_state", "unknown")
    assert rendezvous._numba_screen(rendezvous._NUMBA_MIN_PAIRS - 1) is None
    assert rendezvous._numba_screen(rendezvous._NUMBA_MIN_PAIRS) is screen_numba
    assert rendezvous._numba_state == "loaded"
    assert rendezvous._numba_screen(rendezvous._NUMBA_LOADED_MIN_PAIRS) is screen_numba
    assert rendezvous._numba_screen(rendezvous._NUMBA_LOADED_MIN_PAIRS - 1) is None
    monkeypatch.setattr(rendezvous, "_numba_state", "missing")
    assert rendezvous._numba_screen(1 << 40) is None
    monkeypatch.setattr(rendezvous, "kernel", "numpy")
    monkeypatch.setattr(rendezvous, "_numba_state", "loaded")
    assert rendezvous._numba_screen(1 << 40) is None
    monkeypatch.setattr(rendezvous, "kernel", "numba")
    assert rendezvous._numba_screen(1) is screen_numba
    monkeypatch.setattr(rendezvous, "kernel", "fortran")
    with pytest.raises(ValueError, match="kernel"):
        rendezvous._numba_screen(1)


def test_small_tables_do_not_import_numba():
    """A node's table (or a test's) stays below the threshold: numba is never loaded for it."""
    code = ("import sys; from placement import PlacementTable; "
            "PlacementTable.build({f'n{i}': 1.0 + i for i in range(200)}, partitions=65536, replicas=3); "
            "print('numba' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False"]


_FORK_CHECK = """
import multiprocessing, threading
import numpy as np
from placement import PlacementTable, rendezvous

def build(_=None):
    rendezvous.kernel = "numba"
    return PlacementTable.build({f"n{i}": 1.0 + i / 7 for i in range(300)}, partitions=2048, replicas=2)._owner_idx

if __name__ == "__main__":
    want = build()
    got = []
    threads = [threading.Thread(target=lambda: got.append(build())) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 3 and all(np.array_equal(g, want) for g in got), "threads"
    with multiprocessing.get_context("fork").Pool(2) as pool:
        children = pool.map_async(build, range(2), chunksize=1).get(timeout=60)  # GNU OpenMP: hangs
    assert all(np.array_equal(c, want) for c in children), "forked children"
    print("ok")
"""


def test_threads_and_forked_children_get_the_same_table(tmp_path):
    """Calls are serialised (the workqueue layer is not re-entrant), and the threading layer is a
    fork-safe one: a child forked after the parent ran the kernel runs it again (as a Spark
    Python worker forked from its daemon would). In a fresh interpreter: forking the test
    process itself, with other tests' threads alive, once left a child stuck on a lock."""
    script = tmp_path / "fork_check.py"
    script.write_text(_FORK_CHECK)
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0 and r.stdout.split() == ["ok"], r.stderr[-2000:]
