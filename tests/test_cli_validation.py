"""Bad input never gives a traceback: every flag, PLACEMENT_* variable and file a flag names is
checked, and a mistake is one line naming the flag (variable, file) and the value, exit status 2.

The CLI runs in-process through ``main``; ``node`` is stubbed so a check that wrongly passes
fails the test instead of starting a node. Two cases run a real process (a busy port, and a bad
variable while the parser is built).
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys

import pytest

from placement.errors import PlacementError
from placement.service import http_server, node_cli, node_flags
from placement_cli.main import main


def _value_column(line: str) -> int:
    """Where a line's value starts: after its label and a gap of two or more spaces."""
    m = re.match(r"\S+( \S+)*  +", line)
    assert m is not None, line
    return m.end()


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's usage errors
        assert isinstance(exc.code, int), exc.code
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line(err: str, *names: str) -> None:
    assert "Traceback" not in err
    assert err.count("\n") == 1 and err.endswith("\n"), err
    for name in names:
        assert name in err, (name, err)


@pytest.fixture(autouse=True)
def no_node(monkeypatch):
    """A bad node flag must fail before a node starts: starting one fails the test."""
    monkeypatch.setattr(node_cli, "serve", lambda *a: pytest.fail("bad input reached serve()"))
    for name in [f.variable for f in node_flags.NODE_FLAGS]:
        monkeypatch.delenv(name, raising=False)


NODE = ["node", "--id", "n1"]
WITNESS = ["witness", "--id", "w1"]
BAD_FLAGS = [
    # (argv, flag, value)
    (["table", "--member", "n1=x"], "--member", "'n1=x'"),
    (["table", "--member", "n1=-1"], "--member", "'n1=-1'"),
    (["table", "--member", "n1=inf"], "--member", "'n1=inf'"),
    (["table", "--member", "n1=2000000"], "--member", "'n1=2000000'"),
    (["table", "--member", "=1"], "--member", "'=1'"),
    (["table", "--member", "n1=1", "--partitions", "0"], "--partitions", "'0'"),
    (["table", "--member", "n1=1", "--partitions", "-5"], "--partitions", "'-5'"),
    (["table", "--member", "n1=1", "--partitions", "x"], "--partitions", "'x'"),
    (["table", "--member", "n1=1", "--partitions", str(2**24 + 1)], "--partitions", f"'{2**24 + 1}'"),
    (["table", "--member", "n1=1", "--replicas", "0"], "--replicas", "'0'"),
    (["table", "--member", "n1=1", "--replicas", "17"], "--replicas", "'17'"),
    ([*NODE, "--zone", "z" * 65], "--zone", repr("z" * 65)),
    (["table", "--member", "n1=1", "--seed", "-1"], "--seed", "'-1'"),
    (["table", "--member", "n1=1", "--seed", str(2**32)], "--seed", f"'{2**32}'"),
    (["table", "--member", "n1=1", "--capacity-factor", "0.5"], "--capacity-factor", "'0.5'"),
    (["table", "--member", "n1=1", "--capacity-factor", "nan"], "--capacity-factor", "'nan'"),
    (["table", "--member", "n1=1", "--members", "m.json"], "--members", "--member"),
    (["demo", "--partitions", "0"], "--partitions", "'0'"),
    (["demo", "--replicas", "-1"], "--replicas", "'-1'"),
    (["simulate", "crash-one", "--loss", "2"], "--loss", "'2'"),
    (["simulate", "crash-one", "--loss", "-0.5"], "--loss", "'-0.5'"),
    (["simulate", "crash-one", "--loss", "1"], "--loss", "'1'"),
    (["simulate", "crash-one", "--duration", "-5"], "--duration", "'-5'"),
    (["simulate", "crash-one", "--duration", "0"], "--duration", "'0'"),
    (["simulate", "crash-one", "--nodes", "0"], "--nodes", "'0'"),
    (["simulate", "crash-one", "--nodes", "2.5"], "--nodes", "'2.5'"),
    (["simulate", "crash-one", "--seed", "x"], "--seed", "'x'"),
    (["simulate", "crash-one", "--partitions", "0"], "--partitions", "'0'"),
    (["simulate", "crash-one", "--replicas", "0"], "--replicas", "'0'"),
    (["simulate", "crash-one", "--latency", "-1"], "--latency", "'-1'"),
    (["simulate", "crash-one", "--jitter", "inf"], "--jitter", "'inf'"),
    (["simulate", "crash-one", "--clock-skew", "-0.1"], "--clock-skew", "'-0.1'"),
    (["simulate", "crash-one", "--sample", "0"], "--sample", "'0'"),
    (["simulate", "crash-one", "--param", "at_s=abc"], "--param at_s", "'abc'"),
    (["simulate", "crash-one", "--param", "at_s=-1"], "--param at_s", "'-1'"),
    (["simulate", "crash-one", "--param", "nope=1"], "--param", "'nope'"),
    (["simulate", "crash-one", "--param", "at_s"], "--param", "'at_s'"),
    (["simulate", "crash-many", "--param", "count=1.5"], "--param count", "'1.5'"),
    (["simulate", "stalls", "--param", "gap_s=0"], "--param gap_s", "'0'"),
    (["simulate", "stalls", "--param", "fraction=2"], "--param fraction", "'2'"),
    (["simulate", "loss", "--param", "loss=1"], "--param loss", "'1'"),
    (["simulate", "crash-one", "--system", "nope"], "--system", "'nope'"),
    (["simulate", "nope"], "scenario", "'nope'"),
    ([*NODE, "--weight", "abc"], "--weight", "'abc'"),
    ([*NODE, "--weight", "-1"], "--weight", "'-1'"),
    ([*NODE, "--weight", "nan"], "--weight", "'nan'"),
    ([*NODE, "--gossip", "nohost"], "--gossip", "'nohost'"),
    ([*NODE, "--gossip", "127.0.0.1:99999"], "--gossip", "'127.0.0.1:99999'"),
    ([*NODE, "--http", ":8001"], "--http", "':8001'"),
    ([*NODE, "--join", "x"], "--join", "'x'"),
    ([*NODE, "--join", "dns:"], "--join", "'dns:'"),
    ([*NODE, "--join", "dns:-bad.example"], "--join", "'dns:-bad.example'"),
    ([*NODE, "--join", "dns:seeds.example:0"], "--join", "'dns:seeds.example:0'"),
    ([*NODE, "--join", "dns:seeds.example:x"], "--join", "'dns:seeds.example:x'"),
    ([*NODE, "--join-timeout", "-1"], "--join-timeout", "'-1'"),
    ([*NODE, "--join-timeout", "soon"], "--join-timeout", "'soon'"),
    ([*NODE, "--gossip-advertise", "h:p"], "--gossip-advertise", "'h:p'"),
    ([*NODE, "--http-advertise", "node1:8001"], "--http-advertise", "'node1:8001'"),
    ([*NODE, "--tag", "novalue"], "--tag", "'novalue'"),
    ([*NODE, "--partitions", "0"], "--partitions", "'0'"),
    ([*NODE, "--replicas", "x"], "--replicas", "'x'"),
    ([*NODE, "--seed", "-1"], "--seed", "'-1'"),
    ([*NODE, "--cluster", ""], "--cluster", "''"),
    ([*NODE, "--admin-token", ""], "--admin-token", "''"),
    (["node", "--id", " n1"], "--id", "' n1'"),
    (["node"], "--id", "PLACEMENT_ID"),
    ([*NODE, "--gossip", "0.0.0.0:7001"], "--gossip", "--gossip-advertise"),
    ([*NODE, "--http", "0.0.0.0:8001"], "--http", "--http-advertise"),
    ([*NODE, "--key-file", "/nonexistent/keys"], "--key-file", "/nonexistent/keys"),
    (["members", "--url", "foo"], "--url", "'foo'"),
    (["owners", "k", "--url", "ftp://x"], "--url", "'ftp://x'"),
    (["owners", "k", "--url", "http://h:99999"], "--url", "'http://h:99999'"),
    (["cluster", "--nodes", "0"], "--nodes", "'0'"),
    (["cluster", "--nodes", "65"], "--nodes", "'65'"),
    (["cluster", "--gossip-port", "0"], "--gossip-port", "'0'"),
    (["cluster", "--http-port", "70000"], "--http-port", "'70000'"),
    (["cluster", "--gossip-port", "65534"], "--gossip-port", "65534"),
    (["cluster", "--partitions", "0"], "--partitions", "'0'"),
    (["spark-route", "--input", "x", "--key-column", "k", "--url", "nope", "--deliver"], "--url", "'nope'"),
    (["spark-route", "--input", "x", "--key-column", "k", "--members", "m.json", "--output", "o",
      "--partitions", "0"], "--partitions", "'0'"),
    (["spark-route", "--input", "x", "--key-column", "k", "--url", "http://h", "--deliver",
      "--batch-size", "0"], "--batch-size", "'0'"),
    (["spark-route", "--input", "x", "--key-column", "k", "--url", "http://h", "--deliver",
      "--max-attempts", "-1"], "--max-attempts", "'-1'"),
    (["spark-sample", "--out", "x", "--items", "0"], "--items", "'0'"),
    (["spark-sample", "--out", "x", "--distinct-keys", "0"], "--distinct-keys", "'0'"),
    (["nope"], "nope", "--help"),
    # placement witness: the node's checks, and the flags about work refused
    (["witness"], "--id", "PLACEMENT_ID"),
    ([*WITNESS, "--partitions", "0"], "--partitions", "'0'"),
    ([*WITNESS, "--join", "x"], "--join", "'x'"),
    ([*WITNESS, "--gossip", "0.0.0.0:7001"], "--gossip", "--gossip-advertise"),
    ([*WITNESS, "--http", "0.0.0.0:8001"], "--http", "--http-advertise"),
    ([*WITNESS, "--http-advertise", "http://w1:8001"], "--http-advertise", "without --http"),
    ([*WITNESS, "--key-file", "/nonexistent/keys"], "--key-file", "/nonexistent/keys"),
    ([*WITNESS, "--weight", "0"], "--weight", "a witness always has weight 0"),
    ([*WITNESS, "--weight"], "--weight", "a witness always has weight 0"),
    ([*WITNESS, "--worker", "mod:factory"], "--worker", "runs no partition workers"),
    ([*WITNESS, "--work-sink"], "--work-sink", "a witness takes no work"),
    ([*WITNESS, "--handoff-timeout", "5"], "--handoff-timeout", "hands none on"),
    ([*WITNESS, "--ownership", "available"], "--ownership", "exclusive ownership only"),
]


@pytest.mark.parametrize("argv, flag, value", BAD_FLAGS, ids=[" ".join(c[0]) for c in BAD_FLAGS])
def test_a_bad_flag_is_one_line_naming_flag_and_value(argv, flag, value, capsys):
    code, _out, err = run(argv, capsys)
    assert code == 2
    assert_one_line(err, flag, value)


BAD_VARIABLES = [
    ("PLACEMENT_WEIGHT", "abc"),
    ("PLACEMENT_WEIGHT", "-2"),
    ("PLACEMENT_PARTITIONS", "0"),
    ("PLACEMENT_PARTITIONS", "many"),
    ("PLACEMENT_REPLICAS", "1.5"),
    ("PLACEMENT_SEED", "-1"),
    ("PLACEMENT_GOSSIP", "7001"),
    ("PLACEMENT_HTTP", "localhost"),
    ("PLACEMENT_JOIN", "127.0.0.1:7001,oops"),
    ("PLACEMENT_JOIN", "dns:seeds.example,dns:a..b"),
    ("PLACEMENT_JOIN_TIMEOUT", "nan"),
    ("PLACEMENT_GOSSIP_ADVERTISE", "host"),
    ("PLACEMENT_HTTP_ADVERTISE", "node1"),
    ("PLACEMENT_TAG", "zone=a,bad"),
    ("PLACEMENT_ZONE", " eu-1a"),
    ("PLACEMENT_ZONE", "z" * 65),
    ("PLACEMENT_ID", ""),
    ("PLACEMENT_CLUSTER", ""),
]


@pytest.mark.parametrize("name, value", BAD_VARIABLES)
def test_a_bad_variable_is_one_line_naming_it_and_its_value(name, value, monkeypatch, capsys):
    monkeypatch.setenv(name, value)
    argv = ["node"] if name == "PLACEMENT_ID" else NODE
    code, _out, err = run(argv, capsys)
    assert code == 2
    assert_one_line(err, name, repr(value.split(",")[-1]))


def test_node_variables_are_read_when_no_flag_is_given(monkeypatch):
    env = {"PLACEMENT_ID": "n7", "PLACEMENT_WEIGHT": "2.5", "PLACEMENT_JOIN": "a:1, b:2", "PLACEMENT_TAG": "zone=x",
           "PLACEMENT_PARTITIONS": "512", "PLACEMENT_GOSSIP": "127.0.0.1:7100", "PLACEMENT_ZONE": "eu-1a"}
    from placement_cli.main import build_parser

    config, http = node_flags.config_from_args(build_parser().parse_args(["node", "--weight", "3"]), env)
    assert (config.node_id, config.weight, config.join, dict(config.tags)) == ("n7", 3.0, (("a", 1), ("b", 2)),
                                                                              {"zone": "x"})
    assert (config.partitions, config.gossip_bind, http) == (512, ("127.0.0.1", 7100), ("127.0.0.1", 8001))
    assert config.zone == "eu-1a"
    config, _ = node_flags.config_from_args(build_parser().parse_args(["node", "--zone", "rack 7"]), env)
    assert config.zone == "rack 7"


def test_a_witness_reads_the_variables_of_its_flags_and_not_those_about_work(monkeypatch):
    """A settings file shared with the nodes (deploy/k8s/configmap.yaml) may carry the work
    settings: a witness does not read them. PLACEMENT_OWNERSHIP=available is refused."""
    env = {"PLACEMENT_ID": "w7", "PLACEMENT_JOIN": "dns:placement-gossip:7001", "PLACEMENT_PARTITIONS": "512",
           "PLACEMENT_WEIGHT": "2.5", "PLACEMENT_WORKER": "mod:factory", "PLACEMENT_HANDOFF_TIMEOUT": "9",
           "PLACEMENT_OWNERSHIP": "exclusive"}
    from placement_cli.main import build_parser

    config, http = node_flags.witness_config_from_args(build_parser().parse_args(["witness"]), env)
    assert (config.node_id, config.weight, config.partitions, config.ownership) == ("w7", 0.0, 512, "exclusive")
    assert str(config.join[0]) == "dns:placement-gossip:7001" and config.exclusive.handoff_timeout_s == 5.0
    assert http is None and config.http_advertise == ""  # no HTTP server unless --http
    config, http = node_flags.witness_config_from_args(
        build_parser().parse_args(["witness", "--http", "127.0.0.1:8009"]), env)
    assert http == ("127.0.0.1", 8009) and config.http_advertise == "http://127.0.0.1:8009"
    with pytest.raises(PlacementError, match="PLACEMENT_OWNERSHIP='available': a witness votes in exclusive"):
        node_flags.witness_config_from_args(build_parser().parse_args(["witness"]),
                                          {**env, "PLACEMENT_OWNERSHIP": "available"})


def test_a_witness_starts_with_weight_0_and_no_http_server(monkeypatch, capsys):
    started = []

    async def serve(config, http, *rest):
        started.append((config, http, rest))
        return 0

    monkeypatch.setattr(node_cli, "serve", serve)
    assert run([*WITNESS, "--join", "127.0.0.1:7001", "--tag", "zone=a"], capsys)[0] == 0
    [(config, http, rest)] = started
    assert (config.weight, http, rest, dict(config.tags)) == (0.0, None, (), {"zone": "a"})


def test_witness_help_lists_the_cluster_flags_and_not_the_work_flags(capsys):
    code, out, _err = run(["witness", "--help"], capsys)
    assert code == 0
    assert "owns no partitions" in out
    for flag in ("--id", "--gossip", "--join", "--key-file", "--cluster", "--partitions", "--replicas", "--seed",
                 "--http"):
        assert flag in out, flag
    for flag in node_flags.WITNESS_REFUSES:
        assert flag not in out, flag


@pytest.mark.parametrize("command", [["demo", "--partitions", "64"], ["table", "--member", "n1=1"]])
def test_a_bad_node_variable_does_not_break_other_commands(command, monkeypatch, capsys):
    monkeypatch.setenv("PLACEMENT_WEIGHT", "abc")
    monkeypatch.setenv("PLACEMENT_PARTITIONS", "x")
    assert run(command, capsys)[0] == 0


BAD_MEMBER_FILES = [
    # (content, what the message must hold besides the file name)
    ('{"n1": 1,}', ":1:10: not valid JSON"),
    ('{\n  "n1": 1\n  "n2": 2\n}', ":3:3: not valid JSON"),
    ('{"n1": 1, "n1": 2}', "duplicate key 'n1'"),
    ('{"n1": "x"}', "'x'"),
    ('{"n1": -1}', "-1"),
    ('{"n1": true}', "True"),
    ('{"": 1}', "''"),
    ('[["n1", 1], ["n1", 2]]', "duplicate member id 'n1'"),
    ("[1, 2]", "expected members as"),
    ("{}", "no members"),
    ('{"n1": 0}', "positive weight"),
]


@pytest.mark.parametrize("content, detail", BAD_MEMBER_FILES)
def test_a_bad_members_file_names_the_file(content, detail, tmp_path, capsys):
    path = tmp_path / "members.json"
    path.write_text(content)
    code, _out, err = run(["table", "--members", str(path)], capsys)
    assert code == 2
    assert_one_line(err, detail, *([] if "positive" in detail else [str(path)]))


@pytest.mark.parametrize("setup, argv, detail", [
    (lambda p: None, ["table", "--members"], "No such file or directory"),
    (lambda p: p.write_bytes(b"\xff\xfe{"), ["table", "--members"], "not a UTF-8 text file"),
    (lambda p: p.write_text("{nope"), ["spark-route", "--input", "x", "--key-column", "k", "--output", "o",
                                        "--members"], ":1:2: not valid JSON"),
    (lambda p: p.write_text('{"nodes": [8],}'), ["spark-sweep", "--out", "o", "--grid"], ":1:15: not valid JSON"),
    (lambda p: p.write_text('{"nodez": [8]}'), ["spark-sweep", "--out", "o", "--grid"], "unknown grid keys"),
    (lambda p: p.write_text("[8]"), ["spark-sweep", "--out", "o", "--grid"], "a grid is a JSON object"),
    (lambda p: p.write_text("zz\n"), [*NODE, "--key-file"], ":1: a key must be hex or base64"),
    (lambda p: p.write_bytes(b"\x80\x81\n"), [*NODE, "--key-file"], "not a text file"),
])
def test_a_bad_file_names_the_file(setup, argv, detail, tmp_path, capsys):
    path = tmp_path / "file.json"
    setup(path)
    code, _out, err = run([*argv, str(path)], capsys)
    assert code == 2
    assert_one_line(err, str(path), detail)


def test_a_busy_gossip_port_names_the_address_and_the_flag():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as busy:
        busy.bind(("127.0.0.1", 0))
        port = busy.getsockname()[1]
        r = subprocess.run([sys.executable, "-m", "placement_cli", "node", "--id", "n1",
                            "--gossip", f"127.0.0.1:{port}", "--http", "127.0.0.1:0"],
                           capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert_one_line(r.stderr, f"127.0.0.1:{port}", "--gossip", "PLACEMENT_GOSSIP", "in use")


def test_a_busy_http_port_names_the_address_and_the_flag(capsys):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(PlacementError, match=rf"HTTP 127\.0\.0\.1:{port} \(--http or PLACEMENT_HTTP\)"):
            http_server.listen_http(("127.0.0.1", port))


def test_a_bad_variable_while_the_parser_is_built_breaks_nothing():
    """The reported crash: PLACEMENT_WEIGHT=abc broke every subcommand (a real process, real env)."""
    env = {"PLACEMENT_WEIGHT": "abc", "PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path)}
    r = subprocess.run([sys.executable, "-m", "placement_cli", "demo", "--partitions", "64"],
                       capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0 and r.stderr == ""


# ----- what the commands print ---------------------------------------------------------------
def test_table_compares_leaders_with_the_weighted_share(capsys):
    code, out, _err = run(["table", "--member", "a=1", "--member", "b=3", "--member", "z=0", "--partitions",
                          "40000"], capsys)
    assert code == 0
    header, *rows = out.splitlines()[1:]
    assert header.split()[-2:] == ["vs", "share"]
    ratio = {r.split()[0]: r.split()[-1] for r in rows}
    assert abs(float(ratio["a"]) - 1) < 0.05 and abs(float(ratio["b"]) - 1) < 0.05  # not 0.5 and 1.5
    assert ratio["z"] == "-"


def test_demo_points_at_the_local_cluster(capsys):
    code, out, _err = run(["demo", "--partitions", "256"], capsys)
    assert code == 0 and "not built yet" not in out
    assert "make run" in out and "placement cluster" in out


def test_simulate_prints_a_summary_or_json(capsys):
    argv = ["simulate", "crash-one", "--nodes", "5", "--duration", "15", "--quiet", "--partitions", "64"]
    code, out, _err = run(argv, capsys)
    assert code == 0
    lines = out.splitlines()
    assert len(lines) <= 12 and lines[0].split()[:3] == ["run", "crash-one", "on"]
    assert any(line.startswith("detection ") and "p99" in line for line in lines)
    assert len({_value_column(line) for line in lines}) == 1  # one value column
    code, out, _err = run([*argv, "--json"], capsys)
    metrics = json.loads(out)
    assert code == 0 and metrics["scenario"] == "crash-one" and metrics["detection_s"]["n"] == 1
