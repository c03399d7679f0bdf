"""DescribeGroups (15), ListGroups (16), DeleteGroups (42)."""

from __future__ import annotations

from typing import Any

from gregor.apis.authorization import GROUP, Op, allowed, allowed_names, authorized_operations, cluster_allowed, enabled
from gregor.apis.handler import RequestContext, handles
from gregor.apis.metadata import GROUP_OPERATIONS, OMITTED
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode, KafkaError


@handles(ApiKey.DESCRIBE_GROUPS, 0, 5)
async def describe_groups(ctx: RequestContext, req: Any) -> dict[str, Any]:
    out = []
    include = getattr(req, "include_authorized_operations", False)
    for group_id in req.groups:
        ops = (authorized_operations(ctx, GROUP, group_id) if enabled(ctx) else GROUP_OPERATIONS) if include \
            else OMITTED
        if enabled(ctx) and not allowed(ctx, Op.DESCRIBE, GROUP, group_id):
            out.append({"error_code": ErrorCode.group_authorization_failed, "group_id": group_id, "group_state": "",
                        "protocol_type": "", "protocol_data": "", "members": [], "authorized_operations": OMITTED})
            continue
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
    groups = [g for g in result.groups if not types or g.group_type in types]
    if enabled(ctx) and not cluster_allowed(ctx, Op.DESCRIBE):  # Kafka: only the groups it may describe
        visible = allowed_names(ctx, Op.DESCRIBE, GROUP, {g.group_id for g in groups})
        groups = [g for g in groups if g.group_id in visible]
    return {"throttle_time": 0, "error_code": result.error, "groups": [
        {"group_id": g.group_id, "protocol_type": g.protocol_type, "group_state": g.state, "group_type": g.group_type}
        for g in groups]}


@handles(ApiKey.DELETE_GROUPS, 0, 2)
async def delete_groups(ctx: RequestContext, req: Any) -> dict[str, Any]:
    results = []
    for group_id in req.groups_names:
        if enabled(ctx) and not allowed(ctx, Op.DELETE, GROUP, group_id):
            results.append({"group_id": group_id, "error_code": ErrorCode.group_authorization_failed})
            continue
        try:
            code = await ctx.groups.delete_group(group_id)
        except KafkaError as e:
            code = e.code
        results.append({"group_id": group_id, "error_code": code})
    return {"throttle_time": 0, "results": results}
