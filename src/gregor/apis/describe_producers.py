"""DescribeProducers (61): the producers a partition's log has state for (KIP-664, the admin
client's ``describe_producers``, ``kafka-transactions.sh describe-producers`` and ``find-hanging``).

As Kafka's ReplicaManager.activeProducerState, any replica hosting the partition answers, leader
or follower (the admin client asks the leader unless told a broker id): a partition that does not
exist is UNKNOWN_TOPIC_OR_PARTITION, one without a replica here NOT_LEADER_OR_FOLLOWER, an offline
one KAFKA_STORAGE_ERROR, each with a message. Each producer: id, epoch, last sequence, last
timestamp, the coordinator epoch of its last marker (-1 before any) and the first offset of its
ongoing transaction (-1 when none), as ``PartitionLog.producers()`` keeps them.
"""

from __future__ import annotations

from typing import Any

from gregor.apis.authorization import TOPIC_REFUSED, Op, denied_topics
from gregor.apis.handler import RequestContext, handles
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode, KafkaError


@handles(ApiKey.DESCRIBE_PRODUCERS, 0, 0)
async def describe_producers(ctx: RequestContext, req: Any) -> dict[str, Any]:
    topics = []
    denied = denied_topics(ctx, Op.READ, (t.name for t in req.topics))
    for t in req.topics:
        parts = []
        for index in t.partition_indexes:
            entry: dict[str, Any] = {"partition_index": index, "error_code": ErrorCode.none, "error_message": None,
                                     "active_producers": []}
            try:
                if t.name in denied:
                    raise KafkaError(ErrorCode.topic_authorization_failed, TOPIC_REFUSED)
                part = ctx.replicas.local_partition(t.name, index)
                producers = part.log.producers()
            except KafkaError as e:
                entry["error_code"], entry["error_message"] = e.code, e.message or None
            except OSError as e:  # the partition's files could not be read
                entry["error_code"] = ErrorCode.kafka_storage_error
                entry["error_message"] = f"{t.name}-{index}: {e.strerror or e}"
            else:
                entry["active_producers"] = [
                    {"producer_id": p.producer_id, "producer_epoch": p.producer_epoch,
                     "last_sequence": p.last_sequence, "last_timestamp": p.last_timestamp,
                     "coordinator_epoch": p.coordinator_epoch, "current_txn_start_offset": p.current_txn_start_offset}
                    for p in sorted(producers, key=lambda p: p.producer_id)]
            parts.append(entry)
        topics.append({"name": t.name, "partitions": parts})
    return {"throttle_time": 0, "topics": topics}
