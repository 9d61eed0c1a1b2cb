"""A Spark standalone cluster on this machine (one master, n workers) from the installed pyspark.

Why: ``local[*]`` runs every task inside the driver's JVM, so it cannot show that the JVM key-hash
jar reaches executors (``spark.jars`` is fetched by each executor from the driver), that
``--master spark://...`` works, or what a job does on executors that are separate processes. A
standalone cluster of real daemons, bound to one address, does - without Docker or a second host.

It runs the commands a user would type (docs/spark.md, "On a standalone cluster")::

    $SPARK_HOME/bin/spark-class org.apache.spark.deploy.master.Master \\
        --host 127.0.0.1 --port 7077 --webui-port 8080
    $SPARK_HOME/bin/spark-class org.apache.spark.deploy.worker.Worker \\
        --host 127.0.0.1 --cores 1 --memory 512m --webui-port 8081 --work-dir DIR spark://127.0.0.1:7077

``SPARK_HOME`` defaults to the pyspark package (a pip-installed pyspark ships ``bin/`` and the
jars). Readiness is polled, with a deadline: the master's log line ``Starting Spark master at
spark://...`` gives the URL it really bound (Spark moves to the next port when one is taken), and
its web UI JSON (``/json/``) says when ``status`` is ALIVE and all workers registered.

Everything a driver needs to use the cluster is in ``driver_env()``: a ``SPARK_CONF_DIR`` whose
``spark-defaults.conf`` makes executors fit the workers' memory, and ``PYSPARK_PYTHON`` (on one
machine the executors' Python is the driver's). Each daemon runs in its own process group, which
``stop()`` ends (executors are children of their worker).

    with StandaloneCluster(Path("/tmp/sc"), workers=2) as cluster:
        subprocess.run(["placement", "spark-sweep", "--out", "out", "--master", cluster.master_url],
                       env={**os.environ, **cluster.driver_env()})

From the shell (``main``): ``python -m spark_jobs.standalone -- placement spark-sweep --out out
--master {master}`` runs one command against a fresh cluster; without a command it stays up
until Ctrl-C and prints the environment a driver needs.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path

from placement.errors import PlacementError

from .jvm import _spark_home
from .session import require_java

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
_MASTER_URL = re.compile(r"Starting Spark master at (spark://\S+)")
_MASTER_UI = re.compile(r"Successfully started service 'MasterUI' on port (\d+)")


class ClusterStartError(PlacementError):
    """A daemon exited or the cluster was not ready in time; the message holds its log's tail."""


def free_port(host: str = "127.0.0.1") -> int:
    """A port free now (Spark moves on by itself if another process takes it before it binds)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class StandaloneCluster:
    """One master and ``workers`` workers bound to ``host``; logs and work dirs under ``root``."""

    def __init__(self, root: Path, workers: int = 2, cores: int = 1, memory: str = "512m",
                 host: str = "127.0.0.1", env: Mapping[str, str] | None = None,
                 conf: Mapping[str, str] | None = None, java_options: str = "") -> None:
        """``env``: extra environment of the daemons (and so of executors and their Python
        workers); ``conf``: extra ``spark-defaults.conf`` lines for daemons and drivers;
        ``java_options``: JVM flags of every daemon, driver and executor (e.g. short-run flags)."""
        self.root = Path(root)
        self._conf, self._java_options = dict(conf or {}), java_options
        self.workers, self.cores, self.memory, self.host = workers, cores, memory, host
        self.spark_home = _spark_home()
        self.conf_dir = self.root / "conf"
        self.master_url = ""
        self.web_url = ""
        self._env = dict(env or {})
        self._procs: list[tuple[str, subprocess.Popen]] = []

    # ----- start ---------------------------------------------------------------------------
    def start(self, timeout_s: float = 180.0) -> StandaloneCluster:
        """Start the master, then the workers; return once all workers are registered and alive."""
        spark_class = self.spark_home / "bin" / "spark-class"
        if not os.access(spark_class, os.X_OK):
            raise ClusterStartError(f"no {spark_class}: set SPARK_HOME to a Spark distribution")
        require_java()
        self._write_conf()
        deadline = time.monotonic() + timeout_s
        try:
            self._spawn("master", [MASTER_CLASS, "--host", self.host, "--port", str(free_port(self.host)),
                                   "--webui-port", str(free_port(self.host))])
            self.master_url = self._wait_log("master", _MASTER_URL, deadline)
            self.web_url = f"http://{self.host}:{self._wait_log('master', _MASTER_UI, deadline)}"
            for i in range(self.workers):
                work_dir = self.root / f"worker-{i + 1}"
                self._spawn(f"worker-{i + 1}", [WORKER_CLASS, "--host", self.host, "--cores", str(self.cores),
                                                "--memory", self.memory, "--webui-port", str(free_port(self.host)),
                                                "--work-dir", str(work_dir), self.master_url])
            self._wait_alive(deadline)
        except BaseException:
            self.stop()
            raise
        return self

    def _write_conf(self) -> None:
        """spark-defaults.conf read by the daemons and by every driver given ``driver_env()``."""
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        conf = {
            "spark.master.rest.enabled": "false",  # no REST submission port (6066) to collide on
            "spark.executor.memory": self.memory,  # an executor must fit its worker (default 1g)
            "spark.driver.host": self.host,  # executors connect back to the driver here
            "spark.driver.bindAddress": self.host,
            "spark.ui.enabled": "false",  # drivers: no web UI ports (4040+) needed
            "spark.worker.cleanup.enabled": "false",  # keep executor dirs: tests look at them
        }
        if self._java_options:
            conf["spark.driver.extraJavaOptions"] = conf["spark.executor.extraJavaOptions"] = self._java_options
        conf.update(self._conf)
        (self.conf_dir / "spark-defaults.conf").write_text("".join(f"{k} {v}\n" for k, v in conf.items()))

    def _daemon_env(self) -> dict[str, str]:
        return {**os.environ, **self._env, "SPARK_HOME": str(self.spark_home), "SPARK_CONF_DIR": str(self.conf_dir),
                "SPARK_LOCAL_IP": self.host, "SPARK_DAEMON_MEMORY": "256m",
                "SPARK_DAEMON_JAVA_OPTS": self._java_options}

    def _spawn(self, name: str, args: list[str]) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.log_path(name), "wb") as log:
            proc = subprocess.Popen([str(self.spark_home / "bin" / "spark-class"), *args], stdin=subprocess.DEVNULL,
                                    stdout=log, stderr=subprocess.STDOUT, env=self._daemon_env(),
                                    start_new_session=True)  # its own group: stop() ends its executors too
        self._procs.append((name, proc))

    def log_path(self, name: str) -> Path:
        return self.root / f"{name}.log"

    def _check_running(self) -> None:
        for name, proc in self._procs:
            if proc.poll() is not None:
                raise ClusterStartError(f"Spark {name} exited with status {proc.returncode}:\n{self._tail(name)}")

    def _tail(self, name: str, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path(name).read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def _wait_log(self, name: str, pattern: re.Pattern, deadline: float) -> str:
        while True:
            self._check_running()
            match = pattern.search(self.log_path(name).read_text(errors="replace"))
            if match:
                return match.group(1)
            if time.monotonic() > deadline:
                raise ClusterStartError(f"Spark {name} did not log {pattern.pattern!r} in time:\n{self._tail(name)}")
            time.sleep(0.1)

    def status(self) -> dict:
        """The master's web UI JSON: ``status``, ``aliveworkers``, ``workers``, ``activeapps``, ..."""
        with urllib.request.urlopen(self.web_url + "/json/", timeout=5) as r:
            return json.load(r)

    def _wait_alive(self, deadline: float) -> None:
        seen: dict = {}
        while True:
            self._check_running()
            try:
                seen = self.status()
            except (OSError, ValueError):  # the UI is not serving yet
                seen = {}
            if seen.get("status") == "ALIVE" and seen.get("aliveworkers") == self.workers:
                return
            if time.monotonic() > deadline:
                tails = "\n".join(f"--- {n}:\n{self._tail(n, 8)}" for n, _ in self._procs)
                raise ClusterStartError(f"{seen.get('aliveworkers', 0)} of {self.workers} Spark workers alive at "
                                        f"{self.master_url} in time (status {seen.get('status')}):\n{tails}")
            time.sleep(0.2)

    # ----- use -----------------------------------------------------------------------------
    def running(self) -> bool:
        """True while every daemon started is still running."""
        return bool(self._procs) and all(proc.poll() is None for _, proc in self._procs)

    def driver_env(self) -> dict[str, str]:
        """Environment for a driver process (``placement spark-*`` or ``spark-submit``) on this machine."""
        return {"SPARK_HOME": str(self.spark_home), "SPARK_CONF_DIR": str(self.conf_dir),
                "SPARK_LOCAL_IP": self.host, "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable)}

    def app_id(self, name: str) -> str:
        """The id of the (last) application called ``name`` the master knows, running or finished."""
        status = self.status()
        apps = [a for a in status.get("activeapps", []) + status.get("completedapps", []) if a.get("name") == name]
        if not apps:
            raise LookupError(f"no application named {name!r} at {self.master_url}")
        return max(apps, key=lambda a: a.get("starttime", 0))["id"]

    def executor_dirs(self, app_id: str) -> list[Path]:
        """The executors' working directories of ``app_id`` (where they put fetched jars and logs)."""
        return sorted(d for w in range(self.workers) for d in (self.root / f"worker-{w + 1}" / app_id).glob("*")
                      if d.is_dir())

    # ----- stop ----------------------------------------------------------------------------
    def stop(self, timeout_s: float = 20.0) -> None:
        """SIGTERM each daemon's process group (workers first), SIGKILL what is left at the deadline."""
        procs, self._procs = self._procs[::-1], []
        for _, proc in procs:
            _signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for _, proc in procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            _signal_group(proc, signal.SIGKILL)  # executors left in the group, or a daemon that hung
            proc.wait()

    def __enter__(self) -> StandaloneCluster:
        return self.start() if not self._procs else self

    def __exit__(self, *exc) -> None:
        self.stop()


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)  # start_new_session: the group id is the daemon's pid
    except ProcessLookupError:
        pass


def main(argv: list[str] | None = None) -> int:
    """``python -m spark_jobs.standalone [--workers 2] ... [-- COMMAND ...]``: start a cluster, then
    run COMMAND with the driver environment (``{master}`` in it becomes the master URL) and stop,
    or without COMMAND print how to use the cluster and keep it up until Ctrl-C."""
    import argparse
    import shlex
    import tempfile

    from placement import argtypes

    ap = argparse.ArgumentParser(prog="python -m spark_jobs.standalone",
                                 description=(main.__doc__ or "").split("\n\n")[0])
    ap.add_argument("--workers", type=argtypes.integer(1, 16), default=2, help="1-16 (default 2)")
    ap.add_argument("--cores", type=argtypes.integer(1, 256), default=1, help="cores per worker (default 1)")
    ap.add_argument("--memory", default="512m", help="memory per worker and executor (default 512m)")
    ap.add_argument("--dir", help="logs, conf and work dirs (default: a new temp dir)")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ARGS... ({master}: the master URL)")
    args = ap.parse_args(argv)
    if not re.fullmatch(r"[0-9]+[kmgt]", args.memory.lower()):
        ap.error(f"--memory {args.memory!r}: give a size like 512m or 2g")
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    root = Path(args.dir or tempfile.mkdtemp(prefix="spark-standalone-"))
    try:
        cluster = StandaloneCluster(root, args.workers, args.cores, args.memory).start()
    except PlacementError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        env = cluster.driver_env()
        if command:
            return subprocess.run([c.replace("{master}", cluster.master_url) for c in command],
                                  env={**os.environ, **env}).returncode
        print(f"master {cluster.master_url} (web UI {cluster.web_url}); logs and work dirs in {root}\n"
              f"in another shell:\n  export {' '.join(f'{k}={shlex.quote(v)}' for k, v in env.items())}\n"
              f"  placement spark-sweep --out out/sweep --master {cluster.master_url}\nCtrl-C stops it", flush=True)
        while cluster.running():
            time.sleep(0.5)
        print("a Spark daemon exited; stopping", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        cluster.stop()


if __name__ == "__main__":
    raise SystemExit(main())
