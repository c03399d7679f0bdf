"""The shard runtime on a real partition log (no network): loading is replay, of any size;
loading and unloading answer the way Kafka's coordinator does."""

import asyncio

import pytest

from gregor.coordinator.group.api import CommitPartition, CommitRequest, HeartbeatRequest, JoinRequest
from gregor.coordinator.group.context import GroupConfig
from gregor.coordinator.group.shard import RECORD_SERDE, GroupCoordinatorShard
from gregor.coordinator.runtime.partition_writer import LogWriter
from gregor.coordinator.runtime.result import CoordinatorResult
from gregor.coordinator.runtime.shard_runtime import ShardRuntime, ShardState, resolve
from gregor.log.partition_log import now_ms
from gregor.protocol.consumer_offsets import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    encode_key,
    encode_value,
)
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.records import build_batch


def make_runtime(plog, config=GroupConfig(initial_rebalance_delay_ms=0), replicated=False):
    """A runtime over ``plog``; ``replicated``: its high watermark moves only when the test says
    (``commit_to``), as a replicated partition's does."""
    if replicated:
        plog.replicated = True
    return ShardRuntime(0, plog, lambda p, timer: GroupCoordinatorShard(p, config, now_ms, timer), RECORD_SERDE,
                        LogWriter(plog))


def commit_to(plog, rt, offset):
    """The partition's high watermark moves to ``offset`` (the in-sync replicas have it)."""
    plog.update_high_watermark(offset)
    rt.on_high_watermark(plog.high_watermark)


def append(plog, records):
    pairs = [(encode_key(k), encode_value(v)) for k, v in records]
    plog.append_batch_unchecked(build_batch(pairs, timestamp=now_ms()))


def test_loads_partitions_with_batches_and_records_larger_than_any_buffer(plog):
    # 2,000 commits with 1 KB metadata each in ONE batch (about 2.1 MB), plus a group whose
    # metadata record alone is 6 MB: Kafka's fixed 5 MB offsets.load.buffer.size chokes on both.
    append(plog, [(OffsetCommitKey("big", "t", p), OffsetCommitValue(p, "m" * 1024, 1)) for p in range(2000)])
    member = MemberMetadata("m1", "c", "/h", 10000, 30000, b"s", b"A" * (6 << 20))
    append(plog, [(GroupMetadataKey("huge"), GroupMetadataValue("consumer", 3, "range", "m1", 1, [member]))])
    for i in range(20_000):  # and a long tail of small batches
        if i % 1000 == 0:
            append(plog, [(OffsetCommitKey("tail", "t", j % 7), OffsetCommitValue(i + j, "", 1)) for j in range(1000)])

    async def run():
        rt = make_runtime(plog)
        rt.start_loading()
        with pytest.raises(KafkaError) as e:
            rt.check_available()
        assert e.value.code == ErrorCode.coordinator_load_in_progress
        await rt.wait_loaded()
        assert rt.state is ShardState.ACTIVE
        shard = rt.shard
        assert len(shard.offsets_mgr.offsets["big"]) == 2000
        assert shard.offsets_mgr.offsets["big"][("t", 1999)].metadata == "m" * 1024
        assert shard.groups["huge"].members["m1"].assignment == b"A" * (6 << 20)
        assert shard.groups["huge"].state.value == "Stable"
        rt.unload()

    asyncio.run(run())


def test_writes_are_answered_after_the_records_are_in_the_log(plog):
    async def run():
        rt = make_runtime(plog)
        rt.start_loading()
        await rt.wait_loaded()
        before = plog.log_end_offset
        req = CommitRequest("g", -1, "", None, [CommitPartition("t", 0, 99, -1, "")])
        errors = await resolve(rt.execute(lambda s: s.commit_offsets(req)))
        assert errors == {("t", 0): ErrorCode.none}
        assert plog.log_end_offset == before + 1
        rt.unload()
        # a fresh runtime reads the commit back from the log
        rt2 = make_runtime(plog)
        rt2.start_loading()
        await rt2.wait_loaded()
        assert rt2.shard.offsets_mgr.offsets["g"][("t", 0)].offset == 99

    asyncio.run(run())


def test_unloading_fails_waiting_members_with_not_coordinator(plog):
    async def run():
        rt = make_runtime(plog, GroupConfig(initial_rebalance_delay_ms=60_000))
        rt.start_loading()
        await rt.wait_loaded()
        join = JoinRequest("g", "", None, 10_000, 30_000, "consumer", [("range", b"")], "c", "/h", False)
        pending = rt.execute(lambda s: s.join_group(join))  # waits for the initial delay
        waiter = asyncio.ensure_future(resolve(pending))
        await asyncio.sleep(0.01)
        assert not waiter.done()
        rt.unload()
        result = await asyncio.wait_for(waiter, 1)
        assert result.error == ErrorCode.not_coordinator
        with pytest.raises(KafkaError) as e:
            rt.check_available()
        assert e.value.code == ErrorCode.not_coordinator

    asyncio.run(run())


def test_a_failed_append_reloads_the_shard_from_the_log(plog):
    async def run():
        rt = make_runtime(plog)
        rt.start_loading()
        await rt.wait_loaded()
        ok = CommitRequest("g", -1, "", None, [CommitPartition("t", 0, 1, -1, "")])
        await resolve(rt.execute(lambda s: s.commit_offsets(ok)))

        def broken(_batch):
            raise OSError("disk full")

        plog.append_batch_unchecked, original = broken, plog.append_batch_unchecked
        bad = CommitRequest("g", -1, "", None, [CommitPartition("t", 0, 2, -1, "")])
        with pytest.raises(KafkaError) as e:
            rt.execute(lambda s: s.commit_offsets(bad))
        assert e.value.code == ErrorCode.not_coordinator
        plog.append_batch_unchecked = original
        await rt.wait_loaded()
        assert rt.shard.offsets_mgr.offsets["g"][("t", 0)].offset == 1  # state = what the log holds

    asyncio.run(run())


def test_a_partition_that_fails_to_load_is_reported_and_retried(plog):
    """Failure mode: a group's coordinator partition cannot be served. The shard says why, and
    a reload brings it back, instead of leaving consumers looping without explanation."""
    append(plog, [(OffsetCommitKey("g", "t", 0), OffsetCommitValue(5, "", 1))])

    async def run():
        original = plog.read

        def failing_read(*a, **kw):
            raise OSError("I/O error reading segment")

        plog.read = failing_read
        rt = make_runtime(plog)
        rt.start_loading()
        await rt.wait_loaded()
        assert rt.state is ShardState.FAILED
        with pytest.raises(KafkaError) as e:
            rt.check_available()
        assert e.value.code == ErrorCode.coordinator_not_available
        assert "__consumer_offsets-0 failed to load" in e.value.message and "I/O error" in e.value.message
        plog.read = original
        rt.reload()
        await rt.wait_loaded()
        assert rt.state is ShardState.ACTIVE and rt.shard.offsets_mgr.offsets["g"][("t", 0)].offset == 5

    asyncio.run(run())


def test_on_one_node_a_write_is_answered_within_execute(plog):
    """The fast path: the high watermark is the log end offset, so the write is released by the
    append itself and execute hands back the response, not a Deferred."""

    async def run():
        rt = make_runtime(plog)
        rt.start_loading()
        await rt.wait_loaded()
        req = CommitRequest("g", -1, "", None, [CommitPartition("t", 0, 7, -1, "")])
        assert rt.execute(lambda s: s.commit_offsets(req)) == {("t", 0): ErrorCode.none}
        assert len(rt.writes) == 0
        rt.unload()

    asyncio.run(run())


def test_writes_wait_for_the_committed_offset_and_are_released_in_order(plog):
    """With a high watermark that lags the append (replication), a commit waits in the write
    queue; an operation without records behind it waits too; raising the high watermark
    releases them, oldest first."""
    async def run():
        rt = make_runtime(plog, replicated=True)
        rt.start_loading()
        await rt.wait_loaded()
        first = CommitRequest("g", -1, "", None, [CommitPartition("t", 0, 1, -1, "")])
        second = CommitRequest("g", -1, "", None, [CommitPartition("t", 1, 2, -1, "")])
        a = asyncio.ensure_future(resolve(rt.execute(lambda s: s.commit_offsets(first))))
        b = asyncio.ensure_future(resolve(rt.execute(lambda s: s.commit_offsets(second))))
        c = asyncio.ensure_future(resolve(rt.execute(lambda s: s.heartbeat(HeartbeatRequest("g", 0, "nobody")))))
        await asyncio.sleep(0.01)
        assert not (a.done() or b.done() or c.done()) and len(rt.writes) == 3
        assert plog.log_end_offset == 2
        commit_to(plog, rt, 1)
        await asyncio.sleep(0.01)
        assert a.done() and not b.done() and not c.done()
        assert a.result() == {("t", 0): ErrorCode.none}
        commit_to(plog, rt, 2)
        assert await b == {("t", 1): ErrorCode.none}
        assert await c == ErrorCode.unknown_member_id
        rt.unload()

    asyncio.run(run())


def test_completions_for_other_members_wait_for_the_committed_offset(plog):
    """A rebalance completed by one member's JoinGroup answers the others only once the write
    that completed it (here: one with records ahead of it) is committed."""
    async def run():
        rt = make_runtime(plog, replicated=True)
        rt.start_loading()
        await rt.wait_loaded()
        commit = CommitRequest("other", -1, "", None, [CommitPartition("t", 0, 1, -1, "")])
        pending_commit = rt.execute(lambda s: s.commit_offsets(commit))
        join = JoinRequest("g", "", None, 10_000, 30_000, "consumer", [("range", b"")], "c", "/h", False)
        joined = asyncio.ensure_future(resolve(rt.execute(lambda s: s.join_group(join))))
        await asyncio.sleep(0.01)
        assert not joined.done() and rt.shard.groups["g"].state.value == "CompletingRebalance"
        commit_to(plog, rt, plog.log_end_offset)
        result = await asyncio.wait_for(joined, 1)
        assert result.error == ErrorCode.none and result.generation_id == 1
        assert (await resolve(pending_commit)) == {("t", 0): ErrorCode.none}
        rt.unload()

    asyncio.run(run())


def test_unloading_fails_pending_writes_with_not_coordinator(plog):
    async def run():
        rt = make_runtime(plog, replicated=True)
        rt.start_loading()
        await rt.wait_loaded()
        req = CommitRequest("g", -1, "", None, [CommitPartition("t", 0, 1, -1, "")])
        waiter = asyncio.ensure_future(resolve(rt.execute(lambda s: s.commit_offsets(req))))
        await asyncio.sleep(0.01)
        assert not waiter.done()
        rt.unload()
        with pytest.raises(KafkaError) as e:
            await asyncio.wait_for(waiter, 1)
        assert e.value.code == ErrorCode.not_coordinator

    asyncio.run(run())


# -- reads at the committed offset (issue 23, defect 7) ------------------------------------------
def offsets_of(rt, group="g"):
    return {tp: v.offset for tp, v in rt.read(lambda s: s.fetch_offsets(group, None))}


def commit_request(group, offsets):
    return CommitRequest(group, -1, "", None, [CommitPartition("t", p, o, -1, "") for p, o in offsets.items()])


def test_offset_fetch_reads_at_the_committed_offset(plog):
    """A commit the in-sync replicas do not have yet is not visible to OffsetFetch: if the leader
    failed before they had it, the next leader would not have it either. It becomes visible when
    the high watermark passes it; a deletion (tombstone) likewise."""
    async def run():
        rt = make_runtime(plog, replicated=True)
        rt.start_loading()
        await rt.wait_loaded()
        first = rt.execute(lambda s: s.commit_offsets(commit_request("g", {0: 5, 1: 7})))
        assert offsets_of(rt) == {}  # not even the group's first commit
        commit_to(plog, rt, plog.log_end_offset)
        await resolve(first)
        assert offsets_of(rt) == {("t", 0): 5, ("t", 1): 7}
        second = rt.execute(lambda s: s.commit_offsets(commit_request("g", {0: 6})))
        third = rt.execute(lambda s: s.commit_offsets(commit_request("g", {0: 9, 2: 1})))
        assert offsets_of(rt) == {("t", 0): 5, ("t", 1): 7}
        assert rt.read(lambda s: s.committed_position("g", "t", 0))[0] == 5
        end_of_second = plog.log_end_offset - 1  # each commit is one record here
        commit_to(plog, rt, end_of_second)
        await resolve(second)
        assert offsets_of(rt) == {("t", 0): 6, ("t", 1): 7}
        commit_to(plog, rt, plog.log_end_offset)
        await resolve(third)
        assert offsets_of(rt) == {("t", 0): 9, ("t", 1): 7, ("t", 2): 1}
        deleted = rt.execute(lambda s: s.delete_offsets("g", [("t", 1)]))
        assert ("t", 1) in offsets_of(rt)
        commit_to(plog, rt, plog.log_end_offset)
        await resolve(deleted)
        assert ("t", 1) not in offsets_of(rt)
        rt.unload()

    asyncio.run(run())


def test_a_loaded_tail_above_the_high_watermark_is_not_read_until_committed(plog):
    """A new leader's log may end with records its followers do not have yet: loading replays
    them, but reads see them only once the high watermark passes them."""
    append(plog, [(OffsetCommitKey("g", "t", 0), OffsetCommitValue(1, "", now_ms()))])
    append(plog, [(OffsetCommitKey("g", "t", 0), OffsetCommitValue(2, "", now_ms())),
                  (OffsetCommitKey("g", "t", 1), OffsetCommitValue(3, "", now_ms()))])
    plog.replicated = True
    plog.update_high_watermark(1)

    async def run():
        rt = make_runtime(plog, replicated=True)
        rt.start_loading()
        await rt.wait_loaded()
        assert offsets_of(rt) == {("t", 0): 1}
        commit_to(plog, rt, plog.log_end_offset)
        assert offsets_of(rt) == {("t", 0): 2, ("t", 1): 3}
        rt.unload()

    asyncio.run(run())


def test_on_one_node_nothing_is_kept_for_committed_reads(plog):
    async def run():
        rt = make_runtime(plog)
        rt.start_loading()
        await rt.wait_loaded()
        for i in range(10):
            rt.execute(lambda s, i=i: s.commit_offsets(commit_request("g", {0: i})))
        assert len(rt.shard.committed_reads) == 0
        assert offsets_of(rt) == {("t", 0): 9}
        rt.unload()

    asyncio.run(run())


def test_a_stable_offset_fetch_waits_for_the_writes_before_it(plog):
    """OffsetFetch with require_stable (what consumers send) is an operation that writes nothing:
    answered once the writes before it are committed, with every offset written (Kafka runs it as
    a write operation for that reason)."""
    async def run():
        rt = make_runtime(plog, replicated=True)
        rt.start_loading()
        await rt.wait_loaded()
        rt.execute(lambda s: s.commit_offsets(commit_request("g", {0: 5})))
        stable = asyncio.ensure_future(resolve(rt.execute(
            lambda s: CoordinatorResult([], s.fetch_offsets("g", None, latest=True)))))
        await asyncio.sleep(0.01)
        assert not stable.done() and offsets_of(rt) == {}
        commit_to(plog, rt, plog.log_end_offset)
        assert {tp: v.offset for tp, v in await stable} == {("t", 0): 5}
        rt.unload()

    asyncio.run(run())


def test_a_loaded_tail_holds_back_what_waits_for_the_writes_before_it(plog):
    append(plog, [(OffsetCommitKey("g", "t", 0), OffsetCommitValue(1, "", now_ms()))])
    append(plog, [(OffsetCommitKey("g", "t", 0), OffsetCommitValue(2, "", now_ms()))])
    plog.replicated = True
    plog.update_high_watermark(1)

    async def run():
        rt = make_runtime(plog, replicated=True)
        rt.start_loading()
        await rt.wait_loaded()
        stable = asyncio.ensure_future(resolve(rt.execute(
            lambda s: CoordinatorResult([], s.fetch_offsets("g", None, latest=True)))))
        await asyncio.sleep(0.01)
        assert not stable.done()
        commit_to(plog, rt, plog.log_end_offset)
        assert {tp: v.offset for tp, v in await stable} == {("t", 0): 2}
        rt.unload()

    asyncio.run(run())
