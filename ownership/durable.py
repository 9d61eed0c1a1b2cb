"""The record a witness keeps of its promises (``lease.WitnessState``), as bytes: pure, no
file I/O (``placement.service.witness_state`` writes and reads the file).

Format, version 1::

    placement-witness-state 1 <body length> <SHA-256 of the body, hex>\\n
    <body: JSON, {"cluster": ..., "node": ..., "state": {...}}>

``decode`` checks everything before it believes anything: the header, the length (a
truncated record says so), the checksum (a flipped byte), the version, the cluster and node
id it was written for, and the shape of every value. Any failure is a ``StateRecordError``
saying what is wrong; it never returns a state it did not fully verify.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

from .lease import WitnessState
from .views import NO_VIEW, AcceptorState, View

__all__ = ["MAGIC", "VERSION", "StateRecordError", "encode", "decode"]

MAGIC = b"placement-witness-state"
VERSION = 1
_MAX_HEADER = 128


class StateRecordError(ValueError):
    """The bytes are not a record of this node's promises (the message says why)."""


def _view(v: View) -> list[Any]:
    # [num, members, weights, incarnation], then [loads (hex), loads_at] if it carries loads or
    # pins, then [pins (hex)] if it carries pins: a view without them is recorded as before views
    # carried any.
    tail = [v.loads.hex(), v.loads_at] if v.loads or v.pins else []
    return [v.num, list(v.members), list(v.weights), v.inc] + tail + ([v.pins.hex()] if v.pins else [])


def encode(state: WitnessState, *, cluster: str, node: str) -> bytes:
    a = state.views
    acc = None if a.accepted is None else [a.accepted[0][0], a.accepted[0][1], _view(a.accepted[1])]
    body = json.dumps({
        "cluster": cluster, "node": node,
        "state": {
            "view": _view(a.view), "promised": [a.promised[0], a.promised[1]], "accepted": acc,
            "reserves": dict(sorted(state.reserves.items())),
            "condemnations": dict(sorted(state.condemnations.items())),
            "nonce_seq": state.nonce_seq,
            "forgetful": a.forgetful,
        },
    }, sort_keys=True, separators=(",", ":")).encode()
    header = b"%s %d %d %s\n" % (MAGIC, VERSION, len(body), hashlib.sha256(body).hexdigest().encode())
    return header + body


def _int(x: Any, what: str) -> int:
    if type(x) is not int or x < 0:
        raise StateRecordError(f"{what} is not a non-negative integer")
    return x


def _str(x: Any, what: str) -> str:
    if not isinstance(x, str):
        raise StateRecordError(f"{what} is not a string")
    return x


def _hex(x: Any, what: str) -> bytes:
    try:
        return bytes.fromhex(_str(x, what))
    except ValueError:
        raise StateRecordError(f"{what} are not hex") from None


def _decode_view(x: Any, what: str) -> View:
    # [num, members, weights, incarnation]; records written before views carried their
    # incarnation lack the last (0: unknown, ``StableViews.heard``).
    if not (isinstance(x, list) and len(x) in (3, 4, 6, 7) and isinstance(x[1], list) and isinstance(x[2], list)):
        raise StateRecordError(f"{what} is not [num, members, weights, incarnation(, loads, loads_at(, pins))]")
    num = _int(x[0], f"{what}'s number")
    inc = _int(x[3], f"{what}'s incarnation") if len(x) >= 4 else 0
    loads, loads_at, pins = b"", 0, b""
    if len(x) >= 6:
        loads = _hex(x[4], f"{what}'s loads")
        loads_at = _int(x[5], f"{what}'s loads time")
    if len(x) == 7:
        pins = _hex(x[6], f"{what}'s pins")
    members = tuple(_str(m, f"a member of {what}") for m in x[1])
    weights = tuple(float(w) if type(w) in (int, float) and math.isfinite(w) else math.nan for w in x[2])
    if num == 0 and not members and not weights:
        return NO_VIEW
    view = View.checked(num, members, weights, inc, loads, loads_at, pins)
    if view is None:
        raise StateRecordError(f"{what} is not a valid view")
    return view


def _counts(x: Any, what: str) -> dict[str, int]:
    if not isinstance(x, dict):
        raise StateRecordError(f"{what} is not a map")
    return {_str(k, f"a key of {what}"): _int(v, f"{what}[{k!r}]") for k, v in x.items()}


def decode(data: bytes, *, cluster: str, node: str) -> WitnessState:
    """The state in ``data``, written by ``encode`` for this cluster and node (else
    ``StateRecordError``)."""
    if not data:
        raise StateRecordError("empty (0 bytes): truncated before its header")
    end = data.find(b"\n", 0, _MAX_HEADER)
    if not data.startswith(MAGIC) and not MAGIC.startswith(data[:len(MAGIC)]):
        raise StateRecordError("not a witness state record (wrong header)")
    if end < 0:
        if len(data) < _MAX_HEADER:
            raise StateRecordError(f"truncated in its header ({len(data)} bytes)")
        raise StateRecordError("not a witness state record (no header line)")
    parts = data[:end].split(b" ")
    if len(parts) != 4 or parts[0] != MAGIC or not all(p.isdigit() for p in parts[1:3]):
        raise StateRecordError("not a witness state record (malformed header)")
    version, length, digest = int(parts[1]), int(parts[2]), parts[3]
    if version != VERSION:
        raise StateRecordError(f"format version {version}, this program reads version {VERSION}")
    body = data[end + 1:]
    if len(body) < length:
        raise StateRecordError(f"truncated: {len(body)} of {length} bytes of its body")
    if len(body) > length:
        raise StateRecordError(f"{len(body) - length} bytes after its end")
    if hashlib.sha256(body).hexdigest().encode() != digest:
        raise StateRecordError("checksum mismatch: the record is corrupt")
    try:
        doc = json.loads(body)
    except ValueError:
        raise StateRecordError("its body is not JSON") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("state"), dict):
        raise StateRecordError("its body has no state")
    if doc.get("cluster") != cluster:
        raise StateRecordError(f"written for cluster {doc.get('cluster')!r}, not {cluster!r}")
    if doc.get("node") != node:
        raise StateRecordError(f"written for node {doc.get('node')!r}, not {node!r}")
    s = doc["state"]
    view = _decode_view(s.get("view"), "the view")
    p = s.get("promised")
    if not (isinstance(p, list) and len(p) == 2):
        raise StateRecordError("the promised ballot is not [round, proposer]")
    promised = (_int(p[0], "the promised round"), _str(p[1], "the promised proposer"))
    a = s.get("accepted")
    accepted: tuple[tuple[int, str], View] | None = None
    if a is not None:
        if not (isinstance(a, list) and len(a) == 3):
            raise StateRecordError("the accepted value is not [round, proposer, view]")
        accepted = ((_int(a[0], "the accepted round"), _str(a[1], "the accepted proposer")),
                    _decode_view(a[2], "the accepted view"))
        if accepted[1].num != view.num + 1 or accepted[0] > promised:
            raise StateRecordError("the accepted value does not follow the view and the promise")
    forgetful = s.get("forgetful")
    if not isinstance(forgetful, bool):
        raise StateRecordError("the forgetful flag is not true or false")
    return WitnessState(AcceptorState(view, promised, accepted, forgetful),
                        _counts(s.get("reserves"), "the reserves"),
                        _counts(s.get("condemnations"), "the condemnations"),
                        _int(s.get("nonce_seq"), "the nonce counter"))
