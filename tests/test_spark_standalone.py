"""The Spark jobs on a real cluster manager: a standalone master and two workers (``spark_standalone``
in conftest.py), driven the way a user does - ``placement spark-route`` / ``spark-sweep`` processes
with ``--master spark://...`` - so executors are separate JVMs that fetch the key-hash jar from the
driver, and the work sinks are separate processes that can be killed with SIGKILL.

Owners are recomputed here, in this process, from the placement the job planned with (scalar
``PlacementTable.lookup``), and compared with where every item ended up. The sinks keep a journal
(``placement.service.work_sink --journal``) flushed before each 200, so even a killed sink's own count can be
compared with the job's report.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from placement.service.work_sink import LocalSinkCluster, read_journal
from spark_jobs import route

from ports import free_port

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
N, P = 4_000, 256
CLI_TIMEOUT_S = 600  # a hung job fails the test instead of hanging the suite


@pytest.fixture(scope="module")
def items(tmp_path_factory):
    """N items with distinct keys (written with pyarrow: no Spark session needed here)."""
    path = tmp_path_factory.mktemp("standalone-items") / "items.parquet"
    pq.write_table(pa.table({"key": [f"item-{i}" for i in range(N)], "seq": list(range(N))}), path)
    return str(path)


def driver_env(cluster, **extra: str) -> dict[str, str]:
    pythonpath = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return {**os.environ, **cluster.driver_env(), "PYTHONPATH": pythonpath, **extra}


def placement_cli(cluster, *args: str) -> list[str]:
    return [sys.executable, "-m", "placement_cli", *args, "--master", cluster.master_url]


def run(cluster, *args: str, **env: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(placement_cli(cluster, *args), env=driver_env(cluster, **env), capture_output=True,
                          text=True, timeout=CLI_TIMEOUT_S)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr[-3000:]}"
    return proc


def executor_files(cluster, app_name: str) -> list[str]:
    return sorted(f.name for d in cluster.executor_dirs(cluster.app_id(app_name)) for f in d.iterdir())


# ----- owners --------------------------------------------------------------------------------
def test_output_mode_on_executors_python_fallback_is_said(spark_standalone, items, tmp_path):
    """--output with the JVM key hash switched off: the fallback is named on stderr and in the
    report, the Python engine runs on the executors, and every row is under its owner's folder."""
    members = tmp_path / "members.json"
    members.write_text(json.dumps({"n1": 1.0, "n2": 2.0, "n3": 1.0}))
    table = route.offline_snapshot(str(members), partitions=P).table
    out, report = tmp_path / "out", tmp_path / "report.json"
    proc = run(spark_standalone, "spark-route", "--input", items, "--key-column", "key", "--members", str(members),
               "--partitions", str(P), "--output", str(out), "--report", str(report), PLACEMENT_UDF_JAR="off")
    assert "owner assignment runs in Python workers" in proc.stderr and "PLACEMENT_UDF_JAR=off" in proc.stderr
    summary = json.loads(report.read_text())
    assert summary["engine"] == "python" and summary["accounted"] and summary["input_items"] == N
    rows = ds.dataset(out, format="parquet", partitioning="hive").to_table().to_pylist()
    assert len(rows) == N and len({r["item_id"] for r in rows}) == N
    for r in rows:
        assert (r["partition"], r["owner"]) == (table.partition_of(r["key"]), table.lookup(r["key"])[0]), r
    assert summary["per_owner"] == {m: sum(r["owner"] == m for r in rows) for m in table.members}


def test_deliver_mode_uses_the_jvm_key_hash_on_executors(spark_standalone, items, tmp_path):
    cluster = LocalSinkCluster(3, partitions=P)
    try:
        snap = route.fetch_snapshot(cluster.urls)
        report = tmp_path / "report.json"
        run(spark_standalone, "spark-route", "--input", items, "--key-column", "key", *url_flags(cluster.urls),
            "--deliver", "--engine", "jvm", "--batch-size", "200", "--work-dir", str(tmp_path),
            "--report", str(report))
        summary = json.loads(report.read_text())
        assert summary["engine"] == "jvm"
        # The executors fetched the jar the driver put in spark.jars (they are not the driver's JVM).
        jars = [f for f in executor_files(spark_standalone, "placement spark-route") if f.endswith(".jar")]
        assert any(f.startswith("placement-udf-") for f in jars), jars
        got = {node.node_id: dict(app.state.work.received.get(summary["job"], {}))
               for node, app in zip(cluster.nodes, cluster.apps)}
        assert sum(map(len, got.values())) == len(set().union(*got.values())) == N
        for owner, received in got.items():
            assert all(snap.table.lookup(key)[0] == owner for key in received.values())
        assert summary["accounted"] and summary["failed"] == 0 and summary["rerouted"] == 0
        assert summary["per_owner"] == {m: len(r) for m, r in got.items()} == cluster.received(summary["job"])
        assert sum(app.state.work.duplicates for app in cluster.apps) == 0
    finally:
        cluster.close()


def url_flags(urls) -> list[str]:
    return [arg for url in urls for arg in ("--url", url)]


# ----- a sink killed with SIGKILL mid-delivery -----------------------------------------------
BATCH, AFTER = 50, 3  # the victim acknowledges AFTER batches, then freezes and is killed


class SinkProcesses:
    """``n`` ``python -m placement.service.work_sink`` processes with journals; ``stop_after`` {index: N} runs
    that one as ``tests/sink_stop_after.py N`` (freezes before taking batch N+1)."""

    def __init__(self, root: Path, n: int, stop_after: dict[int, int]) -> None:
        self.procs: list[subprocess.Popen] = []
        self.urls: list[str] = []
        self.journals: list[str] = []
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
        seed = None
        for i in range(n):
            gossip, http = free_port(), free_port()
            journal = str(root / f"n{i + 1}.jsonl")
            entry = ([str(REPO / "tests" / "sink_stop_after.py"), str(stop_after[i])] if i in stop_after
                     else ["-m", "placement.service.work_sink"])
            cmd = [sys.executable, *entry, "--id", f"n{i + 1}", "--gossip", f"127.0.0.1:{gossip}",
                   "--http", f"127.0.0.1:{http}", "--partitions", str(P), "--journal", journal]
            if seed:
                cmd += ["--join", seed]
            with open(root / f"n{i + 1}.log", "wb") as log:
                self.procs.append(subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                                   env=env))
            self.urls.append(f"http://127.0.0.1:{http}")
            self.journals.append(journal)
            seed = seed or f"127.0.0.1:{gossip}"

    def converged(self, indices: list[int], timeout_s: float = 90.0) -> None:
        """Wait until the sinks ``indices`` agree on a placement of exactly them and each holds
        exactly the partitions it leads in it (exclusive ownership: the handoffs are done; "every
        partition held once" alone is also true while the first node still holds them all)."""
        want = {f"n{i + 1}" for i in indices}
        deadline, last = time.monotonic() + timeout_s, "no answer yet"
        while time.monotonic() < deadline:
            try:
                snaps = [route.fetch_snapshot([self.urls[i]], timeout_s=2.0) for i in indices]
                owned = [httpx.get(self.urls[i] + "/v1/ownership", timeout=2.0).json()["owned"] for i in indices]
            except (route.NodeUnreachableError, httpx.HTTPError) as exc:
                last = str(exc)
            else:
                last = f"members {[sorted(s.table.members) for s in snaps]}, owned {[len(o) for o in owned]}"
                if (all(set(s.table.members) == want for s in snaps) and len({s.checksum for s in snaps}) == 1
                        and all(o == snaps[0].table.owned_by(f"n{i + 1}", leader_only=True)
                                for i, o in zip(indices, owned))):
                    return
            for i in indices:
                assert self.procs[i].poll() is None, f"sink n{i + 1} exited with {self.procs[i].returncode}"
            time.sleep(0.1)
        raise TimeoutError(f"sinks {sorted(want)} did not converge in {timeout_s} s: {last}")

    def wait_stopped(self, i: int, until: subprocess.Popen) -> bool:
        """Poll until sink ``i`` has frozen itself (True) or the process ``until`` ended (False)."""
        while until.poll() is None:
            pid, status = os.waitpid(self.procs[i].pid, os.WUNTRACED | os.WNOHANG)
            if pid and os.WIFSTOPPED(status):
                return True
            time.sleep(0.01)
        return False

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)  # the sink leaves gracefully on Ctrl-C
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def test_deliver_with_a_sink_killed_mid_job_accounts_for_every_item(spark_standalone, items, tmp_path):
    victim = 1
    sinks = SinkProcesses(tmp_path, 3, stop_after={victim: AFTER})
    try:
        sinks.converged([0, 1, 2])
        snap = route.fetch_snapshot(sinks.urls)
        planned = sum(snap.table.lookup(f"item-{i}")[0] == "n2" for i in range(N))
        report = tmp_path / "report.json"
        # Enough attempts (backoff 0.1 s doubling to 2 s) to outlast failure detection and takeover.
        with open(tmp_path / "job.out", "w+") as out, open(tmp_path / "job.err", "w+") as err:  # files: no pipe to fill
            job = subprocess.Popen(
                placement_cli(spark_standalone, "spark-route", "--input", items, "--key-column", "key",
                              *url_flags(sinks.urls), "--deliver", "--batch-size", str(BATCH), "--max-attempts", "40",
                              "--work-dir", str(tmp_path), "--report", str(report)),
                env=driver_env(spark_standalone), stdout=out, stderr=err, text=True)
            try:
                stopped = sinks.wait_stopped(victim, until=job)
                if stopped:
                    os.kill(sinks.procs[victim].pid, signal.SIGKILL)  # kill -9, mid-delivery
                job.wait(CLI_TIMEOUT_S)
            finally:
                if job.poll() is None:
                    job.kill()
            output = f"exit {job.returncode}\n{(tmp_path / 'job.out').read_text()}\n" \
                     f"{(tmp_path / 'job.err').read_text()[-3000:]}"
        assert stopped, f"the victim never received batch {AFTER + 1}: {output}"
        assert job.returncode == 0, output
        summary = json.loads(report.read_text())

        # The report: every item delivered exactly once, none failed, nothing missing.
        assert summary["accounted"] and summary["input_items"] == N and summary["failed"] == 0
        assert summary["delivered"] + summary["failed"] == N
        assert summary["missing"] == summary["duplicated"] == 0
        assert summary["retries"] >= 1 and summary["rerouted"] >= planned - AFTER * BATCH > 0

        # The sinks' own journals (the victim's written before it died) agree with the report.
        taken = [read_journal(path, summary["job"]) for path in sinks.journals]
        assert [d for _, d in taken] == [0, 0, 0]  # no sink saw an item twice
        ids = [set(items_) for items_, _ in taken]
        assert sum(map(len, ids)) == len(set().union(*ids)) == N  # each item at exactly one sink
        assert len(ids[victim]) == AFTER * BATCH  # what it acknowledged before it was killed
        assert summary["per_owner"] == {f"n{i + 1}": len(t) for i, t in enumerate(ids)}

        # Each item went to its owner: the victim's under the placement the job planned with, the
        # rest under the survivors' placement (which no longer has the victim).
        survivors = [i for i in range(3) if i != victim]
        after = route.fetch_snapshot([sinks.urls[i] for i in survivors]).table
        assert "n2" not in after.members
        for i, (received, _) in enumerate(taken):
            table = snap.table if i == victim else after
            assert all(table.lookup(key)[0] == f"n{i + 1}" for key in received.values())
    finally:
        sinks.close()


# ----- the sweep -----------------------------------------------------------------------------
def test_sweep_runs_on_the_cluster(spark_standalone, tmp_path):
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps({"scenario": ["crash-one"], "nodes": [5], "loss": [0.0], "lifeguard": [True, False],
                                "seed": [1], "duration_s": 20.0, "partitions": 64}))
    out = tmp_path / "sweep"
    proc = run(spark_standalone, "spark-sweep", "--out", str(out), "--grid", str(grid), "--no-plots")
    assert "2 runs (0 failed)" in proc.stdout
    table = pq.read_table(out / "metrics.parquet").to_pandas()
    assert sorted(table["lifeguard"]) == [False, True] and table["error"].isna().all()
    assert (table["detection_s_n"] == 1).all()
    assert "placement spark-sweep" in [a["name"] for a in spark_standalone.status()["completedapps"]]


# ----- bad input -----------------------------------------------------------------------------
@pytest.mark.parametrize("argv, message", [(["--workers", "0"], "--workers"), (["--memory", "lots"], "--memory")])
def test_standalone_command_rejects_bad_values_before_starting_anything(argv, message, capsys):
    from spark_jobs.standalone import main

    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_a_spark_home_without_spark_class_is_named(tmp_path, monkeypatch):
    from spark_jobs.standalone import ClusterStartError, StandaloneCluster

    monkeypatch.setenv("SPARK_HOME", str(tmp_path))
    with pytest.raises(ClusterStartError, match="spark-class"):
        StandaloneCluster(tmp_path / "cluster").start()
