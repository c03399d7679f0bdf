"""ListOffsets (2): earliest (-2), latest (-1), max timestamp (-3), earliest local (-4), or the
first offset whose timestamp is at or after a given time.

In a cluster only the leader answers (NOT_LEADER_OR_FOLLOWER elsewhere, leader epochs checked as
KIP-320 says); latest is the high watermark for clients and the log end for a follower
(``replica_id`` >= 0), and the answer carries the leader epoch."""

from __future__ import annotations

from typing import Any

from gregor.apis.handler import RequestContext, handles
from gregor.log.storage_errors import CorruptBatch
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode, KafkaError

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL = -1, -2, -3, -4


@handles(ApiKey.LIST_OFFSETS, 1, 8)
async def list_offsets(ctx: RequestContext, req: Any) -> dict[str, Any]:
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            entry: dict[str, Any] = {"partition_index": p.partition_index, "error_code": ErrorCode.none,
                                     "timestamp": -1, "offset": -1, "leader_epoch": 0}
            try:
                if ctx.replicas is not None:
                    part = ctx.replicas.leader_partition(t.name, p.partition_index,
                                                         getattr(p, "current_leader_epoch", -1))
                    entry["leader_epoch"] = part.leader_epoch
                    if p.timestamp == LATEST and getattr(req, "replica_id", -1) >= 0:
                        entry["offset"] = part.log.log_end_offset
                        parts.append(entry)
                        continue
                _lookup(ctx, t.name, p.partition_index, p.timestamp, entry)
            except KafkaError as e:  # an offline partition (KAFKA_STORAGE_ERROR), a corrupt batch
                entry["error_code"] = e.code
            except CorruptBatch:
                entry["error_code"] = ErrorCode.corrupt_message
            except OSError:  # the files could not be read
                entry["error_code"] = ErrorCode.kafka_storage_error
            parts.append(entry)
        topics.append({"name": t.name, "partitions": parts})
    return {"throttle_time": 0, "topics": topics}


def _lookup(ctx: RequestContext, topic: str, partition: int, ts: int, entry: dict[str, Any]) -> None:
    plog = ctx.logs.get(topic, partition)
    if plog is None:
        entry["error_code"] = ErrorCode.unknown_topic_or_partition
    elif ts == LATEST:
        entry["offset"] = plog.high_watermark
    elif ts in (EARLIEST, EARLIEST_LOCAL):
        entry["offset"] = plog.log_start_offset
    elif ts == MAX_TIMESTAMP:
        found = plog.max_timestamp_offset()
        if found is not None:
            entry["offset"], entry["timestamp"] = found
    elif ts < 0:
        entry["error_code"] = ErrorCode.invalid_request
    else:
        hit = plog.offset_for_timestamp(ts)
        if hit is not None:
            entry["offset"], entry["timestamp"] = hit
