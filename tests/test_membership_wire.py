"""Wire format, bad input (fuzzed with hypothesis), encryption and key rotation."""

from __future__ import annotations

import random

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from membership import MembershipConfig, Meta, Swim
from membership.messages import Ack, Alive, Dead, Message, Nack, Ping, PingReq, PushPull, Refuse, Suspect
from membership.wire import Codec, Drop, Keyring, ReplayFilter, encode_notice
from simulations.datagrams import decode, forge
from simulations.members import MembershipSim, build_cluster

KEY1, KEY2, KEY3 = b"1" * 32, b"2" * 16, b"3" * 24

ALL_MESSAGES: list[Message] = [
    Ping(1, "n1"), Ack(2, 2**32 - 1), Nack(3), PingReq(4, "n2", ("10.0.0.2", 7000)),
    Alive("n3", 7, ("::1", 65535), Meta(weight=0.5, http="http://h:1", tags={"a": "b", "c": ""})),
    Alive("n6", 1, ("10.0.0.6", 7001), Meta(tags={"a": "b"}, zone="eu-west-1a")),
    Suspect("n4", 0, "n1"), Dead("n5", 2**63, "n5"), PushPull(99, True), Refuse("because"),
]


def codec(config: MembershipConfig, sender: str = "s") -> Codec:
    return Codec(cluster=config.cluster_name, settings=config.cluster_settings, sender=sender, epoch=5,
                 keyring=Keyring(config.keys), mtu_bytes=config.mtu_bytes,
                 max_receive_bytes=config.max_receive_bytes)


@pytest.mark.parametrize("keys", [(), (KEY1,)])
def test_every_message_type_round_trips(keys):
    c = codec(MembershipConfig(keys=keys))
    data = c.seal([c.encode_message(m) for m in ALL_MESSAGES])
    env = c.open(data)
    assert env.messages == tuple(ALL_MESSAGES)
    assert (env.cluster, env.sender, env.epoch, env.seq) == ("default", "s", 5, 1)
    assert data[:3] == b"SW\x01"  # magic + protocol version on every datagram


def test_zone_travels_as_a_tag_that_older_members_decode_and_pass_on():
    """Wire compatibility (issue 33 item 4): an Alive keeps its 8 fields; the zone is the tag
    '@zone', which a member of an older version reads as a tag and gossips on unchanged."""
    c = codec(MembershipConfig())
    plain = Alive("n1", 1, ("10.0.0.1", 1), Meta(tags={"k": "v"}))
    zoned = Alive("n1", 1, ("10.0.0.1", 1), Meta(tags={"k": "v"}, zone="rack-7"))
    assert c.encode_message(plain) == msgpack.packb([5, "n1", 1, "10.0.0.1", 1, 1.0, "", {"k": "v"}])  # as before
    raw = msgpack.unpackb(c.encode_message(zoned))
    assert len(raw) == 8 and raw[7] == {"k": "v", "@zone": "rack-7"}
    # what an older member sends on is that same list, which decodes to the zone again
    assert c.open(c.seal([msgpack.packb(raw)])).messages == (zoned,)
    assert c.open(c.seal([c.encode_message(plain)])).messages == (plain,)
    assert plain.meta.zone == ""
    bad = [5, "n1", 1, "10.0.0.1", 1, 1.0, "", {"@zone": " padded"}]
    with pytest.raises(Drop):
        c.open(c.seal([msgpack.packb(bad)]))
    with pytest.raises(ValueError, match="reserved"):
        Meta(tags={"@zone": "x"})
    with pytest.raises(ValueError, match=r"Meta\.zone"):
        Meta(zone="x" * 65)


def test_capacity_accounts_for_all_overheads():
    for keys in [(), (KEY1,)]:
        cfg = MembershipConfig(keys=keys, mtu_bytes=500)
        c = codec(cfg, sender="x" * 128)
        blob = c.encode_message(Refuse("r" * 40))
        n = c.capacity() // c.message_cost(blob)
        assert len(c.seal([blob] * n)) <= 500


@settings(max_examples=200, deadline=None)
@given(cluster=st.text(min_size=1, max_size=128), settings_=st.text(max_size=200),
       sender=st.text(min_size=1, max_size=128), epoch=st.integers(0, 2**64 - 1),
       seq0=st.integers(0, 2**64 - 2), blobs=st.lists(st.binary(max_size=300), max_size=40))
def test_seal_is_the_whole_envelope_packed_at_once(cluster, settings_, sender, epoch, seq0, blobs):
    """``seal`` packs the envelope's constant head once per codec; the bytes must be those of
    packing the whole 6-element envelope (the reference: the plain msgpack call)."""
    import msgpack
    c = Codec(cluster=cluster, settings=settings_, sender=sender, epoch=epoch, keyring=Keyring(()),
              mtu_bytes=1400, max_receive_bytes=65507)
    c._seq = seq0
    data = c.seal(blobs)
    want = msgpack.packb([cluster, settings_, sender, epoch, seq0 + 1, blobs], use_bin_type=True)
    assert data == b"SW\x01\x00" + want


def test_keyring_rotation_rules():
    ring = Keyring([KEY1])
    ring.install(KEY2)
    assert ring.keys == (KEY1, KEY2)
    with pytest.raises(ValueError):
        ring.remove(KEY1)
    with pytest.raises(KeyError):
        ring.use(KEY3)
    ring.use(KEY2)
    ring.remove(KEY1)
    assert ring.keys == (KEY2,)
    with pytest.raises(ValueError):
        ring.install(b"short")


def test_replay_filter_window():
    f = ReplayFilter()
    assert f.check_and_record("a", 1, 10)
    assert not f.check_and_record("a", 1, 10)
    assert f.check_and_record("a", 1, 8)       # reordered, inside the window
    assert not f.check_and_record("a", 1, 8)
    assert f.check_and_record("a", 1, 100)
    assert not f.check_and_record("a", 1, 30)  # older than the 64-datagram window
    assert f.check_and_record("a", 2, 1)       # new epoch: the sender restarted
    assert f.check_and_record("b", 1, 10)


def test_replay_filter_evicts_the_sender_first_seen_longest_ago():
    f = ReplayFilter(max_senders=2)
    assert f.check_and_record("a", 1, 1) and f.check_and_record("b", 1, 1)
    assert f.check_and_record("a", 1, 2)  # updated in place: "a" is still the oldest
    assert f.check_and_record("c", 1, 1)  # evicts "a"
    assert f.check_and_record("a", 1, 2)  # forgotten, so accepted again (and evicts "b")
    assert not f.check_and_record("c", 1, 1)
    assert f.check_and_record("b", 1, 1)


def _reference_replay(seen: dict[str, tuple[int, set[int]]], sender: str, epoch: int, seq: int) -> bool:
    """The filter's rule spelled out with a set of every accepted seq (no eviction)."""
    state = seen.get(sender)
    if state is None or state[0] != epoch:
        seen[sender] = (epoch, {seq})
        return True
    accepted = state[1]
    top = max(accepted)
    if seq in accepted or top - seq >= ReplayFilter.WINDOW:
        return False
    accepted.add(seq)
    return True


@given(st.lists(st.tuples(st.sampled_from("abc"), st.integers(1, 3), st.integers(0, 200)), max_size=80))
def test_replay_filter_agrees_with_a_set_of_accepted_seqs(ops):
    f = ReplayFilter()
    seen: dict[str, tuple[int, set[int]]] = {}
    for sender, epoch, seq in ops:
        assert f.check_and_record(sender, epoch, seq) == _reference_replay(seen, sender, epoch, seq)


# --- bad datagrams into a running core -------------------------------------------------------

def snapshot(core: Swim):
    return (core.members(), core.incarnation, core.view_checksum)


def _fuzz_target(keys=()):
    cfg = MembershipConfig(keys=keys)
    core = Swim(cfg, "me", ("10.0.0.1", 1), rng=random.Random(1), now=0.0)
    core.receive_datagram(forge(cfg, "x0", [Alive("x0", 3, ("10.0.0.2", 2), Meta(http="h"))]), ("10.0.0.2", 2), 0.0)
    core.handle_timer(0.0)
    core.datagrams_to_send()
    return cfg, core


def _valid_datagram(cfg):
    msgs = [Alive("x1", 1, ("10.0.0.3", 3), Meta(tags={"k": "v"})), Suspect("x0", 3, "x1"),
            Dead("me", 0, "x1"), Ping(7, "me"), PushPull(1, True)]
    return forge(cfg, "x1", msgs, seq=50)


FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(st.binary(max_size=2000))
def test_random_bytes_are_dropped_and_counted(data):
    _cfg, core = _fuzz_target()
    before = snapshot(core)
    core.receive_datagram(data, ("10.6.6.6", 6), 1.0)
    assert snapshot(core) == before
    assert core.stats["dropped"] == 1


@FUZZ
@given(st.data())
def test_truncated_datagrams_are_dropped(data):
    for keys in [(), (KEY1,)]:
        cfg, core = _fuzz_target(keys)
        valid = _valid_datagram(cfg)
        cut = data.draw(st.integers(0, len(valid) - 1))
        before = snapshot(core)
        core.receive_datagram(valid[:cut], ("10.6.6.6", 6), 1.0)
        assert snapshot(core) == before
        assert core.stats["dropped"] == 1
        # nothing but, for a datagram that does not decrypt, a notice saying so (5 bytes)
        assert all(d.startswith(b"SW\x01\x02") and len(d) == 5 for d, _ in core.datagrams_to_send())


@FUZZ
@given(st.data())
def test_mutated_encrypted_datagrams_are_dropped(data):
    cfg, core = _fuzz_target((KEY1,))
    valid = bytearray(_valid_datagram(cfg))
    positions = data.draw(st.sets(st.integers(0, len(valid) - 1), min_size=1, max_size=4))
    for i in positions:
        valid[i] ^= data.draw(st.integers(1, 255))
    before = snapshot(core)
    core.receive_datagram(bytes(valid), ("10.6.6.6", 6), 1.0)
    assert snapshot(core) == before
    assert core.stats["dropped"] == 1


@FUZZ
@given(st.data())
def test_mutated_plaintext_datagrams_never_raise_or_break_the_view(data):
    # Without encryption a mutation can yield another valid datagram (that is what keys are
    # for); the core must still never raise and keep a well-formed view.
    cfg, core = _fuzz_target()
    valid = bytearray(_valid_datagram(cfg))
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(valid) - 1))
        valid[i] = data.draw(st.integers(0, 255))
    core.receive_datagram(bytes(valid), ("10.6.6.6", 6), 1.0)
    core.handle_timer(2.0)
    assert core.member("me").status == "alive"
    for m in core.members():
        assert m.status in {"alive", "suspect", "dead", "left"} and m.incarnation >= 0
    for out, _ in core.datagrams_to_send():
        assert len(out) <= cfg.mtu_bytes


def test_a_datagram_we_cannot_read_gets_one_notice_a_second_and_notices_are_never_answered():
    _cfg, core = _fuzz_target((KEY1,))
    foreign = forge(MembershipConfig(keys=(b"y" * 16,)), "x1", [Nack(1)])
    sender = ("10.6.6.6", 6)
    for t in (1.0, 1.5, 2.1):
        core.receive_datagram(foreign, sender, t)
    notices = core.datagrams_to_send()
    assert notices == [(encode_notice("decrypt_failed"), sender)] * 2 and core.stats["notices_sent"] == 2
    core.receive_datagram(encode_notice("decrypt_failed"), sender, 5.0)
    assert core.datagrams_to_send() == [] and core.stats["dropped_notice"] == 1
    assert core.stats["dropped_malformed"] == 0
    core.receive_datagram(encode_notice("decrypt_failed")[:4] + b"\x09", sender, 5.0)  # no such reason
    assert core.stats["dropped_malformed"] == 1


def test_a_notice_is_read_before_the_version_byte():
    other_version = bytearray(encode_notice("unknown_version"))
    other_version[2] = 9
    _cfg, core = _fuzz_target()
    core.join([("10.6.6.6", 6)], 1.0)
    core.receive_datagram(bytes(other_version), ("10.6.6.6", 6), 1.1)
    assert core.stats["dropped_notice"] == 1 and core.stats["dropped_unknown_version"] == 0


def test_specific_bad_datagrams_are_counted_by_reason():
    cfg, core = _fuzz_target()
    valid = _valid_datagram(cfg)
    cases = {
        "unknown_version": valid[:2] + b"\x09" + valid[3:],
        "bad_magic": b"XX" + valid[2:],
        "oversized": valid + b"\x00" * cfg.max_receive_bytes,
        "malformed": valid + b"\xc1",
        "unexpected_encrypted": forge(MembershipConfig(keys=(KEY1,)), "x1", [Nack(1)]),
        "wrong_cluster": forge(MembershipConfig(cluster_name="other"), "x1", [Nack(1)]),
        "from_self": forge(cfg, "me", [Nack(1)]),
    }
    before = snapshot(core)
    for reason, data in cases.items():
        core.receive_datagram(data, ("10.6.6.6", 6), 1.0)
        assert core.stats["dropped_" + reason] == 1, reason
    assert snapshot(core) == before


def test_replayed_datagram_is_dropped():
    cfg, core = _fuzz_target((KEY1,))
    data = forge(cfg, "x1", [Alive("x1", 1, ("10.0.0.3", 3), Meta())], seq=7)
    core.receive_datagram(data, ("10.0.0.3", 3), 1.0)
    assert core.member("x1") is not None
    core.receive_datagram(data, ("10.0.0.3", 3), 1.5)
    assert core.stats["dropped_replayed"] == 1


def test_datagrams_with_an_unknown_key_or_without_encryption_are_dropped():
    _cfg, core = _fuzz_target((KEY1,))
    before = snapshot(core)
    core.receive_datagram(forge(MembershipConfig(keys=(KEY2,)), "x9", [Alive("x9", 1, ("10.0.0.9", 9), Meta())]),
                          ("10.0.0.9", 9), 1.0)
    core.receive_datagram(forge(MembershipConfig(), "x9", [Alive("x9", 1, ("10.0.0.9", 9), Meta())]),
                          ("10.0.0.9", 9), 1.0)
    assert core.stats["dropped_decrypt_failed"] == 1
    assert core.stats["dropped_unencrypted"] == 1
    assert snapshot(core) == before


# --- encryption in a running cluster ---------------------------------------------------------

def test_encrypted_cluster_converges_and_outsiders_cannot_join():
    cfg = MembershipConfig(keys=(KEY1,))
    net = build_cluster(4, seed=30, config=cfg)
    stranger = net.add("stranger", seeds=["n0"], config=MembershipConfig(keys=(KEY2,)))
    net.run_for(5.0)
    assert [m.node_id for m in stranger.core.live_members()] == ["stranger"]
    assert net.nodes["n0"].core.stats["dropped_decrypt_failed"] > 0
    assert "stranger" not in {m.node_id for m in net.nodes["n0"].core.members()}


def test_key_rotation_without_downtime():
    net = build_cluster(5, seed=31, config=MembershipConfig(keys=(KEY1,)))
    ids = list(net.nodes)
    steps = [lambda r: r.install(KEY2), lambda r: r.use(KEY2), lambda r: r.remove(KEY1)]
    for step in steps:
        for _i, node_id in enumerate(ids):  # members change one by one, traffic keeps flowing
            step(net.nodes[node_id].core.keyring)
            net.run_for(0.7)
        net.run_for(3.0)
    net.run_for(10.0)
    for node in net.nodes.values():
        assert node.core.keyring.keys == (KEY2,)
        assert node.core.stats["dropped_decrypt_failed"] == 0
        assert node.core.stats["suspicions"] == 0
    assert net.converged()
    # And the old key no longer works.
    net.inject("n0", forge(MembershipConfig(keys=(KEY1,)), "x", [Nack(1)]))
    assert net.nodes["n0"].core.stats["dropped_decrypt_failed"] == 1


def test_every_sent_datagram_decodes_under_the_cluster_config():
    cfg = MembershipConfig(keys=(KEY3,))
    net = MembershipSim(32, config=cfg)
    bad = []

    def check(now, src, dst, data):
        try:
            decode(cfg, data)
        except Drop as drop:  # pragma: no cover - reported below
            bad.append(drop.reason)

    net.on_send = check
    net.add("n0")
    for i in range(1, 6):
        net.add(f"n{i}", seeds=["n0"])
    net.run_for(10.0)
    assert net.converged() and not bad
