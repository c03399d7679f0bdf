"""OffsetDelete (47): remove committed offsets of a group for partitions it does not consume."""

from __future__ import annotations

from typing import Any

from gregor.apis.handler import RequestContext, handles
from gregor.coordinator.group.api import OffsetDeleteResult
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode, KafkaError


@handles(ApiKey.OFFSET_DELETE, 0, 0)
async def offset_delete(ctx: RequestContext, req: Any) -> dict[str, Any]:
    wanted = [(t.name, p.partition_index) for t in req.topics for p in t.partitions]
    try:
        result = await ctx.groups.delete_offsets(req.group_id, wanted)
    except KafkaError as e:
        result = OffsetDeleteResult(e.code)
    top, errors = result.error, result.partitions
    return {"error_code": top, "throttle_time": 0, "topics": [
        {"name": t.name, "partitions": [{"partition_index": p.partition_index,
                                         "error_code": errors.get((t.name, p.partition_index), ErrorCode.none)}
                                        for p in t.partitions]}
        for t in req.topics] if not top else []}
