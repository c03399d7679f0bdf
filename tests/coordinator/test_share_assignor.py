"""The share assignor: partitions spread over members, several members per partition when members
outnumber partitions, sticky, subscriptions and exclusions respected."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from gregor.assignment.assignors import GroupSpec, MemberSpec
from gregor.assignment.share import ShareAssignor

T1, T2 = uuid.UUID(int=1), uuid.UUID(int=2)


def spec(n_members: int, partitions: dict, subscribed=None, current=None, excluded=frozenset()) -> GroupSpec:
    members = {f"m{i:02d}": MemberSpec(f"m{i:02d}", None, None, frozenset(subscribed or partitions),
                                       (current or {}).get(f"m{i:02d}", {})) for i in range(n_members)}
    return GroupSpec(members, partitions, excluded=excluded)


def sharers(result) -> dict:
    out: dict = {}
    for a in result.values():
        for t, ps in a.items():
            for p in ps:
                out[(t, p)] = out.get((t, p), 0) + 1
    return out


def test_more_members_than_partitions_share_them_evenly():
    result = ShareAssignor().assign(spec(12, {T1: 4}))
    assert all(len(a.get(T1, ())) == 1 for a in result.values())
    assert sharers(result) == {(T1, p): 3 for p in range(4)}


def test_fewer_members_each_get_several_partitions():
    result = ShareAssignor().assign(spec(4, {T1: 12}))
    assert sorted(len(a[T1]) for a in result.values()) == [3, 3, 3, 3]
    assert set(sharers(result).values()) == {1}


def test_a_shared_partition_is_kept_across_a_rebalance():
    first = ShareAssignor().assign(spec(6, {T1: 2}))
    again = ShareAssignor().assign(spec(6, {T1: 2}, current=first))
    assert again == first


def test_subscriptions_and_exclusions():
    s = spec(5, {T1: 1, T2: 1}, subscribed={T1}, excluded=frozenset({(T1, 0)}))
    assert ShareAssignor().assign(s) == {f"m{i:02d}": {} for i in range(5)}  # T1-0 excluded, T2 not subscribed


@settings(max_examples=200, deadline=None)
@given(members=st.integers(1, 20), p1=st.integers(0, 8), p2=st.integers(0, 8))
def test_every_partition_served_every_member_busy_when_possible(members, p1, p2):
    result = ShareAssignor().assign(spec(members, {T1: p1, T2: p2}))
    total = p1 + p2
    if total:
        assert set(sharers(result)) == {(t, p) for t, n in ((T1, p1), (T2, p2)) for p in range(n)}
        assert len(result) == members  # nobody idle
        counts = sharers(result).values()
        assert max(counts) - min(counts) <= 1
