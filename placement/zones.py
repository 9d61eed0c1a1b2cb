"""Zone-aware replica sets: a partition's replicas spread over failure domains (zones).

Theory of operation (the spec is the README's "Zones" section). Every member may name a zone
(a rack, an availability zone); a member without one is a zone of its own. For partition p, walk
the partition's rendezvous order (``rendezvous``: all members of positive weight, best first):

* pass 1: take a member whose zone no taken member has, until R are taken or every zone is;
* pass 2: if fewer than R were taken (fewer zones than replicas), walk the order again and take
  members not yet taken, until R are taken.

The replica set is the pass-1 members in rendezvous order, then the pass-2 members in rendezvous
order. So the first min(R, zones) replicas are in distinct zones, and the leader (replica 0) is
always the partition's top rendezvous member: zones never move a leader. This is Cassandra's
NetworkTopologyStrategy walk (skip a rack already used, then fill from the skipped) on the HRW
order instead of the ring.

Computing it without ranking every member: what a zone contributes is always a prefix of that
zone's own rendezvous order (pass 1 takes only a zone's first member; pass 2 walks the order, so
a member is taken only after every better one), of length at most R; the members without a zone
behave the same way as one group (each is a new zone in pass 1, so pass 1 takes them in order).
And a member's HRW key (draw, -H, member index) does not depend on who else is ranked. So each
group (a zone, or the zoneless members) is ranked alone to its top min(R, size), with
``rank_many``; pass 1 chooses among the zones' first members and all the zoneless candidates,
pass 2 among the rest - by the same key, with the member's index in the whole membership as the
final tie-break. A membership change re-ranks only the groups it touches (incrementally, in
``table``) and re-runs the selection, which reads R entries per group and partition.

``select_reference`` is the plain definition (rank every member, walk the order twice), which
``tests/test_zones.py`` checks the fast path against.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import numpy as np

from .errors import InvalidMembershipError
from .hashing import pair_hash, partition_hash
from .rendezvous import Members, Ranked, _select, draw_of, rank_many

MAX_ZONE_CHARS: Final = 64
#: The key of the group of members without a zone (each of them is a zone of its own).
NO_ZONE: Final = ""

Groups = dict[str, tuple[Members, Ranked]]  # zone (NO_ZONE: the zoneless) -> its members and their top R


def check_zone(zone: object, what: str = "zone") -> str:
    """A zone name: a string of at most 64 printable characters without surrounding spaces
    ("" = no zone). Raises ``InvalidMembershipError`` saying what is wrong."""
    if not isinstance(zone, str):
        raise InvalidMembershipError(f"{what} must be a string, got {zone!r}")
    if len(zone) > MAX_ZONE_CHARS:
        raise InvalidMembershipError(f"{what} {zone[:20]!r}... is {len(zone)} characters; the limit is "
                                     f"{MAX_ZONE_CHARS}")
    if zone != zone.strip() or not zone.isprintable():
        raise InvalidMembershipError(f"{what} {zone!r} has surrounding spaces or unprintable characters")
    return zone


def validate_zones(zones: object, units: Mapping[str, int]) -> dict[str, str]:
    """Check a {member id: zone} mapping against the members; return it sorted, without the
    members whose zone is "" (no zone). Every id must be a member (weight 0 is fine)."""
    if zones is None:
        return {}
    if not isinstance(zones, Mapping):
        raise InvalidMembershipError(f"zones must map member ids to zone names, got {type(zones).__name__}")
    out = {}
    for member_id, zone in sorted(zones.items(), key=lambda kv: str(kv[0])):
        if member_id not in units:
            raise InvalidMembershipError(f"zones names {member_id!r}, which is not a member")
        if check_zone(zone, f"zone of member {member_id!r}"):
            out[member_id] = zone
    return out


def group_units(units: Mapping[str, int], zones: Mapping[str, str]) -> dict[str, dict[str, int]]:
    """Positive-weight members by group: zone name -> {id: units}; NO_ZONE: the zoneless."""
    groups: dict[str, dict[str, int]] = {}
    for m, u in units.items():
        if u > 0:
            groups.setdefault(zones.get(m, NO_ZONE), {})[m] = u
    return groups


def rank_group(units: Mapping[str, int], partitions: int, seed: int, replicas: int) -> tuple[Members, Ranked]:
    ms = Members.build(dict(units), seed)
    return ms, rank_many(np.arange(partitions), ms, seed, replicas)


def select(groups: Groups, ms: Members, replicas: int, partitions: int) -> np.ndarray:
    """Owner indices (P, min(R, N)) into ``ms.ids`` (all positive-weight members): see the module
    docstring. ``groups`` holds every group's top-min(R, size) ranking."""
    pos = {m: i for i, m in enumerate(ms.ids)}
    first: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # pass-1 candidates (idx, h, draw)
    rest: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # pass-2 candidates
    for zone, (gms, ranked) in sorted(groups.items()):
        if not len(gms):
            continue
        to_global = np.array([pos[m] for m in gms.ids], dtype=np.int32)
        idx = to_global[ranked.idx]
        if zone == NO_ZONE:  # each its own zone: all are pass-1 candidates
            first.append((idx, ranked.h, ranked.draw))
        else:
            first.append((idx[:, :1], ranked.h[:, :1], ranked.draw[:, :1]))
            if idx.shape[1] > 1:
                rest.append((idx[:, 1:], ranked.h[:, 1:], ranked.draw[:, 1:]))
    width = min(replicas, len(ms))
    if not first:
        return np.empty((partitions, 0), dtype=np.int32)
    f_idx, f_h, f_draw = (np.concatenate(parts, axis=1) for parts in zip(*first))
    n_first = f_idx.shape[1]
    if n_first >= width:
        return np.ascontiguousarray(_select(f_idx, f_h, f_draw, width).idx, dtype=np.int32)
    picked = _select(f_idx, f_h, f_draw, n_first).idx
    r_idx, r_h, r_draw = (np.concatenate(parts, axis=1) for parts in zip(*rest))
    more = _select(r_idx, r_h, r_draw, width - n_first).idx
    return np.ascontiguousarray(np.concatenate([picked, more], axis=1), dtype=np.int32)


def select_reference(p: int, ms: Members, zone_of: Mapping[str, str], seed: int, replicas: int) -> tuple[int, ...]:
    """The definition, for one partition: rank every member (scalar HRW key), walk twice.
    Returns indices into ``ms.ids``."""
    hp = partition_hash(p, seed)
    keyed = []
    for i, (hm, u) in enumerate(zip(ms.hashes.tolist(), ms.units.tolist())):
        h = pair_hash(hp, hm)
        keyed.append((draw_of(h, u), -h, i))
    order = [i for _, _, i in sorted(keyed)]

    def zone(i: int) -> object:
        z = zone_of.get(ms.ids[i], NO_ZONE)
        return z if z != NO_ZONE else ("member", ms.ids[i])  # no zone: a zone of its own

    taken: list[int] = []
    used: set[object] = set()
    every_zone = {zone(i) for i in order}
    for i in order:  # pass 1: a new zone each
        if len(taken) == replicas or used == every_zone:
            break
        if zone(i) not in used:
            taken.append(i)
            used.add(zone(i))
    for i in order:  # pass 2: the best not yet taken
        if len(taken) >= replicas:
            break
        if i not in taken:
            taken.append(i)
    return tuple(taken)
