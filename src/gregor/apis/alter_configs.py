"""AlterConfigs (33) and IncrementalAlterConfigs (44) for topics, this broker and groups (GROUP
resources, Kafka 4.0). AlterConfigs replaces every override of a resource, IncrementalAlterConfigs
applies SET, DELETE, APPEND and SUBTRACT to single keys; both may only validate. The changes
themselves are the topic admin's (topic overrides; in a cluster they are written to ZooKeeper and
every broker applies them) and ``gregor.cluster.dynamic_configs``' (broker
and group keys: which may change at run time, and how they persist)."""

from __future__ import annotations

from typing import Any

from gregor.apis.describe_configs import BROKER, GROUP, TOPIC
from gregor.apis.handler import RequestContext, handles
from gregor.assignment import steering
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode, KafkaError


async def _alter(ctx: RequestContext, req: Any, incremental: bool) -> list[dict[str, Any]]:
    out = []
    for r in req.resources:
        res: dict[str, Any] = {"error_code": ErrorCode.none, "error_message": None,
                               "resource_type": r.resource_type, "resource_name": r.resource_name}
        try:
            if r.resource_type == TOPIC:
                values = {c.name: c.value for c in r.configs}
                ops = {c.name: c.config_operation for c in r.configs} if incremental else None
                await ctx.topics.alter_topic_configs_async(r.resource_name, values, ops, req.validate_only)
            elif r.resource_type == BROKER:
                entries = [(c.name, c.value, c.config_operation if incremental else 0) for c in r.configs]
                ctx.dynamic_configs.alter_broker(r.resource_name, entries, incremental, req.validate_only)
            elif r.resource_type == GROUP:
                entries = [(c.name, c.value, c.config_operation if incremental else 0) for c in r.configs]
                if not incremental:  # AlterConfigs replaces every override of the resource
                    _, overrides = ctx.dynamic_configs.group_config(r.resource_name)
                    entries = [(k, None, 1) for k in overrides] + entries
                await _alter_group(ctx, r.resource_name, entries, req.validate_only)
            else:
                raise KafkaError(ErrorCode.invalid_request, f"resource type {r.resource_type} is not supported")
        except KafkaError as e:
            res["error_code"] = e.code
            res["error_message"] = e.message
        out.append(res)
    return out


async def _alter_group(ctx: RequestContext, group_id: str, entries: list[tuple[str, str | None, int]],
                       validate_only: bool) -> None:
    """A group's configs; a change of its steering (gregor.assignment.*) must fit the group as its
    coordinator knows it (members, topics), else it is refused and nothing changes; once saved,
    the group gets a new epoch so that its members are reassigned."""
    new = ctx.dynamic_configs.preview_group(group_id, entries)
    if not any(k in steering.KEYS for k, _v, _op in entries):
        if not validate_only:
            ctx.dynamic_configs.save_group(group_id, new)
        return
    wanted = steering.Steering.from_config(new)
    problems = ctx.groups.steering_problems(group_id, wanted)
    if problems:
        raise KafkaError(ErrorCode.invalid_config, "; ".join(problems))
    if validate_only:
        return
    ctx.dynamic_configs.save_group(group_id, new)
    await ctx.groups.steering_changed(group_id)


@handles(ApiKey.ALTER_CONFIGS, 0, 2)
async def alter_configs(ctx: RequestContext, req: Any) -> dict[str, Any]:
    return {"throttle_time": 0, "responses": await _alter(ctx, req, incremental=False)}


@handles(ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, 1)
async def incremental_alter_configs(ctx: RequestContext, req: Any) -> dict[str, Any]:
    return {"throttle_time": 0, "responses": await _alter(ctx, req, incremental=True)}
