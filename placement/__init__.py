"""Partition placement by weighted rendezvous hashing: a pure, deterministic core.

    from placement import PlacementTable
    t = PlacementTable.build({"n1": 1.0, "n2": 2.0, "n3": 1.0}, partitions=4096, replicas=2, seed=0)
    t.lookup("order-42")   # owners of the key's partition, leader first

See ``placement.table`` for the API, ``placement.rendezvous`` for the ranking rule and
``placement.hashing`` for the bit-exact hash and fixed-point logarithm definitions.

Everything in this package outside ``placement.service`` needs only numpy, mmh3 and msgpack
(``placement.client`` also httpx: the ``client`` extra). The node, its HTTP API, the console and
the command line live in ``placement.service`` (the ``service`` extra).
"""

from .errors import InvalidConfigError, InvalidMembershipError, NoOwnerError, PlacementError, SnapshotError
from .pins import decode_pins, encode_pins
from .table import PlacementTable, TableConfig

__all__ = [
    "PlacementTable",
    "TableConfig",
    "PlacementError",
    "InvalidMembershipError",
    "InvalidConfigError",
    "NoOwnerError",
    "SnapshotError",
    "encode_pins",
    "decode_pins",
]
