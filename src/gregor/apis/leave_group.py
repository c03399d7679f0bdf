"""LeaveGroup (13): one member (v0-v2) or a batch of members (v3+)."""

from __future__ import annotations

from typing import Any

from gregor.apis.handler import RequestContext, handles
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import KafkaError


@handles(ApiKey.LEAVE_GROUP, 0, 5)
async def leave_group(ctx: RequestContext, req: Any) -> dict[str, Any]:
    if ctx.version >= 3:
        members = [(m.member_id, m.group_instance_id, getattr(m, "reason", None)) for m in req.members]
    else:
        members = [(req.member_id, None, None)]
    try:
        top, results = await ctx.groups.write(req.group_id, lambda s: s.leave_group(req.group_id, members))
    except KafkaError as e:
        top, results = e.code, []
    if ctx.version < 3 and not top and results:
        top = results[0][2]  # v0-v2 carry the single member's error at the top level
    return {"throttle_time": 0, "error_code": top,
            "members": [{"member_id": m, "group_instance_id": i, "error_code": c} for m, i, c in results]}
