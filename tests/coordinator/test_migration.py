"""Classic and consumer-protocol members together (KIP-848's migration), without a network: a
classic JoinGroup never creates a second group beside a consumer-protocol one; empty groups
convert both ways; classic members in a consumer-protocol group; online upgrade and downgrade."""

from __future__ import annotations

from gregor.protocol.errors import ErrorCode
from tests.coordinator.consumer_clients import Client, ConsumerHarness


def test_a_classic_join_never_creates_a_second_group_beside_a_consumer_group():
    h = ConsumerHarness()
    a = Client(h, ["foo"])
    assert a.beat().error == 0
    r = h.join("g").result()
    assert r.error != ErrorCode.none
    assert "g" not in h.shard.groups and h.shard.consumer_groups["g"].members
    # the other classic APIs do not find a classic member there either
    assert h.sync("g", 1, "x").result().error == ErrorCode.unknown_member_id
    assert h.heartbeat("g", 1, "x") == ErrorCode.unknown_member_id
    assert h.leave("g", ("x", None)).members[0].error == ErrorCode.unknown_member_id
    assert "g" not in h.shard.groups
    h.reload()
    assert "g" not in h.shard.groups and h.shard.consumer_groups["g"].members


def test_an_empty_consumer_group_becomes_a_classic_group_and_keeps_its_offsets():
    from tests.coordinator.harness import stable_group

    h = ConsumerHarness()
    a = Client(h, ["foo"])
    a.beat()
    assert h.commit("g", {("foo", 0): 5}, generation=a.epoch, member_id=a.member_id) == {("foo", 0): 0}
    a.leave()
    assert not h.shard.consumer_groups["g"].members
    stable_group(h, 2)
    assert "g" not in h.shard.consumer_groups and h.state("g") == "Stable"
    assert h.committed("g") == {("foo", 0): 5}
    h.reload()
    assert "g" not in h.shard.consumer_groups and h.state("g") == "Stable" and h.committed("g") == {("foo", 0): 5}
