"""DeleteRecords (21): move a partition's log start offset forward (the admin client's
``delete_records``, ``kafka-delete-records.sh``).

Only the partition's leader answers (NOT_LEADER_OR_FOLLOWER elsewhere: a follower reached with
stale metadata never trims its own log). Offset -1 means the high watermark; any other offset below
0 or above the high watermark is OFFSET_OUT_OF_RANGE. The new start offset is written to
``log-start-offset-checkpoint`` before the answer, so it survives a crash or restart; segments
wholly below it are deleted after that. The answer waits, within the request's timeout, until every
live replica's log start has reached it (Kafka's DelayedDeleteRecords) and carries the low
watermark, the smallest of them (on one node at once). Reads below it answer OFFSET_OUT_OF_RANGE
and ListOffsets earliest returns it. As in Kafka, partitions whose cleanup.policy lacks ``delete``
answer POLICY_VIOLATION and internal topics INVALID_TOPIC_EXCEPTION.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from gregor.apis.authorization import TOPIC_REFUSED, Op, denied_topics
from gregor.apis.handler import RequestContext, handles
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.replication.partition import Partition

log = logging.getLogger(__name__)

HIGH_WATERMARK = -1


@handles(ApiKey.DELETE_RECORDS, 0, 2)
async def delete_records(ctx: RequestContext, req: Any) -> dict[str, Any]:
    topics = []
    moved: list[tuple[dict[str, Any], Partition, int]] = []  # (entry, partition, offset to wait for)
    denied = denied_topics(ctx, Op.DELETE, (t.name for t in req.topics))
    for t in req.topics:
        topic = ctx.topics.get(t.name)
        parts = []
        for p in t.partitions:
            entry: dict[str, Any] = {"partition_index": p.partition_index, "low_watermark": -1,
                                     "error_code": ErrorCode.none}
            try:
                if t.name in denied:
                    raise KafkaError(ErrorCode.topic_authorization_failed, TOPIC_REFUSED)
                if topic is None:
                    raise KafkaError(ErrorCode.unknown_topic_or_partition)
                if topic.internal:
                    raise KafkaError(ErrorCode.invalid_topic_exception)
                part = ctx.replicas.delete_records(t.name, p.partition_index, p.offset)
                moved.append((entry, part, part.log.log_start_offset))
            except KafkaError as e:
                entry["error_code"] = e.code
            parts.append(entry)
        topics.append({"name": t.name, "partitions": parts})
    if not moved:
        return {"throttle_time": 0, "topics": topics}
    try:
        ctx.logs.write_checkpoints()  # the new start offsets first: a crash after this keeps them
    except OSError as e:
        log.error("DeleteRecords: cannot write the log start offset checkpoint: %s", e)
        for entry, _, _ in moved:
            entry["error_code"] = ErrorCode.kafka_storage_error
        return {"throttle_time": 0, "topics": topics}
    for _, part, _ in moved:
        part.log.delete_segments_below_start()
    timeout_s = max(req.timeout.total_seconds(), 0)
    outcomes = await asyncio.gather(*(ctx.replicas.wait_low_watermark(part, offset, timeout_s)
                                      for _, part, offset in moved), return_exceptions=True)
    for (entry, _, _), out in zip(moved, outcomes, strict=True):
        if isinstance(out, KafkaError):
            entry["error_code"] = out.code
        elif isinstance(out, BaseException):
            raise out
        else:
            entry["low_watermark"] = out
    return {"throttle_time": 0, "topics": topics}
