"""The JVM key hash (spark_jobs/jvm) run through Spark equals ``placement.hashing.key_hash`` bit for
bit, both owner-assignment engines agree with the table row for row, and without the jar the job
falls back to Python workers with a reason."""

import logging
import os
import random
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from placement.errors import PlacementError
from placement.hashing import key_hash
from placement.snapshot import PlacementSnapshot
from placement.table import PlacementTable
from spark_jobs import jvm, route, session

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def jvm_spark(spark):
    if session.UDF_UNAVAILABLE:
        pytest.skip(f"JVM key hash unavailable here: {session.UDF_UNAVAILABLE[0]}")
    jvm.register(spark)
    return spark


def spark_partitions(spark, keys, seed, partitions):
    from pyspark.sql import functions as F

    df = spark.createDataFrame([(i, k) for i, k in enumerate(keys)], "i long, key string")
    out = df.select("i", F.call_function("placement_key_partition", F.col("key").cast("binary"),
                                         F.lit(seed).cast("long"), F.lit(partitions)).alias("p")).collect()
    return [r.p for r in sorted(out, key=lambda r: r.i)]


def tricky_keys():
    rng = random.Random(5)
    alphabet = "aZ9-_/é€ключ😀\u0000\u07ff\u0800\uffff\U00010000"
    keys = ["", "a", "ab", "abc", "abcd", "ünïcode-ключ", "x" * 1001]
    keys += ["".join(rng.choice(alphabet) for _ in range(n)) for n in range(41) for _ in range(3)]
    keys += [f"item-{i}" for i in range(0, 10**6, 997)]
    return keys


@pytest.mark.parametrize("seed", [0, 1, 42, 2**31 - 1, 2**31, 2**32 - 1])
def test_jvm_key_hash_equals_the_spec(jvm_spark, seed):
    keys = tricky_keys()
    partitions = 2**24  # the largest P: keeps almost all 32 bits of the hash
    assert spark_partitions(jvm_spark, keys, seed, partitions) == [key_hash(k, seed) % partitions for k in keys]
    assert spark_partitions(jvm_spark, keys, seed, 1) == [0] * len(keys)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.text(max_size=24), min_size=1, max_size=40), st.integers(0, 2**32 - 1), st.integers(1, 2**24))
def test_jvm_key_hash_property(jvm_spark, keys, seed, partitions):
    assert spark_partitions(jvm_spark, keys, seed, partitions) == [key_hash(k, seed) % partitions for k in keys]


@pytest.mark.parametrize("engine", ["jvm", "python"])
def test_both_engines_equal_the_table_row_for_row(jvm_spark, engine):
    table = PlacementTable.build({"a": 1.0, "b": 2.0, "c'\"d`)": 0.5, "é": 1.0}, partitions=1000, replicas=2, seed=7)
    snap = PlacementSnapshot(table, {})
    keys = tricky_keys()
    column = "routing key"  # quoted in the JVM path's SQL
    df = jvm_spark.createDataFrame([(k, 1) for k in keys] + [(None, 2)], "k string, n int")
    df = df.withColumnRenamed("k", column)
    rows = route.assign_owners(jvm_spark, df, column, snap, engine=engine).collect()
    assert len(rows) == len(keys) + 1
    assert set(table.members) == {r.owner for r in rows if r.owner is not None}
    for r in rows:
        key = r[column]
        if key is None:
            assert r.partition is None and r.owner is None
        else:
            assert (r.partition, r.owner) == (table.partition_of(key), table.lookup(key)[0])


def test_without_the_jar_auto_falls_back_to_python_and_says_why(spark, monkeypatch, caplog):
    table = PlacementTable.build({"a": 1.0, "b": 1.0}, partitions=64)
    snap = PlacementSnapshot(table, {})
    monkeypatch.setattr(session, "UDF_UNAVAILABLE", ["no `javac` (test)"])
    monkeypatch.setattr(route, "_WARNED", set())
    df = spark.createDataFrame([("k1",), ("k2",)], "key string")
    with caplog.at_level(logging.WARNING, logger="spark_jobs.route"):
        routed = route.assign_owners(spark, df, "key", snap, with_ids=False)
    assert "Python workers" in caplog.text and "no `javac` (test)" in caplog.text
    assert "MapInArrow" in routed._jdf.queryExecution().analyzed().toString()
    assert [(r.partition, r.owner) for r in routed.collect()] == [
        (table.partition_of(k), table.lookup(k)[0]) for k in ("k1", "k2")]
    with pytest.raises(PlacementError, match="JVM key hash is unavailable"):
        route.assign_owners(spark, df, "key", snap, engine="jvm")


def test_building_the_jar_without_a_jdk_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no javac anywhere
    with pytest.raises(jvm.JvmUdfUnavailable, match="JDK"):
        jvm.build_jar(tmp_path / "x.jar")
    monkeypatch.setenv(jvm.ENV, "off")
    with pytest.raises(jvm.JvmUdfUnavailable, match="disabled"):
        jvm.ensure_jar()
    monkeypatch.setenv(jvm.ENV, str(tmp_path / "missing.jar"))
    with pytest.raises(jvm.JvmUdfUnavailable, match="not a file"):
        jvm.ensure_jar()


def test_the_jar_builds_from_a_py_files_zip(tmp_path):
    """Under ``spark-submit --py-files pkgs.zip`` the driver imports spark_jobs from the zip: the
    Java sources must be read from there (same cache key as from the checkout) and still compile."""
    if shutil.which("javac") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no javac to build the JVM key hash")
    repo = Path(__file__).resolve().parents[1]
    pkgs = tmp_path / "pkgs.zip"
    with zipfile.ZipFile(pkgs, "w") as z:
        for path in sorted((repo / "spark_jobs").rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                z.write(path, path.relative_to(repo).as_posix())
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from spark_jobs import jvm; "
            "assert '.zip' in jvm.__file__, jvm.__file__; print(jvm.jar_path()); "
            "print(jvm.build_jar(jvm.Path(sys.argv[2])))")
    env = {**os.environ, "PYTHONPATH": str(repo)}  # placement etc. from the checkout, spark_jobs from the zip
    proc = subprocess.run([sys.executable, "-c", code, str(pkgs), str(tmp_path / "udf.jar")], env=env,
                          capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    cache_key, built = proc.stdout.split()
    assert cache_key == str(jvm.jar_path())
    assert "placement/spark/KeyPartition.class" in zipfile.ZipFile(built).namelist()
