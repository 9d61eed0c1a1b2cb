"""Every shell command in README.md and docs/*.md works as written (issue 16 item 6).

The commands are read from the fenced ``sh`` blocks (continuation lines joined, comments dropped,
``.venv/bin/`` dropped: the same programs are on PATH). Each one is either

* run here, as written, by ``bash`` in a fresh directory whose ``.venv/bin`` holds ``placement``
  and ``python`` for this interpreter (``FAST``; ``MAKE_RUN`` against the cluster ``make run``
  starts, and ``README_NODES``), with what its comment or the text around it promises checked;
* or covered by a named test that exercises the same thing (``COVERED``);
* or not run, with the reason (``NOT_RUN``: no Docker engine, Kubernetes, YARN, root, network,
  or a benchmark of minutes); its arguments still go through the program's own parser.

``test_every_documented_command_is_run_or_covered`` fails for a documented command in none of
them (and for an entry no document has any more), so a new command cannot slip in untested.

Commands against a running cluster use its documented ports (7001-7005, 8001-8005) moved to free
ones, and ``make run``'s cluster has 3 nodes and 256 partitions instead of 5 and 4096 (flags
added after the recipe's; the documented commands reach nodes 1-3 only).
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from placement.snapshot import PlacementSnapshot
from placement.table import PlacementTable
from placement_cli.main import DEMO_MEMBERS, build_parser

from ports import free_block
from test_cluster_processes import poll
from test_node_lifecycle import interrupt_as_a_terminal_does, kill_session

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>\w*)\n(?P<body>.*?)^(?P=indent)```", re.S | re.M)
SHELL_LANGS = {"sh", "bash", "shell", "console"}


def normalize(command: str) -> str:
    command = re.sub(r"(^|\s|\$\()\.venv/bin/", r"\1", command)
    return " ".join(command.split())


def documented_commands() -> dict[str, str]:
    """Command -> where it is first documented (``file:line``)."""
    found: dict[str, str] = {}
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for block in FENCE.finditer(text):
            if block["lang"] not in SHELL_LANGS:
                continue
            first_line = text.count("\n", 0, block.start("body")) + 1
            pending, start = "", None
            for i, line in enumerate(block["body"].splitlines()):
                line = re.sub(r"(^|\s)#.*", "", line).strip()  # `a#b` (env.tar.gz#env) is not a comment
                if start is None:
                    start = first_line + i
                if line.endswith("\\"):
                    pending += line[:-1] + " "
                    continue
                command = normalize(pending + line)
                if command:
                    found.setdefault(command, f"{path.relative_to(REPO)}:{start}")
                pending, start = "", None
    return found


# ----- how each command is checked -----------------------------------------------------------
def simulate_summary(out: str, run: str) -> dict[str, str]:
    """``simulate`` ends with a short human summary: one aligned line per subject."""
    lines = out.splitlines()
    labels = [re.split(r"  +", line, maxsplit=1)[0] for line in lines]
    assert labels == ["run", "network", "detection", "takeover", "false alarms", "moves", "ownership gaps",
                      "balance", "traffic", "wall time"], out
    rows = {label: re.split(r"  +", line, maxsplit=1)[1] for label, line in zip(labels, lines)}
    assert rows["run"].startswith(run), out
    return rows


def check_demo(out: str, home: Path) -> None:
    """The demo's figures are the library's: leaders per member against the weighted share, the
    keys' owners, and the moves of a join and a leave (all to the newcomer, all the leaver's)."""
    t = PlacementTable.build(DEMO_MEMBERS, partitions=4096, replicas=1, seed=0)
    load, total = t.load(), sum(DEMO_MEMBERS.values())
    rows = {w[0]: w[1:] for w in map(str.split, out.splitlines()) if len(w) == 5 and w[0] in DEMO_MEMBERS}
    assert "vs share" in out
    for m, w in DEMO_MEMBERS.items():
        assert rows[m] == [f"{w:g}", str(load[m]), str(load[m]), f"{load[m] / (4096 * w / total):.2f}"], rows[m]
    for key in ("order-42", "customer-7", "invoice-2026-11"):
        assert f"partition {t.partition_of(key):>5} -> owners {t.lookup(key)}" in out
    joined = t.with_members({**DEMO_MEMBERS, "n6": 1.0})
    left = joined.with_members({m: w for m, w in {**DEMO_MEMBERS, "n6": 1.0}.items() if m != "n2"})
    assert (f"n6 joins (weight 1): {len(t.moved(joined, leaders=True))} leaderships move, all to n6: True "
            f"(expected P*w/W = {4096 / (total + 1):.0f})") in out
    assert f"n2 leaves: {len(joined.moved(left, leaders=True))} leaderships move, all were n2's: True" in out
    assert "make run" in out and "placement cluster" in out


def check_list(out: str, home: Path) -> None:
    from simulations.scenarios import SCENARIOS, SYSTEMS

    names = [line.split()[0] for line in out.splitlines() if line.startswith("  ")]
    assert names == [*SCENARIOS, "compare"], names
    assert out.splitlines()[-1] == "systems: " + ", ".join(SYSTEMS)


def check_crash_out(out: str, home: Path) -> None:  # "metrics.json + PNGs"
    rows = simulate_summary(out, "crash-one on swim-exclusive, 64 nodes, 60 simulated s, seed 3")
    assert rows["detection"].endswith("(n=1); 0 crashes undetected"), rows
    written = {p.name for p in (home / "out" / "crash").iterdir()}
    assert written == {"metrics.json", "series.json", "membership.png", "detection.png", "moved.png", "balance.png",
                       "ownership.png"}, written
    metrics = json.loads((home / "out" / "crash" / "metrics.json").read_text())
    assert (metrics["scenario"], metrics["nodes"], metrics["seed"], metrics["detection_s"]["n"]) == \
        ("crash-one", 64, 3, 1)


def check_exclusive_split(out: str, home: Path) -> None:  # "exclusive ownership rules: 0 partition-s with two owners"
    rows = simulate_summary(out, "split on swim-exclusive, 16 nodes")
    assert rows["ownership gaps"].startswith("0 partition-s with two owners, "), rows


def check_plain_swim(out: str, home: Path) -> None:  # "plain SWIM"
    simulate_summary(out, "stalls on swim-nolifeguard, 32 nodes")


def check_eventhubs(out: str, home: Path) -> None:
    rows = simulate_summary(out, "crash-one on eventhubs, 16 nodes")
    assert rows["detection"].startswith("n/a") and rows["takeover"].endswith("(n=1)"), rows


def check_available_split(out: str, home: Path) -> None:  # "the availability-first mode: ... two owners"
    rows = simulate_summary(out, "split on swim, 16 nodes")
    dual = float(rows["ownership gaps"].split()[0].replace(",", ""))
    assert dual > 1000, rows


def check_split_loss(out: str, home: Path) -> None:
    rows = simulate_summary(out, "split on swim-exclusive, 16 nodes")
    assert rows["run"].endswith("(split_s=30, fraction=0.5)") and rows["network"].startswith("loss 2.0%"), rows


def check_split_cores(out: str, home: Path) -> None:
    """Every invariant, every core's own check included, held after every step: a violation
    would have ended the run with an error instead of the summary."""
    simulate_summary(out, "split on swim-exclusive, 16 nodes")


def documented_table(path: Path, header_start: str) -> list[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    end = next(i for i in range(start, len(lines) + 1) if i == len(lines) or not lines[i].startswith("|"))
    return lines[start:end]


def check_compare(out: str, home: Path) -> None:  # "the comparison table below" (docs/simulations.md)
    printed = [line for line in out.splitlines() if line.startswith("|")]
    documented = documented_table(REPO / "docs" / "simulations.md", "| system | crash: takeover s")
    assert printed == documented, ("docs/simulations.md's comparison table is not what `placement simulate "
                                   "compare` prints now: paste the new table there", printed)
    assert out.startswith("N=16, P=256, replicas=1, seed=1\n")
    assert set(json.loads((home / "out" / "compare" / "compare.json").read_text())) == {
        row.split("|")[1].strip() for row in printed[2:]}


def check_keygen(out: str, home: Path) -> None:  # "once per cluster; keep it secret"
    from placement.service.node import read_key_file

    path = home / "gossip.key"
    assert path.stat().st_mode & 0o777 == 0o600
    (key,) = read_key_file(str(path))
    assert len(key) == 32


#: Run by test_command_runs_as_written (each well under 20 s), with what their text promises.
FAST: dict[str, Callable[[str, Path], None]] = {
    "placement keygen --out gossip.key": check_keygen,
    "placement demo": check_demo,
    "placement simulate --list": check_list,
    "placement simulate crash-one --nodes 64 --duration 60 --seed 3 --out out/crash": check_crash_out,
    "placement simulate split": check_exclusive_split,
    "placement simulate split --system swim": check_available_split,
    "placement simulate stalls --nodes 32 --no-lifeguard": check_plain_swim,
    "placement simulate crash-one --system eventhubs --partitions 256": check_eventhubs,
    "placement simulate split --param split_s=30 --loss 0.02": check_split_loss,
    "placement simulate compare --out out/compare": check_compare,
    "placement simulate split --check-cores": check_split_cores,
}

#: Run by the tests against ``make run``'s cluster (below), in this order.
MAKE_RUN = (
    "make run",
    "placement status --url http://127.0.0.1:8001 --watch",
    "placement members --url http://127.0.0.1:8001",
    "placement owners order-42 --url http://127.0.0.1:8003",
    "curl -s http://127.0.0.1:8002/metrics | grep placement_",
    "placement status --url http://127.0.0.1:8001",
    "placement status --url http://127.0.0.1:8001 --watch 2",
    "placement spark-sample --out items.parquet --items 100000",
    "placement spark-route --input items.parquet --key-column key --url http://127.0.0.1:8001 --deliver "
    "--report report.json",
)

#: README, "Running nodes": run by test_readme_nodes_run_as_written.
README_NODES = (
    "placement node --id n1 --gossip 127.0.0.1:7001 --http 127.0.0.1:8001",
    "placement node --id n2 --gossip 127.0.0.1:7002 --http 127.0.0.1:8002 --join 127.0.0.1:7001 --weight 2",
    "placement witness --id w1 --gossip 127.0.0.1:7003 --http 127.0.0.1:8003 --join 127.0.0.1:7001",
)
#: README, "Forming a cluster": every member with --join and the same --bootstrap list.
README_BOOTSTRAP = (
    "placement node --id n1 --gossip 127.0.0.1:7001 --http 127.0.0.1:8001 --join 127.0.0.1:7002 --bootstrap n1,n2,n3",
    "placement node --id n2 --gossip 127.0.0.1:7002 --http 127.0.0.1:8002 --join 127.0.0.1:7001 --bootstrap n1,n2,n3",
    "placement node --id n3 --gossip 127.0.0.1:7003 --http 127.0.0.1:8003 --join 127.0.0.1:7001 --bootstrap n1,n2,n3",
)

_STANDALONE = ("tests/test_spark_standalone.py::test_output_mode_on_executors_python_fallback_is_said",
               "tests/test_spark_standalone.py::test_deliver_mode_uses_the_jvm_key_hash_on_executors",
               "tests/test_spark_standalone.py::test_sweep_runs_on_the_cluster")

#: Covered by these tests (which run the same code path, or the same program with other sizes).
COVERED: dict[str, tuple[str, ...]] = {
    "python -m simulations.fuzz_ownership --seeds 0:40":
        ("tests/test_exclusive.py::test_random_fault_schedules_never_give_two_owners_and_end_with_every_partition_owned",),
    "PYTHONPATH=build/mypyc placement simulate loss --nodes 256 --duration 3600 --system swim":
        ("tests/test_sim_engine.py::test_every_scenario_runs_small",),  # (the loss scenario, small)
    "placement spark-route --input items.csv --key-column key --members members.json --output out/by-owner":
        ("tests/test_spark_route.py::test_owner_columns_equal_the_library_row_for_row",  # items.csv
         "tests/test_spark_standalone.py::test_output_mode_on_executors_python_fallback_is_said"),  # the CLI
    "placement spark-route --input items.csv --key-column key --members members.json --partitions 4096 "
    "--output out/by-owner": ("tests/test_spark_route.py::test_owner_columns_equal_the_library_row_for_row",
                              "tests/test_spark_standalone.py::test_output_mode_on_executors_python_fallback_is_said"),
    "placement spark-sweep --out out/sweep": ("tests/test_spark_sweep.py::test_tiny_sweep_writes_table_and_plots",),
    "placement spark-sweep --out out/sweep --grid grid.json":
        ("tests/test_spark_sweep.py::test_tiny_sweep_writes_table_and_plots",
         "tests/test_spark_standalone.py::test_sweep_runs_on_the_cluster"),
    "kubectl apply -k deploy/k8s": ("tests/test_k8s_manifests.py::test_kustomization_lists_every_manifest",
                                    "tests/test_k8s_manifests.py::test_manifests_are_valid_kubernetes"),
    "kubectl create secret generic placement-secrets --from-file=gossip.key --from-literal=admin-token=\"$(placement "
    "keygen)\"": ("tests/test_k8s_manifests.py::"
                  "test_the_pods_gossip_with_keys_from_a_secret_and_take_the_admin_token_from_it",),
    "kubectl create secret tls placement-tls --cert=tls.crt --key=tls.key":
        ("tests/test_k8s_manifests.py::test_the_tls_overlay_serves_https_with_the_certificate_of_a_secret",),
    "kubectl apply -k deploy/k8s/tls":
        ("tests/test_k8s_manifests.py::test_the_tls_overlay_serves_https_with_the_certificate_of_a_secret",
         "tests/test_http_tls.py::test_a_node_serves_https_and_advertises_it"),
    "kubectl run -it --rm probe --image=curlimages/curl --restart=Never -- curl -s placement-http:8001/v1/members":
        ("tests/test_k8s_manifests.py::test_services_probes_and_budget_fit_the_pods",),
    "sudo python -m pytest -s -m netns tests/test_netns_cluster.py":
        ("tests/test_netns_cluster.py::test_hosts_converge_with_each_partition_owned_once",),
    # docs/spark.md, "On a standalone cluster": the fixture spark_standalone (spark_jobs/standalone.py)
    # starts the same master and workers, writes the same spark-defaults.conf and environment.
    "export SPARK_HOME=$(python -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')": _STANDALONE,
    "export SPARK_LOCAL_IP=127.0.0.1": _STANDALONE,
    "$SPARK_HOME/bin/spark-class org.apache.spark.deploy.master.Master --host 127.0.0.1 --port 7077 "
    "--webui-port 8080 &": _STANDALONE,
    "$SPARK_HOME/bin/spark-class org.apache.spark.deploy.worker.Worker --host 127.0.0.1 --cores 1 --memory 512m "
    "--webui-port 8081 --work-dir /tmp/spark-w1 spark://127.0.0.1:7077 &": _STANDALONE,
    "$SPARK_HOME/bin/spark-class org.apache.spark.deploy.worker.Worker --host 127.0.0.1 --cores 1 --memory 512m "
    "--webui-port 8082 --work-dir /tmp/spark-w2 spark://127.0.0.1:7077 &": _STANDALONE,
    "curl -s http://127.0.0.1:8080/json/ | grep -E '\"(status|aliveworkers)\"'": _STANDALONE,
    "mkdir -p conf && printf 'spark.executor.memory 512m\\nspark.driver.host 127.0.0.1\\n' > "
    "conf/spark-defaults.conf": _STANDALONE,
    "export SPARK_CONF_DIR=$PWD/conf PYSPARK_PYTHON=$PWD/.venv/bin/python": _STANDALONE,
    "placement spark-route --input items.parquet --key-column key --url http://127.0.0.1:8001 --deliver "
    "--master spark://127.0.0.1:7077 --max-attempts 12 --report report.json":
        ("tests/test_spark_standalone.py::test_deliver_mode_uses_the_jvm_key_hash_on_executors",
         "tests/test_spark_standalone.py::test_deliver_with_a_sink_killed_mid_job_accounts_for_every_item"),
    "placement spark-sweep --out out/sweep --master spark://127.0.0.1:7077":
        ("tests/test_spark_standalone.py::test_sweep_runs_on_the_cluster",),
}

_BENCH = "a benchmark of minutes; its output is recorded in docs/simulations.md and BENCHMARKS.md"
_NO_NET = "needs the network (pip installs mypy into build/mypyc-venv)"

#: Not run here, and why. Arguments of `placement`, `benchmarks/bench_sim.py` and `make` still
#: go through the real parser (test_commands_not_run_here_still_parse, test_make_targets).
NOT_RUN: dict[str, str] = {
    "make test": "the whole suite: this test is part of it (its recipe is checked by test_make_targets)",
    "make sim-fast": _NO_NET,
    "PYTHONPATH=build/mypyc python benchmarks/bench_sim.py --speed --repeat 2": _BENCH + "; " + _NO_NET,
    "PYTHONPATH=build/mypyc pytest -q": "the whole suite on a mypyc build; " + _NO_NET,
    "python benchmarks/bench_sim.py": _BENCH,
    "python benchmarks/bench_sim.py --speed": _BENCH,
    "python benchmarks/bench_sim.py --speed --repeat 2": _BENCH,
    "python benchmarks/bench_sim.py --only loss5": _BENCH,
    "python benchmarks/bench_sim.py --speed --nodes 256 --speed-s 120 --repeat 2": _BENCH,
    "python benchmarks/bench_sim.py --speed --nodes 256 --speed-s 120 --repeat 2 --check-cores": _BENCH,
    "python benchmarks/bench_sim.py --only crash --only split": _BENCH,
    "python benchmarks/bench_sim.py --large": _BENCH,
    "python benchmarks/bench_scale.py --nodes 256 512 1024": _BENCH + " (N=1,024 alone: half an hour and more)",
    "python benchmarks/bench_hosts.py --nodes 3 --witness --kills 6 --footprint 60 --out witness-kills.jsonl":
        "a benchmark of minutes with real processes; its figures are in docs/ownership.md (tests/"
        "test_witness_processes.py runs the same cluster and kill, smaller)",
    "python benchmarks/bench_bootstrap.py --runs 3": "a benchmark of about three minutes with real processes; "
    "tests/test_docs_commands.py::test_readme_bootstrap_nodes_form_a_cluster_and_a_restart_rejoins_it runs the "
    "same kill and restart",
    "python benchmarks/bench_restarts.py": "a benchmark of a minute with real processes; its figures are in "
                                           "docs/deploy.md (tests/test_restarts.py runs its SIGTERM scenario)",
    "python benchmarks/bench_restarts.py --nodes 10 --at-once 2": "a benchmark of a minute with 10 real processes; "
                                                                  "its figures are in docs/deploy.md",
    "docker build -t REGISTRY/placement-service:0.1.0 .": "no Docker engine here (tests/test_compose.py checks "
                                                          "the Dockerfile's ENTRYPOINT and the compose commands)",
    "cd deploy/k8s && kustomize edit set image placement-service=REGISTRY/placement-service:0.1.0 && cd -":
        "no kustomize here (test_the_image_name_is_the_one_kustomize_sets checks the name it sets)",
    "zip -r placement_pkgs.zip placement placement_cli membership ownership simulations spark_jobs":
        "part of the YARN example (no YARN here)",
    "venv-pack -o env.tar.gz": "part of the YARN example (no YARN, no venv-pack here)",
    "spark-submit --master yarn --py-files placement_pkgs.zip --jars \"$(python -m spark_jobs.jvm)\" --archives "
    "env.tar.gz#env --conf spark.pyspark.python=./env/bin/python spark_jobs/submit.py spark-route --input "
    "hdfs:///work/items --key-column key --url http://node-1:8001 --deliver": "no YARN or HDFS here",
    "zip -qr placement_pkgs.zip placement placement_cli membership ownership simulations spark_jobs":
        "part of the spark-submit example below it",
    "$SPARK_HOME/bin/spark-submit --master spark://127.0.0.1:7077 --py-files placement_pkgs.zip --jars "
    "\"$(python -m spark_jobs.jvm)\" --conf spark.executor.memory=512m --conf "
    "spark.pyspark.python=$PWD/.venv/bin/python spark_jobs/submit.py spark-route --input items.parquet "
    "--key-column key --url http://127.0.0.1:8001 --deliver":
        "spark-submit on a standalone cluster is not run by any test (~1 min); the zip's part is "
        "tests/test_spark_jvm.py::test_the_jar_builds_from_a_py_files_zip, the job's the standalone tests",
}


def test_every_documented_command_is_run_or_covered():
    documented = documented_commands()
    ways = [set(FAST), set(MAKE_RUN), set(README_NODES), set(README_BOOTSTRAP), set(COVERED), set(NOT_RUN)]
    checked = set().union(*ways)
    assert sum(map(len, ways)) == len(checked), "a command is listed twice"
    missing = {c: where for c, where in documented.items() if c not in checked}
    assert not missing, f"documented commands neither run nor covered by a test (add them to a table here): {missing}"
    assert not checked - set(documented), f"listed here but no longer documented: {checked - set(documented)}"
    for node_ids in COVERED.values():
        for node_id in node_ids:
            path, _, name = node_id.partition("::")
            tree = ast.parse((REPO / path).read_text(encoding="utf-8"))
            assert name in {f.name for f in tree.body if isinstance(f, ast.FunctionDef)}, f"no test {node_id}"


def placement_argv(command: str) -> list[str] | None:
    """The `placement` arguments of a command (also after spark-submit's submit.py), or None."""
    words = [w for w in shlex.split(command) if not re.fullmatch(r"[A-Z_]+=\S*", w)]
    if words[:1] == ["placement"]:
        return words[1:]
    if "spark_jobs/submit.py" in words:
        return words[words.index("spark_jobs/submit.py") + 1:]
    return None


def load_bench_sim():
    spec = importlib.util.spec_from_file_location("bench_sim", REPO / "benchmarks" / "bench_sim.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_commands_not_run_here_still_parse():
    """Documented flags and values exist and validate, for the commands this file does not run."""
    bench = load_bench_sim().build_parser()
    parsed = 0
    for command in [*COVERED, *NOT_RUN]:
        argv = placement_argv(command)
        if argv is not None:
            build_parser().parse_args(argv)  # a bad flag or value exits (status 2): the test fails
            parsed += 1
        elif "benchmarks/bench_sim.py" in command:
            words = shlex.split(command)
            bench.parse_args(words[words.index("benchmarks/bench_sim.py") + 1:])
            parsed += 1
    assert parsed == 18  # 7 placement commands, 2 spark-submit jobs, 9 bench_sim runs


def test_the_image_name_is_the_one_kustomize_sets():
    """`kustomize edit set image placement-service=...` replaces the StatefulSet's image by name."""
    sts = (REPO / "deploy" / "k8s" / "statefulset.yaml").read_text()
    assert re.search(r"^\s+image: placement-service:", sts, re.M)


# ----- running them --------------------------------------------------------------------------
def make_home(path: Path) -> Path:
    """A directory like a fresh clone after `make`: ``.venv/bin/{placement,python}`` run this
    interpreter (whose packages are this checkout's: PYTHONPATH)."""
    bin_dir = path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name, args in (("placement", "-m placement_cli "), ("python", "")):
        (bin_dir / name).write_text(f'#!/bin/sh\nexec "{sys.executable}" {args}"$@"\n')
        (bin_dir / name).chmod(0o755)
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(REPO / name, path / name)
    return path


def environment(home: Path) -> dict[str, str]:
    """A user's shell: without the variables of a ``make`` this suite may run under (``make
    test``, as CI does), which make a nested ``make -n`` print "Entering directory" lines."""
    pythonpath = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES")}
    return {**env, "PATH": f"{home / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}",
            "PYTHONPATH": pythonpath, "PYTHONUNBUFFERED": "1"}


def shell(home: Path, command: str, timeout_s: float = 120) -> subprocess.CompletedProcess:
    r = subprocess.run(["bash", "-c", command], cwd=home, env=environment(home), capture_output=True, text=True,
                       timeout=timeout_s, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, f"{command}: exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    assert "Traceback" not in r.stderr, r.stderr
    return r


def start(home: Path, command: str, log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """A long-running command (Ctrl-C stops it), its output in ``log``; in a session of its own,
    so that a cleanup also reaches the processes it started (``placement cluster``'s nodes).
    ``env``: variables to set on top of the user's shell."""
    with log.open("w") as out:
        return subprocess.Popen(["bash", "-c", "exec " + command], cwd=home, env={**environment(home), **(env or {})},
                                stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                preexec_fn=interrupt_as_a_terminal_does)


def stop(proc: subprocess.Popen, sig: int = signal.SIGINT, timeout_s: float = 20) -> int:
    """Signal ``proc`` alone (as Ctrl-C in its terminal would reach it); if it has not ended in
    ``timeout_s``, kill its whole session and fail."""
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        return proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        kill_session(proc)
        raise AssertionError(f"still running {timeout_s} s after signal {sig}") from None


def on_ports(command: str, gossip: int, http: int) -> str:
    """The documented ports 7001-7005 / 8001-8005 moved to ``gossip`` / ``http`` onwards."""
    return re.sub(r"127\.0\.0\.1:([78])00([1-9])\b",
                  lambda m: f"127.0.0.1:{(gossip if m[1] == '7' else http) + int(m[2]) - 1}", command)


@pytest.fixture
def home(tmp_path):
    return make_home(tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("command", FAST)
def test_command_runs_as_written(command, home):
    FAST[command](shell(home, command).stdout, home)


def make_recipe(home: Path, target: str) -> list[str]:
    return shell(home, f"make -n {target}").stdout.splitlines()


def test_make_targets(home):
    """What README says `make run` and `make test` do, and that `make sim-fast` is a target (dry
    runs in a fresh directory: installing needs the network)."""
    # `make test`: every test (no -m), in TEST_WORKERS parallel processes (3 unless set).
    for target, last in (("run", r"\.venv/bin/placement cluster --nodes 5"),
                         ("test", r"\.venv/bin/python -m pytest -q -n \d+")):
        recipe = make_recipe(home, target)
        assert "test -x .venv/bin/python || python3 -m venv .venv" in recipe
        assert ".venv/bin/python -m pip install --quiet -e '.[dev]'" in recipe
        assert re.fullmatch(last, recipe[-1]), recipe
    assert any("mypyc" in line for line in make_recipe(home, "sim-fast"))


def test_placement_in_five_lines():
    """README's Python example gives the values its comments say."""
    block = next(b["body"] for b in FENCE.finditer((REPO / "README.md").read_text(encoding="utf-8"))
                 if b["body"].startswith("from placement import PlacementTable"))
    scope: dict = {}
    claims = []
    for line in block.splitlines():
        code, _, comment = line.partition("#")
        exec(code, scope)  # the README's own code
        if comment.strip().startswith("->"):  # "-> 398", "-> ('n2', 'n1'): owners of ..."
            claims.append((eval(code, scope), comment.strip()[2:].split(":")[0].strip()))
    assert len(claims) == 2
    for value, expected in claims:
        assert repr(value) == expected
    t, t2 = scope["t"], scope["t2"]
    assert t2.checksum == PlacementTable.build(dict(t2.members), partitions=4096, replicas=2, seed=0).checksum
    moved = t.moved(t2)  # "partitions whose owner set changed (only to n4)"
    assert moved and all(set(t2.owners(p)) - set(t.owners(p)) == {"n4"} for p in moved)


# ----- against `make run` --------------------------------------------------------------------
def spark_missing() -> str | None:
    """Why the Spark jobs cannot run here, or None."""
    if importlib.util.find_spec("pyspark") is None:
        return "pyspark not installed (pip install -e '.[dev]')"
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "Spark needs Java 17+ (no java on PATH, no JAVA_HOME)"
    return None


class MakeRun:
    """``make run``'s command, in a fresh directory, on free ports with 3 nodes and 256 partitions.
    The README's ``spark-sample`` (which needs no cluster) starts at the same time: it takes ~10 s
    of a JVM while the nodes mostly wait for each other."""

    NODES, PARTITIONS = 3, 256

    def __init__(self, home: Path, run: int = 1) -> None:
        self.home = home
        self.gossip, self.http = free_block(self.NODES), free_block(self.NODES)
        self.urls = [f"http://127.0.0.1:{self.http + i}" for i in range(self.NODES)]
        recipe = make_recipe(home, "run")[-1]
        self.log, self.sample_log = home / f"make-run-{run}.out", home / "spark-sample.out"
        # (The nodes' state - members files, witness records - in the home, as a user's: a
        # second run finds the first's.)
        self.proc = start(home, f"{recipe} --nodes {self.NODES} --partitions {self.PARTITIONS} "
                                f"--gossip-port {self.gossip} --http-port {self.http}", self.log,
                          {"PLACEMENT_STATE_HOME": str(home / "state")})
        self.sample = None if spark_missing() or run > 1 else start(home, MAKE_RUN[-2], self.sample_log)

    def command(self, documented: str) -> str:
        return on_ports(documented, self.gossip, self.http)

    def settled(self) -> bool:
        if any(httpx.get(u + "/readyz", timeout=2).status_code != 200 for u in self.urls):
            return False
        owned = [httpx.get(u + "/v1/ownership", timeout=2).json()["owned"] for u in self.urls]
        sums = {httpx.get(u + "/v1/checksum", timeout=2).json()["checksum"] for u in self.urls}
        # Every node owning some: "all 256 owned" alone also held before the first handoffs began
        # (n1 owning all), and the next test then read counts that were still moving.
        return sum(map(len, owned)) == self.PARTITIONS and all(owned) and len(sums) == 1

    def table(self) -> PlacementTable:
        return PlacementSnapshot.from_dict(httpx.get(self.urls[0] + "/v1/placement", timeout=5).json()).table


@pytest.fixture(scope="module")
def make_run(tmp_path_factory):
    cluster = MakeRun(make_home(tmp_path_factory.mktemp("make-run")))
    try:
        poll(lambda: cluster.proc.poll() is None and cluster.settled(), 60,
             "make run's nodes ready, every partition owned")
        yield cluster
    finally:
        stop(cluster.proc)
        if cluster.sample is not None:
            kill_session(cluster.sample)  # (Spark's JVM too, if the test stopped early)


@pytest.mark.slow
def test_make_run_starts_the_documented_cluster(make_run):
    """Nodes on consecutive ports, the console at /ui, and a streamed log whose ownership lines
    add up (each line's count is the previous one plus its +, minus its -)."""
    assert "cluster of 3 nodes; HTTP: " + ", ".join(make_run.urls) in make_run.log.read_text()
    for url in make_run.urls:
        assert httpx.get(url + "/ui", timeout=5).status_code == 200
    owned = {f"n{i + 1}": len(httpx.get(u + "/v1/ownership", timeout=2).json()["owned"])
             for i, u in enumerate(make_run.urls)}

    def printed() -> dict[str, int]:
        count: dict[str, int] = {}
        for node, n, plus, minus in re.findall(r"^\[(n\d)\] owns (\d+) partitions \(\+(\d+) -(\d+)\)",
                                               make_run.log.read_text(), re.M):
            assert int(n) == count.get(node, 0) + int(plus) - int(minus), (node, n, plus, minus)
            count[node] = int(n)
        return count

    poll(lambda: printed() == owned, 10, f"the log's last counts equal what the nodes own ({owned})")


@pytest.mark.slow
def test_commands_against_make_run(make_run):
    run = {c: make_run.command(c) for c in MAKE_RUN}
    urls, table = make_run.urls, make_run.table()

    out = shell(make_run.home, run["placement members --url http://127.0.0.1:8001"]).stdout
    rows = [line.split() for line in out.splitlines()[1:]]
    assert [r[:2] for r in rows] == [["n1", "alive"], ["n2", "alive"], ["n3", "alive"]], out
    assert [r[-1] for r in rows] == urls

    out = shell(make_run.home, run["placement owners order-42 --url http://127.0.0.1:8003"]).stdout
    owners = ", ".join(f"{m} ({urls[int(m[1:]) - 1]})" for m in table.lookup("order-42"))
    assert out == f"key 'order-42' -> partition {table.partition_of('order-42')} -> {owners}\n"

    out = shell(make_run.home, run["curl -s http://127.0.0.1:8002/metrics | grep placement_"]).stdout
    assert 'placement_members{status="alive"} 3.0' in out and all("placement_" in line for line in out.splitlines())

    # "members, agreement, balance max/mean, recent moves"
    out = shell(make_run.home, run["placement status --url http://127.0.0.1:8001"]).stdout
    assert out.startswith(f"node n1 at {urls[0]}  placement ") and "members: 3 alive" in out
    for text in ("agreement: all 3 answering members agree", "balance: max/mean ", "recent changes:"):
        assert text in out, out

    # --watch refreshes (every 2 s by default) until Ctrl-C, which ends it quietly.
    for command, frames in (("placement status --url http://127.0.0.1:8001 --watch", 1),
                            ("placement status --url http://127.0.0.1:8001 --watch 2", 2)):
        log = make_run.home / "watch.out"
        proc = start(make_run.home, run[command], log)
        poll(lambda: log.read_text().count("agreement: all 3") >= frames, 20, f"{frames} frame(s) of {command}")
        assert stop(proc) == 0 and "Traceback" not in log.read_text(), log.read_text()


@pytest.mark.slow
def test_spark_route_delivers_to_make_run(make_run):
    """The README's Spark example end to end: sample items, route them, POST each owner its own."""
    if make_run.sample is None:
        reason = spark_missing()
        assert reason is not None  # the sample is only left unstarted when Spark cannot run
        pytest.skip(reason)
    code, log = make_run.sample.wait(300), make_run.sample_log.read_text()
    assert code == 0 and "wrote 100000 items to items.parquet\n" in log and "Traceback" not in log, log[-3000:]
    out = shell(make_run.home, make_run.command(MAKE_RUN[-1]), timeout_s=300).stdout
    assert "accounting OK: 100000 delivered + 0 failed = 100000 of 100000; missing 0, duplicated 0" in out, out
    report = json.loads((make_run.home / "report.json").read_text())
    assert (report["delivered"], report["failed"], report["accounted"]) == (100000, 0, True)
    routes = make_run.table().route([f"item-{i}" for i in range(100000)])  # spark-sample's keys
    assert report["per_owner"] == {m: len(keys) for m, keys in routes.items()}


@pytest.mark.slow
def test_ctrl_c_stops_make_run_with_every_node_leaving(make_run):
    assert stop(make_run.proc) == 0
    log = make_run.log.read_text()
    assert "stopping: every node leaves gracefully" in log
    for i in range(1, 4):
        assert f"[n{i}] leaving: releasing partitions, announcing the leave" in log and f"[n{i}] stopped" in log


@pytest.mark.slow
def test_make_run_again_forms_a_new_cluster_over_the_state_of_the_last(make_run):
    """The second `make run` in the same place: its nodes find the witness records the first
    run's kept by default. n1 founds anew (``--new-cluster`` sets its record aside); n2 and n3,
    whose records are of the first run's cluster, join the new one as members that kept no
    promises; every node ready, every partition owned once, as the first time."""
    assert make_run.proc.poll() is not None  # (stopped by the test above)
    assert (make_run.home / "state" / "placement" / "n2.witness.state").exists()
    again = MakeRun(make_run.home, run=2)
    try:
        poll(lambda: again.proc.poll() is None and again.settled(), 60, "the second make run's nodes ready")
        log = again.log.read_text()
        assert "[n1] WARNING" in log and "--new-cluster founds a new cluster" in log
        assert "promised in an earlier cluster named 'placement'" in log
    finally:
        stop(again.proc)


# ----- README, "Running nodes" ---------------------------------------------------------------
@pytest.mark.slow
def test_readme_bootstrap_nodes_form_a_cluster_and_a_restart_rejoins_it(home):
    """"Forming a cluster": no founder; view 1 chosen by the listed members, every partition owned
    once; n1 killed and started again with its command is told the running view (it does not
    choose another), and owns its share again."""
    gossip, http = free_block(3), free_block(3)
    commands = [on_ports(c, gossip, http) for c in README_BOOTSTRAP]
    urls = [f"http://127.0.0.1:{http + i}" for i in range(3)]

    def ownership() -> list[dict]:
        return [httpx.get(u + "/v1/ownership", timeout=2).json() for u in urls]

    def owned_once() -> bool:
        owned = [set(o["owned"]) for o in ownership()]
        return sum(map(len, owned)) == 4096 and len(set().union(*owned)) == 4096

    procs = [start(home, c, home / f"b{i + 1}.out") for i, c in enumerate(commands)]
    try:
        poll(lambda: all(httpx.get(u + "/healthz", timeout=2).status_code == 200 for u in urls), 30, "nodes up")
        poll(owned_once, 90, "every partition owned once")
        assert {o["stable_view"] for o in ownership()} == {1}
        kill_session(procs[0])  # kill -9
        procs[0] = start(home, commands[0], home / "b1-again.out")
        poll(lambda: httpx.get(urls[0] + "/v1/ownership", timeout=2).json()["owned"] != [] and owned_once(), 90,
             "n1 owning its share again")
        assert {o["stable_view"] for o in ownership()} == {1}  # the running view: no second first view
    finally:
        for proc in procs:
            kill_session(proc)



@pytest.mark.slow
def test_readme_nodes_run_as_written(home):
    gossip, http = free_block(3), free_block(3)
    procs = []
    try:
        for i, command in enumerate(README_NODES):
            procs.append(start(home, on_ports(command, gossip, http), home / f"n{i + 1}.out"))
            url = f"http://127.0.0.1:{http + i}"
            poll(lambda: httpx.get(url + "/readyz", timeout=2).status_code == 200, 30, f"{url} ready")
        members = httpx.get(f"http://127.0.0.1:{http}/v1/members", timeout=2).json()
        assert [(m["id"], m["status"], m["weight"]) for m in members] == [
            ("n1", "alive", 1.0), ("n2", "alive", 2.0), ("w1", "alive", 0.0)]
        # "a witness ... owns no partitions"; with it in the stable view nobody warns any more.
        poll(lambda: all("warning" not in httpx.get(f"http://127.0.0.1:{http + i}/readyz", timeout=2).json()
                         and httpx.get(f"http://127.0.0.1:{http + i}/v1/ownership", timeout=2).json()
                         ["survival"]["crashes_survived"] == 1 for i in range(3)), 30, "three voters")
        assert httpx.get(f"http://127.0.0.1:{http + 2}/v1/ownership", timeout=2).json()["owned"] == []
        for proc in reversed(procs):
            assert stop(proc, signal.SIGTERM) == 0  # "SIGTERM/SIGINT: the node ... leaves, exits"
        for i, name in ((1, "n1"), (2, "n2"), (3, "w1")):
            assert f"[{name}] stopped" in (home / f"n{i}.out").read_text()
        assert "stops all work" in (home / "n1.out").read_text()  # logged while n1 and n2 were alone
        assert "founded a new cluster 'placement' (no --join)" in (home / "n1.out").read_text()
    finally:
        for proc in procs:
            kill_session(proc)
