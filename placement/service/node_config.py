"""A node's settings (``NodeConfig``) and its gossip keys (``read_key_file``).

Apart from ``node`` so that what a node is configured with can be read - by the flags that make
it (``node_flags``) and by the parts of the node that take it (its ownership modes) - without
the node itself.
"""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from membership import MembershipConfig, Meta
from membership.messages import ZONE_TAG
from membership.seeds import DnsSeed
from ownership import ExclusiveConfig

from ..errors import InvalidConfigError, InvalidMembershipError
from ..table import TableConfig
from ..zones import check_zone

Addr = tuple[str, int]


@dataclass(frozen=True)
class NodeConfig:
    """Settings of one node. ``partitions``, ``replicas``, ``seed`` and ``capacity_factor``
    are cluster-wide: a node whose values differ is refused at join."""

    node_id: str
    gossip_bind: Addr = ("127.0.0.1", 7001)
    gossip_advertise: Addr | None = None
    http_advertise: str = ""  # base URL others use to reach this node's HTTP API
    join: tuple[Addr | DnsSeed, ...] = ()  # DnsSeed: every address of a DNS name (membership.seeds)
    weight: float = 1.0
    tags: Mapping[str, str] = field(default_factory=dict)
    #: Failure domain (``placement node --zone``; "" = none): replica sets span zones (``placement.zones``).
    zone: str = ""
    partitions: int = 4096
    replicas: int = 1
    seed: int = 0
    capacity_factor: float | None = None
    cluster: str = "placement"
    keys: tuple[bytes, ...] = field(default=(), repr=False)
    admin_token: str | None = field(default=None, repr=False)
    #: PEM certificate (chain) and private key files: the HTTP API serves HTTPS (``placement
    #: node --tls-cert --tls-key``; the node itself only carries them to its server).
    tls_cert: str | None = None
    tls_key: str | None = None
    settle_s: float = 1.0  # ready once joined and the view has not changed for this long
    # After being declared dead: own nothing this long after refuting (several times the p99
    # time for an update to reach every member, 0.4-0.6 s at N=256: BENCHMARKS.md).
    rejoin_holddown_s: float = 3.0
    #: ``placement node`` exits (status 5) if it has not joined after this long; 0: keeps trying.
    join_timeout_s: float = 0.0
    membership: MembershipConfig = field(default_factory=MembershipConfig)
    #: "exclusive" (never two owners: ``node_exclusive``) or "available" (owns what its own view
    #: says, at once; two owners possible during splits and freezes: ``node_available``).
    ownership: str = "exclusive"
    exclusive: ExclusiveConfig = field(default_factory=ExclusiveConfig)
    #: Where the witness keeps what it promised across restarts (``witness_state``); None: in
    #: a file beside the members file (under ``state_home``), unless ``keep_state`` is False.
    state_dir: str | None = None
    #: False (``--no-state-dir``): keep no witness state; a restart forgets its promises and
    #: waits the quiet time before voting, and fencing epochs can fall (docs/ownership.md).
    keep_state: bool = True
    #: Found a new cluster even if this node's members file lists members of one it was in
    #: (``placement node --new-cluster``): without it, a node started with no ``join`` seeds
    #: that was a member of a cluster rejoins that cluster (``members_file``).
    new_cluster: bool = False
    #: Where nodes without ``state_dir`` keep their members file; None: ``$PLACEMENT_STATE_HOME``,
    #: else ``$XDG_STATE_HOME/placement``, else ``~/.local/state/placement``.
    state_home: str | None = None
    #: ``placement node --load-aware SECONDS``: weights follow measured load, a step at most every
    #: that many seconds (``load_balance``; exclusive mode; 0: off, the weights stay as given).
    load_aware_s: float = 0.0
    #: ``--balance-by``: what a load-aware step moves: "pins" (chosen partitions, pinned by the
    #: stable view: ``placement.pinning``) or "weights" (each member's own weight: ``placement.rebalance``).
    balance_by: str = "pins"

    def __post_init__(self) -> None:
        if self.ownership not in ("exclusive", "available"):
            raise InvalidConfigError(f"ownership must be 'exclusive' or 'available', got {self.ownership!r}")
        if self.new_cluster and self.join:
            raise InvalidConfigError("--new-cluster founds a new cluster, and --join joins a running one: drop one")
        if self.state_dir is not None and not self.keep_state:
            raise InvalidConfigError("--state-dir keeps the witness state in DIR, and --no-state-dir keeps none: "
                                     "drop one")
        if self.state_dir is not None and self.ownership != "exclusive":
            raise InvalidConfigError("--state-dir keeps a witness's promises, and only exclusive ownership has "
                                     "witnesses: drop --state-dir or --ownership available")
        if not (isinstance(self.load_aware_s, (int, float)) and math.isfinite(self.load_aware_s)
                and (self.load_aware_s == 0 or self.load_aware_s >= 2.0)):
            raise InvalidConfigError(f"--load-aware must be 0 (off) or at least 2 seconds, got {self.load_aware_s!r}")
        if self.load_aware_s and self.ownership != "exclusive":
            raise InvalidConfigError("--load-aware commits load figures in stable views, which only exclusive "
                                     "ownership has: drop --load-aware or --ownership available")
        if self.balance_by not in ("pins", "weights"):
            raise InvalidConfigError(f"--balance-by must be pins or weights, got {self.balance_by!r}")
        if self.load_aware_s and self.capacity_factor is not None:
            raise InvalidConfigError("--load-aware and a capacity factor do not combine: drop one")
        TableConfig(self.partitions, self.replicas, self.seed, self.capacity_factor)  # validates
        if not self.node_id or not self.node_id.isprintable() or self.node_id != self.node_id.strip():
            raise InvalidConfigError(f"node id must be a non-empty printable string, got {self.node_id!r}")
        try:
            check_zone(self.zone, "--zone")
        except InvalidMembershipError as exc:
            raise InvalidConfigError(str(exc)) from None
        if self.zone and self.capacity_factor is not None:
            raise InvalidConfigError("--zone and a capacity factor do not combine (placement.zones): drop one")
        if ZONE_TAG in self.tags:
            raise InvalidConfigError(f"the tag {ZONE_TAG!r} is reserved for the zone: give --zone instead")
        self.meta()  # validates weight, tags and zone together

    def meta(self, weight: float | None = None) -> Meta:
        """What this node gossips about itself (``weight``: another than ``--weight``, as
        load-aware weights set it)."""
        return Meta(weight=self.weight if weight is None else weight, http=self.http_advertise, tags=self.tags,
                    zone=self.zone)

    @property
    def table_config(self) -> TableConfig:
        return TableConfig(self.partitions, self.replicas, self.seed, self.capacity_factor)

    def cluster_settings(self) -> str:
        """The fingerprint every member must share (checked by the gossip layer at join)."""
        c = self.capacity_factor
        text = f"partitions={self.partitions},replicas={self.replicas},seed={self.seed},capacity={c}"
        # Members that group witnesses differently could hold a lease and condemn it with quorums
        # that share no witness. (Only when set: the default leaves the fingerprint as it was, so
        # a rolling upgrade still joins.)
        groups = self.exclusive.witness_group_members
        return text + (f",witness_groups={groups}" if groups and self.ownership == "exclusive" else "")

    def membership_config(self) -> MembershipConfig:
        return replace(self.membership, cluster_name=self.cluster, cluster_settings=self.cluster_settings(),
                       keys=self.keys or self.membership.keys)


def read_key_file(path: str) -> tuple[bytes, ...]:
    """Keys for gossip encryption: one per line, hex or base64, 16/24/32 bytes; first is primary."""
    keys = []
    with open(path, encoding="ascii") as fh:
        for n, line in enumerate(fh, 1):
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            try:
                key = bytes.fromhex(text) if len(text) in (32, 48, 64) else base64.b64decode(text, validate=True)
            except (ValueError, binascii.Error):
                raise InvalidConfigError(f"{path}:{n}: a key must be hex or base64") from None
            if len(key) not in (16, 24, 32):
                raise InvalidConfigError(f"{path}:{n}: a key must be 16, 24 or 32 bytes, got {len(key)}")
            keys.append(key)
    if not keys:
        raise InvalidConfigError(f"{path}: no key found")
    return tuple(keys)
