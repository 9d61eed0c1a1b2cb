"""How long the exclusive-ownership core takes to hand P partitions from a founder to a joiner
(CPU of the rules and the codec only; no network, simulated clock).

    PYTHONPATH=. python benchmarks/bench_handoff.py --partitions 4096

``batched``: what the node and the simulator do - the messages for one member go out in as few
datagrams as fit (``wire.encode_many``) and the rules run once per datagram and once
per group of finished releases. ``per-message``: one datagram and one run of the rules per
message, the reference measured in the same run (what the node did before).
"""

from __future__ import annotations

import argparse
import time

from ownership import ExclusiveConfig, Ownership, Release, wire
from placement import PlacementTable


def handoff(partitions: int, batched: bool) -> tuple[float, int, int]:
    """(wall seconds, datagrams, partitions moved) for one join."""
    tables: dict[tuple, PlacementTable] = {}

    def table(view):
        key = tuple(sorted(view.items()))
        if key not in tables:
            tables[key] = PlacementTable.build(dict(view), partitions, 1, 0)
        return tables[key]

    cfg = ExclusiveConfig()
    a = Ownership("n1", cfg, table, 0.0, founder=True)
    a.set_view({"n1": 1.0}, (), 0.0)
    b = Ownership("n2", cfg, table, 0.0, founder=False)
    nodes = {"n1": a, "n2": b}
    view = {"n1": 1.0, "n2": 1.0}
    share = len(table(view).owned_by("n2", leader_only=True))
    t, datagrams = 0.0, 0
    wall = time.perf_counter()
    a.set_view(view, (), t)
    b.set_view(view, (), t)
    while len(b.owned) < share and t < 60:
        t += 0.05
        for core in (a, b):
            core.handle_timer(t)
        for _ in range(4):
            for src in (a, b):
                done = [(x.partition, None) for x in src.actions() if isinstance(x, Release)]
                if done:
                    if batched:
                        src.releases_done(done, t)
                    else:
                        for item in done:
                            src.releases_done([item], t)
                by_dst: dict[str, list] = {}
                for dst, msg in src.messages(t):
                    by_dst.setdefault(dst, []).append(msg)
                for dst, msgs in by_dst.items():
                    grams = (wire.encode_many(src.me, msgs) if batched
                             else [wire.encode(src.me, m) for m in msgs])
                    for data in grams:
                        datagrams += 1
                        decoded = wire.decode_many(data)
                        assert decoded is not None  # whole datagrams, just encoded
                        sender, got = decoded
                        nodes[dst].receive_many(sender, got, t)
    return time.perf_counter() - wall, datagrams, len(b.owned)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--partitions", type=int, default=4096)
    args = p.parse_args(argv)
    ref = handoff(args.partitions, batched=False)
    new = handoff(args.partitions, batched=True)
    for name, (wall, grams, moved) in (("per-message", ref), ("batched", new)):
        print(f"{name:>12}: {moved} partitions handed over, {grams} datagrams, {wall:.2f} s wall")
    print(f"batched / per-message: {new[0] / ref[0]:.3f}x time, {new[1] / ref[1]:.3f}x datagrams")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
