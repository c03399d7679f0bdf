"""SyncGroup (14): the leader's assignment is written to __consumer_offsets, then every member
gets its part."""

from __future__ import annotations

from typing import Any

from gregor.apis.handler import RequestContext, handles
from gregor.coordinator.group.api import SyncRequest, SyncResult
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode, KafkaError


@handles(ApiKey.SYNC_GROUP, 0, 5)
async def sync_group(ctx: RequestContext, req: Any) -> dict[str, Any]:
    sr = SyncRequest(group_id=req.group_id, generation_id=req.generation_id, member_id=req.member_id,
                     group_instance_id=getattr(req, "group_instance_id", None),
                     protocol_type=getattr(req, "protocol_type", None),
                     protocol_name=getattr(req, "protocol_name", None),
                     assignments={a.member_id: a.assignment for a in req.assignments})
    try:
        result = await ctx.groups.sync_group(sr)
    except KafkaError as e:
        # Kafka: while the coordinator loads, the rebalance state is gone; REBALANCE_IN_PROGRESS
        # makes the member rejoin without rediscovering the coordinator.
        code = ErrorCode.rebalance_in_progress if e.code == ErrorCode.coordinator_load_in_progress else e.code
        result = SyncResult(error=code)
    return {"throttle_time": 0, "error_code": result.error, "protocol_type": result.protocol_type,
            "protocol_name": result.protocol_name, "assignment": result.assignment}
