"""Transaction markers through the replication seam (write_txn_marker): leader checks, acks=all,
the producer state's refusals, and the last stable offset moving with the high watermark."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from gregor.config import BrokerConfig
from gregor.log.log_manager import LogManager
from gregor.log.topic_registry import Topic, TopicRegistry
from gregor.protocol import record_batch as rb
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.records import build_batch
from gregor.replication.single_node import SingleNodeReplicas
from tests.support.replica_manager import TOPIC, Harness


def txn_batch(pid: int = 7, seq: int = 0, epoch: int = 0) -> bytes:
    return build_batch([(None, b"t")], producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                       attributes=rb.TRANSACTIONAL_BIT)


def run(tmp_path: Any, test: Any, settings: dict[str, str] | None = None) -> Any:
    async def body() -> Any:
        h = Harness(tmp_path, settings)
        try:
            await h.start()
            return await test(h)
        finally:
            await h.close()
    return asyncio.run(asyncio.wait_for(body(), 30))


def test_a_marker_waits_for_the_isr_and_moves_the_last_stable_offset(tmp_path):
    async def body(h: Harness) -> None:
        part = h.lead(isr=[1, 2])
        hwms: list[int] = []
        h.rm.on_high_watermark.append(lambda t, p, off: hwms.append(off))
        _, w = h.rm.append_records(TOPIC, 0, txn_batch(), -1, 5)
        h.rm.follower_fetched(part, 2, 1, 0)
        assert await w == ErrorCode.none
        assert part.log.last_stable_offset == 0  # the transaction is ongoing
        task = asyncio.ensure_future(h.rm.write_txn_marker(TOPIC, 0, 7, 0, 3, True, 5))
        await asyncio.sleep(0.01)
        assert not task.done() and part.log.last_stable_offset == 0  # the marker is above the HW
        waiter = asyncio.ensure_future(h.logs.notifier.wait([(TOPIC, 0)], 5))
        await asyncio.sleep(0)
        h.rm.follower_fetched(part, 2, 2, 0)
        assert await task == 1
        assert part.log.last_stable_offset == 2 and hwms[-1] == 2
        await asyncio.wait_for(waiter, 1)  # a read_committed long poll wakes up
    run(tmp_path, body)


def test_marker_refusals(tmp_path):
    async def body(h: Harness) -> None:
        part = h.lead(isr=[1, 2])
        h.rm.append_records(TOPIC, 0, txn_batch(epoch=2), 1, 5)
        with pytest.raises(KafkaError) as e:
            await h.rm.write_txn_marker(TOPIC, 0, 7, 1, 0, True, 5)
        assert e.value.code == ErrorCode.invalid_producer_epoch
        h.rm.follower_fetched(part, 2, 1, 0)
        task = asyncio.ensure_future(h.rm.write_txn_marker(TOPIC, 0, 7, 2, 5, False, 5))
        await asyncio.sleep(0)
        h.rm.follower_fetched(part, 2, 2, 0)
        assert await task == 1 and part.log.aborted_transactions(0, 2) == [(7, 0)]
        h.rm.append_records(TOPIC, 0, txn_batch(seq=1, epoch=2), 1, 5)
        with pytest.raises(KafkaError) as e:
            await h.rm.write_txn_marker(TOPIC, 0, 7, 2, 4, True, 5)
        assert e.value.code == ErrorCode.transaction_coordinator_fenced
        with pytest.raises(KafkaError) as e:
            await h.rm.write_txn_marker(TOPIC, 0, 7, 2, 5, True, 0.05)
        assert e.value.code == ErrorCode.request_timed_out  # written; broker 2 never confirmed
        with pytest.raises(KafkaError) as e:
            await h.rm.write_txn_marker(TOPIC, 1, 7, 2, 5, True, 5)
        assert e.value.code == ErrorCode.not_leader_or_follower  # not hosted here
    run(tmp_path, body)


def test_a_marker_needs_min_insync_replicas(tmp_path):
    async def body(h: Harness) -> None:
        h.lead(isr=[1])
        with pytest.raises(KafkaError) as e:
            await h.rm.write_txn_marker(TOPIC, 0, 7, 0, 0, True, 5)
        assert e.value.code == ErrorCode.not_enough_replicas
    run(tmp_path, body)


def test_single_node_writes_markers_at_once(tmp_path):
    async def body() -> None:
        config = BrokerConfig.from_mapping({"log.dirs": str(tmp_path), "node.id": "1"})
        registry = TopicRegistry(config.data_dir)
        logs = LogManager(config.data_dir, config.topic_defaults(), registry)
        logs.startup()
        topic = Topic("t", uuid.uuid4(), 1, {})
        registry.add_topic(topic)
        logs.create_logs(topic)
        rm = SingleNodeReplicas(config, 1, logs, registry)
        await rm.start()
        hw: list[int] = []
        rm.on_high_watermark.append(lambda t, p, off: hw.append(off))
        rm.append_records("t", 0, txn_batch(), -1, 5)
        plog = logs.get("t", 0)
        assert plog.last_stable_offset == 0
        assert await rm.write_txn_marker("t", 0, 7, 0, 0, False, 5) == 1
        assert plog.last_stable_offset == 2 and hw[-1] == 2
        assert plog.aborted_transactions(0, 2) == [(7, 0)]
        with pytest.raises(KafkaError) as e:
            await rm.write_txn_marker("nope", 0, 7, 0, 0, False, 5)
        assert e.value.code == ErrorCode.unknown_topic_or_partition
        await rm.stop()
        logs.shutdown()
    asyncio.run(body())
