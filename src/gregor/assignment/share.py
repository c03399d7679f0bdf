"""The share group assignor (KIP-932's "simple" assignor), pure as the consumer group assignors:
a GroupSpec in, every member's target assignment out.

Share groups deliver records, not partitions, to members, so a partition may go to several
members. The rules:

- first each partition goes to one member, balanced and sticky, as the consumer groups' ``uniform``
  assignor does (pins and exclusions included);
- then, when members outnumber the partitions of what they subscribe to, every member left with
  nothing shares a partition of its subscriptions: the one with the fewest members so far (its
  current one when that is among the least shared, so a member keeps its partition across
  rebalances), ties broken by topic id and partition;
- a partition is never given to a member that does not subscribe to its topic (pins aside), and
  excluded partitions to nobody.

So with 4 partitions and 12 members every partition has 3 members; with 12 partitions and 4 members
each member has 3 partitions."""

from __future__ import annotations

from gregor.assignment.assignors import Assignment, GroupSpec, TopicId, UniformAssignor


class ShareAssignor:
    name = "simple"

    def assign(self, spec: GroupSpec) -> dict[str, Assignment]:
        base = UniformAssignor().assign(spec)
        sharers: dict[tuple[TopicId, int], int] = {}
        for a in base.values():
            for t, ps in a.items():
                for p in ps:
                    sharers[(t, p)] = sharers.get((t, p), 0) + 1
        out = {m: dict(a) for m, a in base.items()}
        for mid in sorted(spec.members):
            if any(out.get(mid, {}).values()):
                continue
            member = spec.members[mid]
            candidates = [(t, p) for t in sorted(member.subscribed) for p in range(spec.partitions.get(t, 0))
                          if (t, p) not in spec.excluded]
            if not candidates:
                continue
            least = min(sharers.get(tp, 0) for tp in candidates)
            current = [(t, p) for t, ps in sorted(member.current.items()) for p in sorted(ps)
                       if (t, p) in candidates and sharers.get((t, p), 0) <= least]
            chosen = current[0] if current else min(candidates, key=lambda tp: (sharers.get(tp, 0), tp))
            out[mid] = {chosen[0]: frozenset({chosen[1]})}
            sharers[chosen] = sharers.get(chosen, 0) + 1
        return {m: {t: ps for t, ps in a.items() if ps} for m, a in out.items()}
