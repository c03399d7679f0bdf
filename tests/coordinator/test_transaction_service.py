"""The transaction coordinator service on a broker in this process (no network): a transaction
whose markers are written while the broker briefly does not act as leader of its
``__transaction_state`` partition (confirming its ZooKeeper session after a pause) still
completes; nothing moved, so no other coordinator would complete it."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from gregor.protocol import record_batch as rb
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode
from gregor.protocol.records import build_batch
from gregor.protocol.transaction_log import TRANSACTION_STATE_TOPIC

TID = "paused"


def test_a_transaction_completes_when_leadership_was_unsure_for_a_moment(in_process_broker_factory):
    node = in_process_broker_factory()
    node.start_groups()
    node.run(node.broker.transactions.start())
    try:
        node.services.topics.create_topic("t", 1, {})
        assert node.call(ApiKey.FIND_COORDINATOR, 3, {"key": TID, "key_type": 1}).error_code == 0
        node.run(node.broker.transactions.wait_loaded())
        init = node.call(ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": TID,
                                                      "transaction_timeout": timedelta(seconds=60),
                                                      "producer_id": -1, "producer_epoch": -1})
        pid, epoch = init.producer_id, init.producer_epoch
        add = node.call(ApiKey.ADD_PARTITIONS_TO_TXN, 3, {
            "v3_and_below_transactional_id": TID, "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": epoch, "v3_and_below_topics": [{"name": "t", "partitions": [0]}]})
        assert add.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
        batch = build_batch([(None, b"x")], producer_id=pid, producer_epoch=epoch, base_sequence=0,
                            attributes=rb.TRANSACTIONAL_BIT)
        produced = node.call(ApiKey.PRODUCE, 9, {"transactional_id": TID, "acks": -1, "timeout": 5000, "topic_data": [
            {"name": "t", "partition_data": [{"index": 0, "records": batch}]}]})
        assert produced.responses[0].partition_responses[0].error_code == 0

        replicas = node.services.replicas
        leads = replicas.leads
        unsure = {"calls": 0, "on": False}

        def paused_leads(topic: str, partition: int) -> bool:
            # the first answers once the transaction ended (its markers are then written and it
            # is completed): not acting as leader for a moment (the session guard)
            if topic == TRANSACTION_STATE_TOPIC and unsure["on"] and unsure["calls"] < 3:
                unsure["calls"] += 1
                return False
            return leads(topic, partition)

        replicas.leads = paused_leads  # type: ignore[method-assign]
        ended = node.call(ApiKey.END_TXN, 3, {"transactional_id": TID, "producer_id": pid, "producer_epoch": epoch,
                                              "committed": True})
        assert ended.error_code == ErrorCode.none

        async def completed() -> str:
            for _ in range(300):
                state = node.services.transactions.describe(TID).state
                if state == "CompleteCommit":
                    return state
                await asyncio.sleep(0.02)
            return node.services.transactions.describe(TID).state

        unsure["on"] = True  # the markers are written once the loop runs again
        assert node.run(completed()) == "CompleteCommit"
        assert unsure["calls"] > 0, "the pause was not hit"
    finally:
        node.run(node.broker.transactions.stop())
