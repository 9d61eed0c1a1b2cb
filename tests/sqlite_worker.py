"""A partition processor for real `placement node --worker sqlite_worker:Recorder` processes
(tests/test_exclusive_processes.py): it records every unit of work in one SQLite file shared by
all nodes, through a store that fences by epoch, the way a user's database would.

A unit of work is: check ``ctx.owned()``, then write ``(partition, node, epoch, t)`` where ``t``
is the time of the check. The write is accepted only if ``epoch`` is at least the highest epoch
stored for the partition (Kleppmann's fencing token); a refused write is counted in ``stale``.
Closing for a handoff drains for ``PLACEMENT_TEST_DRAIN_S`` (1 s) and writes once more.
The store is the file named by ``PLACEMENT_TEST_DB``.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time

from placement.service.workers import PartitionProcessor

SCHEMA = """
CREATE TABLE IF NOT EXISTS units (partition INTEGER, node TEXT, epoch INTEGER, t REAL);
CREATE TABLE IF NOT EXISTS fence (partition INTEGER PRIMARY KEY, epoch INTEGER);
CREATE TABLE IF NOT EXISTS stale (partition INTEGER, node TEXT, epoch INTEGER, t REAL);
CREATE TABLE IF NOT EXISTS opened (partition INTEGER, node TEXT, epoch INTEGER, payload TEXT, t REAL);
"""


def connect(path: str) -> sqlite3.Connection:
    db = sqlite3.connect(path, timeout=10.0, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.executescript(SCHEMA)
    return db


_db: sqlite3.Connection | None = None


def _conn() -> sqlite3.Connection:
    global _db
    if _db is None:
        _db = connect(os.environ["PLACEMENT_TEST_DB"])
    return _db


def write(partition: int, node: str, epoch: int, t: float) -> bool:
    """One fenced write (a transaction); False when a higher epoch was stored before."""
    db = _conn()
    db.execute("BEGIN IMMEDIATE")
    try:
        row = db.execute("SELECT epoch FROM fence WHERE partition = ?", (partition,)).fetchone()
        if row is not None and row[0] > epoch:
            db.execute("INSERT INTO stale VALUES (?, ?, ?, ?)", (partition, node, epoch, t))
            return False
        db.execute("INSERT OR REPLACE INTO fence VALUES (?, ?)", (partition, epoch))
        db.execute("INSERT INTO units VALUES (?, ?, ?, ?)", (partition, node, epoch, t))
        return True
    finally:
        db.execute("COMMIT")


class Recorder(PartitionProcessor):
    period_s = 0.2

    async def open(self, ctx):
        self.node = ctx.node_id
        _conn().execute("INSERT INTO opened VALUES (?, ?, ?, ?, ?)",
                        (ctx.partition, self.node, ctx.epoch, repr(ctx.payload), time.time()))
        ctx.checkpoint = 0

    def unit(self, ctx) -> None:
        t = time.time()
        if ctx.owned():
            write(ctx.partition, self.node, ctx.epoch, t)
            ctx.checkpoint += 1

    async def process(self, ctx):
        while not ctx.stopping.is_set():
            self.unit(ctx)
            await asyncio.sleep(self.period_s)

    async def close(self, ctx, reason):
        if reason == "released":
            await asyncio.sleep(float(os.environ.get("PLACEMENT_TEST_DRAIN_S", "1.0")))
            self.unit(ctx)  # the last write of the drain: the checkpoint
        return {"node": self.node, "units": ctx.checkpoint}
