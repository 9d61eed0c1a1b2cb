"""What a key is, for every route that takes one (``GET /v1/owners``, ``POST /v1/route``,
``POST /v1/work``, ``require_ownership``; issue 31): its own module, with no imports, so the HTTP
API can check keys without importing the client library (and httpx) before a node serves.
"""

from __future__ import annotations

__all__ = ["MAX_KEY_CHARS", "key_error"]

#: The longest key any route takes, in characters (``GET /v1/owners``, ``POST /v1/route``,
#: ``POST /v1/work``, ``require_ownership``): one rule for every route (issue 31).
MAX_KEY_CHARS = 4096


def key_error(key: str) -> str | None:
    """Why ``key`` is not a key any route takes, or None: keys are 1 to ``MAX_KEY_CHARS``
    characters of valid Unicode text (no lone surrogates: keys hash as UTF-8)."""
    if not key:
        return "a key must not be empty"
    if len(key) > MAX_KEY_CHARS:
        return f"a key is at most {MAX_KEY_CHARS} characters, got {len(key)}"
    try:
        key.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"keys must be valid Unicode text: {exc.reason}"
    return None
