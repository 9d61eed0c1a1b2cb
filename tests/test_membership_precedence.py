"""The precedence of membership updates (membership/status.py ``PRECEDENCE``) against a plain
statement of the SWIM rules (Das et al. 2002, section 4.2) with memberlist's deviations, both
as a table and as the core applies it to its view."""

from __future__ import annotations

import random
from typing import get_args

from hypothesis import given, settings
from hypothesis import strategies as st

from membership import MembershipConfig, Meta, Swim
from membership.messages import Alive, Dead, Suspect
from membership.status import (
    ALIVE,
    ALIVE_MARGIN_MIN,
    DEAD,
    EVENT_KINDS,
    LEFT,
    PRECEDENCE,
    STATUSES,
    SUSPECT,
    EventKind,
    Status,
    supersedes,
)
from membership.wire import Codec, Keyring

UPDATES = (ALIVE, SUSPECT, DEAD, LEFT)  # LEFT: a Dead sent by the member itself (a leave)
X_ADDR = ("10.0.0.9", 7009)


def reference(update: str, i: int, held: str, j: int) -> bool:
    """Whether ``update`` at incarnation ``i`` replaces a record held as ``held`` at ``j``."""
    if update == ALIVE:
        return i > j  # a newer Alive overrides anything, even dead (a restart or a refutation)
    if held in (DEAD, LEFT):
        return False  # Suspect and Dead never revive or re-kill a dead record
    if update == SUSPECT:
        return i >= j  # i == j on a suspect: a (Lifeguard) confirmation of the same suspicion
    return i >= j  # Dead/leave: memberlist ignores a Dead older than the record


def test_the_vocabulary_is_complete():
    assert STATUSES == get_args(Status)
    assert EVENT_KINDS == get_args(EventKind)
    assert set(PRECEDENCE) == set(UPDATES) and all(set(row) == set(STATUSES) for row in PRECEDENCE.values())


@given(st.sampled_from(UPDATES), st.integers(0, 2**40), st.sampled_from(STATUSES), st.integers(0, 2**40))
def test_table_equals_the_swim_rules(update, i, held, j):
    assert supersedes(update, i, held, j) == reference(update, i, held, j)
    assert supersedes(update, j, held, j) == reference(update, j, held, j)  # equal incarnations


@given(st.integers(0, 2**40), st.sampled_from(STATUSES), st.integers(0, 2**40))
def test_the_alive_fast_path_skips_only_alives_that_never_apply(i, held, j):
    if i - j < ALIVE_MARGIN_MIN:
        assert not supersedes(ALIVE, i, held, j)


class _Forger:
    """Valid datagrams from other members (one codec per sender, so replay checks pass)."""

    def __init__(self, config: MembershipConfig) -> None:
        self.config = config
        self.codecs: dict[str, Codec] = {}

    def __call__(self, sender: str, *messages) -> bytes:
        codec = self.codecs.get(sender)
        if codec is None:
            cfg = self.config
            codec = self.codecs[sender] = Codec(
                cluster=cfg.cluster_name, settings=cfg.cluster_settings, sender=sender, epoch=1,
                keyring=Keyring(cfg.keys), mtu_bytes=cfg.mtu_bytes, max_receive_bytes=cfg.max_receive_bytes)
        return codec.seal([codec.encode_message(m) for m in messages])


def _update_message(update: str, node: str, i: int, sender: str):
    if update == ALIVE:
        return Alive(node, i, X_ADDR if node == "x" else ("10.0.0.1", 7001), Meta())
    if update == SUSPECT:
        return Suspect(node, i, sender)
    return Dead(node, i, node if update == LEFT else sender)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(UPDATES), st.integers(0, 4), st.sampled_from(STATUSES), st.integers(0, 4))
def test_the_core_applies_updates_by_the_table(update, i, held, j):
    cfg = MembershipConfig()
    core = Swim(cfg, "n0", ("10.0.0.1", 7001), rng=random.Random(1), now=0.0)
    forge = _Forger(cfg)
    # Bring member x to (held, j): learn it alive, then suspect / dead / left from gossip.
    core.receive_datagram(forge("z", Alive("x", j, X_ADDR, Meta())), ("10.0.0.3", 7003), 1.0)
    if held != ALIVE:
        core.receive_datagram(forge("z", _update_message(held, "x", j, "z")), ("10.0.0.3", 7003), 1.1)
    x = core.member("x")
    assert x is not None and (x.status, x.incarnation) == (held, j)
    core.receive_datagram(forge("w", _update_message(update, "x", i, "w")), ("10.0.0.4", 7004), 1.2)
    x = core.member("x")
    assert x is not None
    if reference(update, i, held, j):
        assert (x.status, x.incarnation) == (update, i)
    else:
        assert (x.status, x.incarnation) == (held, j)
    core.check_invariants()


@settings(max_examples=200, deadline=None)
@given(st.sampled_from((ALIVE, SUSPECT, DEAD)), st.integers(0, 4), st.integers(0, 4))
def test_a_member_outbids_updates_about_itself_by_the_table(update, i, j):
    # We hold ourselves alive at j: an update that applies is refuted (or outbid) with j' = i + 1.
    cfg = MembershipConfig()
    core = Swim(cfg, "n0", ("10.0.0.1", 7001), rng=random.Random(1), now=0.0, incarnation=j)
    core.receive_datagram(_Forger(cfg)("w", _update_message(update, "n0", i, "w")), ("10.0.0.4", 7004), 1.0)
    assert core.incarnation == (i + 1 if reference(update, i, ALIVE, j) else j)
    assert core.status == ALIVE
