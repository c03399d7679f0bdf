"""OffsetForLeaderEpoch (23): where a leader epoch ends in this replica's log (KIP-101, KIP-279).

A follower asks it before fetching from a new leader, to find where its log diverges; a consumer
asks it after a leader change to detect a truncation below its position (KIP-320). The answer for
a requested epoch is the largest epoch at or below it that this log knows and the start offset of
the next higher epoch (the log end for the latest epoch); an epoch older than any known is
UNDEFINED (-1, -1). Only the partition's leader answers (NOT_LEADER_OR_FOLLOWER elsewhere);
``current_leader_epoch`` is checked first, as for Fetch: a follower that asks a new leader which
has not read its own election yet gets UNKNOWN_LEADER_EPOCH and asks again at once.
"""

from __future__ import annotations

from typing import Any

from gregor.apis.authorization import TOPIC_REFUSED, Op, cluster_allowed, denied_topics
from gregor.apis.handler import RequestContext, handles
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode, KafkaError


@handles(ApiKey.OFFSET_FOR_LEADER_EPOCH, 2, 4)
async def offset_for_leader_epoch(ctx: RequestContext, req: Any) -> dict[str, Any]:
    topics = []
    names = [t.topic for t in req.topics]
    if getattr(req, "replica_id", -1) >= 0:  # a follower: CLUSTER_ACTION on the cluster
        denied = set() if cluster_allowed(ctx, Op.CLUSTER_ACTION) else set(names)
    else:
        denied = denied_topics(ctx, Op.DESCRIBE, names)
    for t in req.topics:
        parts = []
        for p in t.partitions:
            entry: dict[str, Any] = {"partition": p.partition, "error_code": ErrorCode.none,
                                     "leader_epoch": -1, "end_offset": -1}
            try:
                if t.topic in denied:
                    raise KafkaError(ErrorCode.topic_authorization_failed, TOPIC_REFUSED)
                plog = ctx.replicas.leader_partition(t.topic, p.partition,
                                                     getattr(p, "current_leader_epoch", -1)).log
                plog.ensure_loaded()
                entry["leader_epoch"], entry["end_offset"] = plog.epochs.end_offset_for(
                    p.leader_epoch, plog.log_end_offset)
            except KafkaError as e:
                entry["error_code"] = e.code
            except OSError:
                entry["error_code"] = ErrorCode.kafka_storage_error
            parts.append(entry)
        topics.append({"topic": t.topic, "partitions": parts})
    return {"throttle_time": 0, "topics": topics}
