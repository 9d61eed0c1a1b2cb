"""Decoding of serialised snapshots: bad bytes become ``SnapshotError``, never another type."""

from __future__ import annotations

import json
from typing import Any

import msgpack

from .errors import SnapshotError


def load_msgpack_map(data: bytes) -> dict[str, Any]:
    try:
        decoded = msgpack.unpackb(data, raw=False)
    except Exception as exc:  # msgpack raises several unrelated types on bad input
        raise SnapshotError(f"snapshot is not valid msgpack: {exc}") from exc
    if not isinstance(decoded, dict):
        raise SnapshotError("snapshot must be a msgpack map")
    return decoded


def load_json_object(text: str | bytes) -> dict[str, Any]:
    try:
        decoded = json.loads(text)
    except ValueError as exc:
        raise SnapshotError(f"snapshot is not valid JSON: {exc}") from exc
    if not isinstance(decoded, dict):
        raise SnapshotError("snapshot must be a JSON object")
    return decoded
