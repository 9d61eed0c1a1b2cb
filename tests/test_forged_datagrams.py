"""Forged datagrams against a keyless cluster (issue 31, item 1).

Without keys nothing authenticates a datagram, so a stranger on the network can always inject
*some* gossip. What must hold: nothing it sends does lasting damage that honest traffic cannot
repair, and the cheap attacks (replay-window poisoning, incarnation exhaustion) are closed.

Each test runs a few cores on the simulated network (``simulations.members``) and plays a
stranger at an address no member knows, who builds its datagrams with the wire codec itself
(``membership.wire.Codec``: any cluster name, settings, sender id, epoch and seq) and reads the
answers the members send it. Each attack then asserts, within a bounded simulated time: no
healthy member declared dead by anyone (where keyless gossip cannot prevent a death, the test
says so and asserts the refutation instead), and the cluster whole afterwards (every view holds
exactly the live members, at the same incarnations).
"""

from __future__ import annotations

import pytest

from membership import DEAD, LEFT, DeclaredDead, JoinRefused, MemberEvent, MemberInfo, MembershipConfig, Meta
from membership.messages import Ack, Alive, Dead, Ping, PushPull, Refuse, Suspect
from membership.wire import Codec, Keyring
from simulations.members import MembershipSim, build_cluster

STRANGER = ("10.9.9.9", 9999)
U64 = 2**64 - 1


class Stranger:
    """Someone on the network with no key: sends crafted datagrams from ``STRANGER`` and keeps
    every datagram a member sends back to it."""

    def __init__(self, net: MembershipSim) -> None:
        self.net = net
        self.heard: list[tuple[str, bytes]] = []  # (member id, datagram)
        by_addr = {n.addr: n.node_id for n in net.nodes.values()}

        def on_send(now, src, dst, data):
            if dst == STRANGER:
                self.heard.append((by_addr[src], data))

        net.on_send = on_send

    @staticmethod
    def craft(messages, *, sender: str, epoch: int, seq: int, cluster: str = "default", settings: str = "") -> bytes:
        codec = Codec(cluster=cluster, settings=settings, sender=sender, epoch=epoch, keyring=Keyring(),
                      mtu_bytes=1400, max_receive_bytes=8192)
        codec._seq = seq - 1
        return codec.seal([codec.encode_message(m) for m in messages])

    def send(self, node_id: str, data: bytes) -> None:
        self.net.inject(node_id, data, src=STRANGER)

    def answers(self, node_id: str):
        """The envelopes ``node_id`` sent us, opened with the wire codec (any cluster)."""
        opener = Codec(cluster="?", settings="", sender="?", epoch=0, keyring=Keyring(), mtu_bytes=1400,
                       max_receive_bytes=8192)
        return [opener.open(data) for who, data in self.heard if who == node_id]


def _info(net: MembershipSim, observer: str, subject: str) -> MemberInfo:
    """What ``observer`` holds about ``subject`` (which it must know)."""
    info = net.nodes[observer].core.member(subject)
    assert info is not None, f"{observer} does not know {subject}"
    return info


def deaths(net: MembershipSim, ids) -> list[tuple[str, str, str]]:
    """(observer, subject, kind) for every dead/left event about one of ``ids``, and every
    DeclaredDead a member of ``ids`` heard about itself."""
    out: list[tuple[str, str, str]] = []
    for node in net.nodes.values():
        for e in node.events:
            if isinstance(e, MemberEvent) and e.kind in (DEAD, LEFT) and e.member.node_id in ids:
                out.append((node.node_id, e.member.node_id, e.kind))
            elif isinstance(e, DeclaredDead):
                out.append((node.node_id, node.node_id, "declared-dead"))
    return out


def whole(net: MembershipSim, ids) -> bool:
    """Every member of ``ids`` holds exactly ``ids`` as live, alive, at the incarnation each
    member holds for itself, with the metadata it has."""
    want = {i: (net.nodes[i].core.incarnation, net.nodes[i].core.meta) for i in ids}
    for i in ids:
        view = {m.node_id: (m.incarnation, m.meta) for m in net.nodes[i].core.live_members()}
        if view != want or any(m.status != "alive" for m in net.nodes[i].core.live_members()):
            return False
    return True


IDS = ("n0", "n1", "n2")


def cluster(seed: int = 1, config: MembershipConfig | None = None) -> tuple[MembershipSim, Stranger]:
    net = build_cluster(3, seed=seed, config=config)
    net.run_for(2.0)
    assert whole(net, IDS)
    return net, Stranger(net)


def learn_epochs_by_refusal(net: MembershipSim, stranger: Stranger) -> dict[str, tuple[str, str, int, int]]:
    """The issue's first step: a join with a wrong cluster name to each member; what the answer
    tells: member id -> (cluster name, settings, epoch, seq) of the envelope."""
    learned = {}
    for i, node_id in enumerate(IDS):
        stranger.send(node_id, stranger.craft([PushPull(77 + i, True)], sender="intruder", epoch=5, seq=1 + i,
                                              cluster="intruders"))
        for env in stranger.answers(node_id):
            if any(isinstance(m, Refuse) for m in env.messages):
                learned[env.sender] = (env.cluster, env.settings, env.epoch, env.seq)
    return learned


def learn_epochs_by_ping(net: MembershipSim, stranger: Stranger) -> dict[str, tuple[int, int]]:
    """A stranger that knows the cluster name (the default, or guessed) pings each member: the
    ack's envelope carries the member's epoch and its current seq."""
    learned = {}
    for i, node_id in enumerate(IDS):
        stranger.send(node_id, stranger.craft([Ping(1, node_id)], sender="intruder", epoch=5, seq=10 + i))
        for env in stranger.answers(node_id):
            if any(isinstance(m, Ack) for m in env.messages):
                learned[node_id] = (env.epoch, env.seq)
    return learned


def poison(stranger: Stranger, epochs: dict[str, int], seq: int, **where) -> None:
    """One envelope 'from' each member, with its epoch and ``seq`` and no messages, to each
    other member (six datagrams for three members)."""
    for a, epoch in epochs.items():
        for b in IDS:
            if b != a:
                stranger.send(b, stranger.craft([], sender=a, epoch=epoch, seq=seq, **where))


# --- spoofed sender / epoch / seq ----------------------------------------------------------------

def test_the_six_datagrams_of_the_issue_do_not_split_the_cluster():
    net, stranger = cluster()
    learned = learn_epochs_by_refusal(net, stranger)
    assert len(stranger.heard) == 3  # each member answered the stranger's join with a refusal
    # The refusals' envelopes named the members' epochs (the issue); they no longer do, so the
    # stranger takes what the ack to a ping with the cluster's (default) name tells instead.
    epochs = {a: e for a, (e, _) in learn_epochs_by_ping(net, stranger).items()}
    epochs.update({a: learned[a][2] for a in learned if a in IDS})
    assert set(epochs) == set(IDS)
    dropped = {i: net.nodes[i].core.stats["dropped"] for i in IDS}
    poison(stranger, epochs, 2**63)  # six datagrams
    # read as valid (nothing dropped them): they just no longer decide anything
    assert {i: net.nodes[i].core.stats["dropped"] for i in IDS} == dropped
    net.run_for(40.0)
    assert deaths(net, IDS) == []
    assert whole(net, IDS)


@pytest.mark.parametrize("seq", [2**63, U64, "next"])
def test_an_attacker_who_knows_the_epochs_and_seqs_cannot_silence_members(seq):
    # Stronger than the issue: the stranger knows the cluster name and learns each member's
    # real epoch and current seq from the ack to its own ping, then poisons the window far
    # ahead, at the very top, or just ahead of the member's next datagrams.
    net, stranger = cluster()
    learned = learn_epochs_by_ping(net, stranger)
    assert set(learned) == set(IDS)
    if seq == "next":
        for a, (epoch, top) in learned.items():
            for s in range(top + 1, top + 200):
                for b in IDS:
                    if b != a:
                        stranger.send(b, stranger.craft([], sender=a, epoch=epoch, seq=s))
    else:
        poison(stranger, {a: e for a, (e, _) in learned.items()}, seq)
    net.run_for(40.0)
    assert deaths(net, IDS) == []
    assert whole(net, IDS)
    for node_id in IDS:  # the members kept hearing one another
        assert net.nodes[node_id].core.stats["dropped_replayed"] == 0


def test_random_epochs_and_seqs_from_spoofed_senders_change_nothing():
    net, stranger = cluster()
    rng = net.sim.process_rng()
    for _ in range(300):
        a, b = rng.sample(IDS, 2)
        stranger.send(b, stranger.craft([], sender=a, epoch=rng.getrandbits(64), seq=rng.getrandbits(64)))
    net.run_for(30.0)
    assert deaths(net, IDS) == []
    assert whole(net, IDS)


def test_with_keys_the_replay_filter_still_drops_replays():
    # With keys the filter stays strict: a captured datagram is dropped when replayed.
    cfg = MembershipConfig(keys=(b"k" * 16,))
    net, _ = cluster(config=cfg)
    captured = []
    net.on_send = lambda now, src, dst, data: captured.append((src, dst, data))
    net.run_for(3.0)
    src, dst, data = captured[-1]
    target = next(n.node_id for n in net.nodes.values() if n.addr == dst)
    before = net.nodes[target].core.stats["dropped_replayed"]
    net.inject(target, data, src=src)
    assert net.nodes[target].core.stats["dropped_replayed"] == before + 1


# --- what a stranger's probe learns ----------------------------------------------------------------

def test_a_refusal_to_a_stranger_comes_in_an_anonymous_envelope():
    # The issue's attack read each member's epoch from the envelope of its refusal. The envelope
    # now names no cluster, settings, member, epoch or seq. The text still names the cluster's
    # values: the joiner's operator needs them, and without keys they are no secret (every
    # datagram carries them; README, "Gossip without --key-file").
    net, stranger = cluster(config=MembershipConfig(cluster_name="prod-7f3a", cluster_settings="partitions=64"))
    learned = learn_epochs_by_refusal(net, stranger)
    refusals = [env for node_id in IDS for env in stranger.answers(node_id)]
    assert len(refusals) == 3
    for env in refusals:
        assert (env.cluster, env.settings, env.sender, env.epoch, env.seq) == ("", "", "-", 0, 0)
        (refuse,) = env.messages
        assert "cluster name differs" in refuse.reason and "'intruders'" in refuse.reason
        assert "'prod-7f3a'" in refuse.reason
    assert set(learned) == {"-"}


@pytest.mark.parametrize("keys", [(), (b"k" * 16,)])
def test_a_misconfigured_joiner_still_learns_both_values(keys):
    net = MembershipSim(3)
    net.add("n0", config=MembershipConfig(cluster_settings="partitions=64", keys=keys))
    net.add("bad", seeds=["n0"], config=MembershipConfig(cluster_settings="partitions=128", keys=keys))
    net.run_for(3.0)
    refused = next(e for e in net.nodes["bad"].events if isinstance(e, JoinRefused))
    assert "cluster settings differ" in refused.reason
    assert "'partitions=128'" in refused.reason and "'partitions=64'" in refused.reason


# --- forged suspect / dead / leave / alive ---------------------------------------------------------

def _current(net: MembershipSim, node_id: str) -> int:
    return net.nodes[node_id].core.incarnation


@pytest.mark.parametrize("incarnation", ["current", 2**32, 2**63, U64])
def test_a_forged_suspicion_is_refuted_and_never_becomes_a_death(incarnation):
    net, stranger = cluster()
    before = _current(net, "n1")
    inc = _current(net, "n1") if incarnation == "current" else incarnation
    for i, b in enumerate(IDS):
        stranger.send(b, stranger.craft([Suspect("n1", inc, "n2")], sender="n9", epoch=3, seq=1 + i))
    assert net.run_until_true(lambda: whole(net, IDS), 10.0)
    assert _current(net, "n1") > before  # the forgery landed: the victim had to outbid it
    net.run_for(30.0)
    assert deaths(net, IDS) == []
    assert whole(net, IDS)
    assert _current(net, "n1") <= 2**63  # room left to refute the next one


@pytest.mark.parametrize("incarnation", ["current", 2**63, U64])
def test_a_forged_death_is_refuted_and_the_member_can_refute_again(incarnation):
    # Keyless gossip cannot prevent this one: ``Dead`` at the incarnation a member holds kills at
    # once (SWIM), so the members that got the forgery report the victim dead until its
    # refutation arrives. What must hold: it comes back everywhere, within a few gossip rounds,
    # and a forgery at the top of the incarnation range does not leave it unable to refute.
    net, stranger = cluster()
    before = _current(net, "n1")
    inc = _current(net, "n1") if incarnation == "current" else incarnation
    for i, b in enumerate(IDS):
        stranger.send(b, stranger.craft([Dead("n1", inc, "n2")], sender="n9", epoch=3, seq=1 + i))
    assert net.run_until_true(lambda: whole(net, IDS), 5.0)
    assert _current(net, "n1") > before  # the forgery landed: the victim had to outbid it
    net.run_for(30.0)
    assert whole(net, IDS)
    assert {s for _, s, _ in deaths(net, IDS)} <= {"n1"}
    assert _current(net, "n1") <= 2**63
    # and again, at whatever incarnation the stranger now reads from the victim's gossip
    for i, b in enumerate(IDS):
        stranger.send(b, stranger.craft([Dead("n1", _current(net, "n1"), "n2")], sender="n9", epoch=3, seq=10 + i))
    assert net.run_until_true(lambda: whole(net, IDS), 5.0)


@pytest.mark.parametrize("incarnation", ["current", U64])
def test_a_forged_leave_is_refuted(incarnation):
    net, stranger = cluster()
    before = _current(net, "n1")
    inc = _current(net, "n1") if incarnation == "current" else incarnation
    for i, b in enumerate(("n0", "n2")):  # the victim itself does not get it
        stranger.send(b, stranger.craft([Dead("n1", inc, "n1")], sender="n1", epoch=3, seq=1 + i))
    # The victim still probes the others, and a member it probes that holds it as left says so
    # in the ack: refuted within a probe period or so (anti-entropy alone took up to 4 s).
    assert net.run_until_true(lambda: whole(net, IDS), 2.0)
    assert _current(net, "n1") > before  # the forgery landed: the victim had to outbid it
    net.run_for(30.0)
    assert whole(net, IDS)


@pytest.mark.parametrize("incarnation", [2**32, 2**63, U64])
def test_a_forged_alive_with_a_huge_incarnation_and_other_metadata_does_not_stick(incarnation):
    net, stranger = cluster()
    before = _current(net, "n1")
    n1 = net.nodes["n1"]
    fake = Alive("n1", incarnation, n1.addr, Meta(weight=1000.0, http="http://10.9.9.9:80"))
    for i, b in enumerate(IDS):
        stranger.send(b, stranger.craft([fake], sender="n9", epoch=3, seq=1 + i))
    assert net.run_until_true(lambda: whole(net, IDS), 10.0)
    assert _current(net, "n1") > before  # the forgery landed: the victim had to outbid it
    net.run_for(20.0)
    assert deaths(net, IDS) == []
    assert whole(net, IDS)
    assert all(_info(net, o, "n1").meta == Meta() for o in IDS)
    # the victim can still change its metadata, and everyone takes it
    net.call("n1", lambda c, now: c.update_meta(Meta(weight=2.0), now))
    assert net.run_until_true(lambda: whole(net, IDS), 5.0)
    assert all(_info(net, o, "n1").meta.weight == 2.0 for o in IDS)


def test_a_receive_never_raises_whatever_incarnation_a_datagram_names():
    net, stranger = cluster()
    for i, msg in enumerate([Suspect("n1", U64, "n2"), Dead("n1", U64, "n2"), Alive("n1", U64, ("10.9.9.9", 1), Meta()),
                             Dead("n1", U64, "n1")]):
        data = stranger.craft([msg], sender="n9", epoch=3, seq=1 + i)
        net.nodes["n1"].core.receive_datagram(data, STRANGER, net.now)  # must not raise
        net.nodes["n1"]._flush()
    assert net.run_until_true(lambda: whole(net, IDS), 15.0)


# --- forged joins and refusals ------------------------------------------------------------------

def test_a_phantom_joined_by_a_stranger_is_removed_in_bounded_time():
    # A stranger that knows the cluster name can join keyless gossip: its push-pull brings a
    # member that never answers. It must be suspected and removed, and no real member harmed.
    net, stranger = cluster()
    phantom = Alive("ghost", 0, ("10.9.9.8", 7000), Meta())
    stranger.send("n0", stranger.craft([PushPull(5, True), phantom], sender="ghost", epoch=9, seq=1))
    assert net.run_until_true(lambda: all(net.status(o, "ghost") == "alive" for o in IDS), 5.0)
    # Its suspicion runs out: about 5 s here (the maximum timeout, 6 x 3 s, bounds it).
    assert net.run_until_true(lambda: all(net.status(o, "ghost") == DEAD for o in IDS), 20.0)
    assert deaths(net, IDS) == []
    assert whole(net, IDS)


def test_forged_joins_with_member_ids_change_nothing():
    # Joins 'from' the real members (their ids, another address) are address claims: refused.
    net, stranger = cluster()
    for i, a in enumerate(IDS):
        fake = Alive(a, _current(net, a) + 1, STRANGER, Meta(weight=9.0))
        for j, b in enumerate(IDS):
            if b != a:
                stranger.send(b, stranger.craft([PushPull(5 + i, True), fake], sender=a, epoch=9, seq=1 + j))
    assert sum(net.nodes[o].core.stats["address_conflicts"] for o in IDS) >= 6  # each claim was read
    net.run_for(30.0)
    assert deaths(net, IDS) == []
    assert whole(net, IDS)
    assert all(_info(net, o, a).addr == net.nodes[a].addr for o in IDS for a in IDS)


def test_a_forged_join_carrying_deaths_only_raises_suspicions_that_are_refuted():
    # Full state is applied with ``dead`` as ``suspect`` (memberlist's mergeState): a join that
    # says every member is dead, at the top incarnation, kills no one.
    net, stranger = cluster()
    before = _current(net, "n1")
    state = [PushPull(5, True)] + [Dead(a, U64, "ghost") for a in IDS]
    for i, b in enumerate(IDS):
        stranger.send(b, stranger.craft(state, sender="ghost", epoch=9, seq=1 + i))
    assert net.run_until_true(lambda: whole(net, IDS), 5.0)
    assert _current(net, "n1") > before  # the forgery landed: the victim had to outbid it
    net.run_for(30.0)
    assert deaths(net, IDS) == [] and whole(net, IDS)


def test_a_forged_refusal_does_not_stop_a_member():
    net, stranger = cluster()
    for i, b in enumerate(IDS):
        stranger.send(b, stranger.craft([Refuse("go away")], sender="n9", epoch=3, seq=1 + i, cluster="other"))
    assert all(net.nodes[b].core.stats["refusals_ignored"] == 1 for b in IDS)
    net.run_for(10.0)
    assert not [e for n in net.nodes.values() for e in n.events if isinstance(e, JoinRefused)]
    assert whole(net, IDS)


def test_a_forged_refusal_from_an_address_we_did_not_contact_does_not_stop_a_joiner():
    net = MembershipSim(4)
    net.add("n0")
    joiner = net.add("n1", seeds=["n0"])
    stranger = Stranger(net)
    stranger.send("n1", stranger.craft([Refuse("go away")], sender="n9", epoch=3, seq=1, cluster="other"))
    assert joiner.core.stats["refusals_ignored"] == 1
    assert not [e for e in joiner.events if isinstance(e, JoinRefused)]
    assert net.run_until_true(lambda: whole(net, ("n0", "n1")), 10.0)


def test_with_keys_forged_datagrams_are_dropped():
    cfg = MembershipConfig(keys=(b"k" * 16,))
    net, stranger = cluster(config=cfg)
    stranger.send("n0", stranger.craft([Dead("n1", U64, "n2")], sender="n2", epoch=3, seq=2**63))
    assert net.nodes["n0"].core.stats["dropped_unencrypted"] == 1
    net.run_for(5.0)
    assert deaths(net, IDS) == [] and whole(net, IDS)



def test_bounded_incarnation_lets_honest_values_through_and_steps_above_the_soft_maximum():
    from membership.status import INCARNATION_SOFT_MAX as SOFT
    from membership.status import INCARNATION_STEP_MAX as STEP
    from membership.status import bounded_incarnation
    assert bounded_incarnation(1_764_000_000, 0) == 1_764_000_000  # Unix seconds, from nothing
    assert bounded_incarnation(SOFT, 5) == SOFT
    assert bounded_incarnation(U64, 5) == SOFT  # one update reaches the soft maximum at most
    assert bounded_incarnation(U64, SOFT) == SOFT + STEP  # and then a step per update
    assert bounded_incarnation(SOFT + 3, SOFT) == SOFT + 3
    assert bounded_incarnation(U64, U64 - 1) == U64
    assert bounded_incarnation(U64, SOFT + 7, may_step=False) == SOFT + 8  # one at a time meanwhile
    assert bounded_incarnation(U64, 5, may_step=False) == SOFT


def test_a_flood_of_forged_incarnations_moves_a_member_by_one_step_a_second():
    # 400 accusations at the top in each datagram, 50 datagrams in 5 s, to every member: the
    # victim's incarnation rises by one per update and by a step at most once a second, so
    # exhausting it would take 2**31 s; and the cluster stays whole throughout.
    from membership.status import INCARNATION_SOFT_MAX as SOFT
    from membership.status import INCARNATION_STEP_MAX as STEP
    net, stranger = cluster()
    for k in range(50):
        for i, b in enumerate(IDS):
            stranger.send(b, stranger.craft([Suspect("n1", U64, "n2")] * 400, sender="n9", epoch=3,
                                            seq=1 + 3 * k + i))
        net.run_for(0.1)
    assert net.run_until_true(lambda: whole(net, IDS), 10.0)
    assert _current(net, "n1") <= SOFT + 6 * STEP + 3 * 50 * 400 + 10
    net.run_for(20.0)
    assert deaths(net, IDS) == [] and whole(net, IDS)


def test_a_forged_notice_from_an_address_we_did_not_contact_does_not_stop_a_joiner():
    from membership.wire import encode_notice
    net = MembershipSim(4)
    net.add("n0")
    joiner = net.add("n1", seeds=["n0"])
    Stranger(net).send("n1", encode_notice("unencrypted"))
    assert joiner.core.stats["dropped_notice"] == 1
    assert not [e for e in joiner.events if isinstance(e, JoinRefused)]
    assert net.run_until_true(lambda: whole(net, ("n0", "n1")), 10.0)


def test_a_datagram_forged_in_a_members_own_name_makes_it_report_an_id_conflict_once_a_minute():
    # A limitation keyless gossip cannot lift (README, "Gossip without --key-file"): a datagram
    # with a member's own id and another epoch is how a twin process shows itself, so a forged
    # one is reported as a twin (a node is then not ready for a while). Bounded: once a minute,
    # and nothing else changes.
    from membership import IdConflict
    net, stranger = cluster()
    for i in range(5):
        stranger.send("n1", stranger.craft([], sender="n1", epoch=3, seq=1 + i))
        net.run_for(5.0)
    assert len([e for e in net.nodes["n1"].events if isinstance(e, IdConflict)]) == 1
    assert deaths(net, IDS) == [] and whole(net, IDS)
