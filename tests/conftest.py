"""One SparkSession and one Spark standalone cluster for the whole test run (each costs 10-30 s to start),
and where the nodes of each test keep their members files."""

import os
import shutil
import tempfile
from pathlib import Path

import pytest

# Nodes keep members files (``placement.service.members_file``) under $PLACEMENT_STATE_HOME, by
# default in the user's home: a test run must not leave files there, nor read those of a run
# before. Set at import, so environments copied before any fixture runs have it too; each test
# gets a directory of its own below (``_members_files``).
os.environ["PLACEMENT_STATE_HOME"] = tempfile.mkdtemp(prefix="placement-test-state-")


def pytest_report_header() -> str:
    """Say which membership core runs: the sources, or a mypyc build (`make sim-fast`)."""
    import membership.core

    path = membership.core.__file__
    return f"membership core: {'pure Python' if path.endswith('.py') else 'compiled with mypyc'} ({path})"


@pytest.fixture(scope="session")
def spark():
    pytest.importorskip("pyspark", reason="pyspark not installed (pip install -e '.[dev]')")
    from spark_jobs.session import JavaMissingError, get_session

    try:
        session = get_session("local[2]", "placement-tests", conf={
            "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "4", "spark.default.parallelism": "2",
            "spark.driver.memory": "1g", "spark.ui.showConsoleProgress": "false"})
    except JavaMissingError as exc:
        pytest.skip(f"Spark tests need Java: {exc}")
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def spark_standalone(tmp_path_factory):
    """A Spark standalone master and two workers (1 core, 512 MB each) on 127.0.0.1, started once
    per run from the installed pyspark (``spark_jobs.standalone``); executors import this checkout."""
    pytest.importorskip("pyspark", reason="pyspark not installed (pip install -e '.[dev]')")
    from spark_jobs.session import JavaMissingError
    from spark_jobs.standalone import StandaloneCluster

    repo = str(Path(__file__).resolve().parents[1])
    pythonpath = os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")]))
    # Short jobs on 2 shared cores: few shuffle partitions, and the JIT's first tier only (less
    # compiling; a test job ends before C2 would pay off).
    cluster = StandaloneCluster(tmp_path_factory.mktemp("spark-standalone"), workers=2, cores=1, memory="512m",
                                env={"PYTHONPATH": pythonpath}, conf={"spark.sql.shuffle.partitions": "4"},
                                java_options="-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
    try:
        cluster.start()
    except JavaMissingError as exc:
        pytest.skip(f"Spark tests need Java: {exc}")
    yield cluster
    cluster.stop()


@pytest.fixture
def spark_tmp(tmp_path):
    """A temporary directory for Spark outputs, removed even if Spark left read-only files behind."""
    yield tmp_path
    shutil.rmtree(tmp_path, ignore_errors=True)


@pytest.fixture(scope="module", params=["numpy", "numba"])
def both_kernels(request):
    """Run a module's tests once per screen of ``rendezvous._top_by_gap``: numpy, and the compiled
    one (``placement.screen_numba``, the ``fast`` extra) forced even for small tables."""
    from placement import rendezvous

    if request.param == "numba":
        pytest.importorskip("numba", reason="numba not installed (pip install -e '.[fast]')")
    before, rendezvous.kernel = rendezvous.kernel, request.param
    yield request.param
    rendezvous.kernel = before


@pytest.fixture(autouse=True)
def _members_files(tmp_path_factory, monkeypatch):
    """Each test's nodes keep their members files (``placement.service.members_file``) in a
    directory of their own, inherited by the processes they start: a founder of one test must
    not rejoin the members a founder of the same id knew in an earlier test (or in the user's
    home)."""
    monkeypatch.setenv("PLACEMENT_STATE_HOME", str(tmp_path_factory.mktemp("state-home")))
