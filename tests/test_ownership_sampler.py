"""The overlap rule of the cluster sampler (tests/ownership_sampler.py): flags only what the order
of the answers proves, so a handoff between two answers is never taken for two owners."""

from ownership_sampler import Reply, Round, loose_overlaps, overlaps


def reply(node, t, owned, paused=None):
    return Reply(node, t, t + 0.001, owned, paused)


def test_a_holder_on_both_sides_of_another_owner_is_an_overlap():
    replies = [reply("a", 0, {7: 3}), reply("b", 1, {7: 1}), reply("a", 2, {7: 3}), reply("b", 3, {})]
    assert overlaps(replies) == [(7, "a", "b")]


def test_a_handoff_between_two_answers_is_not_an_overlap():
    # a owns 7, hands it to b; b is asked after the handoff, a before: one pass shows both
    replies = [reply("a", 0, {7: 3}), reply("b", 1, {7: 4}), reply("a", 2, {}), reply("b", 3, {7: 4})]
    assert overlaps(replies) == []
    assert loose_overlaps(replies[:2]) == 1


def test_a_new_grant_between_the_answers_proves_nothing():
    # a's epoch changed: it may have lost 7 (while b had it) and got it back
    replies = [reply("a", 0, {7: 3}), reply("b", 1, {7: 4}), reply("a", 2, {7: 5})]
    assert overlaps(replies) == []


def test_missing_answers_and_unknown_epochs_are_skipped():
    replies = [reply("a", 0, {7: None}), None, reply("b", 1, {7: 1}), reply("a", 2, {7: None})]
    assert overlaps(replies) == []


def test_round_predicates():
    first = [reply("a", 0, {0: 1}), reply("b", 1, {1: 1})]
    r = Round(0, 1, first, list(first), {"a": {"a": "alive", "b": "alive", "c": "dead"}, "b": None})
    assert r.owns_exactly({"a": {0}, "b": {1}}) and not r.owns_exactly({"a": {0, 1}})
    assert not r.owns_exactly({"a": {0}, "c": set()})  # c did not answer
    assert r.sees(["a"], {"a": "alive", "b": "alive"}) and not r.sees(["a"], {"a": "alive"})
    assert not r.sees(["b"], {"b": "alive"})  # b did not answer
    assert r.dead_anywhere() == {("a", "c")}
