"""OffsetCommit (8): answered once the commit's records are in __consumer_offsets."""

from __future__ import annotations

from typing import Any

from gregor.apis.authorization import commit_refusal
from gregor.apis.handler import RequestContext, handles
from gregor.coordinator.group.api import CommitPartition, CommitRequest, CommitResult
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode, KafkaError


@handles(ApiKey.OFFSET_COMMIT, 2, 9)
async def offset_commit(ctx: RequestContext, req: Any) -> dict[str, Any]:
    retention = getattr(req, "retention_time", None)
    retention_ms = int(retention.total_seconds() * 1000) if retention is not None else -1
    partitions = [CommitPartition(t.name, p.partition_index, p.committed_offset,
                                  getattr(p, "committed_leader_epoch", -1), p.committed_metadata)
                  for t in req.topics for p in t.partitions]
    cr = CommitRequest(group_id=req.group_id, generation_id=req.generation_id_or_member_epoch,
                       member_id=req.member_id, group_instance_id=getattr(req, "group_instance_id", None),
                       partitions=partitions, retention_ms=retention_ms if retention_ms >= 0 else -1,
                       api_version=ctx.version)
    errors: CommitResult
    refused, denied = commit_refusal(ctx, req.group_id, (t.name for t in req.topics))
    if refused is not None:
        errors = {(p.topic, p.partition): ErrorCode[refused] for p in partitions}
    elif not req.group_id and ctx.version >= 0 and req.generation_id_or_member_epoch >= 0:
        errors = {(p.topic, p.partition): ErrorCode.invalid_group_id for p in partitions}
    elif denied:  # the others are committed (Kafka's)
        cr.partitions = [p for p in partitions if p.topic not in denied]
        try:
            errors = await ctx.groups.commit_offsets(cr) if cr.partitions else {}
        except KafkaError as e:
            errors = {(p.topic, p.partition): e.code for p in cr.partitions}
        errors.update({(p.topic, p.partition): ErrorCode.topic_authorization_failed for p in partitions
                       if p.topic in denied})
    else:
        try:
            errors = await ctx.groups.commit_offsets(cr)
        except KafkaError as e:
            errors = {(p.topic, p.partition): e.code for p in partitions}
    return {"throttle_time": 0, "topics": [
        {"name": t.name, "partitions": [{"partition_index": p.partition_index,
                                         "error_code": errors.get((t.name, p.partition_index), ErrorCode.none)}
                                        for p in t.partitions]}
        for t in req.topics]}
