"""What a client needs to route by itself: the placement table plus each member's HTTP address.

Served by ``GET /v1/placement`` and consumed by the client library and the Spark jobs, which
depend on this (and ``table``), never on the gossip code. ``etag`` names the whole snapshot
(placement *and* addresses, so a member that moves to a new address is noticed too), while
``checksum`` is the placement's own identity (``PlacementTable.checksum``), which requests carry
to detect that a client routed with an outdated placement.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import mmh3
import msgpack

from .codec import load_json_object, load_msgpack_map
from .errors import SnapshotError
from .table import PlacementTable


@dataclass(frozen=True)
class PlacementSnapshot:
    table: PlacementTable
    addresses: Mapping[str, str]  # member id -> base HTTP URL ("" if unknown)

    @property
    def checksum(self) -> str:
        return self.table.checksum

    @cached_property
    def etag(self) -> str:
        ident = msgpack.packb([self.table.checksum, sorted(self.addresses.items())])
        a, b = mmh3.hash64(ident, 0xE7A6, signed=False)
        return f"{a:016x}{b:016x}"

    def address(self, member: str) -> str:
        return self.addresses.get(member, "")

    def to_dict(self, binary: bool = False) -> dict[str, Any]:
        data = self.table.to_dict(binary=binary)
        data["etag"] = self.etag
        data["addresses"] = dict(sorted(self.addresses.items()))
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], verify: bool = False) -> PlacementSnapshot:
        addresses = data.get("addresses", {}) if isinstance(data, Mapping) else None
        if not isinstance(addresses, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in addresses.items()
        ):
            raise SnapshotError("snapshot 'addresses' must map member ids to URL strings")
        return cls(PlacementTable.from_dict(data, verify=verify), dict(addresses))

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"))

    def to_msgpack(self) -> bytes:
        return msgpack.packb(self.to_dict(binary=True), use_bin_type=True)

    @classmethod
    def from_msgpack(cls, data: bytes, verify: bool = False) -> PlacementSnapshot:
        return cls.from_dict(load_msgpack_map(data), verify=verify)

    @classmethod
    def from_json(cls, text: str | bytes, verify: bool = False) -> PlacementSnapshot:
        return cls.from_dict(load_json_object(text), verify=verify)
