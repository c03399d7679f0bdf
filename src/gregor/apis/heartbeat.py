"""Heartbeat (12): answered from memory, writes nothing."""

from __future__ import annotations

from typing import Any

from gregor.apis.handler import RequestContext, handles
from gregor.coordinator.group.api import HeartbeatRequest
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode, KafkaError


@handles(ApiKey.HEARTBEAT, 0, 4)
async def heartbeat(ctx: RequestContext, req: Any) -> dict[str, Any]:
    hb = HeartbeatRequest(req.group_id, req.generation_id, req.member_id, getattr(req, "group_instance_id", None))
    try:
        code = await ctx.groups.heartbeat(hb)
    except KafkaError as e:
        # Kafka answers heartbeats blindly while the coordinator loads
        code = ErrorCode.none if e.code == ErrorCode.coordinator_load_in_progress else e.code
    return {"throttle_time": 0, "error_code": code}
