"""The transaction coordinator shard on the real runtime (ShardRuntime over a LogWriter on a real
PartitionLog, no network): a commit from InitProducerId to CompleteCommit, the records on disk in
Kafka's bytes, and a new coordinator loading the partition and finishing what was left."""

from __future__ import annotations

import asyncio

import pytest

from gregor.config import BrokerConfig
from gregor.coordinator.runtime.partition_writer import LogWriter
from gregor.coordinator.runtime.shard_runtime import ShardRuntime, ShardState, resolve
from gregor.coordinator.transaction.api import TransactionConfig, TxnMarkers
from gregor.coordinator.transaction.shard import RECORD_SERDE, TransactionCoordinatorShard
from gregor.log.partition_log import PartitionLog, now_ms
from gregor.protocol.errors import ErrorCode
from gregor.protocol.records import iter_batches, iter_key_values
from gregor.protocol.transaction_log import TRANSACTION_STATE_TOPIC, TxnState, decode_key, decode_value
from tests.coordinator.transaction_harness import persisted


@pytest.fixture
def plog(tmp_path):
    cfg = BrokerConfig.from_mapping({}).topic_defaults()
    cfg.update({"cleanup.policy": "compact", "segment.bytes": 1 << 20})
    log = PartitionLog(tmp_path / f"{TRANSACTION_STATE_TOPIC}-0", TRANSACTION_STATE_TOPIC, 0, cfg)
    log.open(clean_shutdown=False, recovery_point=0)
    return log


def make_runtime(plog, sent, epoch=3):
    def make_shard(partition, timer):
        return TransactionCoordinatorShard(partition, TransactionConfig(), now_ms, timer, coordinator_epoch=epoch,
                                           send_markers=sent.append)

    return ShardRuntime(0, plog, make_shard, RECORD_SERDE, LogWriter(plog), label="transaction metadata")


def records_on_disk(plog):
    data = plog.read(plog.log_start_offset, 1 << 20).records
    out = []
    for h in iter_batches(data):
        for kb, vb in iter_key_values(data, h):
            key = decode_key(kb)
            out.append((key.transactional_id, decode_value(key, vb)))
    return out


def test_commit_on_the_runtime_and_a_new_coordinator_finishes_it(plog):
    async def run():
        sent: list[TxnMarkers] = []
        rt = make_runtime(plog, sent)
        rt.start_loading()
        await rt.wait_loaded()
        r = await resolve(rt.execute(lambda s: s.init_producer_id("tx", 60_000, new_producer_id=4000)))
        assert (r.error, r.producer_id, r.producer_epoch) == (ErrorCode.none, 4000, 0)
        added = await resolve(rt.execute(lambda s: s.add_partitions("tx", 4000, 0, [("t", 0), ("t", 1)])))
        assert added.error == ErrorCode.none
        ended = await resolve(rt.execute(lambda s: s.end_txn("tx", 4000, 0, True)))
        assert ended.error == ErrorCode.none
        assert sent == [TxnMarkers("tx", 4000, 0, True, frozenset({("t", 0), ("t", 1)}), 3, 0)]
        before = persisted(rt.shard)
        rt.unload()

        # a new leader (epoch 4) loads the partition and hands the markers over again
        again: list[TxnMarkers] = []
        rt2 = make_runtime(plog, again, epoch=4)
        rt2.start_loading()
        await rt2.wait_loaded()
        assert rt2.state is ShardState.ACTIVE
        assert persisted(rt2.shard) == before
        assert again == [TxnMarkers("tx", 4000, 0, True, frozenset({("t", 0), ("t", 1)}), 4, 0)]
        done = await resolve(rt2.execute(lambda s: s.complete_markers("tx", 4000, 0)))
        assert done == ErrorCode.none
        assert rt2.read(lambda s: s.describe_transaction("tx")).state == "CompleteCommit"
        rt2.unload()

        states = [(tid, v.state) for tid, v in records_on_disk(plog)]
        assert states == [("tx", TxnState.EMPTY), ("tx", TxnState.ONGOING), ("tx", TxnState.PREPARE_COMMIT),
                          ("tx", TxnState.COMPLETE_COMMIT)]

    asyncio.run(run())


def test_refusals_write_nothing(plog):
    async def run():
        sent: list[TxnMarkers] = []
        rt = make_runtime(plog, sent)
        rt.start_loading()
        await rt.wait_loaded()
        end = plog.log_end_offset
        res = await resolve(rt.execute(lambda s: s.end_txn("nope", 1, 0, True)))
        assert res.error == ErrorCode.invalid_producer_id_mapping
        assert plog.log_end_offset == end
        rt.unload()

    asyncio.run(run())
