"""The flags of ``placement node`` and ``placement witness`` (also ``python -m
placement.service.work_sink``), and the ``NodeConfig`` they make.

Every flag can also be set by an environment variable (``PLACEMENT_`` + the flag in upper case
with dashes as underscores, e.g. ``PLACEMENT_GOSSIP_ADVERTISE``; repeatable flags take a
comma-separated list), which is how ``docker-compose.yml`` configures its nodes. A flag wins over
its variable; both go through the same validator (``placement.argtypes``).

``placement witness`` is a member of weight 0 (issue 29): it votes on stable views and leases
when it is one of the view's witnesses, and owns no partitions. It takes the ``node`` flags
except those about work (``WITNESS_REFUSES``: a one-line error each); their variables, which a
settings file shared with the nodes may carry, are not read. ``--http`` is off by default.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from ownership import ExclusiveConfig

from .. import argtypes
from ..errors import InvalidConfigError
from .node import NodeConfig, read_key_file


@dataclass(frozen=True)
class _NodeFlag:
    """A ``node`` flag and its ``PLACEMENT_*`` variable: command line, else variable, else default."""

    flag: str
    parse: Callable[[str], Any]
    default: Any
    help: str
    many: bool = False  # repeatable; the variable takes a comma-separated list
    switch: bool = False  # takes no value (the variable: true/false)

    @property
    def dest(self) -> str:
        return self.flag[2:].replace("-", "_")

    @property
    def variable(self) -> str:
        return argtypes.env_variable(self.flag)

    def resolve(self, given: Any, environ: Mapping[str, str]) -> Any:
        if given is not None:
            return given
        text = environ.get(self.variable)
        if text is None:
            return self.default
        if self.many:
            return [argtypes.env_value(self.variable, v.strip(), self.parse) for v in text.split(",") if v.strip()]
        return argtypes.env_value(self.variable, text, self.parse)


NODE_FLAGS = (
    _NodeFlag("--id", argtypes.member_id, None, "member id, unique in the cluster (required)"),
    _NodeFlag("--gossip", argtypes.host_port, ("127.0.0.1", 7001), "UDP bind HOST:PORT (default 127.0.0.1:7001)"),
    _NodeFlag("--http", argtypes.host_port, ("127.0.0.1", 8001), "HTTP bind HOST:PORT (default 127.0.0.1:8001)"),
    _NodeFlag("--join", argtypes.seed, [], "seed HOST:PORT, or dns:NAME[:PORT] for every address NAME resolves "
              "to, resolved again before each retry (repeatable); none: start a new cluster", many=True),
    _NodeFlag("--bootstrap", argtypes.member_ids, (),
              "ID,ID,...: members that may form the cluster when every member starts with --join (the same list "
              "on every member, e.g. the first pods of a StatefulSet): a majority of them choose the first stable "
              "view once they see each other (README, \"Forming a cluster\")"),
    _NodeFlag("--new-cluster", argtypes.boolean, False,
              "found a new cluster even if this node was a member of one: without --join and without this flag, a "
              "node that was in a cluster rejoins it through the members it last knew (kept in --state-dir, else "
              "under ~/.local/state/placement)", switch=True),
    _NodeFlag("--join-timeout", argtypes.number(0, 86400), 0.0,
              "seconds to keep trying to join before exiting with status 5 (default 0: keep trying)"),
    _NodeFlag("--gossip-advertise", argtypes.host_port, None,
              "HOST:PORT others use to reach our gossip (required when binding 0.0.0.0)"),
    _NodeFlag("--http-advertise", argtypes.http_url, None, "base URL others use for our HTTP API"),
    _NodeFlag("--weight", argtypes.weight, 1.0, "share of partitions (default 1; 0: owns nothing)"),
    _NodeFlag("--tag", argtypes.key_value, [], "KEY=VALUE (repeatable)", many=True),
    _NodeFlag("--zone", argtypes.zone, "",
              "failure domain (rack, availability zone; at most 64 printable characters): each key's replica set "
              "spans distinct zones when there are at least --replicas of them, and leaders are the same as "
              "without zones (README, \"Zones\"); default: none, a zone of its own"),
    _NodeFlag("--partitions", argtypes.partitions, 4096, "cluster-wide (default 4096)"),
    _NodeFlag("--replicas", argtypes.replicas, 1, "cluster-wide (default 1)"),
    _NodeFlag("--seed", argtypes.hash_seed, 0, "cluster-wide hash seed (default 0)"),
    _NodeFlag("--cluster", argtypes.non_empty, "placement", "cluster name (default placement)"),
    _NodeFlag("--key-file", argtypes.non_empty, None, "gossip encryption keys, one per line (hex/base64)"),
    _NodeFlag("--admin-token", argtypes.non_empty, None, "token required by POST /v1/leave"),
    _NodeFlag("--tls-cert", argtypes.non_empty, None, "PEM certificate (chain) file: the HTTP API serves HTTPS "
              "(with --tls-key)"),
    _NodeFlag("--tls-key", argtypes.non_empty, None, "PEM private key file of --tls-cert"),
    _NodeFlag("--ownership", argtypes.ownership_mode, "exclusive",
              "exclusive (default: never two owners of a partition) or available (owns what its own view "
              "says at once; two owners possible during splits and freezes)"),
    _NodeFlag("--witness-groups", argtypes.non_negative_int, 0,
              "MEMBERS: witness groups, one of 5 witnesses for every MEMBERS members, so a witness's load stays "
              "bounded as the cluster grows (a cluster-wide setting, like --partitions; docs/ownership.md, "
              "\"Witness groups\"; default 0: one group of 5)"),
    _NodeFlag("--handoff-timeout", argtypes.number(0, 3600, lo_open=True), 5.0,
              "seconds a released partition may drain before it is handed on anyway (default 5)"),
    _NodeFlag("--worker", argtypes.import_ref, None,
              "MODULE:NAME of a PartitionProcessor factory (placement.service.workers): run one per owned partition"),
    _NodeFlag("--load-aware", argtypes.number(0, 86400), 0.0,
              "SECONDS: weights follow measured load (GET /v1/load), a rebalance step at most that often "
              "(exclusive mode; at least 2; default 0: off, weights stay as given)"),
    _NodeFlag("--balance-by", argtypes.balance_by, "pins",
              "with --load-aware: pins (default: the hot partitions themselves move, pinned by the stable view; "
              "docs/ownership.md, rule 13) or weights (each member plans its own weight)"),
    _NodeFlag("--state-dir", argtypes.non_empty, None,
              "directory where this member keeps what it promised as a witness (written and fsynced before it "
              "answers), so a restart keeps those promises and fencing epochs never fall; default: a file beside "
              "the members file, under ~/.local/state/placement (give a DIR on a volume that survives restarts "
              "where home does not, as in a container)"),
    _NodeFlag("--no-state-dir", argtypes.boolean, False,
              "keep no witness state: a restart forgets its promises, waits before voting, and fencing epochs "
              "can fall after it (docs/ownership.md)", switch=True),
)
_WILDCARD_HOSTS = ("0.0.0.0", "::")

#: ``node`` flags a witness does not take, and why (the error it gives).
WITNESS_REFUSES = {
    "--weight": "a witness always has weight 0: it votes but owns no partitions (run `placement node` "
                "for a member that works)",
    "--worker": "a witness owns no partitions, so it runs no partition workers (give --worker to `placement node`)",
    "--work-sink": "a witness takes no work (give --work-sink to `placement node`)",
    "--handoff-timeout": "a witness owns no partitions, so it hands none on",
    "--load-aware": "a witness owns no partitions, so it has no load and no weight to plan (give --load-aware to "
                    "`placement node`)",
    "--balance-by": "a witness owns no partitions, so it plans no rebalance (give --balance-by to `placement node`)",
    "--ownership": "a witness votes in exclusive ownership only (the default); in --ownership available "
                   "nobody votes",
}
#: The witness's flags: the node's, less those above, with HTTP off unless asked for.
WITNESS_FLAGS = tuple(
    replace(f, default=None, help="HTTP bind HOST:PORT for /healthz, /readyz, /metrics and the read-only API "
                                  "(default: none, no HTTP server)") if f.flag == "--http" else f
    for f in NODE_FLAGS if f.flag not in WITNESS_REFUSES)


def add_node_arguments(p: argparse.ArgumentParser, witness: bool = False) -> None:
    """The ``node`` flags (also used by the compose-file test to check its commands parse);
    ``witness``: those of ``placement witness``, and the refused ones as one-line errors.

    Defaults are None here: ``config_from_args`` reads the variables then, not when the parser
    is built, so a bad variable is an error of ``node`` alone, naming the variable."""
    for f in WITNESS_FLAGS if witness else NODE_FLAGS:
        if f.switch:
            p.add_argument(f.flag, action="store_const", const=True, default=None, help=f"{f.help} [env {f.variable}]")
            continue
        p.add_argument(f.flag, type=f.parse, action="append" if f.many else "store", default=None,
                       help=f"{f.help} [env {f.variable}]")
    if witness:
        for flag, why in WITNESS_REFUSES.items():
            p.add_argument(flag, nargs="?", action=_Refused, why=why, help=argparse.SUPPRESS)


class _Refused(argparse.Action):
    """A flag that makes no sense here: ``placement witness: error: --weight: <why>``."""

    def __init__(self, option_strings: list[str], dest: str, why: str, **kw: Any) -> None:
        super().__init__(option_strings, dest, **kw)
        self.why = why

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        parser.error(f"{option_string}: {self.why}")


def config_from_args(args: argparse.Namespace,
                     environ: Mapping[str, str] = os.environ) -> tuple[NodeConfig, tuple[str, int]]:
    """``placement node``: the node's config and HTTP bind address."""
    config, http = _config(args, environ, witness=False)
    assert http is not None  # (--http has a default for a node)
    return config, http


def witness_config_from_args(args: argparse.Namespace, environ: Mapping[str, str] = os.environ
                             ) -> tuple[NodeConfig, tuple[str, int] | None]:
    """``placement witness``: weight 0, exclusive ownership; HTTP address None without ``--http``."""
    return _config(args, environ, witness=True)


def _config(args: argparse.Namespace, environ: Mapping[str, str],
            witness: bool) -> tuple[NodeConfig, tuple[str, int] | None]:
    v = {f.dest: f.resolve(getattr(args, f.dest), environ) for f in (WITNESS_FLAGS if witness else NODE_FLAGS)}
    if witness:
        v.update(weight=0.0, ownership="exclusive", handoff_timeout=ExclusiveConfig.handoff_timeout_s, load_aware=0.0,
                 balance_by="pins")
        if environ.get("PLACEMENT_OWNERSHIP", "exclusive").strip() != "exclusive":
            raise InvalidConfigError(f"PLACEMENT_OWNERSHIP={environ['PLACEMENT_OWNERSHIP']!r}: "
                                     f"{WITNESS_REFUSES['--ownership']}")
    if v["id"] is None:
        raise InvalidConfigError("give the member id with --id ID (or PLACEMENT_ID)")
    gossip, http, advertise = v["gossip"], v["http"], v["gossip_advertise"]
    if advertise is None and gossip[0] in _WILDCARD_HOSTS:
        raise InvalidConfigError(f"--gossip {gossip[0]}:{gossip[1]} binds every interface: give --gossip-advertise "
                                 "HOST:PORT (or PLACEMENT_GOSSIP_ADVERTISE), the address others reach us at")
    tls_cert, tls_key = v["tls_cert"], v["tls_key"]
    if (tls_cert is None) != (tls_key is None):
        raise InvalidConfigError("--tls-cert and --tls-key go together: give both (HTTPS) or neither (HTTP)")
    if http is None:  # a witness without HTTP: nothing to advertise
        if v["http_advertise"] is not None:
            raise InvalidConfigError("--http-advertise without --http: this witness serves no HTTP; give --http "
                                     "HOST:PORT too (or drop --http-advertise)")
        if tls_cert is not None:
            raise InvalidConfigError("--tls-cert without --http: this witness serves no HTTP; give --http too")
        http_advertise = ""
    else:
        http_host = advertise[0] if advertise else http[0]
        if v["http_advertise"] is None and http_host in _WILDCARD_HOSTS:
            raise InvalidConfigError(f"--http {http[0]}:{http[1]} binds every interface: give --http-advertise URL "
                                     "(or PLACEMENT_HTTP_ADVERTISE), the address others reach us at")
        scheme = "https" if tls_cert else "http"
        http_advertise = v["http_advertise"] or f"{scheme}://{http_host}:{http[1]}"
    if tls_cert is not None:
        from .http_server import check_tls

        check_tls(tls_cert, tls_key)
    config = NodeConfig(
        node_id=v["id"], gossip_bind=gossip, gossip_advertise=advertise,
        http_advertise=http_advertise, join=tuple(v["join"]),
        weight=v["weight"], tags=dict(v["tag"]), zone=v["zone"],
        partitions=v["partitions"], replicas=v["replicas"], seed=v["seed"],
        cluster=v["cluster"], keys=_read_keys(v["key_file"]), admin_token=v["admin_token"],
        ownership=v["ownership"],
        exclusive=ExclusiveConfig(handoff_timeout_s=v["handoff_timeout"],
                                  bootstrap=v["bootstrap"], witness_group_members=v["witness_groups"]),
        join_timeout_s=v["join_timeout"], state_dir=v["state_dir"], keep_state=not v["no_state_dir"],
        tls_cert=tls_cert, tls_key=tls_key,
        new_cluster=v["new_cluster"], load_aware_s=v["load_aware"], balance_by=v["balance_by"],
    )
    return config, http


def _read_keys(path: str | None) -> tuple[bytes, ...]:
    if path is None:
        return ()
    try:
        return read_key_file(path)
    except InvalidConfigError as exc:  # "PATH:LINE: what is wrong", PATH as given to the flag
        raise InvalidConfigError(f"--key-file {exc}") from None
    except UnicodeDecodeError:
        raise InvalidConfigError(f"--key-file {path}: not a text file of hex or base64 keys") from None
    except OSError as exc:
        raise InvalidConfigError(f"--key-file {path}: {exc.strerror or exc}") from None
