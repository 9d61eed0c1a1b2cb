"""One SparkSession and one Spark standalone cluster for the whole test run (each costs 10-30 s to start);
only the Spark fixtures live here."""

import os
import shutil
from pathlib import Path

import pytest


def pytest_report_header() -> str:
    """Say which membership core runs: the sources, or a mypyc build (`make sim-fast`)."""
    import membership.core

    path = membership.core.__file__
    return f"membership core: {'pure Python' if path.endswith('.py') else 'compiled with mypyc'} ({path})"


# The groups that take longest (about 2 min, 2 min, 1.5 min and 0.5 min on the 2-core box): run first.
LONGEST_GROUPS = ("test_netns_cluster", "spark", "test_docs_commands", "test_exclusive_processes")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """For pytest-xdist's ``--dist loadgroup`` (``make test``): each module is one group, run by one
    worker in file order (its module fixtures start once, tests that follow each other still do),
    and every module that uses the Spark session fixtures is in group ``spark``, so one worker
    starts them once. In a worker, the longest groups come first, so none of them is the tail."""
    def module(item):
        return item.nodeid.split("::")[0].rsplit("/", 1)[-1].removesuffix(".py")

    group = {}
    for item in items:
        if {"spark", "spark_standalone"} & set(getattr(item, "fixturenames", ())):
            group[module(item)] = "spark"
    rank = {}
    for item in items:
        name = group.get(module(item), module(item))
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(name))
        rank[item] = LONGEST_GROUPS.index(name) if name in LONGEST_GROUPS else len(LONGEST_GROUPS)
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=rank.__getitem__)  # stable: file order within a group


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
