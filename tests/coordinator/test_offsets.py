"""Offset commits, fetches, deletion and expiry on the shard state machine."""

from gregor.protocol.consumer_offsets import GroupMetadataKey, OffsetCommitKey
from gregor.protocol.errors import ErrorCode as E
from tests.coordinator.harness import GroupShardHarness, stable_group

DAY = 24 * 3600 * 1000


def test_assign_mode_commit_without_group_creates_empty_group():
    ctx = GroupShardHarness()
    errors = ctx.commit("standalone", {("t", 0): 10, ("t", 1): 20}, metadata="m")
    assert errors == {("t", 0): E.none, ("t", 1): E.none}
    assert ctx.committed("standalone") == {("t", 0): 10, ("t", 1): 20}
    assert ctx.state("standalone") == "Empty"
    ((_, v),) = ctx.shard.fetch_offsets("standalone", [("t", 0)])
    assert v.metadata == "m"
    # unknown partitions answer "no offset", not an error
    assert ctx.shard.fetch_offsets("standalone", [("t", 9)]) == [(("t", 9), None)]


def test_member_commit_rules():
    ctx = GroupShardHarness()
    ids, gen = stable_group(ctx, 2)
    assert ctx.commit("g", {("t", 0): 5}, gen, ids[0]) == {("t", 0): E.none}
    assert ctx.commit("g", {("t", 0): 5}, gen + 1, ids[0]) == {("t", 0): E.illegal_generation}
    assert ctx.commit("g", {("t", 0): 5}, gen, "stranger") == {("t", 0): E.unknown_member_id}
    # generation -1 (assign mode) is refused while the group has members
    assert ctx.commit("g", {("t", 0): 5}) == {("t", 0): E.unknown_member_id}
    # a commit for a group that does not exist, claiming a generation
    assert ctx.commit("ghost", {("t", 0): 1}, generation=3, member_id="m") == {("t", 0): E.illegal_generation}


def test_commit_during_rebalance_phases():
    ctx = GroupShardHarness()
    ids, gen = stable_group(ctx, 2)
    ctx.join_new()  # PreparingRebalance: commits still accepted (Kafka)
    assert ctx.commit("g", {("t", 0): 7}, gen, ids[0]) == {("t", 0): E.none}
    for m in ids:
        ctx.join(member_id=m)
    new_gen = ctx.shard.groups["g"].generation_id
    assert ctx.state() == "CompletingRebalance"
    assert ctx.commit("g", {("t", 0): 8}, new_gen, ids[0]) == {("t", 0): E.rebalance_in_progress}


def test_metadata_too_large_and_unknown_topic():
    ctx = GroupShardHarness(topics={"t": 2}).with_config(offset_metadata_max_bytes=10)
    errors = ctx.commit("g", {("t", 0): 1}, metadata="x" * 11)
    assert errors == {("t", 0): E.offset_metadata_too_large}
    assert ctx.commit("g", {("nope", 0): 1, ("t", 5): 1, ("t", 1): 1}) == {
        ("nope", 0): E.unknown_topic_or_partition, ("t", 5): E.unknown_topic_or_partition, ("t", 1): E.none}
    assert ctx.committed("g") == {("t", 1): 1}


def test_offsets_survive_reload():
    ctx = GroupShardHarness()
    for i in range(100):
        ctx.commit("g", {("t", i % 10): i})
    ctx.reload()
    assert ctx.committed("g") == {("t", p): 90 + p for p in range(10)}


def test_delete_groups():
    ctx = GroupShardHarness()
    ids, gen = stable_group(ctx, 1, group="busy")
    ctx.commit("idle", {("t", 0): 1})
    r = ctx.run(ctx.shard.delete_groups(["idle", "busy", "nothing"]))
    assert r == {"idle": E.none, "busy": E.non_empty_group, "nothing": E.group_id_not_found}
    assert "idle" not in ctx.shard.groups and ctx.committed("idle") == {}
    ctx.reload()
    assert "idle" not in ctx.shard.groups and "busy" in ctx.shard.groups


def test_offset_delete_refuses_subscribed_topics_of_active_group():
    ctx = GroupShardHarness()
    # consumer protocol subscription v0: version, topics ["t"], user data
    sub = b"\x00\x00" + b"\x00\x00\x00\x01" + b"\x00\x01t" + b"\x00\x00\x00\x00"
    mid, d = ctx.join_new(protocols=[("range", sub)])
    r = d.result()
    ctx.sync("g", r.generation_id, mid, {mid: b""})
    ctx.commit("g", {("t", 0): 1, ("other", 0): 2}, r.generation_id, mid)
    deleted = ctx.run(ctx.shard.delete_offsets("g", [("t", 0), ("other", 0)]))
    assert deleted.error == E.none
    assert deleted.partitions == {("t", 0): E.group_subscribed_to_topic, ("other", 0): E.none}
    assert ctx.committed("g") == {("t", 0): 1}
    assert ctx.run(ctx.shard.delete_offsets("nogroup", [("t", 0)])).error == E.group_id_not_found


def test_expiry_of_empty_group_counts_from_when_it_became_empty():
    ctx = GroupShardHarness().with_config(offsets_retention_ms=DAY, offsets_retention_check_interval_ms=60_000)
    ids, gen = stable_group(ctx, 1)
    ctx.commit("g", {("t", 0): 5}, gen, ids[0])
    ctx.sleep(2 * DAY // 3)  # keep the member alive? no: it times out and the group empties
    assert ctx.state() == "Empty"
    assert ctx.committed("g") == {("t", 0): 5}  # offsets of a group with members never expire,
    ctx.sleep(DAY // 2)                          # and of an empty one only a retention after it emptied
    assert ctx.committed("g") == {("t", 0): 5}
    records = ctx.sleep(DAY // 2 + 120_000)
    assert ctx.committed("g") == {}
    assert (OffsetCommitKey("g", "t", 0), None) in records
    assert (GroupMetadataKey("g"), None) in records  # the empty group without offsets is removed
    assert "g" not in ctx.shard.groups


def test_offsets_of_a_group_with_members_do_not_expire():
    ctx = GroupShardHarness().with_config(offsets_retention_ms=60_000, offsets_retention_check_interval_ms=10_000)
    ids, gen = stable_group(ctx, 1)
    ctx.commit("g", {("t", 0): 5}, gen, ids[0])
    for _ in range(30):
        ctx.sleep(5_000)
        assert ctx.heartbeat("g", gen, ids[0]) == E.none
    assert ctx.committed("g") == {("t", 0): 5}


def test_standalone_offsets_expire_from_commit_time_and_explicit_retention():
    ctx = GroupShardHarness().with_config(offsets_retention_ms=60_000, offsets_retention_check_interval_ms=1_000)
    ctx.commit("s", {("t", 0): 1})
    ctx.commit("r", {("t", 0): 1}, retention_ms=5_000)  # OffsetCommit v2-v4 retention time
    ctx.sleep(6_000)
    assert ctx.committed("r") == {} and ctx.committed("s") == {("t", 0): 1}
    ctx.commit("s", {("t", 1): 2})
    ctx.sleep(56_000)
    assert ctx.committed("s") == {("t", 1): 2}  # the newer commit is younger than the retention
    ctx.sleep(10_000)
    assert ctx.committed("s") == {}


def test_expiry_logs_like_kafka(caplog):
    import logging

    ctx = GroupShardHarness().with_config(offsets_retention_ms=1_000, offsets_retention_check_interval_ms=1_000)
    ctx.commit("s", {("t", 0): 1, ("t", 1): 1})
    with caplog.at_level(logging.INFO, logger="gregor.coordinator"):
        ctx.sleep(2_000)
    assert any("Removed 2 expired offsets in" in r.getMessage() for r in caplog.records)


def test_deleted_topic_offsets_are_removed():
    ctx = GroupShardHarness()
    ctx.commit("g", {("gone", 0): 1, ("kept", 0): 2})
    ctx.run(ctx.shard.delete_topic_offsets("gone"))
    assert ctx.committed("g") == {("kept", 0): 2}
