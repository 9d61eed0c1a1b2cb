"""The Spark subcommands' errors are clear before any JVM starts (no Spark session needed)."""

from placement_cli.main import main


def test_missing_java_says_what_to_install(monkeypatch, capsys, tmp_path):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setattr("shutil.which", lambda name: None)
    assert main(["spark-sample", "--out", str(tmp_path / "x.parquet")]) == 2
    err = capsys.readouterr().err
    assert "needs a Java runtime" in err and "openjdk-17" in err


def test_unreachable_node_url_is_named(capsys, tmp_path):
    code = main(["spark-route", "--input", str(tmp_path), "--key-column", "key", "--url", "http://127.0.0.1:9",
                 "--deliver"])
    assert code == 2 and "http://127.0.0.1:9" in capsys.readouterr().err


def test_deliver_needs_a_node_url(capsys, tmp_path):
    members = tmp_path / "m.json"
    members.write_text('{"n1": 1}')
    assert main(["spark-route", "--input", str(tmp_path), "--key-column", "key", "--members", str(members),
                 "--deliver"]) == 2
    assert "--deliver needs --url" in capsys.readouterr().err
