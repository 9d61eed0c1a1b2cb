"""The placement table: owners of every partition for one membership, and key routing.

A ``PlacementTable`` is an immutable value computed from (members with weights,
partition count, replica count, seed[, capacity factor]) and nothing else - so every
node, client and Spark executor that knows the member list builds the same table, and
``checksum`` names it. Keys map to partitions with ``hashing.key_hash`` mod P; partition
owners come from ``rendezvous`` (pure HRW) or ``bounded`` (HRW with a load cap).

``with_members`` applies a membership change incrementally and returns exactly what a
full ``build`` would: a join scores one new column (O(P)) and inserts the newcomer where
it beats a current replica; a leave re-ranks only the partitions the leaver held.

With ``zones`` (member -> zone name) a replica set spans distinct zones where it can
(``zones``; the README's "Zones" spec); the leader is the same as without zones. Without
zones - or when no member names one - the table, its checksum and snapshot are exactly those
of a table built without the argument.

With ``pins`` (partition -> member id) chosen partitions are led by chosen members (``pins``;
the README's "Pins" spec): a pin to a member without a positive weight here is ignored, the
pinned member moves to the front of the replica set or replaces its last replica in the same
zone (else its last replica). Pins are a last pass over the unpinned owners, which the table
keeps, so ``with_pins`` re-ranks nothing and ``with_members`` stays incremental. Without pins
the table, its checksum and snapshot are exactly those of a table built without the argument.
"""

from __future__ import annotations

import bisect
import json
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property, lru_cache
from typing import Any, Final

import mmh3
import msgpack
import numpy as np

from . import bounded
from . import pins as pinning
from . import zones as zoning
from .codec import load_json_object, load_msgpack_map
from .errors import InvalidConfigError, NoOwnerError, SnapshotError
from .hashing import fmix64_np, key_hash, member_hash, partition_hashes, safe_key
from .rendezvous import WEIGHT_SCALE, Members, Ranked, draws_np, rank_many, surely_above, validate_members

SNAPSHOT_FORMAT: Final = "placement-table/1"
MAX_PARTITIONS: Final = 1 << 24
MAX_REPLICAS: Final = 16
# Beyond this many member changes at once a full build is cheaper than incremental steps.
_INCREMENTAL_LIMIT_FRACTION: Final = 8
_SENTINEL: Final = np.uint64((1 << 64) - 1)


@dataclass(frozen=True)
class TableConfig:
    """The cluster-wide settings a table is built with (all nodes must share them)."""

    partitions: int
    replicas: int = 1
    seed: int = 0
    capacity_factor: float | None = None  # bounded loads off by default

    def __post_init__(self) -> None:
        def need_int(name: str, value: object, lo: int, hi: int) -> None:
            if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
                raise InvalidConfigError(f"{name} must be an integer in [{lo}, {hi}], got {value!r}")

        need_int("partitions", self.partitions, 1, MAX_PARTITIONS)
        need_int("replicas", self.replicas, 1, MAX_REPLICAS)
        need_int("seed", self.seed, 0, (1 << 32) - 1)
        c = self.capacity_factor
        if c is not None:
            if isinstance(c, bool) or not isinstance(c, (int, float)) or not math.isfinite(c) or c < 1.0:
                raise InvalidConfigError(f"capacity_factor must be a finite number >= 1.0 or None, got {c!r}")


def _checksum(units: Mapping[str, int], config: TableConfig, zones: Mapping[str, str],
              pins: Mapping[int, str]) -> str:
    c = config.capacity_factor
    ident: list[Any] = [
        SNAPSHOT_FORMAT,
        config.partitions,
        config.replicas,
        config.seed,
        None if c is None else float(c).hex(),
        sorted(units.items()),
    ]
    if zones:  # only then: a table without zones keeps the checksum it always had
        ident.append(sorted(zones.items()))
    if pins:  # likewise; tagged, so it never reads as zones
        ident.append(["pins", sorted(pins.items())])
    a, b = mmh3.hash64(msgpack.packb(ident), 0x5EED, signed=False)
    return f"{a:016x}{b:016x}"


def _check_zoned(config: TableConfig) -> None:
    if config.capacity_factor is not None:
        raise InvalidConfigError(
            "zones and capacity_factor do not combine: bounded loads cap members in one global matching, "
            "which can break a zone spread; build with one or the other")


def _effective_pins(config: TableConfig, units: Mapping[str, int], pins: object) -> dict[int, str]:
    """Validated pins, those of members with a positive weight only. Any pin given (effective or
    not) with bounded loads is an error, so whether a build fails never depends on who is a member."""
    valid = pinning.validate_pins(pins, config.partitions)
    if valid and config.capacity_factor is not None:
        raise InvalidConfigError(
            "pins and capacity_factor do not combine: bounded loads cap members in one global matching, "
            "which a pinned partition would overfill; build with one or the other")
    return pinning.effective(valid, units)


class PlacementTable:
    """Owners (replica sets, leader first) of every partition for one membership."""

    def __init__(
        self,
        config: TableConfig,
        units: dict[str, int],
        members: Members,
        ranked: Ranked | None,
        owner_idx: np.ndarray,
        zones: dict[str, str] | None = None,
        groups: zoning.Groups | None = None,
        pins: dict[int, str] | None = None,
        unpinned: np.ndarray | None = None,
    ):
        """``owner_idx`` is the answer (pins applied); ``pins`` are effective, sorted, and
        ``unpinned`` the owners before them (None with pins: unknown). See ``_pinned``."""
        self.config = config
        self._units = units
        self._members = members
        self._ranked = ranked  # pure HRW top-k with scores, for incremental updates (None: unknown)
        self._owner_idx = owner_idx  # (P, r) int32 indices into members.ids: the answer
        self._owner_idx.setflags(write=False)
        self._zones = zones or {}  # member -> zone, members with a zone only (validated, sorted)
        self._groups = groups  # with zones: each zone's own top-k, for incremental updates (None: unknown)
        self._pins = pins or {}  # partition -> member, effective pins only (validated, sorted)
        self._unpinned = owner_idx if not self._pins else unpinned  # owners before pins (None: unknown)
        if self._unpinned is not None:
            self._unpinned.setflags(write=False)
        self.checksum: str = _checksum(units, config, self._zones, self._pins)

    # ----- construction ---------------------------------------------------------------
    @classmethod
    def build(
        cls,
        members: Mapping[str, float] | Iterable[tuple[str, float]],
        partitions: int,
        replicas: int = 1,
        seed: int = 0,
        capacity_factor: float | None = None,
        zones: Mapping[str, str] | None = None,
        pins: Mapping[int, str] | None = None,
    ) -> PlacementTable:
        """Compute the table from scratch. ``members`` maps id -> weight (weight 0 never owns);
        ``zones`` maps member ids to zone names ("" or absent: a zone of its own); ``pins`` maps
        partitions to the member that leads them (ignored for members without a positive weight)."""
        return cls.from_config(TableConfig(partitions, replicas, seed, capacity_factor), members, zones, pins)

    @classmethod
    def from_config(
        cls,
        config: TableConfig,
        members: Mapping[str, float] | Iterable[tuple[str, float]],
        zones: Mapping[str, str] | None = None,
        pins: Mapping[int, str] | None = None,
    ) -> PlacementTable:
        """``build`` with the settings given as one ``TableConfig``."""
        units = validate_members(members)
        zoned = zoning.validate_zones(zones, units)
        return cls._from_units(config, units, zoned, _effective_pins(config, units, pins))

    @classmethod
    def _from_units(cls, config: TableConfig, units: dict[str, int], zones: dict[str, str] | None = None,
                    pins: dict[int, str] | None = None) -> PlacementTable:
        if zones:
            return cls._zoned(config, units, zones, None, pins)
        ms = Members.build(units, config.seed)
        ranked = rank_many(np.arange(config.partitions), ms, config.seed, config.replicas)
        return cls._pinned(config, units, ms, ranked, cls._unpinned_owners(config, ms, ranked), None, None, pins)

    @classmethod
    def _pinned(cls, config: TableConfig, units: dict[str, int], ms: Members, ranked: Ranked | None,
                unpinned: np.ndarray, zones: dict[str, str] | None, groups: zoning.Groups | None,
                pins: dict[int, str] | None) -> PlacementTable:
        """The table whose owners are ``unpinned`` with the (effective) ``pins`` applied: the last pass."""
        owners = pinning.apply_pins(unpinned, pins or {}, ms.ids, zones or {})
        return cls(config, units, ms, ranked, owners, zones, groups, pins, unpinned)

    @staticmethod
    def _unpinned_owners(config: TableConfig, ms: Members, ranked: Ranked) -> np.ndarray:
        if config.capacity_factor is None:
            return ranked.idx
        return bounded.assign(ms, config.partitions, config.replicas, config.seed, Fraction(config.capacity_factor))

    @classmethod
    def _zoned(cls, config: TableConfig, units: dict[str, int], zones: dict[str, str],
               old: zoning.Groups | None, pins: dict[int, str] | None) -> PlacementTable:
        """The table with zones: each group ranked alone (or updated from ``old``), then selected."""
        _check_zoned(config)
        groups = {}
        for name, group in zoning.group_units(units, zones).items():
            before = old.get(name) if old is not None else None
            step = _incremental(before[0], before[1], group, config) if before is not None else None
            groups[name] = step or zoning.rank_group(group, config.partitions, config.seed, config.replicas)
        ms = Members.build(units, config.seed)
        owners = zoning.select(groups, ms, config.replicas, config.partitions)
        return cls._pinned(config, units, ms, None, owners, zones, groups, pins)

    def with_members(
        self,
        members: Mapping[str, float] | Iterable[tuple[str, float]],
        zones: Mapping[str, str] | None = None,
        pins: Mapping[int, str] | None = None,
    ) -> PlacementTable:
        """The table for a new membership; equal to ``build`` with it, computed incrementally.

        ``zones`` None keeps this table's zones for the members that remain (new members have
        none); give a mapping (``{}``: no zones) to set them. ``pins`` None keeps this table's
        (effective) pins, those whose member remains with a positive weight; give a mapping
        (``{}``: no pins) to set them."""
        units = validate_members(members)
        if zones is None:
            zones = {m: z for m, z in self._zones.items() if m in units}
        zoned = zoning.validate_zones(zones, units)
        pinned = _effective_pins(self.config, units, self._pins if pins is None else pins)
        if units == self._units and zoned == self._zones:
            return self._repinned(pinned)
        if zoned:
            return self._zoned(self.config, units, zoned, self._groups, pinned)
        if self._zones or self._ranked is None:
            return self._from_units(self.config, units, None, pinned)
        step = _incremental(self._members, self._ranked, units, self.config)
        if step is None:
            return self._from_units(self.config, units, None, pinned)
        ms, ranked = step
        unpinned = self._unpinned_owners(self.config, ms, ranked)
        return self._pinned(self.config, units, ms, ranked, unpinned, None, None, pinned)

    def with_pins(self, pins: Mapping[int, str]) -> PlacementTable:
        """This membership with other pins (``{}``: none); equal to ``build`` with them.

        Re-ranks nothing: the pins are applied to the owners this table keeps from before its
        own pins, O(P) copying plus O(len(pins) x replicas). (A table read from a snapshot
        without ``verify`` does not know those owners when it has pins: it is built afresh.)"""
        return self._repinned(_effective_pins(self.config, self._units, pins))

    def _repinned(self, pins: dict[int, str]) -> PlacementTable:
        """This membership with effective ``pins``."""
        if pins == self._pins:
            return self
        if self._unpinned is None:
            return self._from_units(self.config, self._units, self._zones or None, pins)
        return self._pinned(self.config, self._units, self._members, self._ranked, self._unpinned,
                            self._zones or None, self._groups, pins)

    # ----- lookups ----------------------------------------------------------------------
    @property
    def partitions(self) -> int:
        return self.config.partitions

    @property
    def replicas(self) -> int:
        return self.config.replicas

    @property
    def seed(self) -> int:
        return self.config.seed

    @property
    def members(self) -> dict[str, float]:
        """id -> weight (as quantised: a multiple of 1/65536), including weight-0 members."""
        return {m: u / WEIGHT_SCALE for m, u in sorted(self._units.items())}

    @property
    def zones(self) -> dict[str, str]:
        """id -> zone of the members that have one (empty: a table without zones)."""
        return dict(self._zones)

    @property
    def pins(self) -> dict[int, str]:
        """partition -> member of the effective pins, sorted by partition (empty: no pins)."""
        return dict(self._pins)

    def zone_of(self, member: str) -> str:
        """A member's zone ("" if it has none)."""
        return self._zones.get(member, "")

    @cached_property
    def _owner_tuples(self) -> tuple[tuple[str, ...], ...]:
        ids = self._members.ids
        return tuple(tuple(ids[i] for i in row) for row in self._owner_idx.tolist())

    @cached_property
    def lookup(self) -> Callable[[str | bytes], tuple[str, ...]]:
        """``lookup(key)`` -> owners of the key's partition, leader first.

        Built once per table as a closure over locals: the per-key hot path is one
        mmh3 call, a modulo and a tuple index (see BENCHMARKS.md).
        """
        owners, h32, seed, p = self._owner_tuples, mmh3.hash, self.config.seed, self.config.partitions

        def lookup(key: str | bytes) -> tuple[str, ...]:
            if key.__class__ is str and not key.isascii():  # inlined hashing.safe_key
                key = key.encode("utf-8")
            return owners[h32(key, seed, signed=False) % p]

        return lookup

    def partition_of(self, key: str | bytes) -> int:
        return key_hash(key, self.config.seed) % self.config.partitions

    def partitions_of(self, keys: Iterable[str | bytes]) -> np.ndarray:
        """Partition of many keys at once (int64 array)."""
        h32, seed = mmh3.hash, self.config.seed
        hashes = np.fromiter((h32(safe_key(k), seed, signed=False) for k in keys), dtype=np.int64)
        return hashes % self.config.partitions

    def owners(self, partition: int) -> tuple[str, ...]:
        """Replica set of a partition, leader first (shorter than ``replicas`` if few members)."""
        return self._owner_tuples[self._check_partition(partition)]

    def owner(self, partition: int) -> str:
        """The leader of a partition."""
        owners = self.owners(partition)
        if not owners:
            raise NoOwnerError("no member has a positive weight, so no partition has an owner")
        return owners[0]

    def _check_partition(self, partition: int) -> int:
        integer = isinstance(partition, (int, np.integer)) and not isinstance(partition, bool)
        if not integer or not 0 <= partition < self.partitions:
            raise IndexError(f"partition must be an integer in [0, {self.partitions}), got {partition!r}")
        return int(partition)

    def owner_indices(self) -> tuple[tuple[str, ...], np.ndarray]:
        """(member ids, read-only (P, r) int32 array of indices into them): the bulk form."""
        return self._members.ids, self._owner_idx

    def route(self, keys: Iterable[str | bytes]) -> dict[str, list[str | bytes]]:
        """Group keys by the leader of their partition (vectorised)."""
        keys = list(keys)
        if not keys:
            return {}
        if self._owner_idx.shape[1] == 0:
            raise NoOwnerError("no member has a positive weight, so no key has an owner")
        leaders = self._owner_idx[:, 0][self.partitions_of(keys)]
        order = np.argsort(leaders, kind="stable")
        bounds = np.flatnonzero(np.diff(leaders[order])) + 1
        ids = self._members.ids
        return {
            ids[int(leaders[chunk[0]])]: [keys[i] for i in chunk.tolist()]
            for chunk in np.split(order, bounds)
        }

    def owned_by(self, member: str, leader_only: bool = False) -> list[int]:
        """Partitions whose replica set (or leadership) includes ``member``."""
        try:
            i = self._members.ids.index(member)
        except ValueError:
            return []
        cols = self._owner_idx[:, :1] if leader_only else self._owner_idx
        return np.flatnonzero((cols == i).any(axis=1)).tolist()

    def load(self, leader_only: bool = True) -> dict[str, int]:
        """Number of partitions per member with positive weight."""
        cols = self._owner_idx[:, :1] if leader_only else self._owner_idx
        counts = np.bincount(cols.ravel(), minlength=len(self._members))
        return dict(zip(self._members.ids, counts.tolist()))

    def moved(self, other: PlacementTable, leaders: bool = False) -> list[int]:
        """Partitions whose owner set (or, with ``leaders``, whose leader) differs in ``other``."""
        if other.partitions != self.partitions:
            raise InvalidConfigError(f"cannot compare tables of {self.partitions} and {other.partitions} partitions")
        a, b = self._id_matrix(), other._id_matrix()
        if leaders:
            a, b = a[:, :1], b[:, :1]
        width = max(a.shape[1], b.shape[1])
        a, b = _pad(np.sort(a, axis=1), width), _pad(np.sort(b, axis=1), width)
        return np.flatnonzero((a != b).any(axis=1)).tolist()

    def _id_matrix(self) -> np.ndarray:
        """Owners as an array of ids (object dtype) so tables with different members compare."""
        return np.array(self._members.ids, dtype=object)[self._owner_idx]

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, PlacementTable)
            and self.checksum == other.checksum
            and np.array_equal(self._owner_idx, other._owner_idx)
            and self._members.ids == other._members.ids
        )

    def __hash__(self) -> int:
        return hash(self.checksum)

    def __repr__(self) -> str:
        c = self.config
        return (
            f"PlacementTable(members={len(self._units)}, partitions={c.partitions}, replicas={c.replicas}, "
            f"seed={c.seed}, capacity_factor={c.capacity_factor}, "
            f"zones={len(set(self._zones.values()))}, pins={len(self._pins)}, checksum={self.checksum[:12]}...)"
        )

    # ----- serialisation (the wire form used by the HTTP API and clients) -------------
    def to_dict(self, binary: bool = False) -> dict[str, Any]:
        """Snapshot as plain data. ``binary`` packs owners as little-endian int32 bytes."""
        c = self.config
        all_ids = sorted(self._units)
        pos = {m: i for i, m in enumerate(all_ids)}
        remap = np.array([pos[m] for m in self._members.ids] or [0], dtype=np.int32)
        owners = remap[self._owner_idx] if self._owner_idx.size else self._owner_idx
        data = {
            "format": SNAPSHOT_FORMAT,
            "checksum": self.checksum,
            "partitions": c.partitions,
            "replicas": c.replicas,
            "seed": c.seed,
            "capacity_factor": c.capacity_factor,
            "members": [[m, self._units[m] / WEIGHT_SCALE] for m in all_ids],
            "owners_width": int(owners.shape[1]),
            "owners": owners.astype("<i4").tobytes() if binary else owners.tolist(),
        }
        if self._zones:  # absent without zones: such a snapshot is byte for byte what it always was
            data["zones"] = dict(self._zones)
        if self._pins:  # likewise
            data["pins"] = [[p, m] for p, m in self._pins.items()]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], verify: bool = False) -> PlacementTable:
        """Rebuild a table from ``to_dict`` output; ``verify`` recomputes it and compares."""
        try:
            if data.get("format") != SNAPSHOT_FORMAT:
                raise SnapshotError(f"unknown snapshot format {data.get('format')!r}; expected {SNAPSHOT_FORMAT!r}")
            config = TableConfig(data["partitions"], data["replicas"], data["seed"], data.get("capacity_factor"))
            units = validate_members([tuple(m) for m in data["members"]])
            zones = zoning.validate_zones(data.get("zones"), units)
            if zones and config.capacity_factor is not None:
                raise SnapshotError("snapshot has both zones and a capacity_factor, which do not combine")
            pins = _snapshot_pins(data.get("pins", []), config, units)
            width = int(data["owners_width"])
            raw = data["owners"]
            if isinstance(raw, (bytes, bytearray)):
                owners = np.frombuffer(raw, dtype="<i4")
            else:
                owners = np.array(raw, dtype=np.int64).ravel()
            owners = owners.reshape(config.partitions, width)
        except SnapshotError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise SnapshotError(f"malformed placement snapshot: {exc}") from exc
        if data.get("checksum") != _checksum(units, config, zones, pins):
            raise SnapshotError("snapshot checksum does not match its members and settings")
        ms = Members.build(units, config.seed)
        all_ids = sorted(units)
        in_range = not owners.size or 0 <= owners.min() <= owners.max() < len(all_ids)
        if width != min(config.replicas, len(ms)) or not in_range:
            raise SnapshotError("snapshot owners do not fit its members and replica count")
        index = {m: i for i, m in enumerate(ms.ids)}
        remap = np.array([index.get(m, -1) for m in all_ids] or [0], dtype=np.int32)
        owner_idx = remap[owners] if owners.size else owners.astype(np.int32)
        if (owner_idx < 0).any():
            raise SnapshotError("snapshot names a weight-0 member as an owner")
        if verify:
            table = cls._from_units(config, units, zones, pins)
            if not np.array_equal(table._owner_idx, owner_idx):
                raise SnapshotError("snapshot owners differ from the placement computed from its members")
            return table
        return cls(config, units, ms, None, np.ascontiguousarray(owner_idx, dtype=np.int32), zones, None, pins)

    def to_msgpack(self) -> bytes:
        return msgpack.packb(self.to_dict(binary=True), use_bin_type=True)

    @classmethod
    def from_msgpack(cls, data: bytes, verify: bool = False) -> PlacementTable:
        return cls.from_dict(load_msgpack_map(data), verify=verify)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes, verify: bool = False) -> PlacementTable:
        return cls.from_dict(load_json_object(text), verify=verify)


def _snapshot_pins(raw: object, config: TableConfig, units: Mapping[str, int]) -> dict[int, str]:
    """A snapshot's pins: [partition, member] pairs, strictly ascending by partition, each naming a
    member with a positive weight (``to_dict`` writes only effective pins). SnapshotError if not."""
    if not isinstance(raw, (list, tuple)) or not all(isinstance(x, (list, tuple)) and len(x) == 2 for x in raw):
        raise SnapshotError("snapshot 'pins' must be a list of [partition, member] pairs")
    try:
        pins = _effective_pins(config, units, dict(raw))
    except InvalidConfigError as exc:
        raise SnapshotError(f"snapshot pins: {exc}") from exc
    if [tuple(x) for x in raw] != list(pins.items()):
        raise SnapshotError("snapshot pins must be sorted by partition, each once, each on a member with a weight")
    return pins


def _pad(a: np.ndarray, width: int) -> np.ndarray:
    if a.shape[1] == width:
        return a
    return np.concatenate([a, np.full((a.shape[0], width - a.shape[1]), "", dtype=object)], axis=1)


# ----- incremental steps (pure HRW ranking) ---------------------------------------------
def _incremental(
    ms: Members, ranked: Ranked, units: Mapping[str, int], config: TableConfig
) -> tuple[Members, Ranked] | None:
    """The ranking of ``units`` from that of ``ms`` by single leaves and joins; None when so
    many members change that a full ranking is cheaper."""
    old = dict(zip(ms.ids, ms.units.tolist()))
    new = {m: u for m, u in units.items() if u > 0}
    if old == new:
        return ms, ranked
    leaving = sorted(m for m in old if new.get(m) != old[m])
    joining = sorted(m for m in new if old.get(m) != new[m])
    limit = max(4, len(ms) // _INCREMENTAL_LIMIT_FRACTION)
    if len(leaving) + len(joining) > limit:
        return None
    for m in leaving:
        ms, ranked = _remove(ms, ranked, m, config)
    for m in joining:
        ms, ranked = _add(ms, ranked, m, new[m], config)
    return ms, ranked


def _add(ms: Members, ranked: Ranked, member: str, units: int, config: TableConfig) -> tuple[Members, Ranked]:
    """Insert one member: score its column for every partition, slot it in where it wins."""
    hm = member_hash(member, config.seed)
    pos = bisect.bisect_left(ms.ids, member)
    new_ms = Members(
        (*ms.ids[:pos], member, *ms.ids[pos:]),
        np.insert(ms.hashes, pos, np.uint64(hm)),
        np.insert(ms.units, pos, units),
    )
    k = min(config.replicas, len(new_ms))
    idx = ranked.idx + (ranked.idx >= pos).astype(np.int32)
    d_old, h_old = ranked.draw.copy(), ranked.h.copy()
    if k > idx.shape[1]:  # fewer members than replicas so far: every row gains a slot
        fill = ((0, 0), (0, 1))
        idx, d_old, h_old = (np.pad(idx, fill), np.pad(d_old, fill, constant_values=_SENTINEL), np.pad(h_old, fill))
    h = _partition_hash_column(config.partitions, config.seed) ^ np.uint64(hm)
    fmix64_np(h)
    # Score exactly only where the newcomer may reach the last slot (~P*k/N rows): a
    # logarithm-free lower bound of its draw rules out the rest (their draw stays above all).
    near = np.flatnonzero(~surely_above((~h >> np.uint64(32)) / float(units), float(units), d_old[:, -1]))
    h_near = h[near]
    d_near = draws_np(h_near, np.full(1, units))

    def ahead(col: int, sel: np.ndarray | slice) -> np.ndarray:
        """Is slot ``col`` ahead of the newcomer, by (draw, -H, idx), in rows near[sel]?"""
        rows = near[sel]
        ds, dn = d_old[rows, col], d_near[sel]
        hs, hn = h_old[rows, col], h_near[sel]
        return (ds < dn) | ((ds == dn) & ((hs > hn) | ((hs == hn) & (idx[rows, col] < pos))))

    enter = np.flatnonzero(~ahead(-1, slice(None)))  # the newcomer beats the last slot here
    rows = near[enter]
    sub = np.stack([ahead(j, enter) for j in range(k)], axis=1) if len(rows) else np.zeros((0, k), bool)
    at = sub.sum(axis=1)
    for j in range(k - 1, -1, -1):  # shift slots at or after the insertion point right by one
        move = rows[at < j]
        for arr in (idx, d_old, h_old):
            arr[move, j] = arr[move, j - 1]
        here = at == j
        idx[rows[here], j], d_old[rows[here], j], h_old[rows[here], j] = pos, d_near[enter[here]], h_near[enter[here]]
    return new_ms, Ranked(idx, h_old, d_old)


@lru_cache(maxsize=8)
def _partition_hash_column(partitions: int, seed: int) -> np.ndarray:
    column = partition_hashes(np.arange(partitions), seed)
    column.setflags(write=False)
    return column


def _remove(ms: Members, ranked: Ranked, member: str, config: TableConfig) -> tuple[Members, Ranked]:
    """Drop one member: only partitions it held are re-ranked."""
    pos = ms.ids.index(member)
    new_ms = Members(ms.ids[:pos] + ms.ids[pos + 1 :], np.delete(ms.hashes, pos), np.delete(ms.units, pos))
    k = min(config.replicas, len(new_ms))
    held = ranked.idx == pos
    if k < ranked.idx.shape[1]:  # every row held every member: just drop the leaver's slot
        keep = ~held
        shape = (config.partitions, k)
        idx = ranked.idx[keep].reshape(shape)
        return new_ms, Ranked(
            (idx - (idx > pos)).astype(np.int32), ranked.h[keep].reshape(shape), ranked.draw[keep].reshape(shape)
        )
    idx = (ranked.idx - (ranked.idx > pos)).astype(np.int32)
    new = Ranked(idx, ranked.h.copy(), ranked.draw.copy())
    rows = np.unique(np.flatnonzero(held) // held.shape[1])  # any(axis=1) is slow on 1M short rows
    if len(rows):
        again = rank_many(rows, new_ms, config.seed, config.replicas)
        new.idx[rows], new.h[rows], new.draw[rows] = again.idx, again.h, again.draw
    return new_ms, new
