"""Which consumer group a fetch belongs to: connections bound to group members, within the counts
the coordinator's own state allows, by the evidence of the groups' commits.

A Fetch request names no group. The coordinator, though, knows every member of every consumer
group: its member id, client id, host and the partitions it owns (written to
``__consumer_offsets``, so also known right after a restart and on every broker that follows the
partition). A connection belongs to one client instance, and a client instance is at most one
member of one group. So the unit of attribution is the connection, and a binding of connections
to members is possible only if

- each member is bound to at most one open connection of this broker (a member of group G with
  client id C on host H owning partition P is one client instance: at most that many connections
  fetching P from (C, H) belong to G), and
- a connection is bound to a member with its client id and host that owns (or, during a
  rebalance, last owned) partitions the connection fetches.

Among the bindings that respect this, the groups' commits choose. A consumer starts where its
group committed and commits what it has fetched, so a commit made since a connection began
fetching a partition, beyond what it fetched, rules its group out for that connection; a commit at
exactly where its fetches reached, within them, or where they began, supports it (most to least).
Pairs are bound strongest evidence first (ties: the binding a connection already has, the member
owning every partition it fetches, then by name), then augmenting paths bind as many connections
as the counts allow. Bindings of a client id and host that could be matched in several ways are
looked at again once a second (commits are new evidence), at once when memberships or what a
connection fetches change.

What a connection fetched is kept with the connection, and a group's count is what its
connections fetched: a revised binding moves the connection's count with it, so the counts follow
the best binding known, not the first guess (``corrections`` counts the moves). A closed
connection's count is sealed to its group once the evidence decides it (usually its consumer's
last commit), or after GHOST_S; until then it is still matched, without holding its member. While
a choice stays undecidable (groups at identical offsets with identical commits) the connections
fetched the same records, and any binding gives every group its exact count.

Fetches that no member can own (assign-mode consumers, tools, a consumer whose group is not yet
known here, a connection beyond its group's members) are labelled ``NO_GROUP``; if a member that
could own them appears, they move to its group unless UNOWNED_S passed first. A long poll
answered after its connection closed reached nobody and is not counted.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from gregor.coordinator.group.api import MemberView
from gregor.protocol.consumer_protocol import decode_assignment

NO_GROUP = "__no_group__"
TopicPartition = tuple[str, int]
Bucket = tuple[str, str]  # client id, host
SlotKey = tuple[str, str]  # group, member id
CountKey = tuple[str, str, int]  # group, topic, partition

# an ambiguous client id and host is looked at again this often (new commits are new evidence)
REVISE_EVERY_S = 1.0
# a connection that fetched nothing for this long is not matched (it keeps its last binding)
IDLE_S = 30.0
# a connection no member can own this long has its count sealed (as NO_GROUP, or the group of the
# member it was bound to, which left)
UNOWNED_S = 10.0
# a member that left is kept this long for the connection bound to it
LEFT_GRACE_S = 10.0
# a closed connection whose group the evidence has not decided is sealed after this long
GHOST_S = 60.0
# commits this long after a connection closed may still be its consumer's last
CLOSE_SLACK_MS = 5000


class MembersView(Protocol):
    """What attribution reads of the coordinator (GroupCoordinatorService provides it)."""

    def membership_version(self) -> int: ...
    def consumer_members(self) -> Iterable[MemberView]: ...
    def committed_position(self, group_id: str, topic: str, partition: int) -> tuple[int, int] | None: ...


@dataclass(slots=True)
class Slot:
    """A member of a group, as attribution sees it: what it owns, and what it owned before the
    last change while it stayed a member (a rebalance clears assignments until the new one)."""

    group: str
    member_id: str
    owned: frozenset[TopicPartition]
    before: frozenset[TopicPartition] = frozenset()
    departed_at: float | None = None  # the member left: kept LEFT_GRACE_S for the connection bound to it

    @property
    def key(self) -> SlotKey:
        return (self.group, self.member_id)

    def overlap(self, partitions: Iterable[TopicPartition]) -> int:
        return sum(1 for tp in partitions if tp in self.owned or tp in self.before)


@dataclass(eq=False, slots=True)
class ConnectionTally:
    """One client connection's part: what it fetches, where each partition's fetches ended, its
    binding and what it fetched while its group was uncertain. Kept in the connection's state; the
    server calls ``connection_closed`` when the connection goes."""

    bucket: Bucket
    on_close: Callable[[ConnectionTally], None]
    fetching: tuple[TopicPartition, ...] = ()
    first: dict[TopicPartition, int] = field(default_factory=dict)  # where its fetches of each began
    since_ms: dict[TopicPartition, int] = field(default_factory=dict)  # and when (wall clock, ms)
    next: dict[TopicPartition, int] = field(default_factory=dict)  # where its last fetch of each ended
    slot: SlotKey | None = None
    left: str | None = None  # the group of the member it was bound to, which left
    # the most evidence seen for each group, per partition: (points, the offset committed)
    support: dict[str, dict[TopicPartition, tuple[int, int]]] = field(default_factory=dict)
    closed: bool = False
    closed_at: float = 0.0  # clock
    closed_ms: int = 0  # wall clock, as commit timestamps
    counts: dict[TopicPartition, list[int]] = field(default_factory=dict)  # not sealed [messages, bytes]
    last_fetch: float = 0.0
    unowned_since: float | None = None

    @property
    def group(self) -> str:
        if self.slot is not None:
            return self.slot[0]
        return self.left if self.left is not None else NO_GROUP

    def connection_closed(self) -> None:
        self.on_close(self)


@dataclass(slots=True)
class _BucketState:
    connections: list[ConnectionTally] = field(default_factory=list)
    dirty: bool = True
    ambiguous: bool = False
    checked_at: float = 0.0


class GroupAttribution:
    def __init__(self, groups: MembersView, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self._groups = groups
        self._clock = clock
        self._wall = wall
        self._built_for = -1
        self._slots: dict[Bucket, list[Slot]] = {}
        self._slot_keys: set[SlotKey] = set()
        self._departed_until = float("inf")
        self._buckets: dict[Bucket, _BucketState] = {}
        self._explained: dict[CountKey, int] = {}  # group, topic, partition -> a closed connection's end
        self.sealed: dict[CountKey, list[int]] = {}  # of closed connections and members that left
        self.corrections = 0  # bindings revised from one group to another

    # -- the fetch path ----------------------------------------------------------------------
    def connection(self, client_id: str, host: str, state: dict[object, object]) -> ConnectionTally:
        """The tally of the connection whose state is ``state``, made on its first fetch."""
        tally = state.get(GroupAttribution)
        if isinstance(tally, ConnectionTally) and tally.bucket != (client_id, host):
            self._closed(tally)  # a client that changed its client id: another client instance
            tally = None
        if not isinstance(tally, ConnectionTally):
            tally = ConnectionTally((client_id, host), self._closed)
            state[GroupAttribution] = tally
            self._bucket(tally.bucket).connections.append(tally)
        return tally

    def attribute(self, tally: ConnectionTally, positions: Iterable[tuple[str, int, int]]) -> str:
        """A fetch of ``positions`` ((topic, partition, offset)) arrives on the connection: its
        group (NO_GROUP when no member can own it)."""
        now = self._clock()
        tally.last_fetch = now
        partitions = tuple((t, p) for t, p, _ in positions)
        bucket = self._bucket(tally.bucket)
        if partitions != tally.fetching:
            tally.fetching = partitions
            bucket.dirty = True
        for t, p, offset in positions:
            tally.next[(t, p)] = offset  # where its consumer is now (it may have moved to a commit)
            if (t, p) not in tally.first:
                tally.first[(t, p)] = offset
                tally.since_ms[(t, p)] = int(self._wall() * 1000)
                bucket.dirty = True
        self._seal_if_unowned(tally, now)
        v = self._groups.membership_version()
        if v != self._built_for or now >= self._departed_until:
            self._rebuild(v)
        if bucket.dirty or (bucket.ambiguous and now - bucket.checked_at >= REVISE_EVERY_S):
            self._match(tally.bucket, bucket, now)
        return tally.group

    def account(self, tally: ConnectionTally, topic: str, partition: int, offset: int, messages: int,
                nbytes: int) -> None:
        """The fetch of ``topic``-``partition`` from ``offset`` served ``messages``/``nbytes``."""
        if tally.closed:
            return  # a long poll answered after its connection closed: nobody received it
        tp = (topic, partition)
        tally.next[tp] = offset + messages
        if messages or nbytes:
            c = tally.counts.get(tp)
            if c is None:
                tally.counts[tp] = [messages, nbytes]
            else:
                c[0] += messages
                c[1] += nbytes

    def consumed(self) -> dict[CountKey, list[int]]:
        """Messages and bytes fetched per (group, topic, partition): the sealed counts and the open
        connections' by their current binding."""
        now = self._clock()
        for key, bucket in list(self._buckets.items()):
            if bucket.ambiguous and now - bucket.checked_at >= REVISE_EVERY_S:
                self._match(key, bucket, now)  # the evidence may have grown while nobody fetched
        out = {k: list(v) for k, v in self.sealed.items()}
        for bucket in self._buckets.values():
            for tally in bucket.connections:
                group = tally.group
                for (t, p), (m, b) in tally.counts.items():
                    c = out.setdefault((group, t, p), [0, 0])
                    c[0] += m
                    c[1] += b
        return out

    # -- binding -----------------------------------------------------------------------------
    def _bucket(self, key: Bucket) -> _BucketState:
        b = self._buckets.get(key)
        if b is None:
            b = self._buckets[key] = _BucketState()
        return b

    def _closed(self, tally: ConnectionTally) -> None:
        """The connection closed. Its count is final once its group is: at once where the
        evidence decides it, otherwise it stays in the matching (not holding its member, whose
        next connection needs it) until a commit decides it or GHOST_S pass."""
        tally.closed = True
        tally.closed_at = self._clock()
        tally.closed_ms = int(self._wall() * 1000)
        bucket = self._buckets.get(tally.bucket)
        if bucket is None or tally not in bucket.connections:
            self._finish(tally)
            return
        self._match(tally.bucket, bucket, tally.closed_at)

    def _finish(self, tally: ConnectionTally) -> None:
        """Seal a closed connection's count to its group; the group's commits up to where it
        fetched are its evidence, not another connection's."""
        if tally.slot is not None:
            for (t, p), end in tally.next.items():
                self._explained[(tally.slot[0], t, p)] = end
        self._seal(tally, tally.group)
        bucket = self._buckets.get(tally.bucket)
        if bucket is None:
            return
        bucket.connections = [c for c in bucket.connections if c is not tally]
        bucket.dirty = True
        if not bucket.connections:
            del self._buckets[tally.bucket]

    def _seal_if_unowned(self, tally: ConnectionTally, now: float) -> None:
        """A connection no member here could own for UNOWNED_S (an assign-mode consumer, a tool)
        keeps what it counted in the group it had."""
        if tally.unowned_since is not None and now - tally.unowned_since >= UNOWNED_S and tally.counts:
            self._seal(tally, tally.group)

    def _seal(self, tally: ConnectionTally, group: str) -> None:
        for (t, p), (m, b) in tally.counts.items():
            c = self.sealed.get((group, t, p))
            if c is None:
                self.sealed[(group, t, p)] = [m, b]
            else:
                c[0] += m
                c[1] += b
        tally.counts.clear()

    def _rebuild(self, version: int) -> None:
        now = self._clock()
        previous = {s.key: (bucket, s) for bucket, slots in self._slots.items() for s in slots}
        slots: dict[Bucket, list[Slot]] = {}
        for m in self._groups.consumer_members():
            owned = frozenset((t, p) for t, ps in decode_assignment(m.assignment) for p in ps)
            key = (m.group_id, m.member_id)
            old = previous.pop(key, (None, None))[1]
            # a member that stays keeps what it owned before the last change, until the change
            # after (a rebalance clears assignments until the leader's new one arrives)
            before = (old.owned | old.before if not owned else old.owned) if old is not None else frozenset()
            slots.setdefault((m.client_id, m.client_host), []).append(Slot(m.group_id, m.member_id, owned,
                                                                           before - owned))
        # a member that left stays a while for the connection bound to it (a consumer leaves its
        # group, then closes its connections): that connection's count is still its group's
        self._departed_until = float("inf")
        for bucket, old in previous.values():
            departed = old.departed_at if old.departed_at is not None else now
            if now - departed < LEFT_GRACE_S:
                slots.setdefault(bucket, []).append(Slot(old.group, old.member_id, old.owned, old.before, departed))
                self._departed_until = min(self._departed_until, departed + LEFT_GRACE_S)
        self._slots = slots
        self._slot_keys = {s.key for ss in slots.values() for s in ss}
        self._built_for = version
        for bucket_state in self._buckets.values():
            bucket_state.dirty = True

    def _match(self, key: Bucket, bucket: _BucketState, now: float) -> None:
        """Bind the bucket's fetching connections to its members, each member to one connection:
        the pairs with the strongest evidence first, then augmenting paths so that as many
        connections as possible are bound, first where no commit contradicts the binding."""
        bucket.dirty = False
        bucket.checked_at = now
        slots = self._slots.get(key, [])
        active = [c for c in bucket.connections if not c.closed and c.fetching and now - c.last_fetch < IDLE_S]
        committed: dict[tuple[str, str, int], tuple[int, int] | None] = {}
        edges: list[tuple[tuple[object, ...], int, Slot]] = []
        candidates: dict[int, list[tuple[bool, Slot]]] = {i: [] for i in range(len(active))}
        for i, conn in enumerate(active):
            for s in slots:
                overlap = s.overlap(conn.fetching)
                if not overlap or (s.departed_at is not None and s.key != conn.slot):
                    continue
                contradicted, support, memory = self._evidence(conn, s.group, committed)
                owns_all = all(tp in s.owned for tp in conn.fetching)  # without the rebalance's leeway
                edges.append(((contradicted, -support, -memory, not owns_all, overlap < len(conn.fetching),
                               s.key != conn.slot, -overlap, s.group, s.member_id), i, s))
        edges.sort(key=lambda e: e[0])
        for rank, i, s in edges:
            candidates[i].append((rank[0] == 0, s))
        owner: dict[SlotKey, int] = {}
        bound: dict[int, SlotKey] = {}
        for rank, i, s in edges:  # the strongest evidence first; ties: the binding a connection has
            if rank[0] == 0 and i not in bound and s.key not in owner:
                owner[s.key], bound[i] = i, s.key

        def augment(i: int, seen: set[SlotKey], consistent_only: bool) -> bool:
            for consistent, s in candidates[i]:
                if s.key in seen or (consistent_only and not consistent):
                    continue
                seen.add(s.key)
                j = owner.get(s.key)
                if j is None or augment(j, seen, consistent_only):
                    owner[s.key], bound[i] = i, s.key
                    return True
            return False

        for consistent_only in (True, False):
            for i in range(len(active)):
                if i not in bound:
                    augment(i, set(), consistent_only)
        groups = [{s.group for _, s in candidates[i]} for i in range(len(active))]
        ghosts = [c for c in bucket.connections if c.closed]
        bucket.ambiguous = len(active) > len(slots) or any(len(g) > 1 for g in groups) or bool(ghosts)
        for i, conn in enumerate(active):
            self._rebind(conn, bound.get(i), groups[i], now)
        if ghosts:
            self._match_closed(ghosts, slots, committed, now)

    def _match_closed(self, ghosts: list[ConnectionTally], slots: list[Slot],
                      committed: dict[tuple[str, str, int], tuple[int, int] | None], now: float) -> None:
        """Closed connections whose group is not decided: each to the member the evidence up to
        its close (and CLOSE_SLACK_MS after: its last commit) points to, one closed connection per
        member; sealed when one group has more support than every other, or after GHOST_S."""
        edges: list[tuple[tuple[int, int, bool, int, str, str], int, Slot]] = []
        for i, conn in enumerate(ghosts):
            for s in slots:
                overlap = s.overlap(conn.first)
                if not overlap or (s.departed_at is not None and s.key != conn.slot):
                    continue
                contradicted, _, memory = self._evidence(conn, s.group, committed,
                                                         until_ms=conn.closed_ms + CLOSE_SLACK_MS)
                edges.append(((contradicted, -memory, s.key != conn.slot, -overlap, s.group, s.member_id), i, s))
        edges.sort(key=lambda e: e[0])
        taken: set[SlotKey] = set()
        chosen: dict[int, Slot] = {}
        best: dict[tuple[int, str], int] = {}
        for (contradicted, minus_memory, *_), i, s in edges:
            if contradicted:
                continue
            best[(i, s.group)] = max(best.get((i, s.group), 0), -minus_memory)
            if i not in chosen and s.key not in taken:
                chosen[i] = s
                taken.add(s.key)
        for i, conn in enumerate(ghosts):
            pick = chosen.get(i)
            if pick is not None and pick.key != conn.slot:
                if conn.slot is not None and conn.slot[0] != pick.group and conn.counts:
                    self.corrections += 1
                conn.slot = pick.key
            mine = best.get((i, pick.group), 0) if pick is not None else 0
            others = max((v for (j, g), v in best.items() if j == i and (pick is None or g != pick.group)),
                         default=-1)
            if pick is None or mine > others or now - conn.closed_at >= GHOST_S:
                self._finish(conn)

    def _evidence(self, conn: ConnectionTally, group: str, cache: dict[tuple[str, str, int], tuple[int, int] | None],
                  until_ms: int | None = None) -> tuple[int, int, int]:
        """What the group's commits say of the connection being its consumer: (contradicted,
        support now, support remembered). A consumer commits what it has fetched and starts where
        its group committed, so a commit made since the connection began fetching a partition it
        still fetches that is beyond what it fetched contradicts it; one made since then at
        exactly where its fetches reached supports it most (3 points), one within what it fetched
        less (2), one where its fetches began least (1: several groups may be there). The most
        seen for each partition is remembered, so evidence outlives the commits after it (a
        partition handed to another member on a rebalance and committed further by it); what
        the commits say now comes first. A commit at where a closed connection of the group
        stopped is that connection's evidence, not this one's."""
        contradicted = support = memory = 0
        remembered = conn.support.setdefault(group, {})
        explained = self._explained
        for tp, first in conn.first.items():
            k = (group, tp[0], tp[1])
            if k not in cache:
                cache[k] = self._groups.committed_position(group, tp[0], tp[1])
            c = cache[k]
            if c is not None and until_ms is not None and c[1] > until_ms:
                c = None  # committed after the connection closed: another connection's
            points = 0
            if c is not None:
                offset, at_ms = c
                end = conn.next.get(tp, first)
                if explained.get(k) == offset:
                    pass  # a closed connection of the group fetched up to there: its evidence
                elif at_ms >= conn.since_ms.get(tp, 0):
                    if offset > end:
                        if tp in conn.fetching:
                            contradicted += 1
                    elif offset >= first:
                        points = 3 if offset == end and offset > first else 2 if offset > first else 1
                elif offset == first and tp in conn.fetching:
                    points = 1
                if points and points >= remembered.get(tp, (0, -1))[0]:
                    remembered[tp] = (points, offset)
            support += points
            old = remembered.get(tp)
            if old is not None and explained.get(k) != old[1]:
                points = max(points, old[0])
            memory += points
        return contradicted, support, memory

    def _rebind(self, conn: ConnectionTally, slot: SlotKey | None, groups: set[str], now: float) -> None:
        old = conn.slot
        if slot != old:
            if old is not None and old not in self._slot_keys and slot is None:
                conn.left = old[0]  # its member left and nothing else here can own it: still its group's
            elif conn.counts and slot is not None and conn.group not in (slot[0], NO_GROUP):
                self.corrections += 1
            if slot is not None:
                conn.left = None
            conn.slot = slot
        if slot is not None or groups:
            conn.unowned_since = None
        elif conn.unowned_since is None:
            conn.unowned_since = now
        else:
            self._seal_if_unowned(conn, now)
