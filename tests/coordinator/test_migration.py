"""Classic and consumer-protocol members together (KIP-848's migration), without a network: a
classic JoinGroup never creates a second group beside a consumer-protocol one; empty groups
convert both ways; classic members in a consumer-protocol group; online upgrade and downgrade."""

from __future__ import annotations

import random
import struct
from typing import Any

import pytest

from gregor.protocol.consumer_protocol import decode_assignment, decode_subscription, encode_assignment
from gregor.protocol.errors import ErrorCode, KafkaError
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


# -- classic clients ------------------------------------------------------------------------------
def subscription(topics: list[str], owned: set[tuple[str, int]], version: int = 1) -> bytes:
    def s(v: str) -> bytes:
        b = v.encode()
        return struct.pack(">h", len(b)) + b

    out = struct.pack(">hi", version, len(topics)) + b"".join(s(t) for t in topics) + struct.pack(">i", -1)
    if version >= 1:
        by_topic: dict[str, list[int]] = {}
        for t, p in sorted(owned):
            by_topic.setdefault(t, []).append(p)
        out += struct.pack(">i", len(by_topic))
        for t, ps in by_topic.items():
            out += s(t) + struct.pack(f">i{len(ps)}i", len(ps), *ps)
    if version >= 2:
        out += struct.pack(">i", -1)
    if version >= 3:
        out += struct.pack(">h", -1)
    return out


class ClassicClient:
    """A classic consumer as librdkafka drives one: eager (revokes everything before it joins) or
    cooperative (keeps what it owns, gives up what SyncGroup no longer lists, then rejoins). As the
    leader of a classic group it assigns like a sticky assignor: what members own stays theirs, the
    rest goes round the members. ``beat`` moves it one step (a join or sync may wait)."""

    def __init__(self, h: ConsumerHarness, topics: list[str], cooperative: bool = True, group: str = "g",
                 instance: str | None = None, session: int = 10_000, rebalance: int = 30_000) -> None:
        self.h, self.topics, self.cooperative, self.group, self.instance = h, topics, cooperative, group, instance
        self.session, self.rebalance = session, rebalance
        self.member_id, self.generation = "", -1
        self.owned_names: set[tuple[str, int]] = set()
        self.needs_join = True
        self.pending: tuple[str, Any] | None = None
        self.protocol = "cooperative-sticky" if cooperative else "range"

    @property
    def busy(self) -> bool:
        return self.needs_join or self.pending is not None

    def join_and_sync(self) -> int:
        if not self.cooperative:
            self.owned_names = set()  # eager: every partition is revoked before JoinGroup
        self.needs_join = False
        d = self.h.join(self.group, member_id=self.member_id, instance=self.instance, session=self.session,
                        rebalance=self.rebalance,
                        protocols=[(self.protocol, subscription(self.topics, self.owned_names))])
        self.pending = ("join", d)
        return self._resume()

    def _resume(self) -> int:
        assert self.pending is not None
        kind, d = self.pending
        if not d.done:
            return 0
        self.pending = None
        r = d.result()
        if kind == "join":
            if r.error == ErrorCode.member_id_required:
                self.member_id = r.member_id
                return self.join_and_sync()
            if r.error:
                return self._lost(r.error)
            self.member_id, self.generation = r.member_id, r.generation_id
            assignments = self._assign(r.members) if r.members else None
            self.pending = ("sync", self.h.sync(self.group, r.generation_id, self.member_id, assignments,
                                                instance=self.instance, protocol_type="consumer",
                                                protocol_name=r.protocol_name))
            return self._resume()
        if r.error:
            return self._lost(r.error)
        assigned = {(t, p) for t, ps in decode_assignment(r.assignment) for p in ps}
        revoked = self.owned_names - assigned
        self.owned_names = assigned
        self.needs_join = self.cooperative and bool(revoked)
        return 0

    def _assign(self, members: list[dict[str, Any]]) -> dict[str, bytes]:
        subs = {m["member_id"]: decode_subscription(m["metadata"]) for m in members}
        out: dict[str, set[tuple[str, int]]] = {mid: set() for mid in subs}
        owner: dict[tuple[str, int], str] = {}
        for mid, sub in subs.items():
            for t, ps in sub.owned:
                for p in ps:
                    owner.setdefault((t, p), mid)
        topics = sorted({t for sub in subs.values() for t in sub.topics})
        for t in topics:
            for p in range(self.h.catalogue[t][1]):
                mid = owner.get((t, p))
                if mid is None:
                    mid = min((m for m in subs if t in subs[m].topics), key=lambda m: (len(out[m]), m))
                out[mid].add((t, p))
        return {mid: encode_assignment(sorted((t, sorted(p for tt, p in tps if tt == t))
                                              for t in {t for t, _ in tps})) for mid, tps in out.items()}

    def _lost(self, error: int) -> int:
        if error in (ErrorCode.unknown_member_id, ErrorCode.illegal_generation, ErrorCode.fenced_instance_id):
            self.owned_names = set()
            if error == ErrorCode.unknown_member_id:
                self.member_id = ""
        self.needs_join = True
        return error

    def beat(self) -> int:
        if self.pending is not None:
            return self._resume()
        if self.needs_join:
            return self.join_and_sync()
        e = self.h.heartbeat(self.group, self.generation, self.member_id, self.instance)
        if e:
            self._lost(e)
        return int(e)

    def leave(self) -> None:
        self.h.leave(self.group, (self.member_id, self.instance))
        self.owned_names, self.member_id, self.needs_join, self.pending = set(), "", True, None

    def partitions(self) -> set[tuple[Any, int]]:
        return {(self.h.catalogue[t][0], p) for t, p in self.owned_names}


def settle(clients: list[Any], rounds: int = 30) -> None:
    """Every client beats until nothing changes; no partition has two owners after any step."""
    for _ in range(rounds):
        before = [(c.partitions(), getattr(c, "busy", False)) for c in clients]
        for c in clients:
            c.beat()
            disjoint(clients)
        if before == [(c.partitions(), getattr(c, "busy", False)) for c in clients] and all(
                not getattr(c, "busy", False) for c in clients):
            return
    raise AssertionError("the group did not settle")


def disjoint(clients: list[Any]) -> None:
    seen: dict[Any, Any] = {}
    for c in clients:
        for tp in c.partitions():
            assert tp not in seen, f"{tp} owned by {seen[tp].member_id} and {c.member_id}"
            seen[tp] = c


def restart(h: ConsumerHarness, clients: Any) -> None:
    """The broker restarts: requests under way fail (NOT_COORDINATOR) and classic clients send
    their JoinGroup or SyncGroup again (a join, as librdkafka does), keeping what they own."""
    h.reload()
    for c in clients:
        if getattr(c, "pending", None) is not None:
            c.pending, c.needs_join = None, True


def snapshot(shard: Any) -> dict[str, Any]:
    """A consumer group's persisted state: epochs, and per member its metadata and assignment."""
    out = {}
    for gid, g in shard.consumer_groups.items():
        members = {mid: (m.member_epoch, m.previous_member_epoch, m.state, m.assigned, m.pending_revocation,
                         m.subscribed_topic_names, m.classic, m.instance_id, m.rebalance_timeout_ms)
                   for mid, m in g.members.items()}
        out[gid] = (g.group_epoch, g.assignment_epoch, members, dict(g.target), dict(g.owners))
    return out


# -- classic members in a consumer group ----------------------------------------------------------
@pytest.mark.parametrize("cooperative", [True, False])
def test_classic_members_are_served_by_the_consumer_group(cooperative):
    h = ConsumerHarness()
    a = Client(h, ["foo"])
    b = ClassicClient(h, ["foo"], cooperative=cooperative, session=7_000)
    settle([a])
    assert len(a.partitions()) == 6
    settle([a, b])
    assert "g" not in h.shard.groups
    assert len(a.partitions()) == 3 and len(b.partitions()) == 3
    member = h.group().members[b.member_id]
    assert member.classic is not None and member.classic.session_timeout_ms == 7_000
    assert member.member_epoch == b.generation == h.group().group_epoch
    # a second classic member: everybody rejoins and ends with two partitions
    c = ClassicClient(h, ["foo"], cooperative=cooperative)
    settle([a, b, c])
    assert sorted(len(x.partitions()) for x in (a, b, c)) == [2, 2, 2]
    # replay gives the same group, and the classic members go on after a reload
    assert snapshot(h.load_fresh()) == snapshot(h.shard)
    h.reload()
    settle([a, b, c])
    assert sorted(len(x.partitions()) for x in (a, b, c)) == [2, 2, 2]
    # a classic member leaves: its partitions go to the others
    b.leave()
    settle([a, c])
    assert sorted(len(x.partitions()) for x in (a, c)) == [3, 3]
    assert b.member_id not in h.group().members or b.member_id == ""


def test_a_classic_member_session_timeout_is_its_joingroups():
    h = ConsumerHarness()
    a, b = Client(h, ["foo"]), ClassicClient(h, ["foo"], session=7_000)
    settle([a, b])
    mid = b.member_id
    for _ in range(3):
        h.sleep(4_000)
        a.beat()
    assert mid not in h.group().members  # 7 s, not the group's 45 s
    settle([a])
    assert len(a.partitions()) == 6
    assert b.beat() == ErrorCode.unknown_member_id


def test_a_classic_member_that_does_not_rejoin_is_fenced_after_its_rebalance_timeout():
    h = ConsumerHarness()
    a, b = Client(h, ["foo"]), ClassicClient(h, ["foo"], rebalance=5_000)
    settle([a, b])
    Client(h, ["foo"]).beat()  # a new member: a new group epoch
    assert h.heartbeat("g", b.generation, b.member_id) == ErrorCode.rebalance_in_progress
    h.sleep(3_000)
    assert h.heartbeat("g", b.generation, b.member_id) == ErrorCode.rebalance_in_progress
    h.sleep(2_001)  # the join timeout counts from the first REBALANCE_IN_PROGRESS
    assert b.member_id not in h.group().members


def test_classic_requests_to_a_consumer_group_errors():
    h = ConsumerHarness()
    a, b = Client(h, ["foo"]), ClassicClient(h, ["foo"], instance="i-1")
    settle([a, b])
    # a consumer-protocol member is not a classic one, and vice versa
    assert h.heartbeat("g", a.epoch, a.member_id) == ErrorCode.unknown_member_id
    assert h.sync("g", a.epoch, a.member_id).result().error == ErrorCode.unknown_member_id
    r = h.heartbeat_consumer(Client(h, ["foo"], member_id=b.member_id).request(epoch=b.generation))
    assert r.error == ErrorCode.unknown_member_id
    # generation, protocol, instance id
    assert h.heartbeat("g", b.generation + 7, b.member_id, "i-1") == ErrorCode.illegal_generation
    assert h.sync("g", b.generation, b.member_id, instance="i-1", protocol_name="range").result().error == \
        ErrorCode.inconsistent_group_protocol
    assert h.heartbeat("g", b.generation, "someone-else", "i-1") == ErrorCode.fenced_instance_id
    r = h.join("g", protocol_type="connect", protocols=[("v1", b"x")]).result()
    assert r.error == ErrorCode.inconsistent_group_protocol
    r = h.join("g", member_id="m", protocols=[("cooperative-sticky", b"\x00")]).result()
    assert r.error == ErrorCode.inconsistent_group_protocol
    r = h.join("g", member_id="m", protocols=[("range", subscription(["foo"], set()))]).result()
    assert r.error == ErrorCode.inconsistent_group_protocol  # the classic members all speak cooperative-sticky


def test_a_static_classic_member_restarts_into_its_place():
    h = ConsumerHarness()
    a, b = Client(h, ["foo"]), ClassicClient(h, ["foo"], instance="i-1")
    settle([a, b])
    epoch, owned = h.group().group_epoch, b.partitions()
    old = b.member_id
    b2 = ClassicClient(h, ["foo"], instance="i-1")
    b2.owned_names = set()
    settle([a, b2])
    assert old not in h.group().members and b2.member_id in h.group().members
    assert b2.partitions() == owned and h.group().group_epoch == epoch  # no rebalance
    assert h.heartbeat("g", b.generation, old, "i-1") == ErrorCode.fenced_instance_id


@pytest.mark.parametrize("seed", range(12))
def test_random_mixed_membership_never_gives_a_partition_to_two_members(seed):
    rng = random.Random(seed)
    h = ConsumerHarness()
    live: list[Any] = [Client(h, ["foo", "bar"])]  # stays: the group stays a consumer group
    live[0].beat()
    for _step in range(60):
        op = rng.random()
        if op < 0.25:
            c: Any = Client(h, ["foo", "bar"]) if rng.random() < 0.5 else ClassicClient(
                h, ["foo", "bar"], cooperative=seed % 2 == 0)  # one protocol: a group refuses others
            live.append(c)
        elif op < 0.4 and len(live) > 1:
            c = live.pop(rng.randrange(1, len(live)))
            c.leave()
        elif op < 0.45 and len(live) > 1:
            crashed = live.pop(rng.randrange(1, len(live)))  # stops: its partitions are lost, its session ends
            crashed.owned, crashed.owned_names = {}, set()
        for c in rng.sample(live, len(live)):
            c.beat()
            disjoint(live)
        h.sleep(rng.choice([100, 1000, 5000]))
        if rng.random() < 0.1 and all(not getattr(c, "busy", False) for c in live):
            assert snapshot(h.load_fresh()) == snapshot(h.shard)
    for _ in range(12):  # the crashed ones' sessions end (and those of all but the first)
        h.sleep(5_000)
        live[0].beat()
    for c in live:
        c.beat()  # whoever was fenced learns it (and gives up its partitions), and rejoins
    settle(live, rounds=60)
    if live:
        assert sum(len(c.partitions()) for c in live) == 9
    assert snapshot(h.load_fresh()) == snapshot(h.shard)


def test_classic_members_commit_at_their_generation():
    from gregor.coordinator.group.api import CommitPartition, CommitRequest

    h = ConsumerHarness()
    a, b = Client(h, ["foo"]), ClassicClient(h, ["foo"])
    settle([a, b])

    def commit(generation: int, version: int) -> Any:
        req = CommitRequest("g", generation, b.member_id, None, [CommitPartition("foo", 0, 9, -1, "")],
                            api_version=version)
        return h.run(h.shard.commit_offsets(req))[("foo", 0)]

    assert commit(b.generation, 7) == ErrorCode.none
    assert commit(b.generation, 9) == ErrorCode.none
    assert commit(b.generation - 1, 7) == ErrorCode.illegal_generation
    assert h.committed("g") == {("foo", 0): 9}
    # and fetch at their generation (ILLEGAL_GENERATION otherwise, where a consumer member gets STALE_MEMBER_EPOCH)
    assert [v.offset for _, v in h.shard.fetch_offsets("g", [("foo", 0)], b.member_id, b.generation)] == [9]
    with pytest.raises(KafkaError) as e:
        h.shard.fetch_offsets("g", [("foo", 0)], b.member_id, b.generation + 1)
    assert e.value.code == ErrorCode.illegal_generation


def test_describe_says_which_members_speak_the_classic_protocol():
    h = ConsumerHarness()
    a, b = Client(h, ["foo"]), ClassicClient(h, ["foo"])
    settle([a, b])
    view = h.shard.consumer_group_view("g")
    assert {m.member_id: m.classic for m in view.members} == {a.member_id: False, b.member_id: True}


# -- online upgrade and downgrade -----------------------------------------------------------------
def classic_group(h: ConsumerHarness, n: int, cooperative: bool = True, topics: list[str] | None = None
                  ) -> list[ClassicClient]:
    clients = [ClassicClient(h, topics or ["foo"], cooperative=cooperative) for _ in range(n)]
    for _ in range(10):
        for c in clients:
            c.beat()
        disjoint(clients)
        if not any(c.busy for c in clients) and h.state("g") == "Stable":
            return clients
    raise AssertionError("the classic group did not form")


@pytest.mark.parametrize("cooperative", [True, False])
def test_online_upgrade_keeps_the_classic_members_and_their_partitions(cooperative):
    h = ConsumerHarness()
    b, c = classic_group(h, 2, cooperative)
    assert h.commit("g", {("foo", 0): 3}, generation=b.generation, member_id=b.member_id) == {("foo", 0): 0}
    owned_before = {b.member_id: b.partitions(), c.member_id: c.partitions()}
    a = Client(h, ["foo"])
    assert a.beat().error == ErrorCode.none
    assert "g" not in h.shard.groups
    group = h.group()
    assert set(group.members) == {a.member_id, b.member_id, c.member_id}
    assert {mid: frozenset((t, p) for t, ps in group.members[mid].assigned.items() for p in ps)
            for mid in (b.member_id, c.member_id)} == owned_before  # they keep their assignment
    assert group.members[b.member_id].classic.session_timeout_ms == 10_000
    assert not a.partitions()  # everything is still held by the classic members
    settle([a, b, c])
    assert sorted(len(x.partitions()) for x in (a, b, c)) == [2, 2, 2]
    assert h.committed("g") == {("foo", 0): 3}
    assert snapshot(h.load_fresh()) == snapshot(h.shard)
    h.reload()
    settle([a, b, c])
    assert sorted(len(x.partitions()) for x in (a, b, c)) == [2, 2, 2]


def test_online_upgrade_answers_a_rebalance_under_way():
    h = ConsumerHarness()
    b, c = classic_group(h, 2)
    d = ClassicClient(h, ["foo"])
    d.beat()  # MEMBER_ID_REQUIRED, then its join waits for b and c
    assert d.pending is not None and not d.pending[1].done
    a = Client(h, ["foo"])
    assert a.beat().error == ErrorCode.none
    assert d.pending[1].done and d.pending[1].result().error == ErrorCode.rebalance_in_progress
    settle([a, b, c, d])
    assert sorted(len(x.partitions()) for x in (a, b, c, d)) == [1, 1, 2, 2]


@pytest.mark.parametrize("policy", ["disabled", "downgrade"])
def test_no_online_upgrade_unless_the_policy_allows_it(policy):
    h = ConsumerHarness(consumer_migration_policy=policy)
    classic_group(h, 1)
    r = Client(h, ["foo"]).beat()
    assert r.error == ErrorCode.group_id_not_found and "online upgrade is disabled" in r.error_message
    assert h.state("g") == "Stable" and "g" not in h.shard.consumer_groups


def test_no_online_upgrade_of_a_group_that_is_not_a_consumer_group():
    h = ConsumerHarness()
    h.join_new("g", protocol_type="connect", protocols=[("v1", b"x")])
    r = Client(h, ["foo"]).beat()
    assert r.error == ErrorCode.group_id_not_found and "consumer embedded protocol" in r.error_message


@pytest.mark.parametrize("policy", ["disabled", "upgrade"])
def test_empty_groups_convert_both_ways_whatever_the_policy(policy):
    h = ConsumerHarness(consumer_migration_policy=policy)
    (b,) = classic_group(h, 1)
    b.leave()
    a = Client(h, ["foo"])
    assert a.beat().error == ErrorCode.none and "g" in h.shard.consumer_groups
    a.leave()
    (b,) = classic_group(h, 1)
    assert h.state("g") == "Stable" and "g" not in h.shard.consumer_groups


@pytest.mark.parametrize("cooperative", [True, False])
def test_online_downgrade_when_the_last_consumer_member_leaves(cooperative):
    h = ConsumerHarness(consumer_migration_policy="bidirectional")
    a = Client(h, ["foo"])
    a.beat()
    b, c = ClassicClient(h, ["foo"], cooperative), ClassicClient(h, ["foo"], cooperative)
    settle([a, b, c])
    assert h.commit("g", {("foo", 1): 8}, generation=b.generation, member_id=b.member_id) == {("foo", 1): 0}
    a.leave()
    assert "g" not in h.shard.consumer_groups and h.state("g") == "PreparingRebalance"
    assert set(h.shard.groups["g"].members) == {b.member_id, c.member_id}
    settle([b, c])
    assert h.state("g") == "Stable" and sorted(len(x.partitions()) for x in (b, c)) == [3, 3]
    assert h.committed("g") == {("foo", 1): 8}
    h.reload()
    assert "g" not in h.shard.consumer_groups and h.state("g") == "Stable"
    settle([b, c])
    assert sorted(len(x.partitions()) for x in (b, c)) == [3, 3]


def test_no_online_downgrade_unless_the_policy_allows_it():
    h = ConsumerHarness(consumer_migration_policy="upgrade")
    a, b = Client(h, ["foo"]), ClassicClient(h, ["foo"])
    settle([a, b])
    a.leave()
    assert "g" not in h.shard.groups and set(h.group().members) == {b.member_id}
    settle([b])
    assert len(b.partitions()) == 6


def test_online_downgrade_when_the_last_consumer_member_times_out():
    h = ConsumerHarness(consumer_migration_policy="bidirectional")
    a, b = Client(h, ["foo"]), ClassicClient(h, ["foo"])
    settle([a, b])
    for _ in range(10):
        h.sleep(5_000)
        b.beat()
    assert "g" not in h.shard.consumer_groups and b.member_id in h.shard.groups["g"].members
    a.owned = {}
    settle([b])
    assert len(b.partitions()) == 6 and h.state("g") == "Stable"


@pytest.mark.parametrize("restarts", [False, True])
@pytest.mark.parametrize("seed", range(12))
def test_random_migrations_never_give_a_partition_to_two_members(seed, restarts):
    """Policy bidirectional: members of both kinds come and go, so the group turns classic and back
    (online and when empty); after every step no partition has two owners, and replay gives the
    same consumer group. With ``restarts`` the broker also restarts at random moments (right after
    an upgrade or a downgrade among them), and every partition is consumed in the end."""
    rng = random.Random(seed)
    h = ConsumerHarness(consumer_migration_policy="bidirectional")
    live: list[Any] = []
    leave, restart_at = (0.42, 0.52) if restarts else (0.45, 0.45)
    for _step in range(80):
        op = rng.random()
        if op < 0.3 or not live:
            live.append(Client(h, ["foo", "bar"]) if rng.random() < 0.5 else ClassicClient(
                h, ["foo", "bar"], cooperative=seed % 2 == 0))
        elif op < leave:
            live.pop(rng.randrange(len(live))).leave()
        elif op < restart_at:
            restart(h, live)
        for c in rng.sample(live, len(live)):
            c.beat()
            disjoint(live)
            if restarts and rng.random() < 0.05:
                restart(h, live)
        h.sleep(rng.choice([100, 1000]))
        if not restarts and "g" in h.shard.consumer_groups and all(not getattr(c, "busy", False) for c in live):
            assert snapshot(h.load_fresh()) == snapshot(h.shard)
    if restarts:
        for _ in range(15):  # a member resurrected by a restart (a classic LeaveGroup is not written) times out
            h.sleep(3_000)
            for c in live:
                c.beat()
                disjoint(live)
    settle(live, rounds=80)
    assert sum(len(c.partitions()) for c in live) == (9 if live else 0)


# -- review fixes (Kafka 4's GroupMetadataManager as the reference) ---------------------------------
def test_the_online_upgrade_gives_every_converted_member_a_session_timeout():
    """Kafka's convertToConsumerGroup schedules each converted member's session timeout (its
    classic one): a classic member that dies just as the group is upgraded is fenced, not kept
    (with its partitions) for ever."""
    h = ConsumerHarness()
    b, c = classic_group(h, 2)
    a = Client(h, ["foo"])
    assert a.beat().error == ErrorCode.none
    dead = b.member_id  # b never speaks again
    for _ in range(4):
        h.sleep(4_000)
        a.beat()
        c.beat()
    assert dead not in h.group().members
    settle([a, c])
    assert sorted(len(x.partitions()) for x in (a, c)) == [3, 3]


def test_a_classic_member_has_no_rebalance_timeout_only_join_and_sync_timeouts():
    """Kafka schedules the rebalance timeout for consumer-protocol members only: a classic member
    revoking partitions has until its join timeout (counted from the REBALANCE_IN_PROGRESS that
    asks it to rejoin), not a rebalance timeout counted from the JoinGroup that started it."""
    h = ConsumerHarness()
    b = ClassicClient(h, ["foo"], rebalance=5_000)
    a = Client(h, ["foo"])
    a.beat()
    settle([a, b])
    Client(h, ["foo"]).beat()  # a third member: b must give up partitions
    assert h.heartbeat("g", b.generation, b.member_id) == ErrorCode.rebalance_in_progress
    b.needs_join = False
    r = h.join("g", member_id=b.member_id, session=10_000, rebalance=5_000,
               protocols=[(b.protocol, subscription(b.topics, b.owned_names))]).result()
    assert r.error == ErrorCode.none
    member = h.group().members[b.member_id]
    assert member.state.name == "UNREVOKED_PARTITIONS"
    assert h.sync("g", r.generation_id, b.member_id, protocol_type="consumer",
                  protocol_name=b.protocol).result().error == ErrorCode.none
    h.sleep(4_000)
    assert h.heartbeat("g", r.generation_id, b.member_id) == ErrorCode.rebalance_in_progress
    h.sleep(2_000)  # 6 s after the JoinGroup, 2 s after the REBALANCE_IN_PROGRESS
    assert b.member_id in h.group().members
    h.sleep(3_100)  # the join timeout: 5 s after the REBALANCE_IN_PROGRESS
    assert b.member_id not in h.group().members


def test_a_consumer_member_takes_the_place_of_a_static_classic_member():
    """A rolling upgrade of a static member: the instance comes back with the consumer protocol
    under the same instance id while its classic incarnation is still a member (a static classic
    consumer sends no LeaveGroup). Kafka lets it take the place at once (the unreleased-instance
    check is for two consumer-protocol members only); the member it becomes is not a classic one."""
    h = ConsumerHarness()
    a = Client(h, ["foo"])
    a.beat()
    b = ClassicClient(h, ["foo"], instance="i-1")
    settle([a, b])
    old = b.member_id
    b2 = Client(h, ["foo"], instance="i-1")
    r = b2.beat()
    assert r.error == ErrorCode.none, r.error_message
    group = h.group()
    assert old not in group.members and not group.members[b2.member_id].uses_classic_protocol
    assert h.heartbeat("g", b.generation, old, "i-1") == ErrorCode.fenced_instance_id
    b.owned_names = set()  # the old incarnation is gone
    settle([a, b2])
    assert sorted(len(x.partitions()) for x in (a, b2)) == [3, 3]
    assert snapshot(h.load_fresh()) == snapshot(h.shard)


def test_online_downgrade_when_a_classic_static_member_replaces_the_last_consumer_member():
    """Kafka's validateOnlineDowngradeWithReplacedMemberId: a static member coming back with the
    classic protocol in place of the last consumer-protocol member makes the group a classic group
    at once, the new member holding the old one's assignment; the group stays Stable (the
    subscription did not change) and no partition has two owners."""
    h = ConsumerHarness(consumer_migration_policy="bidirectional")
    a = Client(h, ["foo"], instance="i-1")
    a.beat()
    b = ClassicClient(h, ["foo"])
    settle([a, b])
    held_by_a = {(t, p) for t, p in a.partitions()}
    a2 = ClassicClient(h, ["foo"], instance="i-1")
    a2.beat()
    assert "g" not in h.shard.consumer_groups, "the group should be a classic group"
    group = h.shard.groups["g"]
    assert set(group.members) == {a2.member_id, b.member_id}
    assert a2.partitions() == held_by_a
    a.owned = {}  # the old incarnation is gone
    disjoint([a2, b])
    settle([a2, b])
    assert h.state("g") == "Stable" and sorted(len(x.partitions()) for x in (a2, b)) == [3, 3]
    h.reload()
    assert "g" not in h.shard.consumer_groups and set(h.shard.groups["g"].members) == {a2.member_id, b.member_id}
    settle([a2, b])
    assert sorted(len(x.partitions()) for x in (a2, b)) == [3, 3]


def test_no_online_downgrade_by_static_replacement_unless_the_policy_allows_it():
    h = ConsumerHarness(consumer_migration_policy="upgrade")
    a = Client(h, ["foo"], instance="i-1")
    a.beat()
    b = ClassicClient(h, ["foo"])
    settle([a, b])
    a2 = ClassicClient(h, ["foo"], instance="i-1")
    a.owned = {}
    settle([a2, b])
    assert "g" in h.shard.consumer_groups and set(h.group().members) == {a2.member_id, b.member_id}
    assert sorted(len(x.partitions()) for x in (a2, b)) == [3, 3]


def test_a_refused_heartbeat_leaves_the_classic_group_as_it_was():
    """The upgrade happens with the heartbeat that triggers it, or not at all: a heartbeat refused
    after the conversion was prepared (here the consumer group would be over its maximum size)
    leaves the classic group working: its members' sessions still end, its rebalances complete."""
    h = ConsumerHarness(consumer_max_size=2)
    b, c = classic_group(h, 2)
    r = Client(h, ["foo"]).beat()
    assert r.error == ErrorCode.group_max_size_reached
    assert "g" not in h.shard.consumer_groups and h.state("g") == "Stable"
    dead = b.member_id  # b stops: its session ends, c gets everything
    for _ in range(4):
        h.sleep(4_000)
        c.beat()
    settle([c])
    assert dead not in h.shard.groups["g"].members and len(c.partitions()) == 6


def test_a_restart_right_after_a_downgrade_gives_no_partition_two_owners():
    """The downgrade writes the classic group as each member holds it (its current assignment,
    partitions still to revoke included), not as the consumer group's target: a broker that
    restarts before the classic rebalance completes loads a Stable group whose assignments a
    member may get from a SyncGroup at once; with the targets it would get a partition its
    previous owner has not revoked yet (Kafka writes the targets)."""
    h = ConsumerHarness(consumer_migration_policy="bidirectional")
    a = Client(h, ["foo"])
    a.beat()
    b = ClassicClient(h, ["foo"])
    settle([a, b])
    c = ClassicClient(h, ["foo"])
    c.beat()  # c joins: everything it is to get is still held by a and b
    assert not c.busy and not c.partitions()
    assert b.beat() == ErrorCode.rebalance_in_progress  # b is to rejoin and give a partition up; it has not yet
    a.leave()  # the last consumer-protocol member: the group becomes a classic group and rebalances
    assert "g" not in h.shard.consumer_groups and h.state("g") == "PreparingRebalance"
    assert c.beat() == ErrorCode.rebalance_in_progress  # c is to rejoin
    h.reload()  # ... and the broker restarts first
    assert h.state("g") == "Stable"
    for _ in range(4):
        c.beat()  # c rejoins the loaded (Stable) group and syncs: what it gets, nobody else holds
        disjoint([b, c])
    settle([b, c])
    assert len(b.partitions() | c.partitions()) == 6


@pytest.mark.parametrize("seed", range(10))
def test_random_static_restarts_across_protocols_never_give_a_partition_to_two_members(seed):
    """Static members restart, each time with either protocol (the group upgrades, downgrades and
    replaces members across protocols), the broker restarts now and then: after every step no
    partition has two owners, and in the end every partition is consumed."""
    rng = random.Random(seed)
    h = ConsumerHarness(consumer_migration_policy="bidirectional")
    cooperative = seed % 2 == 0

    def start(instance: str) -> Any:
        if rng.random() < 0.5:
            return Client(h, ["foo", "bar"], instance=instance)
        return ClassicClient(h, ["foo", "bar"], cooperative=cooperative, instance=instance)

    live = {f"i-{n}": start(f"i-{n}") for n in range(3)}
    for _step in range(60):
        op = rng.random()
        if op < 0.2:
            instance = rng.choice(sorted(live))
            old = live[instance]
            old.owned, old.owned_names = {}, set()  # the process stops: it holds nothing any more
            live[instance] = start(instance)
        elif op < 0.25:
            restart(h, live.values())
        for c in rng.sample(list(live.values()), len(live)):
            c.beat()
            disjoint(list(live.values()))
        h.sleep(rng.choice([100, 1000]))
    clients = list(live.values())
    for _ in range(15):  # replaced incarnations' sessions end
        h.sleep(3_000)
        for c in clients:
            c.beat()
            disjoint(clients)
    settle(clients, rounds=80)
    assert sum(len(c.partitions()) for c in clients) == 9


def test_a_fenced_static_classic_member_rejoining_with_its_old_member_id_is_unknown():
    """Kafka (getOrMaybeSubscribeStaticConsumerGroupMember): a static member comes into the group
    only with an unknown member id; one that names a member id while its instance id is unknown
    (its session ended) gets UNKNOWN_MEMBER_ID, so that it gives up its partitions at once and
    joins again as a new member."""
    h = ConsumerHarness()
    a, b = Client(h, ["foo"]), ClassicClient(h, ["foo"], instance="i-1", session=7_000)
    settle([a, b])
    for _ in range(3):
        h.sleep(4_000)
        a.beat()
    assert b.member_id not in h.group().members
    r = h.join("g", member_id=b.member_id, instance="i-1", session=7_000,
               protocols=[(b.protocol, subscription(b.topics, b.owned_names))]).result()
    assert r.error == ErrorCode.unknown_member_id
    assert b.member_id not in h.group().members
    b.owned_names, b.member_id, b.needs_join = set(), "", True
    settle([a, b])
    assert sorted(len(x.partitions()) for x in (a, b)) == [3, 3]


def test_no_online_upgrade_of_a_group_whose_assignments_a_custom_assignor_wrote():
    """Kafka 4 refuses the upgrade when a member's last assignment carries user data (a custom
    assignor's, which the server-side assignor would lose) or cannot be read (the partitions it
    holds would be unknown); the group stays a classic group. The clients' built-in assignors
    need no user data (librdkafka's cooperative-sticky leader copies some into each assignment):
    those groups are upgraded."""

    class BuiltIn(ClassicClient):
        def _assign(self, members: list[dict[str, Any]]) -> dict[str, bytes]:
            out = super()._assign(members)
            return {mid: a[:-4] + struct.pack(">i", 3) + b"abc" for mid, a in out.items()}

    h = ConsumerHarness()
    b = BuiltIn(h, ["foo"])
    for _ in range(3):
        b.beat()
    assert h.state("g") == "Stable" and len(b.partitions()) == 6
    assert Client(h, ["foo"]).beat().error == ErrorCode.none and "g" in h.shard.consumer_groups

    class CustomAssignor(BuiltIn):
        def __init__(self, *args: Any, **kw: Any) -> None:
            super().__init__(*args, **kw)
            self.protocol = "my-assignor"

    h = ConsumerHarness()
    b = CustomAssignor(h, ["foo"])
    for _ in range(3):
        b.beat()
    assert h.state("g") == "Stable" and len(b.partitions()) == 6
    r = Client(h, ["foo"]).beat()
    assert r.error == ErrorCode.group_id_not_found and "custom assignor" in r.error_message
    assert h.state("g") == "Stable" and "g" not in h.shard.consumer_groups
    assert b.beat() == ErrorCode.none

    class Unreadable(ClassicClient):
        def _assign(self, members: list[dict[str, Any]]) -> dict[str, bytes]:
            return {mid: b"\x00\x00\x00\x00\x00\x01\x00\x03fo" for mid in super()._assign(members)}

    h = ConsumerHarness()
    c = Unreadable(h, ["foo"])
    for _ in range(3):
        c.beat()
    r = Client(h, ["foo"]).beat()
    assert r.error == ErrorCode.group_id_not_found and "malformed" in r.error_message
    assert h.state("g") == "Stable" and "g" not in h.shard.consumer_groups


