"""The key hash as a JVM UDF, so owner assignment needs no Python worker (optional, with a fallback).

``jvm/KeyPartition.java`` implements ``placement.hashing.key_hash(key, seed) % P`` (MurmurHash3_x86_32
of the UTF-8 key, unsigned) and ``jvm/PartitionLeader.java`` looks a partition's leader up in the
driver's table (passed as one binary literal). They are compiled with ``javac`` against PySpark's
own jars into a small jar, cached under ``~/.cache/placement-service/`` by a hash of the source
and the Spark version (``python -m spark_jobs.jvm`` builds it and prints its path; ``make jvm``
too), added to ``spark.jars`` by ``spark_jobs.session.get_session`` and registered as the SQL
functions ``placement_key_partition(utf8 key bytes, seed, partitions)`` and
``placement_partition_leader(partition, leaders)``.

Building needs a JDK (``javac``), not only a Java runtime. Without one - or with a session that
was started without the jar - ``route.assign_owners`` says why and uses the Python worker path,
which gives the same answers, more slowly. ``PLACEMENT_UDF_JAR=/path/to.jar`` uses a jar built
elsewhere (e.g. on a cluster whose nodes have no JDK); ``PLACEMENT_UDF_JAR=off`` disables it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import weakref
import zipfile
from importlib import resources
from pathlib import Path

# Read through importlib.resources, not as files: under ``spark-submit --py-files pkgs.zip`` the
# driver imports this package from the zip, where ``Path(__file__)`` is no directory.
SOURCES = tuple(resources.files(__package__).joinpath("jvm", name) for name in ("KeyPartition.java",
                                                                               "PartitionLeader.java"))
# SQL function name -> class
FUNCTIONS = {"placement_key_partition": "placement.spark.KeyPartition",
             "placement_partition_leader": "placement.spark.PartitionLeader"}
ENV = "PLACEMENT_UDF_JAR"
_REGISTERED: weakref.WeakSet = weakref.WeakSet()  # sessions the functions are registered in


class JvmUdfUnavailable(Exception):
    """The UDF jar cannot be built or used here; the message says why and what to install."""


def _spark_home() -> Path:
    if os.environ.get("SPARK_HOME"):
        return Path(os.environ["SPARK_HOME"])
    import pyspark

    return Path(pyspark.__file__).parent


def _javac() -> str:
    home = os.environ.get("JAVA_HOME")
    javac = os.path.join(home, "bin", "javac") if home else shutil.which("javac")
    if not javac or not os.access(javac, os.X_OK):
        raise JvmUdfUnavailable("no `javac` to build the JVM key hash (a JDK is needed, not only a JRE: "
                                "Debian/Ubuntu `apt-get install openjdk-17-jdk-headless`, or `make jvm`)")
    return javac


def jar_path() -> Path:
    """Where the jar for this source and this Spark version lives (built or not)."""
    try:
        import pyspark
    except ImportError:
        raise JvmUdfUnavailable("pyspark is not installed (its jars are needed to compile against)") from None

    digest = hashlib.sha256(b"".join(s.read_bytes() for s in SOURCES) + pyspark.__version__.encode()).hexdigest()[:12]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "placement-service"
    return cache / f"placement-udf-{digest}.jar"


def build_jar(out: Path | None = None) -> Path:
    """Compile the ``jvm/*.java`` sources into a jar (``out``, default ``jar_path()``) and return its path."""
    out = out or jar_path()
    javac = _javac()
    jars = _spark_home() / "jars"
    if not jars.is_dir():
        raise JvmUdfUnavailable(f"no Spark jars at {jars} to compile against (set SPARK_HOME)")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="placement-udf-") as tmp:
        sources = [Path(tmp) / "src" / s.name for s in SOURCES]  # javac wants files; the sources may be in a zip
        sources[0].parent.mkdir()
        for source, copy in zip(SOURCES, sources):
            copy.write_bytes(source.read_bytes())
        proc = subprocess.run([javac, "--release", "17", "-nowarn", "-d", str(Path(tmp) / "classes"),
                               "-cp", str(jars / "*"), *map(str, sources)],
                              capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise JvmUdfUnavailable(f"javac failed: {proc.stderr.strip()[:2000]}")
        partial = out.with_suffix(f".{os.getpid()}.tmp")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as jar:
            jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\nCreated-By: spark_jobs.jvm\n\n")
            for cls in sorted((Path(tmp) / "classes").rglob("*.class")):
                jar.write(cls, cls.relative_to(Path(tmp) / "classes").as_posix())
        os.replace(partial, out)  # atomic: concurrent builders never see half a jar
    return out


def ensure_jar() -> Path:
    """The UDF jar: ``$PLACEMENT_UDF_JAR``, else the cached build, else built now (~2 s)."""
    env = os.environ.get(ENV, "")
    if env.lower() in ("off", "0", "false", "none"):
        raise JvmUdfUnavailable(f"disabled by {ENV}={env}")
    if env:
        if not os.path.isfile(env):
            raise JvmUdfUnavailable(f"{ENV}={env} is not a file")
        return Path(env)
    path = jar_path()
    return path if path.is_file() else build_jar(path)


def register(spark) -> None:
    """Register the ``FUNCTIONS`` in ``spark`` (once per session), or raise JvmUdfUnavailable saying why."""
    if spark in _REGISTERED:
        return
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException
    from pyspark.sql.types import IntegerType

    try:
        for name, cls in FUNCTIONS.items():
            spark.udf.registerJavaFunction(name, cls, IntegerType())
    except (PySparkException, Py4JError) as exc:  # AnalysisException: the class is not on the classpath
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise JvmUdfUnavailable(f"{cls} is not on this session's classpath ({first[:300]}); start the "
                                "session with spark_jobs.session.get_session or pass the jar with --jars "
                                "(`python -m spark_jobs.jvm` prints its path)") from None
    _REGISTERED.add(spark)


def main() -> int:
    try:
        print(build_jar() if len(sys.argv) < 2 else build_jar(Path(sys.argv[1])))
    except JvmUdfUnavailable as exc:
        print(f"cannot build the JVM key hash: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
