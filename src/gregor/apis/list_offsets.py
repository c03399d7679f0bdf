"""ListOffsets (2): earliest (-2), latest (-1), max timestamp (-3), earliest local (-4), or the
first offset whose timestamp is at or after a given time.

Only the partition's leader answers (the replication seam, with KIP-320's leader epoch checks);
a debugging request (replica id -2) may be answered by any replica. As Kafka's
fetchOffsetForTimestamp: a consumer's answers never reach past the high watermark (the last
offset it could fetch): latest is the high watermark, and a timestamp or max-timestamp lookup
whose record is at or above it finds nothing (offset -1). A new leader whose high watermark has
not yet reached the start of its leader epoch answers OFFSET_NOT_AVAILABLE (v5+; older versions
LEADER_NOT_AVAILABLE) for latest and for a lookup it cannot answer below it, and the client asks
again. A follower (``replica_id`` >= 0) is answered up to the log end. A read_committed consumer
(``isolation_level`` 1, v2+) is answered up to the last stable offset instead of the high
watermark: latest is the last stable offset, as Kafka's."""

from __future__ import annotations

from typing import Any

from gregor.apis.authorization import TOPIC_REFUSED, Op, denied_topics
from gregor.apis.handler import RequestContext, handles
from gregor.log.storage_errors import CorruptBatch
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.replication.partition import Partition

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL = -1, -2, -3, -4
READ_COMMITTED = 1
CONSUMER_REPLICA_ID, DEBUGGING_REPLICA_ID = -1, -2


@handles(ApiKey.LIST_OFFSETS, 1, 8)
async def list_offsets(ctx: RequestContext, req: Any) -> dict[str, Any]:
    replica_id = getattr(req, "replica_id", CONSUMER_REPLICA_ID)
    committed = getattr(req, "isolation_level", 0) == READ_COMMITTED
    topics = []
    denied = denied_topics(ctx, Op.DESCRIBE, (t.name for t in req.topics))
    for t in req.topics:
        parts = []
        for p in t.partitions:
            entry: dict[str, Any] = {"partition_index": p.partition_index, "error_code": ErrorCode.none,
                                     "timestamp": -1, "offset": -1, "leader_epoch": -1}
            try:
                if t.name in denied:
                    raise KafkaError(ErrorCode.topic_authorization_failed, TOPIC_REFUSED)
                epoch = getattr(p, "current_leader_epoch", -1)
                part = (ctx.replicas.local_partition(t.name, p.partition_index, epoch)
                        if replica_id == DEBUGGING_REPLICA_ID
                        else ctx.replicas.leader_partition(t.name, p.partition_index, epoch))
                _lookup(part, p.timestamp, replica_id, entry, committed)
            except KafkaError as e:  # leadership, epochs, an offline partition, a corrupt batch
                entry["error_code"] = e.code
                if e.code == ErrorCode.offset_not_available and ctx.version < 5:
                    entry["error_code"] = ErrorCode.leader_not_available
            except CorruptBatch:
                entry["error_code"] = ErrorCode.corrupt_message
            except OSError:  # the files could not be read
                entry["error_code"] = ErrorCode.kafka_storage_error
            parts.append(entry)
        topics.append({"name": t.name, "partitions": parts})
    return {"throttle_time": 0, "topics": topics}


def _lookup(part: Partition, ts: int, replica_id: int, entry: dict[str, Any], committed: bool = False) -> None:
    plog = part.log
    client = replica_id < 0
    if client:
        last_fetchable = plog.last_stable_offset if committed else plog.high_watermark
    else:
        last_fetchable = plog.log_end_offset
    lagging = client and part.epoch_start_offset > plog.high_watermark
    not_available = KafkaError(ErrorCode.offset_not_available,
                               f"{part.topic}-{part.partition}: the high watermark ({plog.high_watermark}) is "
                               f"behind the start of leader epoch {part.leader_epoch} ({part.epoch_start_offset})")
    if ts == LATEST:
        if lagging:
            raise not_available
        entry["offset"], entry["leader_epoch"] = last_fetchable, part.leader_epoch
        return
    if ts in (EARLIEST, EARLIEST_LOCAL):
        entry["offset"] = plog.log_start_offset
        entry["leader_epoch"] = max(plog.epochs.epoch_for_offset(plog.log_start_offset), -1)
        return
    if ts == MAX_TIMESTAMP:
        found = plog.max_timestamp_offset()
    elif ts < 0:
        raise KafkaError(ErrorCode.invalid_request, f"timestamp {ts} is not valid")
    else:
        found = plog.offset_for_timestamp(ts)
    if found is None:
        if lagging:
            raise not_available
        return
    offset, timestamp = found
    if offset >= last_fetchable:  # not committed yet: a client may not learn of it
        if lagging:
            raise not_available
        return
    entry["offset"], entry["timestamp"] = offset, timestamp
    entry["leader_epoch"] = max(plog.epochs.epoch_for_offset(offset), -1)
