"""deploy/k8s: valid against the Kubernetes schemas, consistent with each other, and what the pods
run parses with the real CLI; the preStop hook makes a real node leave and exit.

No cluster runs here: schemas come bundled with kubernetes-validate (offline), checked strictly
(unknown fields rejected) against the oldest and newest Kubernetes versions it carries.
"""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from placement.service.keygen import new_key
from placement.service.node import read_key_file
from placement.service.node_flags import config_from_args, witness_config_from_args
from placement_cli.main import build_parser

from ports import free_port

kv = pytest.importorskip("kubernetes_validate", reason="pip install -e '.[dev]' (kubernetes-validate)")

K8S = Path(__file__).resolve().parent.parent / "deploy" / "k8s"
VERSIONS = (kv.utils.all_versions()[0], kv.utils.latest_version())
POD_IP, POD_NAME = "10.1.2.3", "placement-0"
#: What an operator puts in the Secret placement-secrets (docs/deploy.md), and where this test
#: mounts it: a directory standing for the pods' secret volume.
SECRET = {"gossip.key": new_key() + "\n", "admin-token": "t0ken"}
SECRET_DIR = Path(tempfile.mkdtemp(prefix="placement-secret-"))
(SECRET_DIR / "gossip.key").write_text(SECRET["gossip.key"])


def resources() -> dict[str, dict]:
    """kind/name -> resource, from every file the kustomization lists."""
    out = {}
    for name in kustomization()["resources"]:
        for doc in yaml.safe_load_all((K8S / name).read_text()):
            out[f"{doc['kind']}/{doc['metadata']['name']}"] = doc
    return out


def kustomization() -> dict:
    return yaml.safe_load((K8S / "kustomization.yaml").read_text())


def container(sts: str = "placement") -> dict:
    return resources()[f"StatefulSet/{sts}"]["spec"]["template"]["spec"]["containers"][0]


def pod_environment(sts: str = "placement", pod: str = POD_NAME) -> dict[str, str]:
    """The variables the node sees in pod placement-0 (or ``pod`` of ``sts``): the ConfigMap,
    then the container's env (fieldRefs filled in, $(VAR) expanded as the kubelet does)."""
    c, res = container(sts), resources()
    env = {}
    for source in c["envFrom"]:
        env.update(res[f"ConfigMap/{source['configMapRef']['name']}"]["data"])
    fields = {"status.podIP": POD_IP, "metadata.name": pod}
    for var in c["env"]:
        if "secretKeyRef" in var.get("valueFrom", {}):
            ref = var["valueFrom"]["secretKeyRef"]
            assert ref["name"] == "placement-secrets", ref
            env[var["name"]] = SECRET[ref["key"]]
        elif "valueFrom" in var:
            env[var["name"]] = fields[var["valueFrom"]["fieldRef"]["fieldPath"]]
        else:
            env[var["name"]] = re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], var["value"])
    for mount in c.get("volumeMounts", ()):  # the Secret's files, where this test put them
        if env.get("PLACEMENT_KEY_FILE", "").startswith(mount["mountPath"] + "/"):
            env["PLACEMENT_KEY_FILE"] = str(SECRET_DIR / env["PLACEMENT_KEY_FILE"][len(mount["mountPath"]) + 1:])
    return env


def test_kustomization_lists_every_manifest():
    assert sorted(kustomization()["resources"]) == sorted(p.name for p in K8S.glob("*.yaml")
                                                          if p.name != "kustomization.yaml")


@pytest.mark.parametrize("version", VERSIONS)
def test_manifests_are_valid_kubernetes(version):
    res = resources()
    assert {k.split("/")[0] for k in res} == {"ConfigMap", "Service", "StatefulSet", "PodDisruptionBudget"}
    for _key, doc in res.items():
        kv.validate(doc, version, strict=True)  # raises ValidationError naming the field


def test_the_validator_rejects_a_broken_manifest():
    doc = copy.deepcopy(resources()["StatefulSet/placement"])
    doc["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["paht"] = "/readyz"
    with pytest.raises(kv.ValidationError):
        kv.validate(doc, VERSIONS[-1], strict=True)
    doc = copy.deepcopy(resources()["PodDisruptionBudget/placement"])
    doc["spec"]["maxUnavailable"] = [1]
    with pytest.raises(kv.ValidationError):
        kv.validate(doc, VERSIONS[-1], strict=True)


def test_services_probes_and_budget_fit_the_pods():
    res = resources()
    sts = res["StatefulSet/placement"]
    labels = sts["spec"]["template"]["metadata"]["labels"]
    headless = res[f"Service/{sts['spec']['serviceName']}"]
    assert headless["spec"]["clusterIP"] == "None" and headless["spec"]["publishNotReadyAddresses"] is True
    assert sts["spec"]["podManagementPolicy"] == "Parallel"  # ready needs a peer: start them together
    for key in ("Service/placement-gossip", "Service/placement-http"):
        assert res[key]["spec"]["selector"].items() <= labels.items()
    assert res["PodDisruptionBudget/placement"]["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert sts["spec"]["selector"]["matchLabels"].items() <= labels.items()

    c = container()
    ports = {p["name"]: (p["containerPort"], p["protocol"]) for p in c["ports"]}
    assert ports == {"gossip": (7001, "UDP"), "http": (8001, "TCP")}
    for svc in ("Service/placement-gossip", "Service/placement-http"):
        for p in res[svc]["spec"]["ports"]:
            assert ports[p["targetPort"]] == (p["port"], p["protocol"])
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert c["resources"]["requests"].keys() == {"cpu", "memory"}
    assert "preStop" in c["lifecycle"]


def test_the_witness_runs_beside_the_nodes_as_a_seed_and_a_voter_but_gets_no_client():
    """StatefulSet/placement-witness: `placement witness`, one replica, in the headless Service
    (a seed) and the disruption budget, not in placement-http; the two StatefulSets' selectors
    never take each other's pods."""
    res = resources()
    nodes, witness = res["StatefulSet/placement"], res["StatefulSet/placement-witness"]
    node_labels = nodes["spec"]["template"]["metadata"]["labels"]
    labels = witness["spec"]["template"]["metadata"]["labels"]
    assert witness["spec"]["replicas"] == 1 and witness["spec"]["serviceName"] == nodes["spec"]["serviceName"]
    assert witness["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert not witness["spec"]["selector"]["matchLabels"].items() <= node_labels.items()
    assert not nodes["spec"]["selector"]["matchLabels"].items() <= labels.items()
    for key in ("Service/placement-gossip", "PodDisruptionBudget/placement"):
        spec = res[key]["spec"]
        selector = spec["selector"] if key.startswith("Service") else spec["selector"]["matchLabels"]
        assert selector.items() <= labels.items() and selector.items() <= node_labels.items(), key
    assert not res["Service/placement-http"]["spec"]["selector"].items() <= labels.items()
    c = container("placement-witness")
    assert c["args"] == ["witness"]
    assert {p["name"]: (p["containerPort"], p["protocol"]) for p in c["ports"]} == {
        "gossip": (7001, "UDP"), "http": (8001, "TCP")}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    env = pod_environment("placement-witness", "placement-witness-0")
    config, http = witness_config_from_args(build_parser().parse_args(c["args"]), env)
    assert (config.node_id, config.weight, http) == ("placement-witness-0", 0.0, ("0.0.0.0", 8001))
    assert config.gossip_advertise == (POD_IP, 7001) and config.http_advertise == f"http://{POD_IP}:8001"
    node_config, _ = config_from_args(build_parser().parse_args(container()["args"]), pod_environment())
    assert config.cluster_settings() == node_config.cluster_settings() and config.cluster == node_config.cluster
    assert [str(s) for s in config.join] == [str(s) for s in node_config.join]  # the same seeds


@pytest.mark.parametrize("sts", ["placement", "placement-witness"])
def test_the_pods_gossip_with_keys_from_a_secret_and_take_the_admin_token_from_it(sts):
    """Issue 31 item 2: the gossip key file is mounted from the Secret placement-secrets (made with
    `placement keygen`; docs/deploy.md), readable by the pod's group only, and a pod does not start
    without it; the admin token comes from the same Secret when it has one."""
    res = resources()
    pod = res[f"StatefulSet/{sts}"]["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mount = next(m for m in container(sts)["volumeMounts"] if m["name"] == "gossip-keys")
    secret = volumes["gossip-keys"]["secret"]
    assert secret["secretName"] == "placement-secrets" and not secret.get("optional", False)
    assert secret["items"] == [{"key": "gossip.key", "path": "gossip.key"}] and secret["defaultMode"] == 0o440
    assert mount["readOnly"] is True and pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsGroup"]
    key_file = res["ConfigMap/placement-settings"]["data"]["PLACEMENT_KEY_FILE"]
    assert key_file == f"{mount['mountPath']}/gossip.key"
    env = pod_environment(sts, f"{sts}-0")
    env.pop("PLACEMENT_JOIN")
    args = build_parser().parse_args(container(sts)["args"])
    config, _ = (config_from_args if sts == "placement" else witness_config_from_args)(args, env)
    assert config.keys == read_key_file(str(SECRET_DIR / "gossip.key")) and len(config.keys[0]) == 32
    assert config.admin_token == SECRET["admin-token"]
    token = next(v for v in container(sts)["env"] if v["name"] == "PLACEMENT_ADMIN_TOKEN")
    assert token["valueFrom"]["secretKeyRef"]["optional"] is True  # no token: loopback-only leave


def json_patch(doc: dict, ops: list[dict]) -> dict:
    """RFC 6902 ``add`` (what tls/https.yaml uses): a key of an object, or ``-`` to append."""
    doc = copy.deepcopy(doc)
    for op in ops:
        assert op["op"] == "add", op
        *parents, last = op["path"].lstrip("/").split("/")
        target: Any = doc
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        if isinstance(target, list):
            assert last == "-", op
            target.append(op["value"])
        else:
            assert last not in target, op  # add, not replace
            target[last] = op["value"]
    return doc


@pytest.mark.parametrize("sts", ["placement", "placement-witness"])
def test_the_tls_overlay_serves_https_with_the_certificate_of_a_secret(sts, tmp_path):
    """deploy/k8s/tls (issue 31 item 3): both StatefulSets patched to mount the Secret
    placement-tls and give its files to --tls-cert/--tls-key; probes on HTTPS; still valid
    Kubernetes; the pods' settings parse, and they advertise https://POD_IP:8001."""
    overlay = K8S / "tls"
    kz = yaml.safe_load((overlay / "kustomization.yaml").read_text())
    assert kz["resources"] == ["../"]
    assert sorted(p["target"]["name"] for p in kz["patches"]) == ["placement", "placement-witness"]
    ops = yaml.safe_load((overlay / next(p["path"] for p in kz["patches"] if p["target"]["name"] == sts)).read_text())
    doc = json_patch(resources()[f"StatefulSet/{sts}"], ops)
    for version in VERSIONS:
        kv.validate(doc, version, strict=True)
    pod = doc["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert all(c[probe]["httpGet"]["scheme"] == "HTTPS" for probe in ("readinessProbe", "livenessProbe",
                                                                       "startupProbe"))
    volume = next(v for v in pod["volumes"] if v["name"] == "http-tls")
    mount = next(m for m in c["volumeMounts"] if m["name"] == "http-tls")
    assert volume["secret"]["secretName"] == "placement-tls" and mount["readOnly"] is True
    # The pod's environment, with the Secret's files (a certificate made here) where it mounts them
    from test_http_tls import self_signed

    cert, key = self_signed(tmp_path)
    env = {**pod_environment(sts, f"{sts}-0")}
    for var in c["env"]:
        if var["name"] in ("PLACEMENT_TLS_CERT", "PLACEMENT_TLS_KEY"):
            assert var["value"].startswith(mount["mountPath"] + "/")
            name = var["value"][len(mount["mountPath"]) + 1:]
            assert name in ("tls.crt", "tls.key")  # the keys of a kubernetes.io/tls Secret
            env[var["name"]] = str(cert if name == "tls.crt" else key)
    env.pop("PLACEMENT_JOIN")
    args = build_parser().parse_args(c["args"])
    config, _ = (config_from_args if sts == "placement" else witness_config_from_args)(args, env)
    assert (config.tls_cert, config.tls_key) == (str(cert), str(key))
    assert config.http_advertise == f"https://{POD_IP}:8001"


def test_the_pods_settings_parse_with_the_cli():
    env = pod_environment()
    env.pop("PLACEMENT_JOIN")  # dns: seeds, checked in the next test
    args = build_parser().parse_args(container()["args"])
    config, http = config_from_args(args, env)
    assert config.node_id == POD_NAME
    assert config.gossip_bind == ("0.0.0.0", 7001) and http == ("0.0.0.0", 8001)
    assert config.gossip_advertise == (POD_IP, 7001) and config.http_advertise == f"http://{POD_IP}:8001"
    assert (config.partitions, config.replicas, config.ownership, config.cluster) == (4096, 1, "exclusive", "placement")


def test_the_seeds_are_the_headless_service_by_dns():
    """``--join dns:NAME:PORT`` names the headless Service and the gossip port, and the node's
    own parser reads it as a DNS seed (issue 13 item 3)."""
    env = pod_environment()
    m = re.fullmatch(r"dns:([a-z0-9-]+):(\d+)", env["PLACEMENT_JOIN"])
    assert m, f"PLACEMENT_JOIN should be dns:SERVICE:PORT, got {env['PLACEMENT_JOIN']!r}"
    assert m.group(1) == resources()["StatefulSet/placement"]["spec"]["serviceName"] and m.group(2) == "7001"
    config, _ = config_from_args(build_parser().parse_args(container()["args"]), env)
    assert [str(s) for s in config.join] == [env["PLACEMENT_JOIN"]]


def test_the_pods_bootstrap_the_cluster_without_a_founder():
    """Every pod has --join (the Service), so none founds the cluster: without --bootstrap they
    never choose a first view and own nothing (README, "Forming a cluster"). The list names pods
    the StatefulSet runs, a majority of them enough to choose."""
    env = pod_environment()
    config, _ = config_from_args(build_parser().parse_args(container()["args"]), env)
    pods = {f"placement-{i}" for i in range(resources()["StatefulSet/placement"]["spec"]["replicas"])}
    assert config.join and len(config.exclusive.bootstrap) >= 3 and set(config.exclusive.bootstrap) <= pods


@pytest.mark.slow
@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
def test_the_prestop_hook_makes_a_node_leave_and_exit(tls, tmp_path):
    script = container()["lifecycle"]["preStop"]["exec"]["command"]
    assert script[:2] == ["python", "-c"]
    gossip, http = free_port(), free_port()
    env = dict(os.environ)
    if tls:  # deploy/k8s/tls: the node serves HTTPS, and the hook sees PLACEMENT_TLS_CERT
        from test_http_tls import self_signed

        cert, key = self_signed(tmp_path)
        env.update(PLACEMENT_TLS_CERT=str(cert), PLACEMENT_TLS_KEY=str(key))
    node = subprocess.Popen([sys.executable, "-m", "placement_cli", "node", "--id", "p0",
                             "--gossip", f"127.0.0.1:{gossip}", "--http", f"127.0.0.1:{http}", "--partitions", "64"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    assert node.stdout is not None
    url = f"{'https' if tls else 'http'}://127.0.0.1:{http}"
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/readyz", timeout=1, verify=False).status_code == 200:
                    break
            except httpx.HTTPError:
                assert node.poll() is None, node.stdout.read()
            time.sleep(0.1)
        else:
            pytest.fail("the node did not get ready within 30 s")
        hook = subprocess.run([sys.executable, "-c", script[2].replace("8001", str(http))],
                              capture_output=True, text=True, timeout=40, env=env)
        assert hook.returncode == 0, hook.stderr
        assert node.wait(10) == 0  # the hook returned once the node had left and exited
        assert "leaving" in node.stdout.read()
    finally:
        if node.poll() is None:
            node.kill()
            node.wait(10)


@pytest.mark.parametrize("sts, pod", [("placement", POD_NAME), ("placement-witness", "placement-witness-0")])
def test_the_state_dir_is_on_the_pods_own_volume(sts: str, pod: str) -> None:
    """--state-dir (docs/ownership.md): a witness's promises survive its restarts only on a
    volume that outlives the pod and follows its name: a volumeClaimTemplate, mounted there."""
    env = pod_environment(sts, pod)
    c = container(sts)
    args = build_parser().parse_args(c["args"])
    env.pop("PLACEMENT_JOIN")
    config, _ = (config_from_args if sts == "placement" else witness_config_from_args)(args, env)
    assert config.state_dir == env["PLACEMENT_STATE_DIR"]
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    spec = resources()[f"StatefulSet/{sts}"]["spec"]
    claims = {t["metadata"]["name"] for t in spec["volumeClaimTemplates"]}
    assert mounts[config.state_dir] in claims
    pod_security = spec["template"]["spec"]["securityContext"]
    assert pod_security["fsGroup"] == pod_security["runAsGroup"]  # the volume is writable by the node
