"""What a user types, validated: argparse ``type=`` functions shared by every ``placement``
subcommand, the ``PLACEMENT_*`` variables of ``placement node``, and the JSON files flags name.

Each validator turns one string into a value or raises ``argparse.ArgumentTypeError`` with a
one-line message saying what is allowed and what was given. argparse puts the flag in front
(``argument --loss: expected a number in [0, 1), got '2'``), ``env_value`` the variable's
name; ``Parser`` prints that one line (no usage block) and exits with status 2.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import re
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar
from urllib.parse import urlsplit

from .errors import InvalidConfigError, InvalidMembershipError
from .rendezvous import MAX_WEIGHT, WEIGHT_SCALE, weight_units
from .table import MAX_PARTITIONS, MAX_REPLICAS

if TYPE_CHECKING:
    from membership.seeds import DnsSeed

T = TypeVar("T")


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line (subparsers inherit the class)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _bad(allowed: str, text: str) -> argparse.ArgumentTypeError:
    return argparse.ArgumentTypeError(f"expected {allowed}, got {text!r}")


def _named(name: str, fn: Callable[[str], T]) -> Callable[[str], T]:
    fn.__name__ = fn.__qualname__ = name  # argparse names the type in some messages
    return fn


def _bounds(kind: str, lo: float | None, hi: float | None, lo_open: bool, hi_open: bool) -> str:
    if lo is not None and hi is not None:
        return f"{kind} in {'(' if lo_open else '['}{lo}, {hi}{')' if hi_open else ']'}"
    if lo is not None:
        return f"{kind} {'>' if lo_open else '>='} {lo}"
    if hi is not None:
        return f"{kind} {'<' if hi_open else '<='} {hi}"
    return kind


def integer(lo: int | None = None, hi: int | None = None, name: str = "integer") -> Callable[[str], int]:
    """Integers in [lo, hi] (either bound optional)."""
    allowed = _bounds("an integer", lo, hi, False, False)

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise _bad(allowed, text) from None
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise _bad(allowed, text)
        return value

    return _named(name, parse)


def number(lo: float | None = None, hi: float | None = None, *, lo_open: bool = False, hi_open: bool = False,
           name: str = "number") -> Callable[[str], float]:
    """Finite floats between lo and hi (each bound optional, closed unless ``*_open``)."""
    allowed = _bounds("a number" if hi is not None else "a finite number", lo, hi, lo_open, hi_open)

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise _bad(allowed, text) from None
        if not math.isfinite(value) or (lo is not None and (value <= lo if lo_open else value < lo)) \
                or (hi is not None and (value >= hi if hi_open else value > hi)):
            raise _bad(allowed, text)
        return value

    return _named(name, parse)


positive_int = integer(1, name="positive_int")
non_negative_int = integer(0, name="non_negative_int")
port = integer(1, 65535, name="port")  # a fixed port (HOST:PORT also takes 0, "any free port")
partitions = integer(1, MAX_PARTITIONS, name="partitions")
replicas = integer(1, MAX_REPLICAS, name="replicas")
hash_seed = integer(0, (1 << 32) - 1, name="hash_seed")  # the placement hash seed (32-bit)
positive_float = number(0, lo_open=True, name="positive_float")
non_negative_float = number(0, name="non_negative_float")
fraction = number(0, 1, name="fraction")
loss_rate = number(0, 1, hi_open=True, name="loss_rate")  # 1 would drop every datagram
capacity_factor = number(1, name="capacity_factor")


def ownership_mode(text: str) -> str:
    """``exclusive`` (never two owners) or ``available`` (owns what its own view says)."""
    if text not in ("exclusive", "available"):
        raise _bad("exclusive or available", text)
    return text


def balance_by(text: str) -> str:
    """``pins`` (chosen partitions move) or ``weights`` (members' weights move): ``--balance-by``."""
    if text not in ("pins", "weights"):
        raise _bad("pins or weights", text)
    return text


def import_ref(text: str) -> Callable[..., Any]:
    """``MODULE:ATTR`` (as uvicorn's app argument): the callable it names, imported now so a
    typo is an error at start, not when the first partition arrives. The current directory is
    searched too, as uvicorn does for its app."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    module, _, attr = text.partition(":")
    if not module or not attr:
        raise _bad("MODULE:NAME, e.g. myapp.workers:Processor", text)
    try:
        obj: Any = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except Exception as exc:  # ImportError, AttributeError, or the module's own error
        raise argparse.ArgumentTypeError(f"cannot load {text!r}: {type(exc).__name__}: {exc}") from None
    if not callable(obj):
        raise argparse.ArgumentTypeError(f"{text!r} is not callable")
    return obj


def weight(text: str) -> float:
    """A member's weight: 0 (member that owns nothing) or 1/65536 .. 1e6 (``weight_units``)."""
    try:
        value = float(text)
        weight_units("", value)
    except (ValueError, InvalidMembershipError):
        raise _bad(f"a weight: 0 or a number in [1/{WEIGHT_SCALE}, {MAX_WEIGHT:.0f}]", text) from None
    return value


def member_id(text: str) -> str:
    """A member id: non-empty, printable, no leading or trailing blanks (as ``NodeConfig``)."""
    if not text or not text.isprintable() or text != text.strip():
        raise _bad("a non-empty printable member id without surrounding blanks", text)
    return text


def zone(text: str) -> str:
    """A zone name (``placement.zones.check_zone``): at most 64 printable characters without
    surrounding blanks; "" is no zone."""
    from .zones import MAX_ZONE_CHARS

    if len(text) > MAX_ZONE_CHARS or not text.isprintable() or text != text.strip():
        raise _bad(f"a zone name of at most {MAX_ZONE_CHARS} printable characters without surrounding blanks", text)
    return text


def member_ids(text: str) -> tuple[str, ...]:
    """Comma-separated member ids (each as ``member_id``), in order, without repeats."""
    ids = tuple(dict.fromkeys(part.strip() for part in text.split(",")))
    if not ids or not all(ids):
        raise _bad("comma-separated member ids, e.g. n1,n2,n3", text)
    return tuple(member_id(i) for i in ids)


def boolean(text: str) -> bool:
    """true/false, yes/no, on/off or 1/0 (any case): a switch's environment variable."""
    word = text.strip().lower()
    if word in ("1", "true", "yes", "on"):
        return True
    if word in ("0", "false", "no", "off"):
        return False
    raise _bad("true or false (also 1/0, yes/no, on/off)", text)


def non_empty(text: str) -> str:
    if not text:
        raise _bad("a non-empty string", text)
    return text


def member(text: str) -> tuple[str, float]:
    """``ID=WEIGHT`` (``ID`` alone: weight 1)."""
    ident, sep, w = text.partition("=")
    try:
        return member_id(ident), weight(w) if sep else 1.0
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"in ID=WEIGHT {text!r}: {exc}") from None


def member_zone(text: str) -> tuple[str, str]:
    """``ID=ZONE``: a member's zone, for a table computed offline (``placement table``,
    ``spark-route --members``); a node names its own with ``--zone NAME``."""
    ident, sep, z = text.partition("=")
    if not sep:
        raise _bad("ID=ZONE", text)
    try:
        return member_id(ident), zone(z)
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"in ID=ZONE {text!r}: {exc}") from None


def host_port(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:7001`` for IPv6), port 0-65535."""
    host, sep, p = text.rpartition(":")
    if not sep or not host.strip("[]") or not p.isdigit() or int(p) > 65535:
        raise _bad("HOST:PORT with a port in 0-65535", text)
    return host.strip("[]"), int(p)


_DNS_LABEL = re.compile(r"(?!-)[A-Za-z0-9_-]{1,63}(?<!-)")
DEFAULT_GOSSIP_PORT = 7001


def seed(text: str) -> tuple[str, int] | DnsSeed:
    """``HOST:PORT``, or ``dns:NAME[:PORT]`` (every A/AAAA record of NAME, resolved again before
    each join retry; port 7001 unless given)."""
    if not text.startswith("dns:"):
        return host_port(text)
    name, sep, p = text[4:].partition(":")
    labels = name.rstrip(".").split(".")
    if len(name) > 253 or not all(_DNS_LABEL.fullmatch(label) for label in labels) \
            or (sep and (not p.isdigit() or not 0 < int(p) <= 65535)):
        raise _bad("HOST:PORT, or dns:NAME[:PORT] with a DNS name and a port in 1-65535", text)
    from membership.seeds import DnsSeed  # here: the other validators (and Spark executors) need no gossip code
    return DnsSeed(name, int(p) if sep else DEFAULT_GOSSIP_PORT)


def key_value(text: str) -> tuple[str, str]:
    k, sep, v = text.partition("=")
    if not sep or not k:
        raise _bad("KEY=VALUE with a non-empty KEY", text)
    return k, v


def http_url(text: str) -> str:
    try:
        parts = urlsplit(text)
        ok = parts.scheme in ("http", "https") and bool(parts.hostname)
        parts.port  # noqa: B018 - raises ValueError when the port is not a number in 0-65535
    except ValueError:
        ok = False
    if not ok:
        raise _bad("an http:// or https:// URL with a host", text)
    return text


def env_variable(flag: str) -> str:
    """The environment variable of a command-line flag: ``--gossip-advertise`` ->
    ``PLACEMENT_GOSSIP_ADVERTISE``."""
    return "PLACEMENT_" + flag[2:].replace("-", "_").upper()


def env_value(variable: str, text: str, parse: Callable[[str], T]) -> T:
    """``parse(text)`` for an environment variable: a bad value names the variable."""
    try:
        return parse(text)
    except argparse.ArgumentTypeError as exc:
        raise InvalidConfigError(f"environment variable {variable}: {exc}") from None


# ----- JSON files named by flags ------------------------------------------------------------
def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:  # json.load would keep the last silently
        if key in obj:
            raise InvalidConfigError(f"duplicate key {key!r}")
        obj[key] = value
    return obj


def read_json(path: str) -> Any:
    """The JSON value in ``path``; a malformed file is reported with its name, line and column."""
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh, object_pairs_hook=_no_duplicate_keys)
    except InvalidConfigError as exc:
        raise InvalidConfigError(f"{path}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise InvalidConfigError(f"{path}:{exc.lineno}:{exc.colno}: not valid JSON: {exc.msg}") from None
    except UnicodeDecodeError:
        raise InvalidConfigError(f"{path}: not a UTF-8 text file") from None
    except OSError as exc:
        raise InvalidConfigError(f"{path}: {exc.strerror or exc}") from None


def read_members(path: str) -> dict[str, float]:
    """Members from a JSON file: ``{"id": weight, ...}`` or ``[["id", weight], ...]``."""
    data = read_json(path)
    shape = 'members as {"id": weight, ...} or [["id", weight], ...]'
    if isinstance(data, Mapping):
        pairs = list(data.items())
    elif isinstance(data, list) and all(isinstance(p, list) and len(p) == 2 for p in data):
        pairs = [tuple(p) for p in data]
    else:
        raise InvalidConfigError(f"{path}: expected {shape}")
    members: dict[str, float] = {}
    for ident, w in pairs:
        try:
            if not isinstance(ident, str) or ident in members:
                raise InvalidMembershipError(f"{'duplicate' if ident in members else 'bad'} member id {ident!r}")
            weight_units(member_id(ident), w)
        except (argparse.ArgumentTypeError, InvalidMembershipError) as exc:
            raise InvalidConfigError(f"{path}: {exc}") from None
        members[ident] = w
    if not members:
        raise InvalidConfigError(f"{path}: no members ({shape})")
    return members


def read_zones(path: str) -> dict[str, str]:
    """Member zones from a JSON file: ``{"id": "zone", ...}`` (``""``: no zone). Whether every id
    is a member is the table's check (``zones.validate_zones``)."""
    data = read_json(path)
    if not isinstance(data, Mapping) or not all(isinstance(z, str) for z in data.values()):
        raise InvalidConfigError(f'{path}: expected zones as {{"id": "zone", ...}}')
    try:
        return {member_id(ident): zone(z) for ident, z in data.items()}
    except argparse.ArgumentTypeError as exc:
        raise InvalidConfigError(f"{path}: {exc}") from None


def zones_given(pairs: list[tuple[str, str]] | None, path: str | None) -> dict[str, str] | None:
    """The zones of ``--zone ID=ZONE`` (repeatable) or ``--zones FILE`` (None: neither given)."""
    if path:
        return read_zones(path)
    if not pairs:
        return None
    out: dict[str, str] = {}
    for ident, z in pairs:
        if ident in out:
            raise InvalidConfigError(f"--zone names member {ident!r} twice")
        out[ident] = z
    return out
