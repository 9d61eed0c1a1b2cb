"""One SparkSession and one Spark standalone cluster for the whole test run (each costs 10-30 s to start),
how pytest-xdist shares the tests out between its workers, and where the nodes of each test keep
their members files."""

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


# Under pytest-xdist (`make test`, `make test-quick`: -n N) a worker runs whole groups, each in
# file order: a module is a group (its module fixtures start once; tests that follow one another,
# as in test_netns_cluster.py, still do), and the modules that use the `spark` session fixture
# below are one group, so one worker starts that JVM, once. The tests of INDEPENDENT modules
# (no module fixture, no order) are units of their own, which balances the workers better; in
# test_docs_commands.py all but those of the module fixture make_run (named so). xdist's own
# `--dist loadgroup` is not used: with pytest 9.2 it no longer groups (pytest-xdist issue 1386).
SPARK_SESSION_MODULES = ("test_spark_jvm", "test_spark_route", "test_spark_sweep")
INDEPENDENT = ("test_exclusive",)
# The longest groups start first, longest first (serial wall times on the 2-core box, from
# --durations: 125, 70, 80 in all, 45, 45, 30, 28, 24, 23, 23, 18, 17 and 16 s); the rest in file order.
LONGEST_GROUPS = ("test_netns_cluster", "test_spark_standalone", "test_docs_commands", "spark", "test_exclusive",
                  "test_exclusive_processes", "test_bad_input_cluster", "test_node_lifecycle", "test_witness",
                  "test_witness_processes", "test_node_busy", "test_bootstrap", "test_node_exclusive")


def _module(nodeid: str) -> str:
    return nodeid.split("::")[0].rsplit("/", 1)[-1].removesuffix(".py")


def xdist_group(nodeid: str) -> str:
    module = _module(nodeid)
    if module in SPARK_SESSION_MODULES:
        return "spark"
    if module in INDEPENDENT or (module == "test_docs_commands" and "make_run" not in nodeid.split("::")[-1]):
        return nodeid
    return module


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class ByGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_group(nodeid)

        def add_node_collection(self, node, collection):
            # schemathesis's items of one test share a node id under pytest 9.2 (test_openapi.py:
            # test_live_node_conforms, one item per operation); the scheduler keys work by id, so
            # all but one would not run. Numbered here, they keep their places (indexes) in the list.
            seen: dict[str, int] = {}
            unique = []
            for nodeid in collection:
                seen[nodeid] = seen.get(nodeid, 0) + 1
                unique.append(nodeid if seen[nodeid] == 1 else f"{nodeid}#{seen[nodeid]}")
            super().add_node_collection(node, unique)

    config.option.loadscopereorder = False  # the order the workers collected: longest groups first
    return ByGroup(config, log)


def pytest_collection_modifyitems(config, items):
    """In an xdist worker, the longest groups first (so none is the tail), file order kept."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        def rank(item):
            group = xdist_group(item.nodeid)
            group = group if group in LONGEST_GROUPS else _module(item.nodeid)  # a test of its own: its module's
            return LONGEST_GROUPS.index(group) if group in LONGEST_GROUPS else len(LONGEST_GROUPS)

        items.sort(key=rank)


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
