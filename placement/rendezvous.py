"""Weighted rendezvous (highest-random-weight) ranking: who holds partition p.

Members of partition p are ranked by the total order

    (draw asc, H desc, member id asc)      draw = (L << 26) // W

where H = pair_hash(p, m) (64 bits), L = -log2(u) in 32.32 fixed point (``hashing``) and
W = the weight in units of 1/65536 (``weight_units``). ``draw`` is the integer form of the
logarithmic method's score -ln(u)/w (Schindelhauer & Schomaker 2005; Ceph straw2 divides
its integer ln by the weight the same way), so a member wins with probability w / sum(w).
The top ``replicas`` members form the replica set, leader first. Everything is integer
arithmetic, so the order is bit-identical on every machine, whatever the member order.

Two implementations share that definition:

* ``rank_one`` - the scalar reference: score every member with Python ints and sort.
* ``rank_many`` - the vectorised path, for any weights (equal, a few classes, or every
  one different as load- or capacity-derived weights are). Every (partition, member) pair
  is screened with a cheap *lower bound* of its draw: the high 32 bits G of 2**64 - H
  (``hashing.pair_gaps_np``: three multiply/shift passes, no logarithm) over W, in
  float32 (or G alone as uint32 when all weights are equal), and the k+1 smallest per
  partition are kept. The k best are scored exactly; if the largest exact draw among
  them is below the bound of the (k+1)-th, no other member can enter the top k, and the
  order inside it is the exact integer one. Otherwise (a near tie: ~0.05 % of partitions
  at N = 1,000 with k = 1, more for small N) the partition is re-ranked from a wider
  candidate set chosen with float64 logarithms, as is every partition when k is large.
  Floats only ever *exclude* members, with a proven margin; the decision stays integer.
  The screen - the only part that touches every pair - has a compiled twin
  (``screen_numba``, the optional ``fast`` extra) that computes the same figures in one
  pass per row; ``kernel`` chooses between them.

``tests/test_rendezvous.py`` checks every path against ``rank_one`` with property tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np

from .errors import InvalidMembershipError
from .hashing import (
    fmix64_np,
    member_hash,
    neg_log2_fp,
    neg_log2_fp_np,
    pair_gaps_np,
    pair_hash,
    partition_hash,
    partition_hashes,
    premix_np,
)

WEIGHT_SCALE: Final = 1 << 16  # weights are quantised to 1/65536
MAX_WEIGHT: Final = 1_000_000.0
DRAW_SHIFT: Final = 26  # L < 2**38, so L << 26 fits in 64 bits
_BLOCK_ELEMS: Final = 1 << 16  # ~512 KiB of uint64 per block: stays in L2
_MAX_SCREENED_K: Final = 32  # beyond this k, repeated argmin costs more than float64 logs
_NO_DRAW: Final = np.uint64((1 << 64) - 1)  # above any real draw: L << 26 leaves 26 zero bits
_PRUNE_REL: Final = 1e-5  # relative slack of the float pre-selection (true error < 1e-6)
_LN2: Final = 0.6931471805599453


def weight_units(member_id: str, weight: float) -> int:
    """Quantise a weight to an integer number of 1/65536 units, validating it.

    Quantising makes the score integer arithmetic (and the checksum exact); the rounding
    is IEEE-exact because 65536 is a power of two.
    """
    if isinstance(weight, bool) or not isinstance(weight, (int, float)):
        raise InvalidMembershipError(f"weight of member {member_id!r} must be a number, got {weight!r}")
    w = float(weight)
    if w != w or w in (float("inf"), float("-inf")):
        raise InvalidMembershipError(f"weight of member {member_id!r} must be finite, got {weight!r}")
    if w < 0:
        raise InvalidMembershipError(f"weight of member {member_id!r} must be >= 0, got {weight!r}")
    if w > MAX_WEIGHT:
        raise InvalidMembershipError(
            f"weight of member {member_id!r} is {weight!r}; the maximum is {MAX_WEIGHT:g} (scale weights down)"
        )
    units = round(w * WEIGHT_SCALE)
    if w > 0 and units == 0:
        raise InvalidMembershipError(
            f"weight of member {member_id!r} is {weight!r}; the smallest positive weight is 1/{WEIGHT_SCALE}"
        )
    return units


def draw_of(h: int, units: int) -> int:
    """Integer score of one (partition, member) pair; lower wins."""
    return (neg_log2_fp(h) << DRAW_SHIFT) // units


def draws_np(h: np.ndarray, units: np.ndarray) -> np.ndarray:
    return (neg_log2_fp_np(h) << np.uint64(DRAW_SHIFT)) // units.astype(np.uint64)


@dataclass(frozen=True)
class Members:
    """Ranking inputs for a membership: ids sorted ascending, their hashes and weight units.

    Only members with positive weight take part in ranking; index i refers to ``ids[i]``.
    """

    ids: tuple[str, ...]
    hashes: np.ndarray  # uint64, member_hash(id, seed)
    units: np.ndarray  # int64, weight units (> 0)

    @classmethod
    def build(cls, weights: dict[str, int], seed: int) -> Members:
        ids = tuple(sorted(m for m, u in weights.items() if u > 0))
        hashes = np.array([member_hash(m, seed) for m in ids], dtype=np.uint64)
        units = np.array([weights[m] for m in ids], dtype=np.int64)
        return cls(ids, hashes, units)

    def __len__(self) -> int:
        return len(self.ids)


def rank_one(p: int, members: Members, seed: int, k: int) -> tuple[int, ...]:
    """Scalar reference: indices of the top-k members of partition p, leader first."""
    hp = partition_hash(p, seed)
    keyed = []
    for i, (hm, units) in enumerate(zip(members.hashes.tolist(), members.units.tolist())):
        h = pair_hash(hp, hm)
        keyed.append((draw_of(h, units), -h, i))
    keyed.sort()
    return tuple(i for _, _, i in keyed[:k])


@dataclass
class Ranked:
    """Top-k of many partitions: member index, H and draw per slot, each shape (P, k)."""

    idx: np.ndarray  # int32
    h: np.ndarray  # uint64
    draw: np.ndarray  # uint64


def _select(cand_idx: np.ndarray, cand_h: np.ndarray, cand_draw: np.ndarray, k: int) -> Ranked:
    """Order each row's candidates by (draw, -H, idx) and keep the first k.

    Rows whose draws already ascend strictly need no sort: with distinct draws the order is
    the draw order. The screen's rows almost all do (it lists candidates by q, which orders
    nearly as the draw does), and a per-row argsort of a million short rows costs more than
    the check. The rest get an argsort on draw; rows where two of the first k+1 draws are
    equal (rare) are re-sorted with the full key. The result may share (and the sort may
    write into) the arguments' memory: callers pass scratch they no longer need.
    """
    if cand_draw.shape[1] == k:
        ranked = Ranked(cand_idx.astype(np.int32, copy=False), cand_h, cand_draw)
    else:
        ranked = Ranked(cand_idx[:, :k].astype(np.int32), cand_h[:, :k].copy(), cand_draw[:, :k].copy())
    if cand_draw.shape[1] < 2:
        return ranked
    rows = np.flatnonzero((cand_draw[:, :-1] >= cand_draw[:, 1:]).any(axis=1))
    if not len(rows):
        return ranked
    idx, h, draw = cand_idx[rows], cand_h[rows], cand_draw[rows]  # copies: ranked may share the rest
    order = np.argsort(draw, axis=1, kind="stable")
    sd = np.take_along_axis(draw, order, axis=1)
    span = min(k + 1, sd.shape[1])
    for r in np.flatnonzero((sd[:, : span - 1] == sd[:, 1:span]).any(axis=1)).tolist():
        order[r] = np.lexsort((idx[r], ~h[r], draw[r]))
    top = order[:, :k]
    ranked.idx[rows] = np.take_along_axis(idx, top, axis=1)
    ranked.h[rows] = np.take_along_axis(h, top, axis=1)
    ranked.draw[rows] = np.take_along_axis(draw, top, axis=1)
    return ranked


def rank_many(partitions: np.ndarray, members: Members, seed: int, k: int) -> Ranked:
    """Vectorised ranking of the given partitions; equal to ``rank_one`` row by row."""
    k = min(k, len(members))
    rows = len(partitions)
    if k == 0:
        empty = np.empty((rows, 0), dtype=np.uint64)
        return Ranked(np.empty((rows, 0), dtype=np.int32), empty, empty.copy())
    hp = partition_hashes(partitions, seed)
    units = members.units
    if k > _MAX_SCREENED_K:
        return _rank_candidates(*_candidates_float_pruned(hp, members, k), units, k)
    ranked, unsure = _rank_by_gap(hp, members, k)
    if len(unsure):
        again = _rank_candidates(*_candidates_float_pruned(hp[unsure], members, k), units, k)
        ranked.idx[unsure], ranked.h[unsure], ranked.draw[unsure] = again.idx, again.h, again.draw
    return ranked


def _rank_candidates(cand_idx: np.ndarray, cand_h: np.ndarray, units: np.ndarray, k: int) -> Ranked:
    """Exact draws of candidate sets (member index -1: padding) and their top k."""
    cand_draw = draws_np(cand_h, units[cand_idx])
    cand_draw[cand_idx < 0] = _NO_DRAW  # padding of the pruned path never wins
    return _select(cand_idx, cand_h, cand_draw, k)


def surely_above(q: np.ndarray, w_min: float, draws: np.ndarray) -> np.ndarray:
    """Does every member whose screen value G/W is at least q draw strictly more than ``draws``?

    Bound, for a member j with G_j/W_j >= q(1-e) (G from ``hashing.pair_gaps_np``, or
    exactly (2**64 - 1 - H) >> 32; W in weight units; e covers float rounding: three
    float32 roundings are 3 * 2**-24): G_j >= q(1-e) W_min, so d_j = 1 - u_j >= (G_j - 1)/2**32
    >= dm with dm = (q(1-e) W_min - 1)/2**32 (``hashing.pair_gaps_np``). Since -ln(1-d) >=
    d (1 + d/2), and L (``neg_log2_fp``) is within 1e-7 relative and 2**-30 absolute of
    -log2(u) (tests/test_hashing.py), the exact draw D = (L << 26) // W satisfies

        D_j >= 2**26/ln2 * q(1-e)(1-1e-7)(1 + dm/2) - 2**26 (1.5/ln2 + 4)/W_min - 1.

    ``floor`` takes 10x slack on the relative terms (and 7 for the 6.2), and a draw counts
    as below it only with that slack too. q = +inf (no such member) is always above.
    """
    q = q * (1 - _PRUNE_REL)
    floor = q * w_min  # in place from here: this runs on a million rows per join
    floor -= 1
    np.maximum(floor, 0, out=floor)
    floor *= 2.0**-33
    floor += 1  # 1 + dm/2
    floor *= q
    floor *= 2.0**DRAW_SHIFT / _LN2
    floor -= 2.0**DRAW_SHIFT * 7 / w_min + 2
    d = draws.astype(np.float64)
    d *= 1 + _PRUNE_REL
    return d < floor


def _rank_by_gap(hp: np.ndarray, members: Members, k: int) -> tuple[Ranked, np.ndarray]:
    """Top-k of every row where the screen proves it, and the rows where it does not.

    The top k by q (``_top_by_gap``) are scored exactly; a row is sure when every member
    outside them - all have q at least the (k+1)-th smallest - draws strictly more than the
    k-th exact draw (``surely_above``): no tie-break involved, so the exact order of the k
    is the answer.
    """
    top, q_next = _top_by_gap(hp, members, k)
    units = members.units
    cand_h = fmix64_np(hp[:, None] ^ members.hashes[top])
    cand_draw = np.empty_like(cand_h)
    step = max(1, _BLOCK_ELEMS // k)  # in chunks: the logarithm's temporaries stay small
    for start in range(0, len(hp), step):
        rows = slice(start, start + step)
        cand_draw[rows] = draws_np(cand_h[rows], units[top[rows]])
    ranked = _select(top, cand_h, cand_draw, k)
    unsure = np.flatnonzero(~surely_above(q_next, float(units.min()), ranked.draw[:, -1]))
    return ranked, unsure


def _top_by_gap(hp: np.ndarray, members: Members, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the k members of smallest q = G/W (ties: lower index first) and the (k+1)-th
    smallest q (float64): compiled (``screen_numba``) where ``kernel`` allows, else numpy."""
    fast = _numba_screen(len(hp) * len(members))
    if fast is not None:
        return fast.top_by_gap(premix_np(hp), premix_np(members.hashes), members.units, k)
    return _top_by_gap_numpy(hp, members, k)


def _top_by_gap_numpy(hp: np.ndarray, members: Members, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``_top_by_gap`` in numpy: the reference for the compiled screen, and its fallback.

    q is float32(G) * float32(1/W); with one weight for all it is G itself, kept as uint32
    (the same order, without a conversion pass). Blocks of rows keep the scratch matrices
    in cache; a row's k+1 smallest come from repeated argmin with the found entry masked
    (cheaper than a partition for small k). With exactly k members the next q is +inf:
    every member is in the top k. A uint32 mask equals a genuine G of 2**32 - 1 (u < 2**-32),
    so once argmin finds that value it may be a masked entry found again: such a row's next
    q is reported as 0, which makes it unsure (``_rank_by_gap``).
    """
    rows, n = len(hp), len(members)
    row_mix, col_mix = premix_np(hp), premix_np(members.hashes)
    uniform = members.units.min() == members.units.max()
    inv_w = (1.0 / members.units.astype(np.float64)).astype(np.float32)
    masked = np.iinfo(np.uint32).max if uniform else np.inf
    block = max(1, _BLOCK_ELEMS // n)
    x = np.empty((min(block, rows), n), dtype=np.uint64)
    tmp = np.empty_like(x)
    q: np.ndarray = np.empty(x.shape, dtype=np.uint32 if uniform else np.float32)  # dtype chosen at run time
    top = np.empty((rows, k), dtype=np.int32)
    q_next = np.full(rows, np.inf)
    for start in range(0, rows, block):
        stop = min(rows, start + block)
        m = stop - start
        qb = q[:m]
        np.copyto(qb, pair_gaps_np(row_mix[start:stop], col_mix, x[:m], tmp[:m]), casting="unsafe")
        if not uniform:
            qb *= inv_w
        ar = np.arange(m)
        clash = np.zeros(m, dtype=bool)
        for j in range(k):
            col = qb.argmin(axis=1)
            top[start:stop, j] = col
            if uniform:
                clash |= qb[ar, col] == masked
            qb[ar, col] = masked
        if n > k:
            q_next[start:stop] = qb.min(axis=1)
        q_next[start:stop][clash] = 0
    if uniform:
        q_next /= float(members.units[0])
    return top, q_next


# Which screen ``_top_by_gap`` runs: "numpy"; "numba" (``screen_numba``; ImportError without
# numba); or "auto": numba when it is installed and the matrix has at least _NUMBA_MIN_PAIRS
# pairs. Its first call in a process costs ~0.4-0.7 s (import, cache load: BENCHMARKS.md), so
# it is loaded only where a numpy build takes a quarter second or more (65,536 x 1,024), and
# small tables - tests, a node's start - never import it; once loaded, it also takes calls
# from _NUMBA_LOADED_MIN_PAIRS on (a leave re-ranking 2,700 rows of 2,000 members: half the
# CPU time of numpy).
KERNELS: Final = ("auto", "numpy", "numba")
kernel = "auto"
_NUMBA_MIN_PAIRS: Final = 1 << 26
_NUMBA_LOADED_MIN_PAIRS: Final = 1 << 20
_numba_state = "unknown"  # "loaded" or "missing" after the first attempt


def _numba_screen(pairs: int):
    """The ``screen_numba`` module if this call should use it, else None."""
    global _numba_state
    if kernel == "numpy":
        return None
    if kernel == "auto":
        least = _NUMBA_LOADED_MIN_PAIRS if _numba_state == "loaded" else _NUMBA_MIN_PAIRS
        if pairs < least or _numba_state == "missing":
            return None
    elif kernel != "numba":
        raise ValueError(f"rendezvous.kernel must be one of {KERNELS}, got {kernel!r}")
    try:
        from . import screen_numba
    except ImportError:
        if kernel == "numba":
            raise
        _numba_state = "missing"
        return None
    _numba_state = "loaded"
    return screen_numba


def _candidates_float_pruned(hp: np.ndarray, members: Members, k: int) -> tuple[np.ndarray, np.ndarray]:
    """A superset of each row's top-k chosen with float scores, padded to equal width.

    Floats only *choose candidates*; the order is decided by the exact integer draw. The
    integer draw D and the float score s = -log2(u)/W satisfy |D/2**58 - s| <= eps*s + a
    (eps: fixed-point and libm relative error, < 1e-6; a: truncation, <= 2**-30/W + 2**-58).
    If s* is a row's k-th smallest float score, k members have D <= 2**58*(s*(1+eps) + a),
    so every exact top-k member has s <= (s*(1+eps) + 2a)/(1-eps): the threshold below,
    with 10x margin on both terms. Padding slots have member index -1.
    """
    rows, n = len(hp), len(members)
    eps, a = _PRUNE_REL, 2.0**-26 / float(members.units.min())
    inv_w = 1.0 / members.units.astype(np.float64)
    block = max(1, _BLOCK_ELEMS // n)
    found_r, found_c, found_h = [], [], []
    x = np.empty((min(block, rows), n), dtype=np.uint64)
    tmp = np.empty_like(x)
    for start in range(0, rows, block):
        stop = min(rows, start + block)
        xb = x[: stop - start]
        np.bitwise_xor(hp[start:stop, None], members.hashes[None, :], out=xb)
        fmix64_np(xb, tmp[: stop - start])
        s = -np.log2(((xb >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0**-53) * inv_w
        kth = np.partition(s, k - 1, axis=1)[:, k - 1 : k]
        r, c = np.nonzero(s <= (kth * (1 + eps) + 2 * a) / (1 - eps))
        found_r.append(r + start)
        found_c.append(c)
        found_h.append(xb[r, c])
    r, c, h = np.concatenate(found_r), np.concatenate(found_c), np.concatenate(found_h)
    width = int(np.bincount(r, minlength=rows).max())
    slot = np.arange(len(r)) - np.searchsorted(r, r)  # position within its row (r is sorted)
    cand_idx = np.full((rows, width), -1, dtype=np.int32)
    cand_h = np.zeros((rows, width), dtype=np.uint64)
    cand_idx[r, slot], cand_h[r, slot] = c, h
    return cand_idx, cand_h


def validate_members(weights: object) -> dict[str, int]:
    """Check members - a {id: weight} mapping or (id, weight) pairs - and return {id: units}."""
    if isinstance(weights, dict):
        pairs = list(weights.items())
    elif isinstance(weights, (list, tuple)) and all(isinstance(x, (list, tuple)) and len(x) == 2 for x in weights):
        pairs = [tuple(x) for x in weights]
    else:
        raise InvalidMembershipError(
            f"members must be a dict of id -> weight or a list of (id, weight) pairs, got {type(weights).__name__}"
        )
    out: dict[str, int] = {}
    for member_id, weight in pairs:
        if not isinstance(member_id, str) or not member_id:
            raise InvalidMembershipError(f"member ids must be non-empty strings, got {member_id!r}")
        if member_id in out:
            raise InvalidMembershipError(f"member id {member_id!r} appears more than once")
        if member_id != member_id.strip() or not member_id.isprintable():
            raise InvalidMembershipError(f"member id {member_id!r} has surrounding spaces or unprintable characters")
        out[member_id] = weight_units(member_id, weight)
    return out
