"""``placement status --url URL``: the console's summary in a terminal (``--watch``, ``--json``).

It reads the endpoints the page reads (``/v1/members``, ``/v1/placement``, ``/v1/agreement``,
``/v1/events``, ``/v1/ownership`` for what the cluster survives, ``/v1/balancing`` for each
member's load) and works the balance out from the snapshot itself (``summary.balance``), so a
script gets the same numbers from ``--json`` as an operator from the table.

Load (issue 33): work per second on the partitions each member leads and its ratio to the mean,
as the node's ``GET /v1/balancing`` reports them. A node without ``--load-aware`` has no figures,
and a node older than that endpoint answers 404: the columns then show ``-`` (``None`` in
``--json``) instead of failing, so one ``placement`` works against a cluster being upgraded.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING, Any

from ... import argtypes
from ...errors import PlacementError, SnapshotError
from ...snapshot import PlacementSnapshot
from .summary import balance

if TYPE_CHECKING:
    import httpx

MSGPACK = "application/msgpack"
RECENT_KINDS = ("placement", "joined", "dead", "left", "declared-dead", "refused", "id-conflict", "survival")


def _get(client: httpx.Client, url: str, path: str, **kw: Any) -> httpx.Response:
    return _checked(_fetch(client, url, path, **kw), url, path)


def _checked(r: httpx.Response, url: str, path: str) -> httpx.Response:
    if r.status_code >= 400:
        try:
            detail = r.json().get("detail", r.text)
        except ValueError:
            detail = r.text
        raise PlacementError(f"{url}{path}: HTTP {r.status_code}: {detail}")
    return r


def _fetch(client: httpx.Client, url: str, path: str, **kw: Any) -> httpx.Response:
    import httpx  # imported where used: every ``placement`` command registers this module (~50 ms)

    try:
        return client.get(url + path, **kw)
    except httpx.HTTPError as exc:
        raise PlacementError(f"cannot reach {url}: {exc}") from None


def collect(client: httpx.Client, url: str, recent: int = 10) -> dict[str, Any]:
    """Everything ``placement status`` shows, as plain data (what ``--json`` prints)."""
    url = url.rstrip("/")
    try:
        return _collect(client, url, recent)
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise PlacementError(f"{url} did not answer like a placement node ({type(exc).__name__}: {exc})") from None


def _collect(client: httpx.Client, url: str, recent: int) -> dict[str, Any]:
    members = _get(client, url, "/v1/members").json()
    try:
        snap = PlacementSnapshot.from_msgpack(_get(client, url, "/v1/placement", headers={"Accept": MSGPACK}).content)
    except SnapshotError as exc:
        raise PlacementError(f"{url}/v1/placement: not a placement snapshot: {exc}") from None
    agreement = _get(client, url, "/v1/agreement").json()
    events = _get(client, url, "/v1/events", params={"limit": 1000}).json()
    ownership = _get(client, url, "/v1/ownership").json()
    survival = ownership.get("survival")  # null: available mode, no view yet
    loads = member_loads(_balancing(client, url))
    table = snap.table
    leads, replicas = table.load(), table.load(leader_only=False)
    for m in members:
        m["leads"], m["replica_of"] = leads.get(m["id"], 0), replicas.get(m["id"], 0)
        m["load"], m["load_over_mean"] = loads.get(m["id"], (None, None))
    moves = [e for e in events["events"] if e["kind"] in RECENT_KINDS][-recent:] if recent else []
    return {
        "node": events["node"], "url": url, "checksum": snap.checksum, "partitions": table.partitions,
        "replicas": table.replicas, "pinned": len(table.pins), "members": members, "agreement": agreement,
        "balance": balance(table),
        "recent": moves, "survival": survival, "security_warning": ownership.get("security_warning"),
    }


def _balancing(client: httpx.Client, url: str) -> Any:
    """``GET /v1/balancing``'s body, or None from a node older than it (404)."""
    r = _fetch(client, url, "/v1/balancing")
    return None if r.status_code == 404 else _checked(r, url, "/v1/balancing").json()


def member_loads(body: Any) -> dict[str, tuple[float | None, float | None]]:
    """id -> (load, load over mean) from a ``/v1/balancing`` body; members or fields it lacks
    (a node without ``--load-aware``, an older node: ``body`` None) are left out or None."""
    rows = body.get("members") if isinstance(body, dict) else None
    out: dict[str, tuple[float | None, float | None]] = {}
    for row in rows if isinstance(rows, list) else []:
        if isinstance(row, dict) and isinstance(row.get("id"), str):
            out[row["id"]] = (_number(row.get("load")), _number(row.get("load_over_mean")))
    return out


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def render(s: dict[str, Any], now: float | None = None) -> str:
    """The status as a terminal page (pure: ``now`` only ages the events)."""
    now = time.time() if now is None else now
    counts: dict[str, int] = {}
    for m in s["members"]:
        counts[m["status"]] = counts.get(m["status"], 0) + 1
    pinned = s.get("pinned") or 0  # (load-aware pins: docs/ownership.md, rule 13)
    lines = [f"node {s['node']} at {s['url']}  placement {s['checksum'][:12]}  "
             f"{s['partitions']} partitions x {s['replicas']} replicas" + (f", {pinned} pinned" if pinned else ""),
             "members: " + ", ".join(f"{n} {status}" for status, n in sorted(counts.items())),
             f"{'id':<16}{'status':<9}{'incarnation':>12}{'weight':>8}{'leads':>7}{'replica of':>11}"
             f"{'load/s':>10}{'x mean':>8}{'heard':>8}  http"]
    for m in sorted(s["members"], key=lambda m: m["id"]):
        heard, load, ratio = m.get("heard_s_ago"), m.get("load"), m.get("load_over_mean")
        lines.append(f"{m['id']:<16}{m['status']:<9}{m['incarnation']:>12}{m['weight']:>8g}{m['leads']:>7}"
                     f"{m['replica_of']:>11}{'-' if load is None else f'{load:.4g}':>10}"
                     f"{'-' if ratio is None else f'{ratio:.2f}':>8}"
                     f"{'-' if heard is None else f'{heard:.1f}s':>8}  {m['http']}")
    if s.get("security_warning"):  # right under the first line: before everything else
        lines.insert(1, f"WARNING: {s['security_warning']}")
    v = s.get("survival")
    if v is not None:
        lines.append(f"witnesses: {', '.join(v['witnesses'])} (the first breaks a tie)")
        lines.append(f"WARNING: {v['warning']}" if v["warning"] else f"survives: {v['summary']}")
        lines.append(f"split: {v['split']}")
    a = s["agreement"]
    answering = len(a["members"]) - len(a["unreachable"])
    unconfirmed = a.get("unconfirmed") or []
    if a["agree"]:
        lines.append(f"agreement: all {answering} answering members agree on {a['majority'][:12]}")
    elif unconfirmed and len(a["checksums"]) <= 1:
        lines.append(f"agreement: UNCONFIRMED - cannot reach {', '.join(unconfirmed)} of the stable view; "
                     f"the {answering} answering members report {str(a['majority'])[:12]}")
    else:
        lines.append(f"agreement: DISAGREE - {len(a['checksums'])} checksums among {answering} answering members; "
                     f"majority {str(a['majority'])[:12]}; others: {', '.join(a['disagree']) or '-'}")
    for m in a["members"]:
        if m["checksum"] is None:
            lines.append(f"  {m['id']} did not answer: {m['error']}")
    b = s["balance"]
    if b["members"]:
        lines.append(f"balance: max/mean {b['max_over_mean']:.3f} (leaderships over weighted share: "
                     f"max {b['max']:.3f} at {b['worst']}, mean {b['mean']:.3f}, {b['members']} members)")
    else:
        lines.append("balance: no member has a positive weight")
    lines.append("recent changes:" if s["recent"] else "recent changes: none in the node's log")
    for e in reversed(s["recent"]):
        lines.append(f"  {_age(now - e['at']):>9}  {e['kind']:<13} {e['member']:<12} {e['detail']}")
    return "\n".join(lines)


def _age(seconds: float) -> str:
    seconds = max(0.0, seconds)
    return f"{seconds:.0f} s ago" if seconds < 90 else f"{seconds / 60:.0f} min ago"


def cmd_status(args: argparse.Namespace) -> int:
    import httpx

    with httpx.Client(timeout=args.timeout) as client:
        shown = 0
        try:
            while True:
                status = collect(client, args.url, args.recent)
                text = json.dumps(status, indent=2) if args.json else render(status)
                if args.watch is not None and not args.json and sys.stdout.isatty():
                    text = "\x1b[H\x1b[2J" + text  # home + clear: refresh in place
                print(text, flush=True)
                shown += 1
                if args.watch is None or (args.count is not None and shown >= args.count):
                    return 0
                time.sleep(args.watch)  # the refresh period of a terminal display
        except KeyboardInterrupt:  # Ctrl-C ends --watch (or a slow fetch) quietly
            return 130 if args.watch is None else 0


def add_subcommands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("status", help="members, agreement, balance and recent moves of a running cluster")
    p.add_argument("--url", type=argtypes.http_url, default="http://127.0.0.1:8001", help="a node's HTTP URL")
    p.add_argument("--json", action="store_true", help="print the status as JSON")
    p.add_argument("--watch", type=argtypes.number(0.1, 3600), nargs="?", const=2.0, default=None, metavar="SECONDS",
                   help="refresh every SECONDS (default 2) until Ctrl-C")
    p.add_argument("--count", type=argtypes.integer(1, 1_000_000), default=None,
                   help="with --watch: stop after this many refreshes")
    p.add_argument("--recent", type=argtypes.integer(0, 1000), default=10, help="recent changes shown (default 10)")
    p.add_argument("--timeout", type=argtypes.number(0.1, 600), default=5.0, help="HTTP timeout in seconds (default 5)")
    p.set_defaults(func=cmd_status)
