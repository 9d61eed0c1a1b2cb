"""docker-compose.yml is valid YAML and every service's command parses with the real CLI parser.

(No Docker engine runs here, so the containers themselves are not started in CI.)
"""

from pathlib import Path

import yaml

from placement.service.node_flags import config_from_args
from placement_cli.main import build_parser

ROOT = Path(__file__).resolve().parent.parent


def test_compose_services_parse_with_the_cli():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert len(services) >= 3
    parser = build_parser()
    ids = set()
    for name, service in services.items():
        args = parser.parse_args(service["command"])
        config, http = config_from_args(args)
        assert config.gossip_bind[0] == "0.0.0.0" and http[0] == "0.0.0.0"
        assert config.gossip_advertise == (name, 7001) and config.http_advertise == f"http://{name}:8001"
        assert all(isinstance(seed, tuple) and seed[0] in services for seed in config.join)  # HOST:PORT seeds
        ids.add(config.node_id)
        assert service["build"] == "." and service["environment"]["PLACEMENT_PARTITIONS"] == "4096"
    assert len(ids) == len(services)


def test_every_node_keeps_its_witness_state_on_a_volume_of_its_own():
    """A container recreated by `docker compose up` keeps what its member promised: the state
    directory the nodes are given is a named volume, one per service."""
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    parser = build_parser()
    volumes = set()
    for service in compose["services"].values():
        env = {k: str(v) for k, v in service["environment"].items()}
        config, _ = config_from_args(parser.parse_args(service["command"]), env)
        assert config.state_dir == "/var/lib/placement" and config.keep_state
        (mount,) = [v for v in service["volumes"] if v.endswith(":" + config.state_dir)]
        volumes.add(mount.split(":")[0])
    assert volumes <= set(compose["volumes"]) and len(volumes) == len(compose["services"])
    assert (ROOT / "Dockerfile").read_text().count("ENTRYPOINT") == 1
