"""Offsets committed in a transaction (TxnOffsetCommit) on the shard runtime over a real log, no
network: pending until the transaction's marker, committed or dropped by it, the newest write
winning over a transaction's older one, UNSTABLE_OFFSET_COMMIT for stable reads meanwhile, KIP-447
fencing, and loading (markers and transactional batches replayed in log order) giving back the
same state."""

import asyncio
import random

import pytest

from gregor.coordinator.group.api import CommitPartition, CommitRequest, JoinRequest, SyncRequest
from gregor.coordinator.group.context import GroupConfig
from gregor.coordinator.group.shard import RECORD_SERDE, GroupCoordinatorShard
from gregor.coordinator.runtime.partition_writer import LogWriter
from gregor.coordinator.runtime.shard_runtime import ShardRuntime, resolve
from gregor.log.partition_log import now_ms
from gregor.protocol.errors import ErrorCode

PID, EPOCH = 4000, 3


def runtime(plog):
    return ShardRuntime(0, plog, lambda p, timer: GroupCoordinatorShard(
        p, GroupConfig(initial_rebalance_delay_ms=0), now_ms, timer), RECORD_SERDE, LogWriter(plog))


def request(group, offsets, generation=-1, member_id=""):
    return CommitRequest(group, generation, member_id, None,
                         [CommitPartition("t", p, o, -1, "") for p, o in offsets.items()])


def committed(rt, group="g"):
    return {tp: v.offset for tp, v in rt.read(lambda s: s.fetch_offsets(group, None))}


def stable(rt, group="g", partitions=4):
    """OffsetFetch with require_stable for partitions 0..3 of t (consumers name their partitions)."""
    wanted = [("t", p) for p in range(partitions)]
    return dict(rt.read(lambda s: s.fetch_offsets(group, wanted, latest=True)))


def pending_offsets(rt):
    return {pid: {tp: v.offset for tp, v in by.get("g", {}).items()}
            for pid, by in rt.shard.offsets_mgr.pending.items() if by.get("g")}


async def loaded(plog):
    rt = runtime(plog)
    rt.start_loading()
    await rt.wait_loaded()
    return rt


def test_offsets_in_a_transaction_wait_for_its_commit_marker(plog):
    async def run():
        rt = await loaded(plog)
        rt.execute(lambda s: s.commit_offsets(request("g", {0: 1})))
        answer = rt.execute(lambda s: s.txn_commit_offsets(request("g", {0: 10, 1: 20}), PID, EPOCH))
        assert await resolve(answer) == {("t", 0): ErrorCode.none, ("t", 1): ErrorCode.none}
        assert committed(rt) == {("t", 0): 1}
        # a stable read (consumers' require_stable) is told to retry while the transaction is open
        rows = stable(rt)
        assert rows[("t", 0)] == ErrorCode.unstable_offset_commit
        assert committed(rt, "other") == {}
        await resolve(rt.complete_transaction(PID, EPOCH, 0, commit=True))
        assert committed(rt) == {("t", 0): 10, ("t", 1): 20}
        assert all(not isinstance(v, ErrorCode) for v in stable(rt).values())
        # the batch was transactional and the marker a control batch of the producer
        reloaded = await loaded(plog)
        assert committed(reloaded) == {("t", 0): 10, ("t", 1): 20}
        assert reloaded.shard.offsets_mgr.pending == {}

    asyncio.run(run())


def test_an_aborted_transaction_leaves_the_offsets_as_they_were(plog):
    async def run():
        rt = await loaded(plog)
        rt.execute(lambda s: s.commit_offsets(request("g", {0: 1})))
        rt.execute(lambda s: s.txn_commit_offsets(request("g", {0: 10}), PID, EPOCH))
        await resolve(rt.complete_transaction(PID, EPOCH, 0, commit=False))
        assert committed(rt) == {("t", 0): 1}
        assert committed(await loaded(plog)) == {("t", 0): 1}

    asyncio.run(run())


def test_a_plain_commit_after_the_transactions_write_wins(plog):
    """Kafka keeps the commit with the higher record offset when the marker comes."""
    async def run():
        rt = await loaded(plog)
        rt.execute(lambda s: s.txn_commit_offsets(request("g", {0: 10, 1: 10}), PID, EPOCH))
        rt.execute(lambda s: s.commit_offsets(request("g", {0: 30})))
        await resolve(rt.complete_transaction(PID, EPOCH, 0, commit=True))
        assert committed(rt) == {("t", 0): 30, ("t", 1): 10}
        assert committed(await loaded(plog)) == {("t", 0): 30, ("t", 1): 10}

    asyncio.run(run())


def test_a_loaded_open_transaction_is_completed_by_a_marker_after_the_load(plog):
    async def run():
        rt = await loaded(plog)
        rt.execute(lambda s: s.txn_commit_offsets(request("g", {0: 10}), PID, EPOCH))
        rt.unload()
        moved = await loaded(plog)  # a new coordinator: the transaction is still open
        assert stable(moved)[("t", 0)] == ErrorCode.unstable_offset_commit
        await resolve(moved.complete_transaction(PID, EPOCH, 0, commit=True))
        assert committed(moved) == {("t", 0): 10}

    asyncio.run(run())


def test_a_zombie_member_is_fenced_and_the_group_state_is_not_enforced(plog):
    """KIP-447: a transactional commit names the member and generation it consumed under; an
    older generation is ILLEGAL_GENERATION, an unknown member UNKNOWN_MEMBER_ID; a group in the
    middle of a rebalance still takes a current member's transactional commit."""
    async def run():
        rt = await loaded(plog)
        def join(member_id):
            return JoinRequest("g", member_id, None, 30000, 30000, "consumer", [("range", b"")], "c", "/h")

        member = (await resolve(rt.execute(lambda s: s.join_group(join(""))))).member_id
        gen = (await resolve(rt.execute(lambda s: s.join_group(join(member))))).generation_id
        await resolve(rt.execute(lambda s: s.sync_group(SyncRequest("g", gen, member, None, "consumer", "range",
                                                                      {member: b""}))))
        ok = await resolve(rt.execute(lambda s: s.txn_commit_offsets(request("g", {0: 5}, gen, member), PID, EPOCH)))
        assert ok == {("t", 0): ErrorCode.none}
        stale = await resolve(rt.execute(lambda s: s.txn_commit_offsets(
            request("g", {0: 6}, gen - 1, member), PID, EPOCH)))
        assert stale == {("t", 0): ErrorCode.illegal_generation}
        stranger = await resolve(rt.execute(lambda s: s.txn_commit_offsets(
            request("g", {0: 6}, gen, "stranger"), PID, EPOCH)))
        assert stranger == {("t", 0): ErrorCode.unknown_member_id}
        # without member and generation (older clients): accepted, as Kafka does
        plain = await resolve(rt.execute(lambda s: s.txn_commit_offsets(request("g", {0: 7}), PID, EPOCH)))
        assert plain == {("t", 0): ErrorCode.none}
        ghost = await resolve(rt.execute(lambda s: s.txn_commit_offsets(request("ghost", {0: 1}, 2, "m"), PID, EPOCH)))
        assert ghost == {("t", 0): ErrorCode.illegal_generation}

    asyncio.run(run())


@pytest.mark.parametrize("seed", range(8))
def test_random_histories_load_to_the_state_they_were_written_with(plog, seed):
    """Plain commits, transactional commits of several producers, commits and aborts in any
    interleaving: the loaded state equals the live one, and equals a model that applies each
    transaction's offsets at its commit unless the partition was written since."""
    rnd = random.Random(seed)

    async def run():
        rt = await loaded(plog)
        model: dict[tuple[str, int], int] = {}
        pending: dict[int, dict[tuple[str, int], int]] = {}
        for value in range(1, 301):
            op = rnd.random()
            pid = rnd.choice([10, 11, 12])
            p = rnd.randrange(4)
            if op < 0.35:
                rt.execute(lambda s, p=p, v=value: s.commit_offsets(request("g", {p: v})))
                model[("t", p)] = value
                for offs in pending.values():
                    offs.pop(("t", p), None)
            elif op < 0.75:
                rt.execute(lambda s, p=p, v=value, pid=pid: s.txn_commit_offsets(request("g", {p: v}), pid, 0))
                pending.setdefault(pid, {})[("t", p)] = value
            elif pid in pending:
                commit = rnd.random() < 0.6
                await resolve(rt.complete_transaction(pid, 0, 0, commit))
                offs = pending.pop(pid)
                if commit:
                    model.update(offs)
        assert committed(rt) == model
        again = await loaded(plog)
        assert committed(again) == model
        live = pending_offsets(rt)
        assert live == {pid: offs for pid, offs in pending.items() if offs}
        assert pending_offsets(again) == live
        for tp, v in stable(again).items():
            assert (v == ErrorCode.unstable_offset_commit) == any(tp in offs for offs in live.values())

    asyncio.run(run())
