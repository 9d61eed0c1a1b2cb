"""Issue 31 item 3: optional TLS for the HTTP API (``--tls-cert``, ``--tls-key``): a real
``placement node`` process serving HTTPS on 127.0.0.1 with a self-signed certificate, and the
flags' one-line errors."""

from __future__ import annotations

import datetime
import ipaddress
import os
import re
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from placement_cli.main import main


def self_signed(tmp: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = tmp / "tls.crt", tmp / "tls.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def test_a_node_serves_https_and_advertises_it(tmp_path: Path):
    cert, key = self_signed(tmp_path)
    node = subprocess.Popen([sys.executable, "-m", "placement_cli", "node", "--id", "s1", "--gossip", "127.0.0.1:0",
                             "--http", "127.0.0.1:0", "--partitions", "64", "--tls-cert", str(cert),
                             "--tls-key", str(key)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        assert node.stdout is not None
        first = node.stdout.readline()
        m = re.search(r" http (https://127\.0\.0\.1:\d+) ", first)
        assert m, first
        url = m.group(1)
        trusting = ssl.create_default_context(cafile=str(cert))
        deadline = time.monotonic() + 20
        while True:
            try:
                r = httpx.get(url + "/v1/members", verify=trusting, timeout=2)
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline and node.poll() is None
                time.sleep(0.1)
        assert r.status_code == 200 and r.json()[0]["http"] == url
        with pytest.raises(httpx.ConnectError):  # a client that does not trust the certificate
            httpx.get(url + "/healthz", timeout=2)
        with pytest.raises(httpx.HTTPError):  # plain HTTP on the HTTPS port
            httpx.get(url.replace("https:", "http:") + "/healthz", timeout=2)
        leave = httpx.post(url + "/v1/leave", verify=trusting, timeout=5)  # loopback, no token
        assert leave.status_code == 202
        assert node.wait(15) == 0
    finally:
        if node.poll() is None:
            node.kill()
            node.wait(10)


def test_tls_flags_are_one_line_errors(tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch):
    cert, key = self_signed(tmp_path)
    monkeypatch.setattr("placement.service.node_cli.serve", lambda *a, **k: pytest.fail("a node started"))
    base = ["node", "--id", "x", "--gossip", "127.0.0.1:0", "--http", "127.0.0.1:0"]
    cases = [
        (["--tls-cert", str(cert)], "--tls-cert and --tls-key go together"),
        (["--tls-cert", str(cert), "--tls-key", str(tmp_path / "nope")], "no such file"),
        (["--tls-cert", str(key), "--tls-key", str(key)], "not a PEM certificate chain and its private key"),
    ]
    for extra, words in cases:
        assert main([*base, *extra]) == 2
        err = capsys.readouterr().err
        assert words in err and err.count("\n") == 1, err
    assert main(["witness", "--id", "w", "--gossip", "127.0.0.1:0", "--tls-cert", str(cert),
                 "--tls-key", str(key)]) == 2
    assert "--tls-cert without --http" in capsys.readouterr().err
