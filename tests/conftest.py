"""One SparkSession for the whole test run (starting one costs ~10 s); only the Spark fixture lives here."""

import shutil

import pytest


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


@pytest.fixture
def spark_tmp(tmp_path):
    """A temporary directory for Spark outputs, removed even if Spark left read-only files behind."""
    yield tmp_path
    shutil.rmtree(tmp_path, ignore_errors=True)
