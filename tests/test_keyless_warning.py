"""Issue 31 item 2: `placement keygen`, and a node that gossips without keys says so: at start
(its log), in /readyz and /v1/ownership, in `placement status` (the console's page: tests/
test_console_browser.py)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import httpx
import pytest

from placement.service.console.status import render
from placement.service.http_api import create_app
from placement.service.node import Node, NodeConfig, read_key_file
from placement_cli.main import main


def test_keygen_prints_a_key_and_writes_a_file_only_its_owner_reads(tmp_path: Path, capsys: pytest.CaptureFixture):
    assert main(["keygen"]) == 0
    printed = capsys.readouterr().out
    assert len(bytes.fromhex(printed.strip())) == 32
    assert main(["keygen"]) == 0 and capsys.readouterr().out != printed  # random
    path = tmp_path / "gossip.key"
    assert main(["keygen", "--out", str(path)]) == 0
    assert os.stat(path).st_mode & 0o777 == 0o600
    (key,) = read_key_file(str(path))
    assert len(key) == 32 and key.hex() not in printed
    assert main(["keygen", "--out", str(path)]) == 2  # never overwrites a key file
    assert "the file exists; keygen never overwrites" in capsys.readouterr().err
    assert read_key_file(str(path)) == (key,)


def config(keys: tuple[bytes, ...] = ()) -> NodeConfig:
    return NodeConfig("n1", gossip_bind=("127.0.0.1", 0), partitions=64, settle_s=0.0, keys=keys)


@pytest.mark.parametrize("keys", [(), (b"k" * 32,)])
def test_a_keyless_node_warns_in_its_log_readyz_and_ownership(keys: tuple[bytes, ...],
                                                             caplog: pytest.LogCaptureFixture):
    async def main_() -> None:
        async with Node(config(keys)) as node:
            transport = httpx.ASGITransport(app=create_app(node))
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
                ready = (await client.get("/readyz")).json()
                ownership = (await client.get("/v1/ownership")).json()
        logged = [r.getMessage() for r in caplog.records if r.name == "placement.node" and r.levelname == "WARNING"]
        if keys:
            assert "security_warning" not in ready and ownership["security_warning"] is None
            assert not any("without keys" in line for line in logged)
        else:
            warning = ready["security_warning"]
            assert warning.startswith("gossip runs without keys (no --key-file)") and "placement keygen" in warning
            assert ownership["security_warning"] == warning and warning in logged

    asyncio.run(main_())


def test_status_shows_the_warning():
    s = {"node": "n1", "url": "http://n1", "checksum": "a" * 32, "partitions": 8, "replicas": 1, "members": [],
         "agreement": {"agree": True, "majority": "a" * 32, "checksums": {"a" * 32: 1}, "disagree": [],
                       "unreachable": [], "unconfirmed": [], "members": [{"id": "n1", "checksum": "a" * 32,
                                                                         "error": None}]},
         "balance": {"members": 0}, "recent": [], "security_warning": "gossip runs without keys (no --key-file): x"}
    assert "WARNING: gossip runs without keys (no --key-file): x" in render(s, now=0.0).splitlines()[1]
    del s["security_warning"]
    assert "WARNING" not in render(s, now=0.0)

