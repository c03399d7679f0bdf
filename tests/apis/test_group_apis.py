"""The classic group APIs through their handlers only (JoinGroup, SyncGroup, Heartbeat,
OffsetCommit, OffsetFetch, LeaveGroup), on a broker whose group coordinator is loaded: one
consumer's life from join to leave, and the errors a client acts on."""

from __future__ import annotations

import pytest

from gregor.protocol.api_keys import ApiKey
from gregor.protocol.consumer_protocol import decode_assignment
from gregor.protocol.errors import ErrorCode
from tests.support.consumer_protocol import assignment, subscription

GROUP = "g"


@pytest.fixture
def node(in_process_broker_factory):
    n = in_process_broker_factory({"offsets.topic.num.partitions": "3"})
    n.start_groups()
    n.services.topics.create_topic("t", 2, {})
    return n


def join(node, member_id: str = ""):
    return node.call(ApiKey.JOIN_GROUP, 5, {
        "group_id": GROUP, "session_timeout": 10000, "rebalance_timeout": 10000, "member_id": member_id,
        "group_instance_id": None, "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": subscription("t")}]})


def sync(node, generation: int, member_id: str, assignments: dict[str, bytes]):
    return node.call(ApiKey.SYNC_GROUP, 5, {
        "group_id": GROUP, "generation_id": generation, "member_id": member_id, "group_instance_id": None,
        "protocol_type": "consumer", "protocol_name": "range",
        "assignments": [{"member_id": m, "assignment": a} for m, a in assignments.items()]})


def heartbeat(node, generation: int, member_id: str) -> ErrorCode:
    return node.call(ApiKey.HEARTBEAT, 4, {"group_id": GROUP, "generation_id": generation, "member_id": member_id,
                                           "group_instance_id": None}).error_code


def commit(node, generation: int, member_id: str, offsets: dict[int, int]) -> list[ErrorCode]:
    resp = node.call(ApiKey.OFFSET_COMMIT, 8, {
        "group_id": GROUP, "generation_id_or_member_epoch": generation, "member_id": member_id,
        "group_instance_id": None, "topics": [{"name": "t", "partitions": [
            {"partition_index": p, "committed_offset": o, "committed_leader_epoch": -1, "committed_metadata": "m"}
            for p, o in offsets.items()]}]})
    return [p.error_code for t in resp.topics for p in t.partitions]


def fetch_offsets(node, group: str = GROUP) -> tuple[ErrorCode, dict[tuple[str, int], tuple[int, str | None]]]:
    resp = node.call(ApiKey.OFFSET_FETCH, 7, {"group_id": group, "topics": None, "require_stable": False})
    return resp.error_code, {(t.name, p.partition_index): (p.committed_offset, p.metadata)
                             for t in resp.topics for p in t.partitions}


def test_one_consumer_from_join_to_leave(node):
    first = join(node)
    assert first.error_code == ErrorCode.member_id_required and first.member_id  # v4+: rejoin with this id
    member = first.member_id
    joined = join(node, member)
    assert joined.error_code == ErrorCode.none and joined.leader == member and joined.protocol_name == "range"
    assert [(m.member_id, m.metadata) for m in joined.members] == [(member, subscription("t"))]
    generation = joined.generation_id
    synced = sync(node, generation, member, {member: assignment({"t": [0, 1]})})
    assert synced.error_code == ErrorCode.none and decode_assignment(synced.assignment) == [("t", [0, 1])]
    assert heartbeat(node, generation, member) == ErrorCode.none
    assert commit(node, generation, member, {0: 5, 1: 7}) == [ErrorCode.none, ErrorCode.none]
    assert fetch_offsets(node) == (ErrorCode.none, {("t", 0): (5, "m"), ("t", 1): (7, "m")})
    left = node.call(ApiKey.LEAVE_GROUP, 5, {"group_id": GROUP, "members": [
        {"member_id": member, "group_instance_id": None, "reason": "done"}]})
    assert left.error_code == ErrorCode.none and [m.error_code for m in left.members] == [ErrorCode.none]
    assert heartbeat(node, generation, member) == ErrorCode.unknown_member_id
    assert fetch_offsets(node)[1] == {("t", 0): (5, "m"), ("t", 1): (7, "m")}  # offsets outlive the members


def test_errors_a_client_acts_on(node):
    member = join(node).member_id
    generation = join(node, member).generation_id
    assert heartbeat(node, generation + 1, member) == ErrorCode.illegal_generation
    assert heartbeat(node, generation, "stranger") == ErrorCode.unknown_member_id
    assert commit(node, generation, "stranger", {0: 1}) == [ErrorCode.unknown_member_id]
    assert sync(node, generation + 1, member, {}).error_code == ErrorCode.illegal_generation
    assert fetch_offsets(node) == (ErrorCode.none, {})


def test_commits_of_a_group_without_members_and_unknown_partitions(node):
    # a standalone consumer (assign(), no subscribe) commits with generation -1 and no member id
    assert commit(node, -1, "", {0: 3, 9: 4}) == [ErrorCode.none, ErrorCode.unknown_topic_or_partition]
    assert fetch_offsets(node) == (ErrorCode.none, {("t", 0): (3, "m")})
    assert fetch_offsets(node, "other") == (ErrorCode.none, {})


def test_offsets_are_read_back_after_the_coordinator_reloads(node):
    assert commit(node, -1, "", {0: 11, 1: 12}) == [ErrorCode.none, ErrorCode.none]
    node.run(node.broker.groups.stop())
    node.start_groups()
    assert fetch_offsets(node) == (ErrorCode.none, {("t", 0): (11, "m"), ("t", 1): (12, "m")})
