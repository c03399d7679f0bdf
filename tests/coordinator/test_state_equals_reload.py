"""Replay is the only mutator: for any sequence of operations, a shard's state equals the state of
a fresh shard that loads the records written so far.

Operations: JoinGroup (dynamic and static members, changing subscriptions), SyncGroup (the
leader's assignment), Heartbeat, LeaveGroup, OffsetCommit as a member and in assign mode (with
and without a retention time), OffsetDelete, DeleteGroups, a topic's deletion, and the manual
clock moving on, which fires session, join, sync, pending-member and expiry timers.

What is compared, and when:
- **Committed offsets: exactly**, after every operation. Offsets change only by replay.
- **Groups: what a GroupMetadata record persists** (state, generation, protocol type and name,
  leader; per member its ids, client id and host, timeouts, the chosen protocol's subscription
  and the assignment), and for an Empty group with a protocol type the time it became empty,
  from which its offsets expire. Only the groups that hold something persisted are compared
  (offsets, a generation or a protocol type): a group that a JoinGroup created and that never
  completed a generation lives in memory only, as in Kafka, and so do pending member ids,
  waiting requests, heartbeat deadlines and rebalance counters.
- Groups are compared **when every group is Stable or Empty**. Classic membership is written the
  way Kafka writes it: at the leader's SyncGroup and when a group becomes empty (and when a
  static member is replaced). In between, while a rebalance is under way, the generation being
  formed is deliberately not persisted, and a restart goes back to the last written one. Each
  example also ends by letting the clock run until every group has settled, so groups are
  compared at least once per example.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gregor.coordinator.group.context import GroupConfig
from gregor.coordinator.group.model import GroupState
from gregor.coordinator.group.shard import GroupCoordinatorShard
from gregor.protocol.errors import ErrorCode
from tests.coordinator.harness import GroupShardHarness

DAY = 24 * 3_600_000
CONFIG = GroupConfig(initial_rebalance_delay_ms=3000, offsets_retention_ms=DAY,
                     offsets_retention_check_interval_ms=600_000)
GROUPS = ["g0", "g1"]
SLOTS = 3  # member slots per group; the last one is a static member
SUBSCRIPTIONS = [[("range", b"a")], [("range", b"b")], [("roundrobin", b"x"), ("range", b"a")]]
SETTLED = (GroupState.STABLE, GroupState.EMPTY)

group = st.sampled_from(GROUPS)
slot = st.integers(0, SLOTS - 1)
partition = st.integers(0, 2)
operation = st.one_of(
    st.tuples(st.just("join"), group, slot, st.integers(0, len(SUBSCRIPTIONS) - 1)),
    st.tuples(st.just("round"), group, st.sets(slot, min_size=1), st.integers(0, len(SUBSCRIPTIONS) - 1)),
    st.tuples(st.just("sync"), group, slot),
    st.tuples(st.just("heartbeat"), group, slot),
    st.tuples(st.just("leave"), group, slot),
    st.tuples(st.just("commit"), group, slot, st.booleans(), partition, st.integers(0, 100),
              st.sampled_from([-1, -1, 60_000])),
    st.tuples(st.just("delete_offsets"), group, partition),
    st.tuples(st.just("delete_group"), group),
    st.tuples(st.just("delete_topic"), st.sampled_from(["t", "u"])),
    st.tuples(st.just("sleep"), st.sampled_from([1, 1_000, 5_001, 10_001, 30_001, 1_000, 600_001, DAY])),
)


class Members:
    """What the clients know: each slot's member id, and the last generation and leader its
    JoinGroup answered with."""

    def __init__(self) -> None:
        self.member_id: dict[tuple[str, int], str] = {}
        self.joined: dict[tuple[str, int], Any] = {}  # slot -> its JoinGroup answer (Deferred)

    def instance(self, g: str, s: int) -> str | None:
        return f"{g}-static" if s == SLOTS - 1 else None

    def generation(self, g: str, s: int) -> tuple[int, Any]:
        d = self.joined.get((g, s))
        if d is None or not d.done or d.result().error != ErrorCode.none:
            return -1, None
        return d.result().generation_id, d.result()

    def learn(self, g: str, s: int, answer: Any) -> None:
        self.joined[(g, s)] = answer
        if answer.done and answer.result().member_id:
            self.member_id[(g, s)] = answer.result().member_id


def apply(h: GroupShardHarness, members: Members, op: tuple[Any, ...]) -> None:
    kind = op[0]
    if kind == "join":
        _, g, s, sub = op
        answer = h.join(g, member_id=members.member_id.get((g, s), ""), protocols=SUBSCRIPTIONS[sub],
                        instance=members.instance(g, s), client_id=f"c{s}")
        members.learn(g, s, answer)
        if answer.done and answer.result().error == ErrorCode.member_id_required:  # a client joins again at once
            members.learn(g, s, h.join(g, member_id=answer.result().member_id, protocols=SUBSCRIPTIONS[sub],
                                       instance=members.instance(g, s), client_id=f"c{s}"))
    elif kind == "round":  # these members (re)join, then all of them sync: a cooperating group
        _, g, slots, sub = op
        for s in sorted(slots):
            apply(h, members, ("join", g, s, sub))
        for _ in range(10):  # the initial delay, extended while members keep arriving
            if all(members.joined[(g, s)].done for s in slots):
                break
            h.sleep(h.config.initial_rebalance_delay_ms + 1)
        for s in sorted(slots):
            apply(h, members, ("sync", g, s))
    elif kind == "sync":
        _, g, s = op
        generation, joined = members.generation(g, s)
        mid = members.member_id.get((g, s), "")
        assignments = {}
        if joined is not None and joined.leader == mid:
            assignments = {m["member_id"]: f"{m['member_id']}@{generation}".encode() for m in joined.members}
        h.sync(g, generation, mid, assignments, instance=members.instance(g, s))
    elif kind == "heartbeat":
        _, g, s = op
        h.heartbeat(g, members.generation(g, s)[0], members.member_id.get((g, s), ""), members.instance(g, s))
    elif kind == "leave":
        _, g, s = op
        h.leave(g, (members.member_id.get((g, s), ""), members.instance(g, s)))
    elif kind == "commit":
        _, g, s, as_member, p, offset, retention = op
        if as_member:
            h.commit(g, {("t", p): offset, ("u", p): offset}, members.generation(g, s)[0],
                     members.member_id.get((g, s), ""), instance=members.instance(g, s))
        else:  # assign mode
            h.commit(g, {("t", p): offset}, retention_ms=retention, metadata=f"m{offset}")
    elif kind == "delete_offsets":
        _, g, p = op
        h.run(h.shard.delete_offsets(g, [("t", p)]))
    elif kind == "delete_group":
        h.run(h.shard.delete_groups([op[1]]))
    elif kind == "delete_topic":
        h.run(h.shard.delete_topic_offsets(op[1]))
    elif kind == "sleep":
        h.sleep(op[1])


def committed(shard: GroupCoordinatorShard) -> dict[str, dict[tuple[str, int], Any]]:
    return {g: dict(o) for g, o in shard.offsets_mgr.offsets.items() if o}


def persisted_groups(shard: GroupCoordinatorShard) -> dict[str, tuple[Any, ...]]:
    offsets = shard.offsets_mgr.offsets
    out = {}
    for gid, g in shard.groups.items():
        if not (offsets.get(gid) or g.generation_id or g.protocol_type):
            continue  # nothing of it was ever persisted: it lives in memory only
        members = {m.member_id: (m.group_instance_id, m.client_id, m.client_host, m.session_timeout_ms,
                                 m.rebalance_timeout_ms, m.metadata_for(g.protocol_name), m.assignment)
                   for m in g.members.values()}
        empty_since = g.state_timestamp_ms if g.is_in(GroupState.EMPTY) and g.protocol_type else None
        out[gid] = (g.state.value, g.generation_id, g.protocol_type, g.protocol_name, g.leader_id, members,
                    empty_since)
    return out


def settled(shard: GroupCoordinatorShard) -> bool:
    return all(g.is_in(*SETTLED) for g in shard.groups.values())


def check(h: GroupShardHarness) -> bool:
    """Compare with a fresh load; returns whether groups were compared too."""
    fresh = h.load_fresh()
    assert committed(h.shard) == committed(fresh)
    if not settled(h.shard):
        return False
    assert persisted_groups(h.shard) == persisted_groups(fresh)
    return True


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([0, 3000]), st.lists(operation, min_size=1, max_size=40))
# found by this property in a full run: the static member waited on SyncGroup while its session
# expired; the leader never synced, the sync timeout removed it and started a rebalance, and the
# static member (its heartbeat not rescheduled) held the group in PreparingRebalance for good
@example(0, [("round", "g0", {0, 1, 2}, 0), ("leave", "g0", 0), ("round", "g0", {2}, 0), ("heartbeat", "g0", 1)])
def test_state_equals_the_state_loaded_from_the_records_written(initial_delay_ms, ops):
    h = GroupShardHarness(replace(CONFIG, initial_rebalance_delay_ms=initial_delay_ms))
    members = Members()
    for op in ops:
        apply(h, members, op)
        check(h)
    for _ in range(20):  # nobody heartbeats any more: every group settles, Empty or gone
        if settled(h.shard):
            break
        h.sleep(60_001)
    assert check(h), {g: grp.state for g, grp in h.shard.groups.items()}
