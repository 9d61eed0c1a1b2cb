"""What the console and ``placement status`` show, computed from snapshots (pure, no I/O).

``map_payload``  the partition map in one compact binary body for the page's canvas: at
                 65,536 partitions x 3 replicas the owner table is 768 KiB of int32 that the
                 browser reads as one ``Int32Array`` (no JSON parse of 200,000 numbers)
``agreement``    every member's placement checksum, grouped, disagreement flagged
``balance``      leaderships per member against its weighted share (max/mean)
"""

from __future__ import annotations

import json
import struct
from collections import Counter
from collections.abc import Collection, Mapping
from typing import Any

from ...snapshot import PlacementSnapshot
from ...table import PlacementTable

MAP_MEDIA_TYPE = "application/octet-stream"


def map_payload(snap: PlacementSnapshot) -> bytes:
    """``u32 n`` (little-endian), ``n`` bytes of UTF-8 JSON (the snapshot's fields but the owner
    table: checksum, etag, partitions, replicas, members [[id, weight]], addresses, owners_width),
    padding to a multiple of 4, then ``partitions x owners_width`` little-endian int32 member
    indices (leader first; the ``owners`` bytes of the msgpack snapshot)."""
    data = snap.to_dict(binary=True)
    owners = data.pop("owners")
    header = json.dumps(data, separators=(",", ":")).encode()
    header += b" " * (-(4 + len(header)) % 4)  # JSON allows trailing blanks; int32s stay aligned
    return struct.pack("<I", len(header)) + header + owners


def read_map_payload(body: bytes) -> tuple[dict[str, Any], memoryview]:
    """The inverse of ``map_payload`` (for tests and scripts): the header and the owner bytes."""
    if len(body) < 4:
        raise ValueError("map payload shorter than its length prefix")
    (n,) = struct.unpack_from("<I", body)
    if 4 + n > len(body):
        raise ValueError("map payload header runs past the end of the body")
    return json.loads(body[4:4 + n]), memoryview(body)[4 + n:]


def agreement(answers: Mapping[str, str | None], view: Collection[str] = ()) -> dict[str, Any]:
    """``answers``: member id -> the placement checksum it reported (None: it did not answer);
    ``view``: the members that must answer (the stable view's, those with an HTTP address).

    The cluster agrees when every member that answered reports one checksum and no member of
    ``view`` failed to answer: a member this node cannot reach may hold another placement, so
    its silence is not agreement (``unconfirmed`` names such members). ``majority`` is the
    checksum most members report; ``disagree`` lists the members that report another."""
    counts = Counter(c for c in answers.values() if c is not None)
    majority = min(counts, key=lambda c: (-counts[c], c)) if counts else None
    unconfirmed = sorted(m for m in view if answers.get(m) is None)
    return {
        "agree": len(counts) == 1 and not unconfirmed,
        "majority": majority,
        "checksums": dict(sorted(counts.items())),
        "disagree": sorted(m for m, c in answers.items() if c is not None and c != majority),
        "unreachable": sorted(m for m, c in answers.items() if c is None),
        "unconfirmed": unconfirmed,
    }


def balance(table: PlacementTable) -> dict[str, Any]:
    """Leaderships per member over its weighted share ``P * w / sum(w)`` (1.0 = exactly fair);
    ``max``/``mean`` of that ratio over members with a positive weight (rendezvous hashing keeps
    max/mean near 1 + a few sigma/mean; bounded loads cap it at the capacity factor)."""
    weights = {m: w for m, w in table.members.items() if w > 0}
    total = sum(weights.values())
    load = table.load()
    ratios = {m: load.get(m, 0) / (table.partitions * w / total) for m, w in weights.items()}
    if not ratios:
        return {"members": 0, "max": None, "mean": None, "max_over_mean": None, "worst": None}
    mean = sum(ratios.values()) / len(ratios)
    worst = max(ratios, key=lambda m: (ratios[m], m))
    return {"members": len(ratios), "max": ratios[worst], "mean": mean, "max_over_mean": ratios[worst] / mean,
            "worst": worst}
