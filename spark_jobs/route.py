"""The routing job: assign work items to their owners on Spark, then deliver or write them.

    snapshot = fetch_snapshot(["http://127.0.0.1:8001"])       # or offline_snapshot("members.json")
    routed = assign_owners(spark, read_items(spark, "items.parquet"), "key", snapshot)
    report = deliver(spark, routed, "key", snapshot, urls)      # or write_by_owner(routed, "out/")

The driver fetches one placement snapshot; owner assignment needs only its ``Router`` (seed,
partition count, member ids, each partition's leader - from the driver's ``PlacementTable``).
The key hash is ``placement.hashing.key_hash`` (MurmurHash3_x86_32 of the UTF-8 key), computed
either in the JVM by a small Java UDF (``spark_jobs/jvm.py``; no Python worker, so about the cost
of a plain repartition) or in Python workers over whole Arrow batches (``mapInArrow`` +
``spark_jobs.arrow_hash``, murmur3 vectorised over the Arrow buffers). Both are property-tested
against the scalar spec; ``engine="auto"`` uses the JVM when its jar is on the session's
classpath and falls back to Python with a logged reason. Never PySpark's ``portable_hash``
(which depends on PYTHONHASHSEED) nor Spark's ``hash()`` (Murmur3 with seed 42 and a
non-standard tail). Keys are routed as strings (the key column is cast).

Delivery repartitions by owner (Spark's own Murmur3 on the owner string, so each owner's items
meet in few tasks) and runs a ``spark_jobs.deliver.Deliverer`` per task. Every item leaves one
outcome row (delivered / failed), written to ``<work dir>/outcomes`` as Parquet *once*; the
report's accounting reads those rows back and checks them against the input item ids:
no item missing, none twice.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from placement.argtypes import read_members
from placement.client import NoNodeReachableError, PlacementClient
from placement.errors import NoOwnerError, PlacementError
from placement.snapshot import PlacementSnapshot
from placement.table import PlacementTable

from .deliver import (
    DEFAULT_OPTIONS,
    DELIVERED,
    FAILED,
    Deliverer,
    DeliveryOptions,
    Item,
)

ITEM_ID, PARTITION, OWNER = "item_id", "partition", "owner"
FORMATS = ("parquet", "csv", "json")
MAX_FAILED_LISTED = 1000


class NodeUnreachableError(PlacementError):
    """No node URL answered ``GET /v1/placement``."""


# ----- the snapshot (driver) ---------------------------------------------------------------
def fetch_snapshot(urls: Sequence[str], timeout_s: float = 5.0) -> PlacementSnapshot:
    try:
        with PlacementClient(list(urls), refresh=False, timeout_s=timeout_s) as client:
            return client.snapshot
    except NoNodeReachableError as exc:
        raise NodeUnreachableError(f"{exc}. Is a node running there? Check --url "
                                   "(e.g. http://127.0.0.1:8001, see `placement cluster`).") from None


def offline_snapshot(members_file: str, partitions: int = 4096, replicas: int = 1, seed: int = 0,
                     zones: Mapping[str, str] | None = None) -> PlacementSnapshot:
    """Plan without a cluster: members from a JSON file ({"n1": 1.0, ...}); no addresses.
    ``zones`` (id -> zone) as the nodes' ``--zone``: the leaders, which items are routed to, are
    the same with or without them (README, "Zones"), but the snapshot - its checksum in the
    report, its replica sets - is then the one a zoned cluster with these members serves."""
    table = PlacementTable.build(read_members(members_file), partitions=partitions, replicas=replicas, seed=seed,
                                 zones=zones)
    return PlacementSnapshot(table, {})


def _check_owners(snapshot: PlacementSnapshot) -> None:
    if snapshot.table.owner_indices()[1].shape[1] == 0:
        raise NoOwnerError("the placement has no member with a positive weight, so no item has an owner")


# ----- owner assignment (executors) --------------------------------------------------------
@dataclass(frozen=True)
class Router:
    """What owner assignment needs of a placement: the key hash's seed, the partition count, the
    member ids and each partition's leader (an index into ``ids``), all from the driver's
    ``PlacementTable`` - so every row's owner is ``table.owner(table.partition_of(key))``."""

    checksum: str
    seed: int
    partitions: int
    ids: tuple[str, ...]
    leaders: np.ndarray  # int32 (P,): index into ids of each partition's leader

    @classmethod
    def of(cls, snapshot: PlacementSnapshot) -> Router:
        table = snapshot.table
        ids, idx = table.owner_indices()
        return cls(snapshot.checksum, table.config.seed, table.config.partitions, tuple(ids),
                   np.ascontiguousarray(idx[:, 0], dtype=np.int32))

    def to_dict(self) -> dict[str, Any]:
        return {"checksum": self.checksum, "seed": self.seed, "partitions": self.partitions,
                "ids": list(self.ids), "leaders": self.leaders.astype("<i4").tobytes()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Router:
        return cls(d["checksum"], d["seed"], d["partitions"], tuple(d["ids"]),
                   np.frombuffer(d["leaders"], dtype="<i4").astype(np.int32))


_ARROW_IDS: dict[str, Any] = {}


def owner_arrays(router: Router, keys) -> tuple[Any, Any]:
    """(partition int32, owner string) Arrow arrays for an Arrow string array of keys; a null
    key has a null partition and owner. Hashes the Arrow buffers directly (``arrow_hash``)."""
    import pyarrow as pa

    from .arrow_hash import key_hashes_arrow

    if router.checksum not in _ARROW_IDS:
        _ARROW_IDS[router.checksum] = pa.array(router.ids, type=pa.string())
    parts = (key_hashes_arrow(keys, router.seed) % np.uint32(router.partitions)).astype(np.int32)
    mask = np.asarray(keys.is_null()) if keys.null_count else None
    partition = pa.array(parts, type=pa.int32(), mask=mask)
    owner = _ARROW_IDS[router.checksum].take(pa.array(router.leaders[parts], type=pa.int32(), mask=mask))
    return partition, owner


ENGINES = ("auto", "jvm", "python")
MAX_JVM_PARTITIONS = 1 << 18  # the JVM path's leader table is one binary literal in the plan (1 MB)
log = logging.getLogger(__name__)
_WARNED: set[str] = set()


def jvm_unavailable(spark, partitions: int) -> str | None:
    """None if the JVM key hash can route this placement in ``spark``, else why not."""
    from . import jvm, session

    if partitions > MAX_JVM_PARTITIONS:
        return f"{partitions} partitions is more than the JVM path's lookup array holds ({MAX_JVM_PARTITIONS})"
    if session.UDF_UNAVAILABLE:
        return session.UDF_UNAVAILABLE[0]
    try:
        jvm.register(spark)
    except jvm.JvmUdfUnavailable as exc:
        return str(exc)
    return None


def assign_owners(spark, df, key_column: str, snapshot: PlacementSnapshot, with_ids: bool = True,
                  engine: str = "auto"):
    """``df`` plus ``partition`` and ``owner`` (leader) columns (and ``item_id`` if ``with_ids``).

    ``engine``: ``jvm`` hashes keys in the JVM (``spark_jobs/jvm.py``: no Python worker, about the
    cost of a plain repartition), ``python`` in Python workers (``mapInArrow`` + ``arrow_hash``),
    ``auto`` (default) the JVM if its UDF is available here, else Python with a logged reason.
    Both give every row ``table.partition_of(key)`` and that partition's leader.
    """
    from pyspark.sql import functions as F

    if engine not in ENGINES:
        raise PlacementError(f"engine must be one of {', '.join(ENGINES)}, not {engine!r}")
    if key_column not in df.columns:
        raise PlacementError(f"input has no column {key_column!r}; its columns: {', '.join(df.columns)}")
    _check_owners(snapshot)
    df = df.withColumn(key_column, F.col(key_column).cast("string"))
    if with_ids:
        df = df.withColumn(ITEM_ID, F.monotonically_increasing_id())
    router = Router.of(snapshot)
    if choose_engine(spark, engine, router.partitions) == "jvm":
        return _assign_jvm(df, key_column, router)
    return _assign_python(spark, df, key_column, router)


def choose_engine(spark, engine: str, partitions: int) -> str:
    """The engine ``assign_owners(engine=engine)`` uses: ``jvm`` or ``python``. ``auto`` falls
    back to ``python`` with a warning saying why (logged once per reason); ``jvm`` raises then."""
    if engine == "python":
        return engine
    reason = jvm_unavailable(spark, partitions)
    if reason is None:
        return "jvm"
    if engine == "jvm":
        raise PlacementError(f"the JVM key hash is unavailable: {reason}")
    if reason not in _WARNED:
        _WARNED.add(reason)
        log.warning("owner assignment runs in Python workers (same owners, slower): the JVM key hash "
                    "is unavailable: %s", reason)
    return "python"


def _assign_jvm(df, key_column: str, router: Router):
    from pyspark.sql import functions as F

    # Plan building is on the clock (~0.1 s matters against a 0.4 s shuffle): one SQL expression
    # per column, literals inline - the leader table as one binary literal (F.lit(list) would make
    # one py4j call per partition, ~0.3 s for 1024), member ids as hex (any characters are safe).
    key = "`" + key_column.replace("`", "``") + "`"
    partition = f"placement_key_partition(CAST({key} AS BINARY), {router.seed}L, {router.partitions})"
    leaders = router.leaders.astype("<i4").tobytes().hex()
    ids = ", ".join(f"CAST(X'{i.encode().hex()}' AS STRING)" for i in router.ids)
    # The guard is needed: element_at(<literal array>, NULL) gives the *last* element in Spark 4.3's
    # generated code (interpreted: NULL).
    owner = (f"CASE WHEN {PARTITION} IS NOT NULL THEN element_at(array({ids}), "
             f"placement_partition_leader({PARTITION}, X'{leaders}') + 1) END")
    return df.withColumn(PARTITION, F.expr(partition)).withColumn(OWNER, F.expr(owner))


def _assign_python(spark, df, key_column: str, router: Router):
    from pyspark.sql import types as T

    broadcast = spark.sparkContext.broadcast(router.to_dict())
    schema = T.StructType([*df.schema.fields, T.StructField(PARTITION, T.IntegerType()),
                           T.StructField(OWNER, T.StringType())])
    names = schema.fieldNames()

    def assign(batches: Iterator) -> Iterator:
        import pyarrow as pa

        router = Router.from_dict(broadcast.value)
        for batch in batches:
            partition, owner = owner_arrays(router, batch.column(key_column))
            yield pa.RecordBatch.from_arrays([*batch.columns, partition, owner], names=names)

    return df.mapInArrow(assign, schema)


# ----- input -------------------------------------------------------------------------------
def _format_of(path: str, fmt: str | None) -> str:
    if fmt:
        return fmt
    name = path.rstrip("/").lower()
    for ext, f in ((".csv", "csv"), (".json", "json"), (".jsonl", "json"), (".ndjson", "json")):
        if name.endswith(ext):
            return f
    return "parquet"


def read_items(spark, path: str, fmt: str | None = None):
    """Parquet (default), CSV with a header, or JSON lines - by ``fmt`` or the path's extension."""
    if not os.path.exists(path) and "://" not in path:
        raise PlacementError(f"input {path!r} does not exist (`placement spark-sample --out {path}` makes one)")
    fmt = _format_of(path, fmt)
    reader = spark.read
    if fmt == "csv":
        reader = reader.option("header", "true")
    return reader.format(fmt).load(path)


def write_sample(spark, path: str, items: int, fmt: str | None = None, distinct_keys: int | None = None) -> None:
    """Sample work items: ``key`` = "item-<n mod distinct_keys>", plus ``seq`` and ``payload``."""
    from pyspark.sql import functions as F

    distinct_keys = distinct_keys or items
    df = spark.range(items).select(
        F.concat(F.lit("item-"), (F.col("id") % distinct_keys).cast("string")).alias("key"),
        F.col("id").alias("seq"),
        F.sha2(F.col("id").cast("string"), 256).substr(1, 16).alias("payload"),
    )
    writer = df.write.mode("overwrite")
    if _format_of(path, fmt) == "csv":
        writer = writer.option("header", "true")
    writer.format(_format_of(path, fmt)).save(path)


# ----- the report --------------------------------------------------------------------------
@dataclass
class RouteReport:
    mode: str  # "deliver" or "output"
    job: str
    checksum: str  # of the snapshot the job planned with
    input_items: int
    per_owner: dict[str, int]  # delivered (or written) items per owner
    delivered: int = 0
    failed: int = 0
    batches: int = 0
    retries: int = 0
    rerouted: int = 0
    refreshes: int = 0
    missing: int = 0  # input items with no outcome (must be 0)
    duplicated: int = 0  # input items with more than one outcome (must be 0)
    failed_items: list[dict[str, Any]] = field(default_factory=list)  # first MAX_FAILED_LISTED
    outcomes_path: str = ""
    engine: str = ""  # where owners were computed: "jvm" (key-hash UDF) or "python" (workers)

    @property
    def accounted(self) -> bool:
        """Every input item delivered exactly once or listed as failed."""
        return self.missing == 0 and self.duplicated == 0 and self.delivered + self.failed == self.input_items

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "accounted": self.accounted}

    def render(self) -> str:
        lines = [f"{self.mode} job {self.job}: {self.input_items} items, placement {self.checksum[:12]}"
                 + (f", owners computed by the {self.engine} engine" if self.engine else "")]
        lines += [f"  {owner:<16}{count:>10}" for owner, count in sorted(self.per_owner.items())]
        done = "delivered" if self.mode == "deliver" else "written"
        lines.append(f"  {done} {self.delivered}  failed {self.failed}  batches {self.batches}  retries "
                     f"{self.retries}  re-routed {self.rerouted}  snapshot refreshes {self.refreshes}")
        verdict = "OK" if self.accounted else "MISMATCH"
        lines.append(f"  accounting {verdict}: {self.delivered} {done} + {self.failed} failed = "
                     f"{self.delivered + self.failed} of {self.input_items}; missing {self.missing}, "
                     f"duplicated {self.duplicated}")
        lines += [f"  failed: id {f[ITEM_ID]} key {f['key']!r}: {f['error']}" for f in self.failed_items[:10]]
        return "\n".join(lines)


def _account(report: RouteReport, routed, outcomes, key_column: str) -> RouteReport:
    """Fill counts, missing and duplicated by comparing outcome rows with the input ids."""
    from pyspark.sql import functions as F

    ids = routed.select(ITEM_ID)
    report.input_items = ids.count()
    per_id = outcomes.groupBy(ITEM_ID).count()
    report.duplicated = per_id.filter(F.col("count") > 1).count()
    report.missing = ids.join(per_id, ITEM_ID, "left_anti").count()
    counts = outcomes.groupBy(OWNER, "status").count().collect()
    report.per_owner = {r[OWNER]: r["count"] for r in counts if r["status"] == DELIVERED}
    report.delivered = sum(r["count"] for r in counts if r["status"] == DELIVERED)
    report.failed = sum(r["count"] for r in counts if r["status"] == FAILED)
    failed = outcomes.filter(F.col("status") == FAILED).orderBy(ITEM_ID).limit(MAX_FAILED_LISTED)
    report.failed_items = [{ITEM_ID: r[ITEM_ID], "key": r[key_column], "owner": r[OWNER], "error": r["error"]}
                           for r in failed.collect()]
    return report


# ----- output mode -------------------------------------------------------------------------
def write_by_owner(spark, routed, key_column: str, snapshot: PlacementSnapshot, out_dir: str,
                   fmt: str = "parquet") -> RouteReport:
    """One folder per owner (``owner=<id>/``); items with a null key are listed as failed."""
    from pyspark.sql import functions as F

    routed.filter(F.col(OWNER).isNotNull()).write.mode("overwrite").partitionBy(OWNER).format(fmt).save(out_dir)
    reader = spark.read.option("header", "true") if fmt == "csv" else spark.read
    written = reader.format(fmt).load(out_dir).select(ITEM_ID, key_column, OWNER, F.lit(DELIVERED).alias("status"),
                                                      F.lit(None).cast("string").alias("error"))
    nulls = routed.filter(F.col(OWNER).isNull()).select(ITEM_ID, key_column, OWNER, F.lit(FAILED).alias("status"),
                                                        F.lit("null key").alias("error"))
    report = RouteReport("output", "", snapshot.checksum, 0, {}, outcomes_path=out_dir)
    return _account(report, routed, written.unionByName(nulls), key_column)


# ----- delivery mode -----------------------------------------------------------------------
def deliver(spark, routed, key_column: str, snapshot: PlacementSnapshot, urls: Sequence[str],
            options: DeliveryOptions = DEFAULT_OPTIONS, work_dir: str | None = None,
            tasks: int | None = None) -> RouteReport:
    """POST every owner's items to it (see ``placement.service.work_sink`` for the contract); account for all."""
    from pyspark.sql import types as T

    if not any(snapshot.addresses.values()):
        raise PlacementError("delivery needs member HTTP addresses: plan from a node (--url), not --members")
    job = uuid.uuid4().hex
    sc = spark.sparkContext
    stats = {name: sc.accumulator(0) for name in ("batches", "retries", "rerouted", "refreshes")}
    broadcast = sc.broadcast(snapshot.to_dict(binary=True))
    seeds = list(urls)
    data_columns = [c for c in routed.columns if c not in (ITEM_ID, PARTITION, OWNER, key_column)]
    schema = T.StructType([T.StructField(ITEM_ID, T.LongType()), T.StructField(key_column, T.StringType()),
                           T.StructField(OWNER, T.StringType()), T.StructField("status", T.StringType()),
                           T.StructField("attempts", T.IntegerType()), T.StructField("reroutes", T.IntegerType()),
                           T.StructField("error", T.StringType())])

    def run(batches: Iterator) -> Iterator:
        import pandas as pd

        deliverer = Deliverer(PlacementSnapshot.from_dict(broadcast.value), seeds, job, options)
        try:
            for pdf in batches:
                data = json.loads(pdf[data_columns].to_json(orient="records", date_format="iso"))
                for item_id, key, owner, row in zip(pdf[ITEM_ID].tolist(), pdf[key_column].tolist(),
                                                    pdf[OWNER].tolist(), data):
                    item = Item(int(item_id), key, row)
                    if key is None:
                        deliverer.stats.outcomes.append((item.id, None, None, FAILED, 0, 0, "null key"))
                    else:
                        deliverer.add(item, owner)
            deliverer.flush()
        finally:
            deliverer.close()
        s = deliverer.stats
        for name, accumulator in stats.items():
            accumulator.add(getattr(s, name))
        yield pd.DataFrame(s.outcomes, columns=schema.fieldNames()).astype({"attempts": "int32", "reroutes": "int32"})

    work_dir = work_dir or tempfile.mkdtemp(prefix="spark-route-")
    outcomes_path = os.path.join(work_dir, "outcomes")
    tasks = tasks or max(1, len(snapshot.addresses))
    # Written once: every later question about the run reads these rows, never re-delivers.
    routed.repartition(tasks, OWNER).mapInPandas(run, schema).write.mode("overwrite").parquet(outcomes_path)
    report = RouteReport("deliver", job, snapshot.checksum, 0, {}, outcomes_path=outcomes_path,
                         **{name: acc.value for name, acc in stats.items()})
    return _account(report, routed, spark.read.parquet(outcomes_path), key_column)
