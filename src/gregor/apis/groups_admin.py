"""DescribeGroups (15), ListGroups (16), DeleteGroups (42)."""

from __future__ import annotations

from typing import Any

from gregor.apis.handler import RequestContext, handles
from gregor.apis.metadata import GROUP_OPERATIONS, OMITTED
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import KafkaError


@handles(ApiKey.DESCRIBE_GROUPS, 0, 5)
async def describe_groups(ctx: RequestContext, req: Any) -> dict[str, Any]:
    out = []
    ops = GROUP_OPERATIONS if getattr(req, "include_authorized_operations", False) else OMITTED
    for group_id in req.groups:
        try:
            d = ctx.groups.describe_group(group_id)
            out.append({"error_code": d.error, "group_id": group_id, "group_state": d.state,
                        "protocol_type": d.protocol_type, "protocol_data": d.protocol_name, "members": d.members,
                        "authorized_operations": ops})
        except KafkaError as e:
            out.append({"error_code": e.code, "group_id": group_id, "group_state": "", "protocol_type": "",
                        "protocol_data": "", "members": [], "authorized_operations": ops})
    return {"throttle_time": 0, "groups": out}


@handles(ApiKey.LIST_GROUPS, 0, 5)
async def list_groups(ctx: RequestContext, req: Any) -> dict[str, Any]:
    states = {s.lower().strip() for s in getattr(req, "states_filter", ())} or None
    types = {t.lower() for t in getattr(req, "types_filter", ())}
    result = ctx.groups.list_groups(states)
    return {"throttle_time": 0, "error_code": result.error, "groups": [
        {"group_id": g.group_id, "protocol_type": g.protocol_type, "group_state": g.state, "group_type": g.group_type}
        for g in result.groups if not types or g.group_type in types]}


@handles(ApiKey.DELETE_GROUPS, 0, 2)
async def delete_groups(ctx: RequestContext, req: Any) -> dict[str, Any]:
    results = []
    for group_id in req.groups_names:
        try:
            code = await ctx.groups.delete_group(group_id)
        except KafkaError as e:
            code = e.code
        results.append({"group_id": group_id, "error_code": code})
    return {"throttle_time": 0, "results": results}
