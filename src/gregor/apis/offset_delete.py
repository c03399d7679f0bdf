"""OffsetDelete (47): remove committed offsets of a group for partitions it does not consume."""

from __future__ import annotations

from typing import Any

from gregor.apis.authorization import Op, denied_topics
from gregor.apis.handler import RequestContext, handles
from gregor.coordinator.group.api import OffsetDeleteResult
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode, KafkaError


@handles(ApiKey.OFFSET_DELETE, 0, 0)
async def offset_delete(ctx: RequestContext, req: Any) -> dict[str, Any]:
    denied = denied_topics(ctx, Op.READ, (t.name for t in req.topics))  # (DELETE on the group: the gate)
    wanted = [(t.name, p.partition_index) for t in req.topics for p in t.partitions if t.name not in denied]
    try:
        result = await ctx.groups.delete_offsets(req.group_id, wanted)
    except KafkaError as e:
        result = OffsetDeleteResult(e.code)
    top, errors = result.error, dict(result.partitions)
    errors.update({(t.name, p.partition_index): ErrorCode.topic_authorization_failed
                   for t in req.topics if t.name in denied for p in t.partitions})
    return {"error_code": top, "throttle_time": 0, "topics": [
        {"name": t.name, "partitions": [{"partition_index": p.partition_index,
                                         "error_code": errors.get((t.name, p.partition_index), ErrorCode.none)}
                                        for p in t.partitions]}
        for t in req.topics] if not top else []}
