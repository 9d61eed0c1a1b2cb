"""Hashes and the fixed-point logarithm behind weighted rendezvous placement.

Every node, client and Spark executor must compute *bit-identical* owners, or two
nodes both believe they own a partition. So nothing here that feeds the ownership
decision uses platform floating point (libm ``log``, SIMD paths): it is integer
arithmetic, in two implementations that must agree exactly, a scalar one on Python
ints and a vectorised one on numpy ``uint64`` arrays (property-tested against each
other in ``tests/test_hashing.py``).

The definitions (the wire-compatible spec; changing any of them changes placement):

* ``member_hash(id, seed)``  = first 64-bit half of MurmurHash3_x64_128(utf-8 id, seed)
* ``partition_hash(p, seed)`` = fmix64(((p + 1) * PHI64) mod 2**64  XOR  S(seed)),
  with S(seed) = first half of MurmurHash3_x64_128(b"placement/partition", seed);
  fmix64 is MurmurHash3's 64-bit finaliser (Appleby), a bijection with full avalanche.
* ``pair_hash(p, m)`` = fmix64(partition_hash XOR member_hash): the 64-bit H(p, m).
* ``key_hash(key, seed)`` = MurmurHash3_x86_32(utf-8 key, seed), unsigned; a key's
  partition is key_hash mod P - the DurableTask idea (hash the instance id to a
  partition), for any P up to 2**24. 32 bits suffice here (the modulo bias is at most
  P / 2**32, zero for a power of two), MurmurHash3_x86_32 exists in every language, and
  it is the fastest mmh3 call, which matters on the per-key lookup path.

The score of a member is -ln(u)/w with u = H mapped into the open interval (0, 1)
(Schindelhauer & Schomaker, SPAA 2005; Ceph straw2): the smallest score wins and a
member's win probability is exactly w_i / sum(w). Ranking is unchanged by a common
factor, so we use -log2(u) instead of -ln(u), computed in 32.32 fixed point by
``neg_log2_fp`` - the same idea as straw2's integer ``crush_ln`` table, designed anew:

    n  = 2*(H >> 11) + 1            odd, 1 <= n < 2**54, so u = n / 2**54 is never 0 or 1
    u  = 2**-e * m                  e >= 0 leading zeros, m in [1/2, 1)
    -log2(u) = e + d * g(d)         with d = 1 - m in (0, 1/2] and g(d) = -log2(1-d)/d

g is smooth and bounded (1/ln2 .. 2), so it is interpolated from a 1,025-entry integer
table with *relative* error ~1e-7 even when u is just below 1 - the regime that decides
winners in a large cluster (a plain table on log2(m) loses most digits there by
cancellation). The table is generated with ``decimal`` (software arithmetic, correctly
rounded, identical on every platform) and pinned by a golden test.
"""

from __future__ import annotations

import decimal
from typing import Final

import mmh3
import numpy as np

MASK64: Final = (1 << 64) - 1
PHI64: Final = 0x9E3779B97F4A7C15  # 2**64 / golden ratio: spreads consecutive p apart
_C1: Final = 0xFF51AFD7ED558CCD  # MurmurHash3 fmix64 constants
_C2: Final = 0xC4CEB9FE1A85EC53

FRAC_BITS: Final = 32  # fixed-point fraction bits of -log2(u)
_TABLE_BITS: Final = 10  # g(d) is tabulated at d = i / 2**(TABLE_BITS+1), i = 0..2**TABLE_BITS
_G_BITS: Final = 30  # fraction bits of the g table
_INTERP_BITS: Final = 20  # bits of d below the table step used for interpolation


def _g_table() -> tuple[int, ...]:
    """round(2**30 * g(i/2048)) for i = 0..1024, g(d) = -log2(1 - d) / d, g(0) = 1/ln 2."""
    ctx = decimal.Context(prec=50, rounding=decimal.ROUND_HALF_EVEN)
    ln2 = ctx.ln(decimal.Decimal(2))
    scale = decimal.Decimal(1 << _G_BITS)
    steps = 1 << (_TABLE_BITS + 1)
    out = []
    for i in range((1 << _TABLE_BITS) + 1):
        if i == 0:
            g = ctx.divide(1, ln2)
        else:
            d = ctx.divide(i, steps)
            g = ctx.divide(-ctx.ln(ctx.subtract(1, d)), ctx.multiply(d, ln2))
        out.append(int(ctx.multiply(g, scale).to_integral_value(rounding=decimal.ROUND_HALF_EVEN)))
    return tuple(out)


G_TABLE: Final = _g_table()
_G_NP: Final = np.array(G_TABLE, dtype=np.uint64)
_PARTITION_SALT: Final = b"placement/partition"


def fmix64(x: int) -> int:
    """MurmurHash3's 64-bit finaliser on a Python int (scalar reference)."""
    x ^= x >> 33
    x = (x * _C1) & MASK64
    x ^= x >> 33
    x = (x * _C2) & MASK64
    x ^= x >> 33
    return x


def fmix64_np(x: np.ndarray, tmp: np.ndarray | None = None) -> np.ndarray:
    """fmix64 in place on a uint64 array (``tmp``: optional scratch of the same shape)."""
    if tmp is None:
        tmp = np.empty_like(x)
    for mult in (_C1, _C2):
        np.right_shift(x, np.uint64(33), out=tmp)
        x ^= tmp
        x *= np.uint64(mult)
    np.right_shift(x, np.uint64(33), out=tmp)
    x ^= tmp
    return x


def premix_np(h: np.ndarray) -> np.ndarray:
    """h ^ (h >> 33): fmix64's first step, applied to one side of a pair hash.

    That step is linear over XOR, so for x = hp ^ hm it equals premix(hp) ^ premix(hm):
    a whole (partitions x members) matrix of pair hashes can start from premixed rows and
    columns and skip two of fmix64's passes over the matrix.
    """
    return h ^ (h >> np.uint64(33))


_NEG_C2: Final = (-_C2) & MASK64
_HI_HALF: Final = 1 if np.little_endian else 0  # index of the high uint32 in a uint64's memory


def pair_gaps_np(rows: np.ndarray, cols: np.ndarray, out: np.ndarray, tmp: np.ndarray) -> np.ndarray:
    """G = the high 32 bits of 2**64 - H for every pair of premixed rows x columns (approximate).

    ``rows`` and ``cols`` are ``premix_np`` of partition and member hashes; ``out`` and
    ``tmp`` are uint64 scratch of shape (len(rows), len(cols)); the result is a uint32 view
    into ``out``. G measures how far u (about H / 2**64) is below 1, the quantity that
    decides rendezvous winners, using three multiplication and shift passes instead of
    fmix64's eight and no logarithm. Guarantee, used to prune candidates soundly:

        2**64 - H >= G * 2**32 - 2**31      for every pair (H = pair_hash)

    Why: fmix64 ends with y = x * C2 and H = y ^ (y >> 33), so H and y agree on bits 31..63
    (|H - y| < 2**31). Multiplying by -C2 instead gives Z = (2**64 - y) mod 2**64 directly
    (the complement for free), and G = Z >> 32 is read as a view, not computed. (y = 0
    gives G = 0, for which the bound holds trivially.)
    """
    np.bitwise_xor(rows[:, None], cols[None, :], out=out)
    out *= np.uint64(_C1)
    np.right_shift(out, np.uint64(33), out=tmp)
    out ^= tmp
    out *= np.uint64(_NEG_C2)
    return out.view(np.uint32)[:, _HI_HALF::2]


def _mmh64(data: bytes, seed: int) -> int:
    return mmh3.hash64(data, seed, signed=False)[0]


def member_hash(member_id: str, seed: int) -> int:
    return _mmh64(member_id.encode("utf-8"), seed)


def _partition_salt(seed: int) -> int:
    return _mmh64(_PARTITION_SALT, seed)


def partition_hash(p: int, seed: int) -> int:
    return fmix64((((p + 1) * PHI64) & MASK64) ^ _partition_salt(seed))


def partition_hashes(partitions: np.ndarray, seed: int) -> np.ndarray:
    """Vectorised ``partition_hash`` for an int array of partition numbers."""
    x = (partitions.astype(np.uint64) + np.uint64(1)) * np.uint64(PHI64)
    x ^= np.uint64(_partition_salt(seed))
    return fmix64_np(x)


def pair_hash(hp: int, hm: int) -> int:
    return fmix64(hp ^ hm)


def safe_key(key: str | bytes) -> str | bytes:
    """The key as mmh3 may take it: ASCII str and bytes as they are, other str as UTF-8.

    mmh3 5.3 crashes the interpreter (SIGSEGV) on a str holding a lone surrogate such as
    "\\ud800", which ``json.loads`` produces from a request body; encoding it ourselves
    raises ``UnicodeEncodeError`` instead. ``isascii`` is O(1), so ASCII keys pay ~nothing.
    """
    if key.__class__ is str and not key.isascii():
        return key.encode("utf-8")
    return key


def key_hash(key: str | bytes, seed: int) -> int:
    """The 32-bit hash that maps a key to its partition (str keys hash as UTF-8)."""
    return mmh3.hash(safe_key(key), seed, signed=False)


def neg_log2_fp(h: int) -> int:
    """-log2(u) in 32.32 fixed point for u = (2*(h >> 11) + 1) / 2**54 (scalar reference)."""
    n = 2 * (h >> 11) + 1
    e = 54 - n.bit_length()
    dd = (1 << 54) - (n << (54 - n.bit_length()))  # d = dd / 2**54, in (0, 1/2]
    i = dd >> (53 - _TABLE_BITS)
    r = (dd >> (53 - _TABLE_BITS - _INTERP_BITS)) & ((1 << _INTERP_BITS) - 1)
    g_lo = G_TABLE[i]
    g = g_lo if i == len(G_TABLE) - 1 else g_lo + (((G_TABLE[i + 1] - g_lo) * r) >> _INTERP_BITS)
    # d * g with d truncated to 32 fraction bits: (dd >> 22) * g < 2**31 * 2**31
    frac = ((dd >> (54 - FRAC_BITS)) * g) >> _G_BITS
    return (e << FRAC_BITS) + frac


def neg_log2_fp_np(h: np.ndarray) -> np.ndarray:
    """Vectorised ``neg_log2_fp`` on a uint64 array; bit-identical to the scalar one."""
    x = h >> np.uint64(11)  # < 2**53: exact as float64, so frexp gives its bit length exactly
    bl = np.frexp(x.astype(np.float64))[1].astype(np.uint64) + np.uint64(1)  # bit_length(n)
    n = x * np.uint64(2) + np.uint64(1)
    e = np.uint64(54) - bl
    dd = np.uint64(1 << 54) - (n << e)
    i = dd >> np.uint64(53 - _TABLE_BITS)
    r = (dd >> np.uint64(53 - _TABLE_BITS - _INTERP_BITS)) & np.uint64((1 << _INTERP_BITS) - 1)
    g_lo = _G_NP[i]
    g_hi = _G_NP[np.minimum(i + np.uint64(1), np.uint64(len(G_TABLE) - 1))]
    g = g_lo + (((g_hi - g_lo) * r) >> np.uint64(_INTERP_BITS))
    frac = ((dd >> np.uint64(54 - FRAC_BITS)) * g) >> np.uint64(_G_BITS)
    return (e << np.uint64(FRAC_BITS)) + frac
