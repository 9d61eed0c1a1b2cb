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
    assert (ROOT / "Dockerfile").read_text().count("ENTRYPOINT") == 1
