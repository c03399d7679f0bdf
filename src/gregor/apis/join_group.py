"""JoinGroup (11): waits (deferred) until the rebalance completes."""

from __future__ import annotations

from typing import Any

from gregor.apis.handler import RequestContext, handles
from gregor.coordinator.group.api import JoinRequest, JoinResult
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import KafkaError


def client_host(ctx: RequestContext) -> str:
    return "/" + ctx.client_host  # Kafka reports hosts as InetAddress.toString(): "/127.0.0.1"


@handles(ApiKey.JOIN_GROUP, 0, 9)
async def join_group(ctx: RequestContext, req: Any) -> dict[str, Any]:
    session_ms = int(req.session_timeout.total_seconds() * 1000)
    rebalance = getattr(req, "rebalance_timeout", None)
    rebalance_ms = int(rebalance.total_seconds() * 1000) if rebalance is not None else session_ms
    jr = JoinRequest(
        group_id=req.group_id, member_id=req.member_id, group_instance_id=getattr(req, "group_instance_id", None),
        session_timeout_ms=session_ms, rebalance_timeout_ms=rebalance_ms if rebalance_ms > 0 else session_ms,
        protocol_type=req.protocol_type, protocols=[(p.name, p.metadata) for p in req.protocols],
        client_id=ctx.header.client_id or "", client_host=client_host(ctx),
        require_known_member_id=ctx.version >= 4, reason=getattr(req, "reason", None))
    try:
        result = await ctx.groups.join_group(jr)
    except KafkaError as e:
        result = JoinResult(error=e.code, member_id=req.member_id)
    return {
        "throttle_time": 0, "error_code": result.error, "generation_id": result.generation_id,
        "protocol_type": result.protocol_type, "protocol_name": result.protocol_name,
        "leader": result.leader, "skip_assignment": result.skip_assignment, "member_id": result.member_id,
        "members": result.members,
    }
