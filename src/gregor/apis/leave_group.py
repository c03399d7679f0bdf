"""LeaveGroup (13): one member (v0-v2) or a batch of members (v3+)."""

from __future__ import annotations

from typing import Any

from gregor.apis.handler import RequestContext, handles
from gregor.coordinator.group.api import LeaveRequest, LeaveResult, LeavingMember
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import KafkaError


@handles(ApiKey.LEAVE_GROUP, 0, 5)
async def leave_group(ctx: RequestContext, req: Any) -> dict[str, Any]:
    if ctx.version >= 3:
        members = [LeavingMember(m.member_id, m.group_instance_id, getattr(m, "reason", None)) for m in req.members]
    else:
        members = [LeavingMember(req.member_id)]
    try:
        result = await ctx.groups.leave_group(LeaveRequest(req.group_id, members))
    except KafkaError as e:
        result = LeaveResult(e.code)
    top = result.error
    if ctx.version < 3 and not top and result.members:
        top = result.members[0].error  # v0-v2 carry the single member's error at the top level
    return {"throttle_time": 0, "error_code": top,
            "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id, "error_code": m.error}
                        for m in result.members]}
