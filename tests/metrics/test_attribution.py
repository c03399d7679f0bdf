"""Fetch attribution (metrics/attribution.py) over an in-memory view of the coordinator's members:
which group a fetch belongs to, and how the ambiguous cases are resolved."""

from __future__ import annotations

from collections.abc import Iterable

from gregor.coordinator.group.api import MemberView
from gregor.metrics.attribution import NO_GROUP, GroupAttribution
from tests.support.consumer_protocol import assignment


class Members:
    """A MembersView: the members of consumer groups and their committed offsets, kept in memory."""

    def __init__(self) -> None:
        self.version = 0
        self.members: list[MemberView] = []
        self.committed: dict[tuple[str, str, int], int] = {}

    def set(self, *members: MemberView) -> None:
        self.members = list(members)
        self.version += 1

    def membership_version(self) -> int:
        return self.version

    def consumer_members(self) -> Iterable[MemberView]:
        return list(self.members)

    def committed_offset(self, group_id: str, topic: str, partition: int) -> int | None:
        return self.committed.get((group_id, topic, partition))


def member(group: str, client_id: str, host: str, partitions: dict[str, list[int]]) -> MemberView:
    return MemberView(group, client_id, host, assignment(partitions))


def test_a_fetch_belongs_to_the_group_whose_member_owns_the_partition():
    view = Members()
    view.set(member("billing", "app", "10.0.0.1", {"orders": [0, 1]}),
             member("audit", "app", "10.0.0.2", {"orders": [0]}))
    attribution = GroupAttribution(view)
    assert attribution.group_of("app", "10.0.0.1", "orders", 1) == "billing"
    assert attribution.group_of("app", "10.0.0.2", "orders", 0) == "audit"
    assert attribution.group_of("app", "10.0.0.2", "orders", 1) == NO_GROUP  # not its partition
    assert attribution.group_of("other", "10.0.0.1", "orders", 0) == NO_GROUP  # an assign-mode client
    assert attribution.group_of("app", "10.0.0.3", "orders", 0) == NO_GROUP


def test_the_index_follows_the_membership_version():
    view = Members()
    view.set(member("billing", "app", "h", {"orders": [0]}))
    attribution = GroupAttribution(view)
    assert attribution.group_of("app", "h", "orders", 0) == "billing"
    view.members = [member("audit", "app", "h", {"orders": [0]})]  # not announced: the index stays
    assert attribution.group_of("app", "h", "orders", 0) == "billing"
    view.version += 1
    assert attribution.group_of("app", "h", "orders", 0) == "audit"


def test_during_a_rebalance_a_live_member_keeps_its_last_partitions():
    view = Members()
    view.set(member("billing", "app", "h", {"orders": [0]}))
    attribution = GroupAttribution(view)
    assert attribution.group_of("app", "h", "orders", 0) == "billing"
    view.set(member("billing", "app", "h", {}))  # assignments cleared until the leader's new one
    assert attribution.group_of("app", "h", "orders", 0) == "billing"
    view.set()  # the member left
    assert attribution.group_of("app", "h", "orders", 0) == NO_GROUP


def two_groups_same_client() -> tuple[Members, GroupAttribution]:
    """librdkafka's default client id on one host, in two groups owning the same partition."""
    view = Members()
    view.set(member("b-group", "rdkafka", "h", {"t": [0]}), member("a-group", "rdkafka", "h", {"t": [0]}))
    return view, GroupAttribution(view)


def test_ambiguous_fetch_follows_the_connection_first():
    _, attribution = two_groups_same_client()
    conn_a: dict = {}
    conn_b = {("t", 0): "b-group"}
    assert attribution.group_of("rdkafka", "h", "t", 0, 100, conn_b) == "b-group"
    assert attribution.group_of("rdkafka", "h", "t", 0, 100, conn_a) == "a-group"  # fresh: first by name
    assert conn_a == {("t", 0): "a-group"}


def test_ambiguous_fetch_continues_where_a_group_stopped():
    _, attribution = two_groups_same_client()
    attribution.fetched_up_to("a-group", "t", 0, 50)
    attribution.fetched_up_to("b-group", "t", 0, 80)
    assert attribution.group_of("rdkafka", "h", "t", 0, 80) == "b-group"
    assert attribution.group_of("rdkafka", "h", "t", 0, 50) == "a-group"
    attribution.fetched_up_to(NO_GROUP, "t", 0, 7)  # never remembered
    assert attribution.group_of("rdkafka", "h", "t", 0, 7) == "a-group"  # neither matches: first by name


def test_ambiguous_fetch_then_the_committed_offset_then_a_group_without_a_position():
    view, attribution = two_groups_same_client()
    view.committed[("b-group", "t", 0)] = 30
    attribution.fetched_up_to("a-group", "t", 0, 10)
    assert attribution.group_of("rdkafka", "h", "t", 0, 30) == "b-group"  # its first fetch after joining
    assert attribution.group_of("rdkafka", "h", "t", 0, 99) == "b-group"  # the one with no position yet
