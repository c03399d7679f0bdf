"""Consumer-protocol groups (KIP-848) on a shard, without network: membership, epochs,
reconciliation (revoke before assign), timeouts, static members, error paths, and that loading
the written records gives back the same groups."""

from __future__ import annotations

import random
import uuid

import pytest

from gregor.coordinator.group.consumer_group import GroupState, MemberState
from gregor.protocol.errors import ErrorCode
from tests.coordinator.consumer_clients import TOPICS, Client, ConsumerHarness, assert_disjoint, converge

FOO, FOO_N = TOPICS["foo"]
BAR, BAR_N = TOPICS["bar"]


def all_of(*topics: str) -> set[tuple[uuid.UUID, int]]:
    return {(TOPICS[t][0], p) for t in topics for p in range(TOPICS[t][1])}


def group_state(h: ConsumerHarness) -> tuple:
    g = h.group()
    return (g.group_epoch, g.assignment_epoch, g.state,
            {m.member_id: (m.member_epoch, m.previous_member_epoch, m.state, m.assigned, m.pending_revocation,
                           m.subscribed_topic_names, m.instance_id) for m in g.members.values()},
            dict(g.target), dict(g.owners))


def test_first_member_gets_every_partition_at_epoch_one():
    h = ConsumerHarness()
    c = Client(h, ["foo", "bar"])
    r = c.beat()
    assert r.error == ErrorCode.none and r.member_epoch == 1 and r.member_id == c.member_id
    assert r.heartbeat_interval_ms == 5000
    assert c.partitions() == all_of("foo", "bar")
    g = h.group()
    assert g.state is GroupState.STABLE and g.group_epoch == 1 and g.assignment_epoch == 1
    # a heartbeat that changes nothing writes nothing and carries no assignment
    r = c.beat()
    assert r.error == 0 and r.assignment is None and h.last_records == []


def test_joining_member_waits_until_the_owner_revoked():
    h = ConsumerHarness()
    a, b = Client(h, ["foo"]), Client(h, ["foo"])
    a.beat()
    rb = b.beat()
    assert rb.member_epoch == 2
    assert b.partitions() == set()  # what it should get is still a's
    g = h.group()
    assert g.state is GroupState.RECONCILING
    assert g.members[a.member_id].member_epoch == 1
    ra = a.beat()  # a is told to give up half of foo
    assert ra.member_epoch == 1 and len(a.partitions()) == 3
    assert g.members[a.member_id].state is MemberState.UNREVOKED_PARTITIONS
    assert_disjoint([a, b])
    rb = b.beat()  # a has not confirmed yet: b still waits
    assert b.partitions() == set() and g.members[b.member_id].state is MemberState.UNRELEASED_PARTITIONS
    a.beat()  # confirms: now at epoch 2
    assert g.members[a.member_id].member_epoch == 2 and g.members[a.member_id].state is MemberState.STABLE
    b.beat()
    assert len(b.partitions()) == 3 and a.partitions() | b.partitions() == all_of("foo")
    assert_disjoint([a, b])
    assert h.group().state is GroupState.STABLE


def test_leave_gives_the_partitions_to_the_others():
    h = ConsumerHarness()
    cs = [Client(h, ["foo", "bar"]) for _ in range(3)]
    converge(cs)
    epoch = h.group().group_epoch
    r = cs[0].leave()
    assert r.error == 0 and r.member_epoch == -1
    assert h.group().group_epoch == epoch + 1 and cs[0].member_id not in h.group().members
    converge(cs[1:])
    assert cs[1].partitions() | cs[2].partitions() == all_of("foo", "bar")


def test_session_timeout_fences_a_silent_member():
    h = ConsumerHarness(consumer_session_timeout_ms=45_000)
    a, b = Client(h, ["foo"]), Client(h, ["foo"])
    converge([a, b])
    for _ in range(5):
        h.sleep(10_000)
        a.beat()
    assert b.member_id not in h.group().members  # b was silent for 50 s
    a.beat()
    assert a.partitions() == all_of("foo")
    r = b.beat()
    assert r.error == ErrorCode.unknown_member_id
    r = b.beat()  # rejoins with epoch 0 (same member id) and gets its share back in time
    assert r.error == 0
    converge([a, b])
    assert len(b.partitions()) == 3


def test_rebalance_timeout_fences_a_member_that_does_not_revoke():
    h = ConsumerHarness()
    a = Client(h, ["foo"], rebalance_timeout_ms=10_000)
    a.beat()
    b = Client(h, ["foo"])
    b.beat()
    a.beat()  # told to revoke
    assert h.group().members[a.member_id].state is MemberState.UNREVOKED_PARTITIONS
    h.sleep(5_000)
    keep = dict(a.owned)
    a.owned = {FOO: frozenset(range(6))}  # pretends it still owns everything
    a.beat()
    assert h.group().members[a.member_id].state is MemberState.UNREVOKED_PARTITIONS
    a.owned = keep
    h.sleep(6_000)  # 11 s after the revocation was asked for
    assert a.member_id not in h.group().members
    b.beat()
    assert b.partitions() == all_of("foo")


def test_member_epoch_errors():
    h = ConsumerHarness()
    a = Client(h, ["foo"])
    a.beat()
    Client(h, ["foo"]).beat()
    a.beat()
    a.owned = {}
    a.beat()  # now at epoch 2, previous 1
    assert a.epoch == 2
    r = h.heartbeat_consumer(a.request(epoch=3))
    assert r.error == ErrorCode.fenced_member_epoch and "greater member epoch (3)" in r.error_message
    r = h.heartbeat_consumer(a.request(epoch=1, owned={FOO: frozenset({5})}))
    assert r.error == ErrorCode.fenced_member_epoch  # previous epoch, but owns what it was not given
    r = h.heartbeat_consumer(a.request(epoch=1))
    assert r.error == 0 and r.member_epoch == 2  # previous epoch with a subset: the answer was lost
    r = h.heartbeat_consumer(Client(h, ["foo"], member_id="nobody").request(epoch=3))
    assert r.error == ErrorCode.unknown_member_id


@pytest.mark.parametrize(("changes", "message"), [
    ({"group_id": ""}, "GroupId can't be empty."),
    ({"group_id": "  "}, "GroupId can't be empty."),  # blanks are empty, as Kafka's trim()
    ({"instance_id": ""}, "InstanceId can't be empty."),
    ({"instance_id": " \t"}, "InstanceId can't be empty."),
    ({"rack_id": ""}, "RackId can't be empty."),
    ({"member_epoch": 0, "rebalance_timeout_ms": -1}, "RebalanceTimeoutMs must be provided in first request."),
    ({"member_epoch": 0, "owned": None}, "TopicPartitions must be empty when (re-)joining."),
    ({"member_epoch": 0, "subscribed_topic_names": None},
     "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining."),
    ({"member_epoch": 3, "member_id": ""}, "MemberId can't be empty."),
    ({"member_epoch": -1, "member_id": " "}, "MemberId can't be empty."),
    ({"member_epoch": 3, "member_id": "", "group_id": ""}, "MemberId can't be empty."),  # Kafka's order
    ({"member_epoch": -2, "instance_id": None}, "InstanceId can't be null."),
    ({"member_epoch": -3}, "MemberEpoch is invalid."),
])
def test_invalid_requests(changes, message):
    h = ConsumerHarness()
    c = Client(h, ["foo"])
    r = h.heartbeat_consumer(c.request(**changes))
    assert r.error == ErrorCode.invalid_request and r.error_message.startswith(message)
    assert h.last_records == [] and "g" not in h.shard.consumer_groups


def test_a_member_may_join_subscribed_to_nothing():
    """As Kafka 4.1+: an empty list of names is a member of the group that is assigned nothing; it
    subscribes to topics later and gets partitions."""
    h = ConsumerHarness()
    a, b = Client(h, []), Client(h, ["foo"])
    converge([a, b])
    assert a.epoch >= 1 and a.partitions() == set() and len(b.partitions()) == TOPICS["foo"][1]
    a.topics = ["foo"]
    a.beat(full=True)
    converge([a, b])
    assert a.partitions() and b.partitions()
    assert_disjoint([a, b])


def test_unsupported_assignor_and_full_group():
    h = ConsumerHarness(consumer_max_size=2)
    r = Client(h, ["foo"], assignor="sticky").beat()
    assert r.error == ErrorCode.unsupported_assignor and "uniform, range" in r.error_message
    Client(h, ["foo"]).beat()
    Client(h, ["foo"]).beat()
    r = Client(h, ["foo"]).beat()
    assert r.error == ErrorCode.group_max_size_reached


def test_static_member_comes_back_to_its_partitions_without_a_rebalance():
    h = ConsumerHarness()
    a, b = Client(h, ["foo"], instance="i-a"), Client(h, ["foo"], instance="i-b")
    converge([a, b])
    mine = a.partitions()
    epoch = h.group().group_epoch
    assert a.leave(static=True).member_epoch == -2
    assert h.group().group_epoch == epoch  # it keeps its place
    # another process with the same instance id cannot take it while it is held
    r = Client(h, ["foo"], instance="i-b").beat()
    assert r.error == ErrorCode.unreleased_instance_id
    back = Client(h, ["foo"], instance="i-a")
    r = back.beat()
    assert r.error == 0 and back.partitions() == mine and h.group().group_epoch == epoch
    assert a.member_id not in h.group().members and back.member_id in h.group().members
    # the old member id is fenced
    r = h.heartbeat_consumer(a.request(epoch=epoch, instance_id="i-a"))
    assert r.error == ErrorCode.fenced_instance_id


def test_new_partitions_are_picked_up_on_the_next_heartbeat():
    h = ConsumerHarness()
    a, b = Client(h, ["foo"]), Client(h, ["foo"])
    converge([a, b])
    h.catalogue["foo"] = (FOO, 10)
    converge([a, b])
    assert a.partitions() | b.partitions() == {(FOO, p) for p in range(10)}
    assert len(a.partitions()) == len(b.partitions()) == 5


def test_subscription_change_and_range_assignor():
    h = ConsumerHarness()
    a, b = Client(h, ["foo"], assignor="range"), Client(h, ["foo", "bar"], assignor="range")
    converge([a, b])
    assert {t for t, _ in a.partitions()} == {FOO} and (BAR, 0) in b.partitions()
    a.topics = ["foo", "bar"]
    a.beat(full=True)
    converge([a, b])
    assert a.partitions() | b.partitions() == all_of("foo", "bar")


def test_loading_the_records_gives_back_the_same_groups():
    h = ConsumerHarness()
    cs = [Client(h, ["foo", "bar"], instance="s0"), Client(h, ["foo"]), Client(h, ["bar"])]
    cs[0].beat()
    cs[1].beat()
    cs[0].beat()  # mid-reconciliation: revocations pending
    live = group_state(h)
    h.reload()
    assert group_state(h) == live
    converge(cs)  # and the members go on at their epochs, as if nothing happened
    assert cs[0].epoch == cs[1].epoch > 1


def test_commits_of_consumer_members_are_checked_against_their_epoch():
    h = ConsumerHarness()
    a = Client(h, ["foo"])
    a.beat()
    assert h.commit("g", {("foo", 0): 5}, generation=1, member_id=a.member_id) == {("foo", 0): 0}
    assert h.commit("g", {("foo", 0): 6}, generation=0, member_id=a.member_id) == {
        ("foo", 0): ErrorCode.stale_member_epoch}
    assert h.commit("g", {("foo", 0): 6}, generation=1, member_id="who") == {("foo", 0): ErrorCode.unknown_member_id}
    assert h.commit("g", {("foo", 0): 6}) == {("foo", 0): ErrorCode.unknown_member_id}  # not while it has members
    a.leave()
    assert h.commit("g", {("foo", 0): 7}) == {("foo", 0): 0}  # empty: tools may commit
    assert h.committed("g") == {("foo", 0): 7}


def test_a_commit_at_an_older_epoch_is_accepted_for_partitions_assigned_by_then():
    """KIP-1251 (Kafka 4.3, KAFKA-20066): a member's commit sent just before it moved to a new
    epoch arrives with the older epoch. It is accepted when every partition in it is one the
    member holds and was given at or before that epoch; anything else (a newer epoch than the
    member's, a partition it gave up or got later) is STALE_MEMBER_EPOCH for the whole request,
    and nothing is written. The assignment epochs survive a reload."""
    h = ConsumerHarness()
    a = Client(h, ["foo"])
    a.beat()
    assert a.epoch == 1 and len(a.partitions()) == 6
    b = Client(h, ["foo"])
    b.beat()  # group epoch 2: a must give up three partitions
    a.beat()  # told to revoke three: still at epoch 1, and it gives them up (its owned set)
    assert a.epoch == 1 and len(a.partitions()) == 3
    revoked = sorted(p for ps in h.group().members[a.member_id].pending_revocation.values() for p in ps)
    assert len(revoked) == 3
    a.beat()  # its heartbeat no longer lists them: on to epoch 2
    assert a.epoch == 2
    kept = sorted(p for _, p in a.partitions())
    assert h.group().members[a.member_id].assignment_epochs == {(FOO, p): 1 for p in kept}
    # a commit a sent at epoch 1 for partitions it still holds: accepted
    assert h.commit("g", {("foo", kept[0]): 10, ("foo", kept[1]): 11}, generation=1, member_id=a.member_id) == {
        ("foo", kept[0]): 0, ("foo", kept[1]): 0}
    # at epoch 1 for a partition it gave up: the whole request is refused, nothing is written
    mixed = {("foo", kept[2]): 12, ("foo", revoked[0]): 13}
    assert h.commit("g", mixed, generation=1, member_id=a.member_id) == {
        tp: ErrorCode.stale_member_epoch for tp in mixed}
    # a newer epoch than the member's
    assert h.commit("g", {("foo", kept[2]): 12}, generation=3, member_id=a.member_id) == {
        ("foo", kept[2]): ErrorCode.stale_member_epoch}
    converge([a, b])
    theirs = sorted(p for _, p in b.partitions())
    assert b.epoch == 2 and h.group().members[b.member_id].assignment_epochs == {(FOO, p): 2 for p in theirs}
    # b got its partitions at epoch 2: a commit of b's at epoch 1 is stale
    assert h.commit("g", {("foo", theirs[0]): 20}, generation=1, member_id=b.member_id) == {
        ("foo", theirs[0]): ErrorCode.stale_member_epoch}
    assert h.committed("g") == {("foo", kept[0]): 10, ("foo", kept[1]): 11}
    h.reload()
    assert h.group().members[a.member_id].assignment_epochs == {(FOO, p): 1 for p in kept}
    assert h.commit("g", {("foo", kept[2]): 12}, generation=1, member_id=a.member_id) == {("foo", kept[2]): 0}


def test_empty_classic_group_becomes_a_consumer_group_and_keeps_its_offsets():
    h = ConsumerHarness()
    h.commit("g", {("foo", 1): 42})
    assert "g" in h.shard.groups
    a = Client(h, ["foo"])
    assert a.beat().error == 0
    assert "g" not in h.shard.groups and h.committed("g") == {("foo", 1): 42}
    h.reload()
    assert "g" not in h.shard.groups and h.shard.consumer_groups["g"].members


def test_a_classic_group_with_members_is_not_taken_over():
    from tests.coordinator.harness import stable_group

    h = ConsumerHarness()
    stable_group(h, 1)
    r = Client(h, ["foo"]).beat()
    assert r.error == ErrorCode.group_id_not_found
    assert r.error_message.startswith("Cannot upgrade classic group g to consumer group because ")


def test_offset_delete_of_a_consumer_group_keeps_what_its_members_subscribe_to():
    """OffsetDelete on a consumer-protocol group (librdkafka's 0081 DeleteConsumerGroupOffsets with
    a subscribing consumer): GROUP_SUBSCRIBED_TO_TOPIC for the subscribed topics, the others
    deleted; once the group is empty, everything may go. It was GROUP_ID_NOT_FOUND."""
    h = ConsumerHarness()
    a = Client(h, ["foo"])
    a.beat()
    h.commit("g", {("foo", 0): 5}, generation=a.epoch, member_id=a.member_id)
    h.commit("g", {("bar", 0): 7}, generation=a.epoch, member_id=a.member_id)
    deleted = h.run(h.shard.delete_offsets("g", [("foo", 0), ("bar", 0)]))
    assert deleted.error == ErrorCode.none
    assert deleted.partitions == {("foo", 0): ErrorCode.group_subscribed_to_topic, ("bar", 0): ErrorCode.none}
    assert h.committed("g") == {("foo", 0): 5}
    a.leave()
    deleted = h.run(h.shard.delete_offsets("g", [("foo", 0)]))
    assert deleted.partitions == {("foo", 0): ErrorCode.none} and h.committed("g") == {}


def test_describing_a_classic_group_as_a_consumer_group_says_so():
    """ConsumerGroupDescribe of a classic group: GROUP_ID_NOT_FOUND with Kafka's message."""
    from gregor.protocol.errors import KafkaError
    from tests.coordinator.harness import stable_group

    h = ConsumerHarness()
    stable_group(h, 1)
    with pytest.raises(KafkaError) as e:
        h.shard.consumer_group_view("g")
    assert e.value.code == ErrorCode.group_id_not_found and e.value.message == "Group g is not a consumer group."
    assert h.shard.consumer_group_view("nobody") is None


def test_listed_and_described_with_phases():
    h = ConsumerHarness()
    a, b = Client(h, ["foo"]), Client(h, ["foo"])
    a.beat()
    b.beat()
    a.beat()
    view = h.shard.consumer_group_view("g")
    assert view.state == "Reconciling" and view.group_epoch == 2 and view.assignor == "uniform"
    by_id = {m.member_id: m for m in view.members}
    assert by_id[a.member_id].state == "UnrevokedPartitions" and sum(map(len, by_id[a.member_id]
                                                                         .pending_revocation.values())) == 3
    assert by_id[b.member_id].pending_assignment and not by_id[b.member_id].assigned
    listed = {g.group_id: g for g in h.shard.list_groups(None)}
    assert listed["g"].group_type == "consumer" and listed["g"].state == "Reconciling"
    assert h.shard.describe_group("g").error == ErrorCode.group_id_not_found


@pytest.mark.parametrize("seed", range(12))
def test_random_membership_never_gives_a_partition_to_two_members(seed):
    """Random joins, leaves, static leaves and returns, crashes (session expiry), subscription
    and partition-count changes; after every heartbeat no partition is owned by two members, and
    once the members keep heartbeating the group converges with every subscribed partition owned."""
    rng = random.Random(seed)
    h = ConsumerHarness(consumer_session_timeout_ms=45_000)
    clients: list[Client] = []
    away: list[Client] = []
    for _step in range(60):
        op = rng.random()
        if op < 0.3 or not clients:
            c = Client(h, rng.choice([["foo"], ["bar"], ["foo", "bar"]]),
                       instance=f"s{rng.randrange(4)}" if rng.random() < 0.3 else None)
            if c.instance and any(o.instance == c.instance for o in clients):
                continue
            clients.append(c)
        elif op < 0.4:
            c = clients.pop(rng.randrange(len(clients)))
            c.leave(static=c.instance is not None and rng.random() < 0.5)
        elif op < 0.45:
            crashed = clients.pop(rng.randrange(len(clients)))  # stops heartbeating; its partitions are lost
            away.append(crashed)
            crashed.owned = {}
        elif op < 0.5:
            name = rng.choice(["foo", "bar"])
            tid, n = h.catalogue[name]
            h.catalogue[name] = (tid, min(n + 1, 12))
        for c in rng.sample(clients, len(clients)):
            r = c.beat()
            assert r.error in (0, ErrorCode.unreleased_instance_id, ErrorCode.unknown_member_id), r
            assert_disjoint(clients)
        h.sleep(rng.choice([100, 1000, 5000]))
    h.sleep(50_000)  # the crashed members' sessions end
    for c in clients:
        c.beat()  # whoever was fenced meanwhile rejoins
    converge(clients, rounds=40)
    wanted = {(h.catalogue[t][0], p) for c in clients for t in c.topics for p in range(h.catalogue[t][1])}
    owned = set().union(*(c.partitions() for c in clients)) if clients else set()
    assert owned == wanted
    if clients:
        assert h.group().state is GroupState.STABLE


def test_group_configs_set_the_session_timeout_and_heartbeat_interval():
    h = ConsumerHarness()
    settings = {"g": {"consumer.session.timeout.ms": "10000", "consumer.heartbeat.interval.ms": "2000"}}
    h.shard.ctx.group_settings = lambda group_id: settings.get(group_id, {})
    a, b = Client(h, ["foo"]), Client(h, ["foo"])
    assert a.beat().heartbeat_interval_ms == 2000
    b.beat()
    h.sleep(11_000)
    assert h.shard.consumer_groups["g"].members == {}  # both silent for 11 s, over the group's 10 s
    other = Client(h, ["foo"], group="other")
    assert other.beat().heartbeat_interval_ms == 5000  # the broker's default elsewhere


def test_phases_name_the_members_that_hold_the_group_up(caplog):
    h = ConsumerHarness(consumer_slow_phase_ms=30_000)
    a, b = Client(h, ["foo"], rebalance_timeout_ms=120_000), Client(h, ["foo"])
    a.beat()
    a.beat()
    assert h.group().phase() == ("Stable", [])
    b.beat()
    a.beat()  # a is asked to revoke three partitions
    phase, holders = h.group().phase()
    assert phase == "Closing" and [(m, why) for m, why, _ in holders] == [(a.member_id, "revoke 3 partition(s)")]
    h.sleep(31_000)
    with caplog.at_level("WARNING", "gregor.coordinator"):
        b.beat()
    assert any("Closing for 31.0 s" in r.message and a.member_id in r.message and "must revoke 3" in r.message
               for r in caplog.records), caplog.text
    a.owned = {FOO: a.owned[FOO] - set(h.group().members[a.member_id].pending_revocation[FOO])}
    a.beat()  # revoked
    b.beat()  # given its three: it has not confirmed them yet
    phase, holders = h.group().phase()
    assert phase == "Starting" and [(m, why) for m, why, _ in holders] == [
        (b.member_id, "confirm 3 partition(s) it was given")]
    b.beat()  # its heartbeat lists them
    assert h.group().phase() == ("Stable", [])


def test_offset_fetch_v9_checks_the_member_and_its_epoch():
    from gregor.protocol.errors import KafkaError

    h = ConsumerHarness()
    a = Client(h, ["foo"])
    a.beat()
    h.commit("g", {("foo", 0): 5}, generation=a.epoch, member_id=a.member_id)
    wanted = [("foo", 0)]
    assert [v.offset for _, v in h.shard.fetch_offsets("g", wanted, a.member_id, a.epoch)] == [5]
    for member_id, epoch, code in [(a.member_id, a.epoch - 1, ErrorCode.stale_member_epoch),
                                   (a.member_id, a.epoch + 1, ErrorCode.stale_member_epoch),
                                   ("who", a.epoch, ErrorCode.unknown_member_id),
                                   (None, 3, ErrorCode.unknown_member_id)]:
        with pytest.raises(KafkaError) as e:
            h.shard.fetch_offsets("g", wanted, member_id, epoch)
        assert e.value.code == code
    # without a member (admin tools, clients before v9) anyone may read
    assert [v.offset for _, v in h.shard.fetch_offsets("g", wanted, None, -1)] == [5]
    assert [v.offset for _, v in h.shard.fetch_offsets("g", wanted, "", -1)] == [5]


def test_offset_fetch_of_a_classic_group_does_not_check_the_member():
    h = ConsumerHarness()
    h.commit("c", {("foo", 0): 3})
    assert [v.offset for _, v in h.shard.fetch_offsets("c", [("foo", 0)], "anyone", 7)] == [3]
