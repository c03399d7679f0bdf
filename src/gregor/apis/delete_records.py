"""DeleteRecords (21): move a partition's log start offset forward (the admin client's
``delete_records``, ``kafka-delete-records.sh``).

Offset -1 means the high watermark; any other offset below 0 or above the high watermark is
OFFSET_OUT_OF_RANGE. The new start offset is written to ``log-start-offset-checkpoint`` before the
answer, so it survives a crash or restart; segments wholly below it are deleted after that. Reads
below it answer OFFSET_OUT_OF_RANGE and ListOffsets earliest returns it. As in Kafka, partitions
whose cleanup.policy lacks ``delete`` answer POLICY_VIOLATION and internal topics
INVALID_TOPIC_EXCEPTION.
"""

from __future__ import annotations

import logging
from typing import Any

from gregor.apis.handler import RequestContext, handles
from gregor.log.partition_log import PartitionLog
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

HIGH_WATERMARK = -1


@handles(ApiKey.DELETE_RECORDS, 0, 2)
async def delete_records(ctx: RequestContext, req: Any) -> dict[str, Any]:
    topics = []
    moved: list[PartitionLog] = []
    for t in req.topics:
        topic = ctx.topics.get(t.name)
        parts = []
        for p in t.partitions:
            entry: dict[str, Any] = {"partition_index": p.partition_index, "low_watermark": -1,
                                     "error_code": ErrorCode.none}
            try:
                plog = ctx.logs.get(t.name, p.partition_index)
                if topic is None or plog is None:
                    raise KafkaError(ErrorCode.unknown_topic_or_partition)
                if topic.internal:
                    raise KafkaError(ErrorCode.invalid_topic_exception)
                offset = plog.high_watermark if p.offset == HIGH_WATERMARK else p.offset
                before = plog.log_start_offset
                entry["low_watermark"] = plog.advance_log_start_offset(offset)
                if plog.log_start_offset != before:
                    moved.append(plog)
            except KafkaError as e:
                entry["error_code"] = e.code
                entry["low_watermark"] = -1
            parts.append(entry)
        topics.append({"name": t.name, "partitions": parts})
    if moved:
        try:
            ctx.logs.write_checkpoints()  # the new start offsets first: a crash after this keeps them
        except OSError as e:
            log.error("DeleteRecords: cannot write the log start offset checkpoint: %s", e)
            failed = {(pl.topic, pl.partition) for pl in moved}
            for t in topics:
                for entry in t["partitions"]:
                    if (t["name"], entry["partition_index"]) in failed:
                        entry["error_code"], entry["low_watermark"] = ErrorCode.kafka_storage_error, -1
            return {"throttle_time": 0, "topics": topics}
        for plog in moved:
            plog.delete_segments_below_start()
    return {"throttle_time": 0, "topics": topics}
