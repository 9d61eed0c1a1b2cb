"""Starting Spark: check for Java first (so a missing JVM is a clear message, not a py4j trace).

pyspark is imported lazily here and in the jobs, so ``placement --help`` works on a machine
without Java or pyspark.
"""

from __future__ import annotations

import os
import shutil
import sys
from typing import Any

from placement.errors import PlacementError


class JavaMissingError(PlacementError):
    """No Java runtime found, so Spark cannot start."""


class SparkMissingError(PlacementError):
    """pyspark (or pandas/pyarrow, which the vectorised jobs need) is not installed."""


def require_java() -> str:
    """Path of the ``java`` Spark will run, or JavaMissingError saying what to install."""
    home = os.environ.get("JAVA_HOME")
    if home:
        java = os.path.join(home, "bin", "java")
        if os.access(java, os.X_OK):
            return java
        raise JavaMissingError(f"JAVA_HOME={home} has no bin/java; point JAVA_HOME at a Java 17 runtime "
                               "or unset it to use the java on PATH")
    found = shutil.which("java")
    if found is None:
        raise JavaMissingError("Spark needs a Java runtime (17 recommended) and none was found: install one "
                               "(Debian/Ubuntu: `sudo apt-get install openjdk-17-jre-headless`; macOS: "
                               "`brew install openjdk@17`) or set JAVA_HOME; `make` installs it too")
    return found


def require_pyspark() -> None:
    try:
        import pandas  # noqa: F401
        import pyarrow  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError as exc:
        raise SparkMissingError(f"{exc.name} is not installed: `pip install -e '.[dev]'` "
                                "(or `pip install pyspark pandas pyarrow`)") from None


def get_session(master: str | None = None, app_name: str = "placement", conf: dict[str, Any] | None = None):
    """The active SparkSession, or a new one on ``master`` (default: spark-submit's, else local[*])."""
    require_pyspark()
    require_java()
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if master:  # else spark-submit's --master, or local[*] when run directly
        builder = builder.master(master)
    if (master or "local").startswith("local"):
        # Local Python workers must run this interpreter (the venv with placement's dependencies),
        # not whatever `python3` is first on PATH.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # Arrow carries the batches to mapInArrow/mapInPandas; the console progress bar shows progress.
    defaults = {"spark.sql.execution.arrow.pyspark.enabled": "true", "spark.ui.showConsoleProgress": "true"}
    conf = {**defaults, **(conf or {})}
    jar = udf_jar()
    if jar:  # the JVM key hash (spark_jobs/jvm.py); without it owner assignment uses Python workers
        conf["spark.jars"] = ",".join(filter(None, [conf.get("spark.jars", ""), jar]))
    for key, value in conf.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


UDF_UNAVAILABLE: list[str] = []  # why the JVM key hash jar could not be had, if it could not


def udf_jar() -> str | None:
    """Path of the JVM key-hash jar (built on first use if a JDK is here), or None (reason kept)."""
    from .jvm import JvmUdfUnavailable, ensure_jar

    try:
        jar = str(ensure_jar())
    except JvmUdfUnavailable as exc:
        UDF_UNAVAILABLE[:] = [str(exc)]
        return None
    UDF_UNAVAILABLE.clear()
    return jar
