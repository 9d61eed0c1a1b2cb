"""The partition-worker API (placement.service.workers) on real in-process nodes: one processor per
owned partition, the drain before the handoff, the checkpoint travelling to the next owner,
epochs, and "lost" on a takeover. Units of work are accounted exactly, with this process's
clock, only when ``ctx.owned()`` allowed them."""

import asyncio
import itertools
import time

from ownership.lease import view_epoch
from placement.service.node import Node
from placement.service.workers import PartitionProcessor, PartitionWorkers

from test_node_exclusive import P, config, eventually, owned_once


class Journal:
    def __init__(self) -> None:
        self.units: list[tuple[int, str, int, float]] = []  # partition, node, epoch, when
        self.opened: list[tuple[int, str, int, object]] = []  # partition, node, epoch, payload
        self.closed: list[tuple[int, str, str]] = []  # partition, node, reason

    def factory(self, node: Node, fail_on: int | None = None):
        journal = self

        class Counter(PartitionProcessor):
            async def open(self, ctx):
                journal.opened.append((ctx.partition, node.node_id, ctx.epoch, ctx.payload))
                ctx.checkpoint = ctx.payload or 0
                if ctx.partition == fail_on:
                    raise RuntimeError("a processor bug")

            async def process(self, ctx):
                while not ctx.stopping.is_set():
                    if ctx.owned():
                        journal.units.append((ctx.partition, node.node_id, ctx.epoch, time.monotonic()))
                        ctx.checkpoint += 1
                    await asyncio.sleep(0.02)

            async def close(self, ctx, reason):
                journal.closed.append((ctx.partition, node.node_id, reason))
                if reason == "released":
                    await asyncio.sleep(0.1)  # the drain: flush, write the checkpoint
                    assert ctx.owned() and ctx.deadline is not None
                    journal.units.append((ctx.partition, node.node_id, ctx.epoch, time.monotonic()))
                    ctx.checkpoint += 1
                return ctx.checkpoint

        return Counter

    def spans(self):
        """(partition, node, epoch) -> [first unit, last unit]."""
        out: dict[tuple[int, str, int], list[float]] = {}
        for p, n, e, t in self.units:
            span = out.setdefault((p, n, e), [t, t])
            span[0], span[1] = min(span[0], t), max(span[1], t)
        return out

    def overlaps(self):
        by_p: dict[int, list] = {}
        for (p, n, e), (s, t) in self.spans().items():
            by_p.setdefault(p, []).append((s, t, n, e))
        bad = []
        for p, spans in by_p.items():
            spans.sort()
            bad += [(p, a, b) for a, b in itertools.pairwise(spans) if b[0] <= a[1]]
        return bad


async def three_nodes(journal, fail_on=None, before_join=None):
    """n1 founds the cluster, n2 and n3 join; each runs ``journal``'s processors. ``fail_on``:
    a partition whose open raises on n1; ``before_join(node)`` runs on n3 right after its start."""
    nodes: list[Node] = []
    workers: list[PartitionWorkers] = []
    for i in (1, 2, 3):
        node = Node(config(f"n{i}", join=[nodes[0].member.bound] if nodes else ()))
        await node.start()
        if i == 3 and before_join is not None:
            before_join(node)
        nodes.append(node)
        workers.append(PartitionWorkers(node, journal.factory(node, fail_on=fail_on if i == 1 else None)))
    return nodes, workers


def test_processors_run_per_partition_hand_checkpoints_on_and_never_overlap():
    async def main():
        journal = Journal()
        nodes, workers = await three_nodes(journal, fail_on=5)
        await eventually(lambda: owned_once(nodes) and all(n.owned_partitions() for n in nodes), timeout_s=20)
        await eventually(lambda: all(w.running() == n.owned_partitions() for w, n in zip(workers, nodes)))
        assert workers[0].errors == 1  # the failing open was counted; the node carried on
        await eventually(lambda: {n for _, n, _, _ in journal.units} == {"n1", "n2", "n3"},
                         what="some work on every node")
        await nodes[2].leave()
        rest = nodes[:2]
        await eventually(lambda: owned_once(rest) and all(w.running() == n.owned_partitions()
                                                          for w, n in zip(workers, rest)), timeout_s=20)
        # Every partition that moved resumed from the checkpoint its previous owner handed over:
        # the count of units done on it before, by all its earlier owners - none lost, none twice.
        moved = [(p, n, e, pl) for p, n, e, pl in journal.opened if pl is not None]
        assert len({p for p, *_ in moved}) > P // 4
        for p, n, e, pl in moved:
            assert pl == sum(1 for q, _, ep, _ in journal.units if q == p and ep < e), (p, n, e, pl)
        # Epochs of each partition rise with each new owner; work never overlaps.
        by_p: dict[int, list[int]] = {}
        for p, _n, e, _ in journal.opened:
            by_p.setdefault(p, []).append(e)
        assert all(a < b for eps in by_p.values() for a, b in itertools.pairwise(eps))
        assert journal.overlaps() == []
        assert {r for _, n, r in journal.closed if n == "n3"} == {"released"}
        for n, w in zip(rest, workers):
            await n.leave()
            await w.close()

    asyncio.run(main())


def test_a_killed_owners_partitions_restart_elsewhere_with_higher_epochs():
    async def main():
        journal = Journal()

        # A member whose epochs are far above the others', above those the views of this run
        # give creations too (rule 8's ``view_epoch``): only the condemnation's floor covers them.
        far = view_epoch(1000)

        def long_history(node):
            node._thread.runner.own.epoch_clock = far

        nodes, workers = await three_nodes(journal, before_join=long_history)
        await eventually(lambda: owned_once(nodes) and all(n.owned_partitions() for n in nodes), timeout_s=20)
        victim = nodes[2]
        assert min(victim.grant(p).epoch for p in victim.owned_partitions()) > far
        lost = victim.owned_partitions()
        epochs = {p: victim.grant(p).epoch for p in lost}
        victim.close()  # as kill -9
        killed, before = time.monotonic(), len(journal.opened)
        await workers[2].close()  # its tasks die with the process
        rest = nodes[:2]
        await eventually(lambda: owned_once(rest), timeout_s=30)
        await eventually(lambda: lost <= workers[0].running() | workers[1].running())
        taken = [(p, n, e, pl) for p, n, e, pl in journal.opened[before:] if p in lost]
        assert {p for p, *_ in taken} == lost
        for p, _n, e, pl in taken:
            assert e > epochs[p], (p, e, epochs[p])  # fencing: the store refuses the dead owner
            assert pl is None  # a takeover: no checkpoint came from the dead owner
        assert all(t < killed for p, n, e, t in journal.units if n == "n3")
        assert journal.overlaps() == []
        for n, w in zip(rest, workers):
            await n.leave()
            await w.close()

    asyncio.run(main())
