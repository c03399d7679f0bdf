"""Share groups (KIP-932) on a group-coordinator shard, without network: joining, sharing
partitions when members outnumber them, leaving, session timeouts, Kafka's errors, the group id
shared with other group types, and that loading the written records gives back the same groups."""

from __future__ import annotations

import uuid
from typing import Any

from gregor.coordinator.group.share_group_manager import ShareHeartbeatRequest, ShareHeartbeatResult
from gregor.protocol.errors import ErrorCode
from tests.coordinator.consumer_clients import TOPICS, Client, ConsumerHarness

FOO, FOO_N = TOPICS["foo"]
BAR, BAR_N = TOPICS["bar"]


class ShareClient:
    def __init__(self, h: ConsumerHarness, topics: list[str], group: str = "g") -> None:
        self.h, self.topics, self.group = h, topics, group
        self.member_id = str(uuid.uuid4())
        self.epoch = 0
        self.assigned: dict[uuid.UUID, frozenset[int]] = {}

    def beat(self, epoch: int | None = None, topics: list[str] | None = None) -> ShareHeartbeatResult:
        epoch = self.epoch if epoch is None else epoch
        names = topics if topics is not None else (self.topics if epoch == 0 else None)
        req = ShareHeartbeatRequest(self.group, self.member_id, epoch, "client", "/127.0.0.1", None, names)
        r: ShareHeartbeatResult = self.h.run(self.h.shard.share_group_heartbeat(req))
        if r.error == 0:
            self.epoch = r.member_epoch
            if r.assignment is not None:
                self.assigned = {t: frozenset(ps) for t, ps in r.assignment.items()}
        return r

    def leave(self) -> ShareHeartbeatResult:
        return self.beat(epoch=-1)

    def partitions(self) -> set[tuple[uuid.UUID, int]]:
        return {(t, p) for t, ps in self.assigned.items() for p in ps}


def share_state(h: ConsumerHarness, group: str = "g") -> Any:
    g = h.shard.share_groups[group]
    return (g.group_epoch, g.assignment_epoch, g.state, dict(g.target), dict(g.initialized),
            {mid: (m.member_epoch, m.assigned, m.subscribed_topic_names, m.client_id) for mid, m in g.members.items()})


def test_first_member_gets_every_partition_at_epoch_one():
    h = ConsumerHarness()
    a = ShareClient(h, ["foo", "bar"])
    r = a.beat()
    assert r.error == 0 and r.member_epoch == 1 and r.heartbeat_interval_ms == 5000
    assert a.partitions() == {(FOO, p) for p in range(FOO_N)} | {(BAR, p) for p in range(BAR_N)}
    g = h.shard.share_groups["g"]
    assert g.state == "Stable" and g.group_epoch == 1 and g.assignment_epoch == 1
    assert g.initialized[FOO][1] == frozenset(range(FOO_N))
    r = a.beat()  # nothing changed: nothing written, no assignment sent
    assert r.error == 0 and r.assignment is None and h.last_records == []


def test_members_share_partitions_when_they_outnumber_them():
    h = ConsumerHarness()
    clients = [ShareClient(h, ["bar"]) for _ in range(7)]
    for _ in range(3):
        for c in clients:
            assert c.beat().error == 0
    per_partition: dict[int, int] = {}
    for c in clients:
        assert len(c.partitions()) == 1, "every member gets a partition of its own topic"
        for _t, p in c.partitions():
            per_partition[p] = per_partition.get(p, 0) + 1
    assert sorted(per_partition.values()) == [2, 2, 3]  # 7 members on 3 partitions, balanced
    assert all(c.epoch == h.shard.share_groups["g"].assignment_epoch for c in clients)


def test_a_member_takes_its_new_assignment_at_once_nothing_to_revoke():
    h = ConsumerHarness()
    a, b = ShareClient(h, ["foo"]), ShareClient(h, ["foo"])
    a.beat()
    assert len(a.partitions()) == FOO_N
    rb = b.beat()
    assert rb.member_epoch == 2 and len(b.partitions()) == FOO_N // 2
    ra = a.beat()
    assert ra.member_epoch == 2 and len(a.partitions()) == FOO_N // 2
    assert a.partitions() | b.partitions() == {(FOO, p) for p in range(FOO_N)}


def test_leave_and_session_timeout_give_the_partitions_back():
    h = ConsumerHarness()
    a, b, c = (ShareClient(h, ["foo"]) for _ in range(3))
    for cl in (a, b, c):
        cl.beat()
    r = a.leave()
    assert r.error == 0 and r.member_epoch == -1 and a.member_id not in h.shard.share_groups["g"].members
    h.sleep(30_000)
    b.beat()
    h.sleep(30_000)  # c never heartbeats again: removed after 45 s
    assert c.member_id not in h.shard.share_groups["g"].members
    b.beat()
    assert b.partitions() == {(FOO, p) for p in range(FOO_N)}


def test_kafkas_errors():
    h = ConsumerHarness()
    a = ShareClient(h, ["foo"])
    assert a.beat(topics=[]).error == ErrorCode.invalid_request  # a first heartbeat names its topics
    req = ShareHeartbeatRequest("g", "", 0, "c", "/h", None, ["foo"])
    assert h.run(h.shard.share_group_heartbeat(req)).error == ErrorCode.invalid_request  # empty member id
    req = ShareHeartbeatRequest("", "m", 0, "c", "/h", None, ["foo"])
    assert h.run(h.shard.share_group_heartbeat(req)).error == ErrorCode.invalid_request  # empty group id
    assert a.beat(epoch=-2).error == ErrorCode.invalid_request
    a.beat()
    assert a.beat(epoch=7).error == ErrorCode.fenced_member_epoch
    stranger = ShareClient(h, ["foo"])
    assert stranger.beat(epoch=3).error == ErrorCode.unknown_member_id
    assert stranger.leave().error == ErrorCode.unknown_member_id


def test_group_size_limit():
    h = ConsumerHarness(share_max_size=2)
    cs = [ShareClient(h, ["foo"]) for _ in range(3)]
    assert [c.beat().error for c in cs] == [0, 0, ErrorCode.group_max_size_reached]


def test_a_group_id_names_one_group():
    h = ConsumerHarness()
    consumer = Client(h, ["foo"], group="c")
    consumer.beat()
    assert ShareClient(h, ["foo"], group="c").beat().error == ErrorCode.group_id_not_found
    ShareClient(h, ["foo"], group="s").beat()
    assert Client(h, ["foo"], group="s").beat().error == ErrorCode.group_id_not_found
    listed = {(g.group_id, g.group_type) for g in h.shard.list_groups(None)}
    assert ("s", "share") in listed and ("c", "consumer") in listed


def test_loading_the_records_gives_back_the_same_groups():
    h = ConsumerHarness()
    clients = [ShareClient(h, ["foo", "bar"]) for _ in range(4)]
    for _ in range(2):
        for c in clients:
            c.beat()
    clients[1].leave()
    before = share_state(h)
    h.reload()
    assert share_state(h) == before
    # the members loaded get a session timeout of their own: silent ones are removed
    h.sleep(46_000)
    assert h.shard.share_groups["g"].members == {}


def test_delete_an_empty_share_group():
    h = ConsumerHarness()
    a = ShareClient(h, ["foo"])
    a.beat()
    assert h.run(h.shard.delete_groups(["g"]))["g"] == ErrorCode.non_empty_group
    a.leave()
    assert h.run(h.shard.delete_groups(["g"]))["g"] == ErrorCode.none
    assert "g" not in h.shard.share_groups
    h.reload()
    assert "g" not in h.shard.share_groups


def test_an_operators_offset_change_creates_the_empty_group_and_lists_its_partitions():
    h = ConsumerHarness()
    code = h.run(h.shard.share_offsets_changed("new", {FOO: ("foo", frozenset({0, 1}))}, set()))
    g = h.shard.share_groups["new"]
    assert code == 0 and g.state == "Empty" and g.initialized == {FOO: ("foo", frozenset({0, 1}))}
    code = h.run(h.shard.share_offsets_changed("new", {FOO: ("foo", frozenset({2}))}, set()))
    assert g.initialized[FOO][1] == frozenset({0, 1, 2})
    assert h.run(h.shard.share_offsets_changed("new", {}, {FOO})) == 0 and g.initialized == {}
    a = ShareClient(h, ["foo"], group="new")
    assert a.beat().member_epoch == 1
    assert h.run(h.shard.share_offsets_changed("new", {}, {FOO})) == ErrorCode.non_empty_group
    Client(h, ["foo"], group="c").beat()
    assert h.run(h.shard.share_offsets_changed("c", {}, set())) == ErrorCode.group_id_not_found
    h.reload()
    assert h.shard.share_groups["new"].initialized[FOO][1] == frozenset(range(FOO_N))
