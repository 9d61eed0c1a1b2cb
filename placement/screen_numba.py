"""The screen of ``rendezvous._top_by_gap`` as one compiled pass per row (optional: numba).

Why: the screen touches every (partition, member) pair - 2.1e9 at P = 2**20, N = 2,000 - and
numpy needs six passes over a row block (XOR, multiply, shift, XOR, multiply, float scale)
plus k+1 argmin passes, ~3 ns per pair. Here one loop per row hashes the row into an L1
buffer (LLVM vectorises it: 64-bit multiplies are single AVX-512 instructions where the CPU
has them), takes the minimum of each of 128 interleaved groups of the row (also vectorised),
finds the (k+1)-th smallest group minimum m in a few vectorised passes, and picks the k+1
smallest values only among the elements <= m of groups whose minimum is <= m: k+1 elements
are <= m (one per such group), so each of the k+1 smallest is too, and so is its group's
minimum. Rows are split over threads (``prange``).

It computes exactly what the numpy screen computes (``tests/test_screen_numba.py`` compares
them bit for bit): the same q = G (equal weights, uint32) or float32(G) * float32(1/W)
(IEEE products, no fast-math), and the k smallest in (q, member index) order - the order
repeated argmin yields. Non-negative float32 values order as their uint32 bit patterns, so
both cases compare integers. The exact decision stays with the caller (integer draws).

Imported lazily, at the first build large enough to use it (``rendezvous._numba_screen``): a
node serving a small table never loads numba. Compiled code is cached on disk
(``cache=True``: ``__pycache__`` beside this file, or numba's user cache directory when that
is read-only), so only the first process on a machine pays the compile (BENCHMARKS.md).
"""

from __future__ import annotations

import os
import threading

import numpy as np

# GNU OpenMP, numba's default layer when libgomp is found, hangs a forked child that runs a
# parallel kernel after its parent did (seen here; Spark forks its Python workers). "forksafe" picks TBB
# if installed, else numba's own workqueue; an explicit NUMBA_THREADING_LAYER is respected. (The
# layer is chosen once per process: if the application ran a parallel numba function first,
# its layer stays.)
if "NUMBA_THREADING_LAYER" not in os.environ:
    import numba

    # numba.config creates its settings at import, from the environment: mypy sees none of them.
    numba.config.THREADING_LAYER = "forksafe"  # type: ignore[attr-defined]

from numba import njit, prange

from .hashing import _C1, _NEG_C2

GROUPS = 128  # interleaved groups per row (64 and 256: 5-15 % slower at N = 1,000-2,000, serial A/B)
_BLOCK_ROWS = 256  # rows per parallel task: enough work to amortise the task's scratch
_MAX_U32 = np.uint32(0xFFFFFFFF)
_C1_U = np.uint64(_C1)
_NEG_C2_U = np.uint64(_NEG_C2)

# The workqueue layer must not be entered by two threads at once (numba's threading-layer
# docs); nodes build tables from more than one thread, so calls are serialised.
_lock = threading.Lock()


@njit(inline="always")
def _insert(best_q, best_i, count, k, v, j):  # pragma: no cover - compiled
    """Insert (v, j) into the sorted first ``count`` (<= k+1) slots, keeping k+1 at most."""
    pos = min(count, k)
    while pos > 0 and (best_q[pos - 1] > v or (best_q[pos - 1] == v and best_i[pos - 1] > j)):
        if pos <= k:
            best_q[pos] = best_q[pos - 1]
            best_i[pos] = best_i[pos - 1]
        pos -= 1
    best_q[pos] = v
    best_i[pos] = j
    return min(count + 1, k + 1)


@njit(parallel=True, cache=True)
def _screen(row_mix, col_mix, inv_w, uniform, n, top, q_next):  # pragma: no cover - compiled
    """Per row: the k members of smallest q (ties: lower index) into ``top`` (rows, k), and the
    (k+1)-th q's bits into ``q_next`` (outputs come from the caller, so tracemalloc sees them).

    ``col_mix`` and ``inv_w`` are padded to a multiple of GROUPS (padding's q is 2**32 - 1,
    above every real q or equal to it with a higher index); n is the real member count.
    """
    rows = row_mix.shape[0]
    width = col_mix.shape[0]
    k = top.shape[1]
    for b in prange((rows + _BLOCK_ROWS - 1) // _BLOCK_ROWS):
        qf = np.empty(width, np.float32)
        q = qf.view(np.uint32)
        q[n:] = _MAX_U32
        grid = q.reshape((width // GROUPS, GROUPS))  # element j is in group j % GROUPS
        mins = np.empty(GROUPS, np.uint32)
        best_q = np.empty(k + 1, np.uint32)
        best_i = np.empty(k + 1, np.int32)
        for r in range(b * _BLOCK_ROWS, min(rows, (b + 1) * _BLOCK_ROWS)):
            rm = row_mix[r]
            if uniform:  # hashing.pair_gaps_np, fused: G = high half of -C2 * xorshift33(C1 * x)
                for j in range(n):
                    x = (rm ^ col_mix[j]) * _C1_U
                    x = (x ^ (x >> np.uint64(33))) * _NEG_C2_U
                    q[j] = np.uint32(x >> np.uint64(32))
            else:
                for j in range(n):
                    x = (rm ^ col_mix[j]) * _C1_U
                    x = (x ^ (x >> np.uint64(33))) * _NEG_C2_U
                    qf[j] = np.float32(np.uint32(x >> np.uint64(32))) * inv_w[j]
            for t in range(GROUPS):
                mins[t] = grid[0, t]
            for c in range(1, grid.shape[0]):
                for t in range(GROUPS):
                    mins[t] = min(mins[t], grid[c, t])
            # limit = the (k+1)-th smallest group minimum, by vectorised passes over the
            # minima (distinct values ascending, counting repeats) - no data-dependent branches
            # per minimum, unlike an insertion
            limit = _MAX_U32
            below = np.uint32(0)  # values <= below are counted already
            need = k + 1
            first = True
            while need > 0:
                m = _MAX_U32
                for t in range(GROUPS):
                    v = mins[t]
                    m = min(m, v if (first or v > below) else _MAX_U32)
                c = 0
                for t in range(GROUPS):
                    c += mins[t] == m
                need -= c
                limit = below = m
                first = False
            count = 0
            for t in range(GROUPS):
                if mins[t] <= limit:
                    for j in range(t, width, GROUPS):
                        v = q[j]
                        if v <= limit and (count <= k or v < best_q[k] or (v == best_q[k] and j < best_i[k])):
                            count = _insert(best_q, best_i, count, k, v, j)
            for t in range(k):
                top[r, t] = best_i[t]
            q_next[r] = best_q[k]


def top_by_gap(row_mix: np.ndarray, col_mix: np.ndarray, units: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``rendezvous._top_by_gap`` from premixed rows and columns: (top (rows, k) int32, q_next).

    Requires 1 <= k <= 32 (``rendezvous._MAX_SCREENED_K``) and k <= the member count.
    """
    n = len(col_mix)
    uniform = bool(units.min() == units.max())
    width = -(-n // GROUPS) * GROUPS
    cols = np.zeros(width, dtype=np.uint64)
    cols[:n] = col_mix
    inv_w = np.zeros(width, dtype=np.float32)
    inv_w[:n] = (1.0 / units.astype(np.float64)).astype(np.float32)
    top = np.empty((len(row_mix), k), dtype=np.int32)
    bits = np.empty(len(row_mix), dtype=np.uint32)
    with _lock:
        _screen(np.ascontiguousarray(row_mix, dtype=np.uint64), cols, inv_w, uniform, n, top, bits)
    if n == k:
        q_next = np.full(len(row_mix), np.inf)
    elif uniform:
        q_next = bits / float(units[0])
    else:
        q_next = bits.view(np.float32).astype(np.float64)
    return top, q_next
