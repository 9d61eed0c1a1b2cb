"""Membership datagrams made and read outside a core, for tests that play another member.

``forge`` seals messages as a member named ``sender`` would (any config: keys, cluster name,
settings), so a test can hand a core a rumour, a refutation or a stranger's ping; ``decode``
opens a datagram a core sent, so a test can look at its traffic. Both use the real codec.
"""

from __future__ import annotations

from membership import MembershipConfig
from membership.wire import Codec, Keyring

__all__ = ["decode", "forge"]


def _codec(config: MembershipConfig, sender: str, epoch: int) -> Codec:
    return Codec(cluster=config.cluster_name, settings=config.cluster_settings, sender=sender,
                 epoch=epoch, keyring=Keyring(config.keys), mtu_bytes=config.mtu_bytes,
                 max_receive_bytes=config.max_receive_bytes)


def forge(config: MembershipConfig, sender: str, messages, *, seq: int = 1, epoch: int = 1) -> bytes:
    """A valid datagram from ``sender`` carrying ``messages`` (as another member would send).
    ``seq`` must grow between datagrams of one sender: cores drop replays."""
    codec = _codec(config, sender, epoch)
    codec._seq = seq - 1
    return codec.seal([codec.encode_message(m) for m in messages])


def decode(config: MembershipConfig, data: bytes):
    """The messages of a datagram (for tests that look at traffic)."""
    return _codec(config, "?", 0).open(data).messages
