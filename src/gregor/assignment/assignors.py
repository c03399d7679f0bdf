"""Server-side partition assignors of the consumer group protocol (KIP-848).

The group coordinator computes every member's target assignment itself. These assignors are pure
functions of a :class:`GroupSpec` (members, their subscriptions and current target assignments, the
partition counts, optional replica racks, operator pins and exclusions) to a new target assignment.
They never touch the network or the coordinator's state.

Rules every assignor keeps:

- a partition goes to at most one member, and (unless pinned) only to a member subscribed to its topic;
- every partition of a subscribed topic that is neither excluded nor pinned is assigned when at least
  one member subscribes to its topic;
- a pinned (``fixed``) partition goes to exactly its member and counts toward that member's share;
  pins naming a member outside ``members``, a topic outside ``partitions`` or a partition out of range
  are ignored (the caller validates them), as are pins of excluded partitions; a partition pinned to
  two members goes to the first member id in sort order;
- excluded partitions are never assigned;
- the result names every member of ``members`` (an empty assignment where it gets nothing), and the
  same input gives the same output in any process (no iteration over string hash order).

``uniform`` (the default of Kafka's new protocol) balances first and keeps partitions second:

- homogeneous subscriptions: member loads (pins included) differ by at most one, except a member whose
  pins alone exceed its share. Each member keeps its current partitions up to its quota, and the quotas
  that get the extra partition go first to members already holding that many, so a join moves only the
  partitions the newcomer needs and a leave moves only the leaver's partitions.
- heterogeneous subscriptions: current partitions are kept, unassigned ones go to the least-loaded
  subscribers topic by topic, then partitions are moved along chains of members (A gives a partition of
  topic x to B, B gives one of y to C, ...) until no chain can lower a load that is two or more above
  another's. That is as balanced as the subscriptions allow (no move sequence lowers the sum of squared
  loads), where Kafka moves partitions only directly between two subscribers of one topic.
- racks (``partition_racks`` and member racks): partitions that move or are new go preferably to a
  member whose rack holds one of their replicas, and a member over its quota gives up mismatched
  partitions first. Rack matching never costs a move that balance does not require (Kafka 3.7 moved
  partitions to match racks; Kafka 3.8+ ignores racks in its server assignors).

``range`` (Kafka 4.x server-side range): per topic, the partitions are cut in ranges in member order,
static members first by instance id and then the others by member id, the first ranges one larger
when the division is not exact. Topics with the same subscribers and partition count get identical
ranges (co-partitioning). It is sticky the way Kafka's is: through the order, which static members keep
across restarts; current assignments are not consulted.
"""

from __future__ import annotations

import heapq
import uuid
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

TopicId = uuid.UUID
Assignment = dict[TopicId, frozenset[int]]

_EMPTY: frozenset[int] = frozenset()


@dataclass(frozen=True)
class MemberSpec:
    member_id: str
    instance_id: str | None
    rack: str | None
    subscribed: frozenset[TopicId]  # already resolved (topic names and regex) to existing topic ids
    current: Assignment  # the member's current target assignment (stickiness)


@dataclass(frozen=True)
class GroupSpec:
    members: Mapping[str, MemberSpec]  # member_id -> spec (only members that may receive partitions)
    partitions: Mapping[TopicId, int]  # partition count of every subscribed topic
    partition_racks: Mapping[TopicId, Sequence[frozenset[str]]] | None = None  # racks of each partition's replicas
    fixed: Mapping[str, Assignment] = field(default_factory=dict)  # operator pins, counted toward the share
    excluded: frozenset[tuple[TopicId, int]] = frozenset()  # partitions that must stay unassigned


class Assignor(Protocol):
    name: str

    def assign(self, spec: GroupSpec) -> dict[str, Assignment]: ...


# ---------------------------------------------------------------------------------------------------
# shared preparation


class _Prep:
    """Member order, validated pins and the partitions no assignor may hand out (excluded or pinned)."""

    __slots__ = ("spec", "mids", "counts", "pins", "pin_n", "pinned", "blocked")

    def __init__(self, spec: GroupSpec, mids: list[str]) -> None:
        self.spec = spec
        self.mids = mids
        counts = self.counts = spec.partitions
        n = len(mids)
        self.pins: list[Assignment | None] = [None] * n
        self.pin_n = [0] * n
        self.pinned: dict[TopicId, set[int]] = {}  # topic -> partitions pinned to some member
        self.blocked: dict[TopicId, set[int]] = {}  # topic -> excluded or pinned partitions
        excluded: dict[TopicId, set[int]] = {}
        for t, p in spec.excluded:
            cnt = counts.get(t)
            if cnt is not None and 0 <= p < cnt:
                excluded.setdefault(t, set()).add(p)
        if spec.fixed:
            members = spec.members
            for i, mid in enumerate(mids):
                f = spec.fixed.get(mid)
                if not f or mid not in members:
                    continue
                mine: Assignment = {}
                for t in sorted(f):
                    cnt = counts.get(t)
                    if cnt is None:
                        continue
                    taken = self.pinned.setdefault(t, set())
                    ex = excluded.get(t, _EMPTY)
                    ps = frozenset(p for p in f[t] if 0 <= p < cnt and p not in ex and p not in taken)
                    if ps:
                        taken |= ps
                        mine[t] = ps
                        self.pin_n[i] += len(ps)
                if mine:
                    self.pins[i] = mine
        for t, ex_t in excluded.items():
            self.blocked[t] = set(ex_t)
        for t, pinned_t in self.pinned.items():
            if pinned_t:
                self.blocked.setdefault(t, set()).update(pinned_t)

    def claim(self, allowed: Sequence[frozenset[TopicId]], everyone: frozenset[TopicId] | None = None
              ) -> tuple[list[Assignment], list[int], dict[TopicId, set[int]]]:
        """The current partitions each member may keep before quotas: of a topic it is allowed
        (subscribed; ``everyone`` when all members share one subscription), in range, neither excluded
        nor pinned, and not claimed by an earlier member."""
        counts, blocked, members = self.counts, self.blocked, self.spec.members
        kept: list[Assignment] = []
        kept_n: list[int] = []
        # one lookup per (member, topic): [count, blocked partitions, claims (member, partitions)]
        info: dict[TopicId, tuple[int, set[int] | None, list[tuple[int, frozenset[int]]]]] = {}
        for topics in ((everyone,) if everyone is not None else allowed):
            for t in topics:
                if t not in info and t in counts:
                    info[t] = (counts[t], blocked.get(t), [])
        for i, mid in enumerate(self.mids):
            cur = members[mid].current
            if not cur:
                kept.append({})
                kept_n.append(0)
                continue
            ok = allowed[i] if everyone is None else None
            good: list[tuple[TopicId, frozenset[int]]] = []
            changed = False
            k = 0
            for t, ps in cur.items():
                rec = info.get(t)
                if rec is None or not ps or (ok is not None and t not in ok):
                    changed = True
                    continue
                if ps.__class__ is not frozenset:
                    ps = frozenset(ps)
                    changed = True
                b = rec[1]
                if b and not b.isdisjoint(ps):
                    ps = ps.difference(b)
                    changed = True
                    if not ps:
                        continue
                rec[2].append((i, ps))
                good.append((t, ps))
                k += len(ps)
            # a copy of an unchanged dict reuses the stored hashes of its topic ids
            kept.append(dict(good) if changed else dict(cur))
            kept_n.append(k)
        # Per topic, one union of every claim: when its size is the sum of the claims' sizes and its
        # bounds are in range (as for any assignment this module made), nothing else is to be done.
        # Otherwise the claims are redone one by one in member order: out-of-range partitions are
        # dropped and a partition claimed twice stays with the first member.
        claimed: dict[TopicId, set[int]] = {}
        for t, (cnt, _, claims) in info.items():
            if not claims:
                continue
            if len(claims) == 1:
                u = set(claims[0][1])
            else:
                u = set().union(*[ps for _, ps in claims])
            if len(u) == sum(len(ps) for _, ps in claims) and min(u) >= 0 and max(u) < cnt:
                claimed[t] = u
                continue
            c: set[int] = set()
            for i, ps in claims:
                ok_ps = frozenset(p for p in ps if 0 <= p < cnt and p not in c)
                c.update(ok_ps)
                if len(ok_ps) != len(ps):
                    kept_n[i] -= len(ps) - len(ok_ps)
                    if ok_ps:
                        kept[i][t] = ok_ps
                    else:
                        del kept[i][t]
            claimed[t] = c
        return kept, kept_n, claimed

    def unassigned(self, t: TopicId, claimed: set[int] | None, shed: list[int] | None) -> Sequence[int]:
        """Ascending partitions of ``t`` that nobody keeps: neither blocked nor claimed, or shed."""
        cnt = self.counts[t]
        b = self.blocked.get(t)
        nb = len(b) if b else 0
        nc = len(claimed) if claimed else 0
        if nb + nc >= cnt:
            return sorted(shed) if shed else ()
        if not nb and not nc:
            return range(cnt)
        s = set(range(cnt))
        if claimed:
            s -= claimed
        if b:
            s -= b
        if shed:
            s.update(shed)
        return sorted(s)

    def result(self, free: list[Assignment]) -> dict[str, Assignment]:
        out: dict[str, Assignment] = {}
        for i, mid in enumerate(self.mids):
            d = free[i]
            pins = self.pins[i]
            if pins:
                for t, ps in pins.items():
                    old = d.get(t)
                    d[t] = old | ps if old else ps
            out[mid] = d
        return out


class _Racks:
    """Replica racks of partitions against member racks."""

    __slots__ = ("racks", "member_rack", "_order")

    def __init__(self, racks: Mapping[TopicId, Sequence[frozenset[str]]], member_rack: list[str | None]) -> None:
        self.racks = racks
        self.member_rack = member_rack
        self._order: dict[frozenset[str], tuple[str, ...]] = {}

    @staticmethod
    def make(spec: GroupSpec, mids: list[str]) -> _Racks | None:
        if not spec.partition_racks:
            return None
        member_rack = [spec.members[m].rack for m in mids]
        if not any(member_rack):
            return None
        return _Racks(spec.partition_racks, member_rack)

    def of(self, t: TopicId, p: int) -> frozenset[str] | None:
        rs = self.racks.get(t)
        if rs is None or p >= len(rs):
            return None
        return rs[p]

    def matches(self, i: int, t: TopicId, p: int) -> bool:
        r = self.member_rack[i]
        if r is None:
            return False
        rs = self.of(t, p)
        return rs is not None and r in rs

    def order(self, rs: frozenset[str]) -> tuple[str, ...]:
        o = self._order.get(rs)
        if o is None:
            o = self._order[rs] = tuple(sorted(rs))
        return o


def _trim(d: Assignment, keep: int, i: int, racks: _Racks | None) -> tuple[Assignment, list[tuple[TopicId, int]]]:
    """Keep ``keep`` of a member's partitions: topics in id order, lowest partitions first, rack-matched
    partitions before the others when racks are known. Returns the kept assignment and the rest."""
    shed: list[tuple[TopicId, int]] = []
    if racks is not None:
        flat = sorted((not racks.matches(i, t, p), t, p) for t, ps in d.items() for p in ps)
        out_l: dict[TopicId, list[int]] = {}
        for _, t, p in flat[:keep]:
            out_l.setdefault(t, []).append(p)
        shed = [(t, p) for _, t, p in flat[keep:]]
        return {t: frozenset(ps) for t, ps in out_l.items()}, shed
    out: Assignment = {}
    for t in sorted(d):
        ps = d[t]
        if len(ps) <= keep:
            out[t] = ps
            keep -= len(ps)
        elif keep:
            ordered = sorted(ps)
            out[t] = frozenset(ordered[:keep])
            shed.extend((t, p) for p in ordered[keep:])
            keep = 0
        else:
            shed.extend((t, p) for p in ps)
    return out, shed


def _add(d: Assignment, t: TopicId, ps: frozenset[int]) -> None:
    old = d.get(t)
    d[t] = old | ps if old else ps


def _fill(free: list[Assignment], needs: list[list[int]], pool: list[tuple[TopicId, Sequence[int]]],
          racks: _Racks | None) -> None:
    """Hand the partitions of ``pool`` (in order) to the members of ``needs`` ([member, count] in
    order, counts summing to the pool's size). Without racks each member gets the next contiguous
    slice; with racks, a partition goes first to a member in one of its replicas' racks (round robin
    within a rack), and the partitions left over are sliced as without racks."""
    if racks is not None:
        pool, needs = _fill_racks(free, needs, pool, racks)
    if not needs:
        return
    ti = 0
    pos = 0
    t, seq = pool[0]
    size = len(seq)
    for i, need in needs:
        d = free[i]
        while need > 0:
            take = size - pos if need > size - pos else need
            ps = frozenset(seq[pos:pos + take])
            old = d.get(t) if d else None
            d[t] = old | ps if old else ps
            pos += take
            need -= take
            if pos == size:
                ti += 1
                pos = 0
                if ti < len(pool):
                    t, seq = pool[ti]
                    size = len(seq)


def _fill_racks(free: list[Assignment], needs: list[list[int]], pool: list[tuple[TopicId, Sequence[int]]],
                racks: _Racks) -> tuple[list[tuple[TopicId, Sequence[int]]], list[list[int]]]:
    queues: dict[str, deque[list[int]]] = {}
    for entry in needs:
        r = racks.member_rack[entry[0]]
        if r is not None and entry[1] > 0:
            queues.setdefault(r, deque()).append(entry)
    if not queues:
        return pool, needs
    got: dict[int, dict[TopicId, list[int]]] = {}
    left: list[tuple[TopicId, Sequence[int]]] = []
    for t, seq in pool:
        prs = racks.racks.get(t)
        rest: list[int] = []
        for p in seq:
            rs = prs[p] if prs is not None and p < len(prs) else None
            if rs:
                for r in racks.order(rs) if len(rs) > 1 else rs:
                    q = queues.get(r)
                    if q:
                        entry = q.popleft()
                        entry[1] -= 1
                        if entry[1]:
                            q.append(entry)
                        got.setdefault(entry[0], {}).setdefault(t, []).append(p)
                        break
                else:
                    rest.append(p)
            else:
                rest.append(p)
        if rest:
            left.append((t, rest))
    for i, per_topic in got.items():
        d = free[i]
        for t, ps in per_topic.items():
            _add(d, t, frozenset(ps))
    return left, [e for e in needs if e[1] > 0]


def _water_level(floors: list[int], total: int) -> int:
    """The largest level L with sum(max(f, L)) <= total."""
    lo, hi = 0, total
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if sum(f if f > mid else mid for f in floors) <= total:
            lo = mid
        else:
            hi = mid - 1
    return lo


# ---------------------------------------------------------------------------------------------------
# uniform


class UniformAssignor:
    name = "uniform"

    def assign(self, spec: GroupSpec) -> dict[str, Assignment]:
        if not spec.members:
            return {}
        mids = sorted(spec.members)
        members = spec.members
        first = members[mids[0]].subscribed
        if all(members[m].subscribed == first for m in mids):
            return _uniform_homogeneous(spec, mids, first)
        return _uniform_heterogeneous(spec, mids)


def _uniform_homogeneous(spec: GroupSpec, mids: list[str], subscribed: frozenset[TopicId]) -> dict[str, Assignment]:
    prep = _Prep(spec, mids)
    counts, blocked = prep.counts, prep.blocked
    n = len(mids)
    topics = sorted(t for t in subscribed if t in counts)
    kept, kept_n, claimed = prep.claim([subscribed] * n, subscribed)
    free_total = 0
    for t in topics:
        b = blocked.get(t)
        free_total += counts[t] - (len(b) if b else 0)
    pin_n = prep.pin_n
    total = free_total + sum(pin_n)
    # quotas (pins included): level L for everyone, L + 1 for r members, pins above L stay as they are
    if any(pin_n):
        level = _water_level(pin_n, total)
        quota = [f if f > level else level for f in pin_n]
        extra = total - sum(quota)
        at_level = [i for i in range(n) if pin_n[i] <= level]
    else:
        level, extra = divmod(total, n)
        quota = [level] * n
        at_level = list(range(n))
    if extra:
        # the extra partition goes first to members that already hold level + 1: one move saved each
        above = [i for i in at_level if pin_n[i] + kept_n[i] > level]
        chosen = above[:extra]
        if len(chosen) < extra:
            taken = set(chosen)
            chosen += [i for i in at_level if i not in taken][:extra - len(chosen)]
        for i in chosen:
            quota[i] += 1
    racks = _Racks.make(spec, mids)
    shed: dict[TopicId, list[int]] = {}
    needs: list[list[int]] = []
    for i in range(n):
        cap = quota[i] - pin_n[i]
        k = kept_n[i]
        if k > cap:
            kept[i], gone = _trim(kept[i], cap, i, racks)
            for t, p in gone:
                shed.setdefault(t, []).append(p)
        elif k < cap:
            needs.append([i, cap - k])
    if needs:
        pool: list[tuple[TopicId, Sequence[int]]] = []
        for t in topics:
            seq = prep.unassigned(t, claimed.get(t), shed.get(t))
            if seq:
                pool.append((t, seq))
        _fill(kept, needs, pool, racks)
    return prep.result(kept)


def _uniform_heterogeneous(spec: GroupSpec, mids: list[str]) -> dict[str, Assignment]:
    prep = _Prep(spec, mids)
    counts = prep.counts
    members = spec.members
    n = len(mids)
    subs = [members[m].subscribed for m in mids]
    topic_subs: dict[TopicId, list[int]] = {}
    for i, s in enumerate(subs):
        for t in s:
            if t in counts:
                topic_subs.setdefault(t, []).append(i)
    kept, kept_n, claimed = prep.claim(subs)
    load = [prep.pin_n[i] + kept_n[i] for i in range(n)]
    racks = _Racks.make(spec, mids)

    # 1. unassigned partitions to the least-loaded subscribers, topics with the most partitions per
    #    subscriber first (their subscribers have the least choice)
    def topic_order(t: TopicId) -> tuple[float, int, TopicId]:
        return (-counts[t] / len(topic_subs[t]), len(topic_subs[t]), t)

    for t in sorted(topic_subs, key=topic_order):
        seq = prep.unassigned(t, claimed.get(t), None)
        if not seq:
            continue
        who = topic_subs[t]
        got = _level_up(who, load, len(seq))
        needs = [[i, k] for i, k in zip(who, got, strict=True) if k]
        for i, k in needs:
            load[i] += k
        _fill(kept, needs, [(t, seq)], racks)

    # 2. move partitions along chains of members until no chain lowers a load two above another
    _balance(kept, load, topic_subs, n)
    return prep.result(kept)


def _level_up(who: list[int], load: list[int], k: int) -> list[int]:
    """How many of ``k`` new partitions each of ``who`` gets, raising the lowest loads first (ties to
    the earlier member)."""
    order = sorted(range(len(who)), key=lambda j: (load[who[j]], j))
    loads = [load[who[j]] for j in order]
    m = len(order)
    level = loads[0]
    j = 1
    while True:
        while j < m and loads[j] <= level:
            j += 1
        nxt = loads[j] if j < m else None
        if nxt is None or k < j * (nxt - level):
            step, rem = divmod(k, j)
            level += step
            break
        k -= j * (nxt - level)
        level = nxt
    got = [0] * m
    extras = sorted(order[:j])[:rem]
    for x in range(j):
        got[order[x]] = level - loads[x]
    for jj in extras:
        got[jj] += 1
    return got


def _balance(free: list[Assignment], load: list[int], topic_subs: dict[TopicId, list[int]], n: int) -> None:
    """Moves movable partitions (not pinned) from the most loaded member along a shortest chain
    (breadth first over 'member v holds a partition of a topic that member u subscribes to') to a member
    at least two below it; a most loaded member from which no chain leads to such a member is final,
    with every member its chains reach."""
    active = [False] * n
    for ts in topic_subs.values():
        if len(ts) > 1:
            for i in ts:
                active[i] = True
    movable: list[dict[TopicId, list[int]]] = [{} for _ in range(n)]  # lists made when first moved from
    shared_topics = sorted(t for t, ts in topic_subs.items() if len(ts) > 1)
    rank = {t: j for j, t in enumerate(shared_topics)}
    heap = [(-load[i], i) for i in range(n) if active[i]]
    # the mean load of the members still balanced: a move takes a member no further than it, so that a
    # partition moved once does not have to move again
    active_load = sum(load[i] for i in range(n) if active[i])
    active_n = len(heap)
    heapq.heapify(heap)
    while heap:
        neg, s = heapq.heappop(heap)
        if not active[s] or -neg != load[s]:
            continue
        top = load[s]
        parent: dict[int, tuple[int, TopicId]] = {}
        seen = {s}
        queue = [s]
        unexpanded = set(shared_topics)  # a topic's subscribers are enqueued once per search
        found = -1
        qi = 0
        while qi < len(queue) and found < 0 and unexpanded:
            v = queue[qi]
            qi += 1
            fv = free[v]
            if not fv:
                continue
            mine = [t for t in fv if t in unexpanded]
            if not mine:
                continue
            if len(mine) > 1:
                mine.sort(key=rank.__getitem__)  # topic id order
            unexpanded.difference_update(mine)
            for t in mine:
                for u in topic_subs[t]:
                    if u in seen or not active[u]:
                        continue
                    seen.add(u)
                    parent[u] = (v, t)
                    if load[u] <= top - 2:
                        found = u
                        break
                    queue.append(u)
                if found >= 0:
                    break
        if found < 0:
            for v in queue:
                active[v] = False
                active_load -= load[v]
            active_n -= len(queue)
            continue
        path: list[tuple[int, TopicId, int]] = []  # (giver, topic, receiver), receiver end first
        u = found
        while u != s:
            v, t = parent[u]
            path.append((v, t, u))
            u = v
        low = load[found]
        floor_mean = active_load // active_n
        ceil_mean = -(-active_load // active_n)
        amount = max(1, min((top - low) // 2, top - floor_mean, ceil_mean - low))
        for v, t, _ in path:
            amount = min(amount, len(free[v][t]))
        for v, t, u in path:
            lst = movable[v].get(t)
            if lst is None:
                lst = movable[v][t] = sorted(free[v][t])
            given = lst[len(lst) - amount:]
            del lst[len(lst) - amount:]
            free[v][t] = frozenset(lst) if lst else _EMPTY
            if not lst:
                del free[v][t]
                del movable[v][t]
            _add(free[u], t, frozenset(given))
            mu = movable[u].get(t)
            if mu is not None:
                mu.extend(given)
        load[s] -= amount
        load[found] += amount
        heapq.heappush(heap, (-load[s], s))
        heapq.heappush(heap, (-load[found], found))


# ---------------------------------------------------------------------------------------------------
# range


class RangeAssignor:
    name = "range"

    def assign(self, spec: GroupSpec) -> dict[str, Assignment]:
        if not spec.members:
            return {}
        members = spec.members
        mids = sorted(members)
        prep = _Prep(spec, mids)
        counts, blocked, pinned = prep.counts, prep.blocked, prep.pinned
        index = {m: i for i, m in enumerate(mids)}
        static = sorted((members[m].instance_id, m) for m in mids if members[m].instance_id is not None)
        order = [index[m] for _, m in static] + [index[m] for m in mids if members[m].instance_id is None]
        first = members[mids[0]].subscribed
        homogeneous = all(members[m].subscribed == first for m in mids)
        topic_subs: dict[TopicId, list[int]] = {}
        if homogeneous:
            for t in first:
                if t in counts:
                    topic_subs[t] = order
        else:
            for i in order:
                for t in members[mids[i]].subscribed:
                    if t in counts:
                        topic_subs.setdefault(t, []).append(i)
        free: list[Assignment] = [{} for _ in mids]
        # Topics without pins or exclusions that share subscribers and partition count are cut the
        # same way: their ranges are made once and given to each member in one dict.fromkeys (which
        # reuses the stored hashes of the topic ids instead of hashing each again).
        alike: dict[tuple[int, tuple[int, ...]], dict[TopicId, None]] = {}
        for t in sorted(topic_subs):
            who = topic_subs[t]
            if t not in blocked:
                key = (counts[t], () if homogeneous else tuple(who))
                alike.setdefault(key, {})[t] = None
                continue
            floors = [0] * len(who)
            if t in pinned:
                for j, i in enumerate(who):
                    pins = prep.pins[i]
                    if pins and t in pins:
                        floors[j] = len(pins[t])
            for i, ps in zip(who, _ranges(prep.unassigned(t, None, None), floors), strict=True):
                if ps:
                    free[i][t] = ps
        for (cnt, _), topics in alike.items():
            who = topic_subs[next(iter(topics))]
            for i, ps in zip(who, _ranges(range(cnt), [0] * len(who)), strict=True):
                if ps:
                    d = free[i]
                    if d:
                        d.update(dict.fromkeys(topics, ps))
                    else:
                        free[i] = dict.fromkeys(topics, ps)
        return prep.result(free)


def _ranges(seq: Sequence[int], floors: list[int]) -> list[frozenset[int]]:
    """Consecutive slices of ``seq`` for members in order, each member's share counting its ``floors``
    (pins) already held: equal shares, the first members one more when the division is not exact."""
    m = len(floors)
    total = len(seq) + sum(floors)
    if any(floors):
        level = _water_level(floors, total)
        quota = [f if f > level else level for f in floors]
        extra = total - sum(quota)
        for j in range(m):
            if extra and floors[j] <= level:
                quota[j] += 1
                extra -= 1
        takes = [q - f for q, f in zip(quota, floors, strict=True)]
    else:
        base, extra = divmod(total, m)
        takes = [base + 1] * extra + [base] * (m - extra)
    out: list[frozenset[int]] = []
    pos = 0
    for k in takes:
        out.append(frozenset(seq[pos:pos + k]) if k else _EMPTY)
        pos += k
    return out


# ---------------------------------------------------------------------------------------------------

ASSIGNORS: dict[str, Assignor] = {a.name: a for a in (UniformAssignor(), RangeAssignor())}


def assignor(name: str) -> Assignor:
    """The assignor called ``name``; ValueError naming the known ones otherwise."""
    try:
        return ASSIGNORS[name]
    except KeyError:
        raise ValueError(f"unknown assignor {name!r}; known: {', '.join(sorted(ASSIGNORS))}") from None
