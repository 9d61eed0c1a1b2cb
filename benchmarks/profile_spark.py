"""Where does owner assignment's time go? Variants of the 1M-item routing shuffle, one session.

    PYTHONPATH=. .venv/bin/python benchmarks/profile_spark.py [--items 1000000] [--repeat 5] [--batch 10000]

Every variant reads the same Parquet file, shuffles into the same ``--shuffle`` partitions and is
forced with the ``noop`` sink; variants run round-robin (``--repeat`` rounds after a warm-up
round); the best time of each is printed with its ratio to the plain repartition, and the
median of its per-round ratios to plain (steadier on a noisy machine):

    plain            repartition(n, key)                          (the goal's baseline)
    pandas_identity  mapInPandas(identity) + repartition(n, key)  (Arrow -> pandas -> Arrow floor)
    arrow_identity   mapInArrow(identity) + repartition(n, key)   (Python worker round trip floor)
    arrow_hash       mapInArrow: partition only (int) + repartition(n, partition)
    builtin_hash     + pmod(hash(key), P) column (Spark's Murmur3, not the spec) + repartition(n, it)
    python_owners    assign_owners(engine="python") + repartition(n, owner)
    jvm_partition    assign_owners(engine="jvm"), partition only + repartition(n, partition)
    jvm_by_key       assign_owners(engine="jvm") + repartition(n, key)  (the shuffle key's share)
    jvm_owners       assign_owners(engine="jvm") + repartition(n, owner)  (the production path)

Also prints where the executors imported ``spark_jobs`` from (it must be this checkout).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from placement.service.work_sink import LocalSinkCluster
from spark_jobs import route
from spark_jobs.session import get_session

PARTITIONS = 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--items", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--shuffle", type=int, default=8)
    ap.add_argument("--batch", type=int, default=None, help="spark.sql.execution.arrow.maxRecordsPerBatch")
    ap.add_argument("--only", default="", help="comma-separated variant names")
    args = ap.parse_args()

    conf = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"}
    if args.batch:
        conf["spark.sql.execution.arrow.maxRecordsPerBatch"] = str(args.batch)
    spark = get_session(args.master, "profile_spark", conf=conf)
    spark.sparkContext.setLogLevel("ERROR")
    import pyarrow as pa
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    tmp = tempfile.mkdtemp(prefix="profile-spark-")
    path = f"{tmp}/items.parquet"
    route.write_sample(spark, path, args.items)
    df = route.read_items(spark, path)

    def where(batches):
        import spark_jobs

        for _b in batches:
            yield pa.RecordBatch.from_pydict({"file": [spark_jobs.__file__]})
            break

    print("executors import spark_jobs from:",
          {r.file for r in df.limit(10).mapInArrow(where, "file string").collect()})

    cluster = LocalSinkCluster(3, partitions=PARTITIONS)
    snapshot = route.fetch_snapshot(cluster.urls)
    cluster.close()
    seed, parts = snapshot.table.config.seed, snapshot.table.config.partitions
    n = args.shuffle

    def sink(frame):
        frame.write.format("noop").mode("overwrite").save()

    def identity_pandas(batches):
        yield from batches

    def identity_arrow(batches):
        yield from batches

    def hash_arrow(batches):
        import numpy as np

        from spark_jobs.arrow_hash import key_hashes_arrow

        for b in batches:
            p = (key_hashes_arrow(b.column("key"), seed) % np.uint32(parts)).astype(np.int32)
            yield b.append_column("partition", pa.array(p))

    hash_schema = T.StructType([*df.schema.fields, T.StructField("partition", T.IntegerType())])
    variants = {
        "plain": lambda: sink(df.repartition(n, "key")),
        "pandas_identity": lambda: sink(df.mapInPandas(identity_pandas, df.schema).repartition(n, "key")),
        "arrow_identity": lambda: sink(df.mapInArrow(identity_arrow, df.schema).repartition(n, "key")),
        "arrow_hash": lambda: sink(df.mapInArrow(hash_arrow, hash_schema).repartition(n, "partition")),
        "builtin_hash": lambda: sink(df.withColumn("partition", F.pmod(F.hash("key"), F.lit(parts)))
                                     .repartition(n, "partition")),
        "python_owners": lambda: sink(route.assign_owners(spark, df, "key", snapshot, with_ids=False,
                                                          engine="python").repartition(n, route.OWNER)),
        "jvm_partition": lambda: sink(route.assign_owners(spark, df, "key", snapshot, with_ids=False, engine="jvm")
                                      .drop(route.OWNER).repartition(n, route.PARTITION)),
        "jvm_by_key": lambda: sink(route.assign_owners(spark, df, "key", snapshot, with_ids=False, engine="jvm")
                                   .repartition(n, "key")),
        "jvm_owners": lambda: sink(route.assign_owners(spark, df, "key", snapshot, with_ids=False, engine="jvm")
                                   .repartition(n, route.OWNER)),
    }
    if args.only:
        variants = {k: v for k, v in variants.items() if k in args.only.split(",") or k == "plain"}
    for fn in variants.values():  # warm-up: JIT, Python workers, file listing
        fn()
    runs: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(args.repeat):
        for k, fn in variants.items():
            t = time.perf_counter()
            fn()
            runs[k].append(time.perf_counter() - t)
    base = min(runs["plain"])
    print(f"{args.items} items, {args.master}, {n} shuffle partitions, maxRecordsPerBatch "
          f"{spark.conf.get('spark.sql.execution.arrow.maxRecordsPerBatch')}")
    for k, v in runs.items():
        paired = statistics.median(x / p for x, p in zip(v, runs["plain"]))
        print(f"  {k:<16} best {min(v):.3f} s  {min(v) / base:.2f}x  per-round ratio median {paired:.2f}x  "
              f"runs {[round(x, 2) for x in v]}")
    spark.stop()


if __name__ == "__main__":
    main()
