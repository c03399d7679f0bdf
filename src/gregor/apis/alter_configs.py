"""AlterConfigs (33) and IncrementalAlterConfigs (44) for topics, this broker and groups (GROUP
resources, Kafka 4.0). AlterConfigs replaces every override of a resource, IncrementalAlterConfigs
applies SET, DELETE, APPEND and SUBTRACT to single keys; both may only validate. The changes
themselves are the topic admin's (topic overrides; in a cluster they are written to ZooKeeper and
every broker applies them) and ``gregor.cluster.dynamic_configs``' (broker and group keys: which
may change at run time, and how they persist; in a cluster group configs are ZooKeeper's,
``gregor.cluster.zk.group_configs``)."""

from __future__ import annotations

from typing import Any

from gregor.apis.authorization import Op, config_refusal
from gregor.apis.describe_configs import BROKER, GROUP, TOPIC
from gregor.apis.handler import RequestContext, handles
from gregor.assignment import steering
from gregor.cluster.dynamic_configs import DELETE, steering_part
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.consumer_offsets import OFFSETS_TOPIC
from gregor.protocol.errors import ErrorCode, KafkaError


async def _alter(ctx: RequestContext, req: Any, incremental: bool) -> list[dict[str, Any]]:
    out = []
    for r in req.resources:
        res: dict[str, Any] = {"error_code": ErrorCode.none, "error_message": None,
                               "resource_type": r.resource_type, "resource_name": r.resource_name}
        try:
            refused = config_refusal(ctx, Op.ALTER_CONFIGS, r.resource_type, r.resource_name)
            if refused is not None:
                raise KafkaError(ErrorCode[refused], "Authorization failed.")
            if r.resource_type == TOPIC:
                values = {c.name: c.value for c in r.configs}
                ops = {c.name: c.config_operation for c in r.configs} if incremental else None
                await ctx.topics.alter_topic_configs_async(r.resource_name, values, ops, req.validate_only)
            elif r.resource_type == BROKER:
                entries = [(c.name, c.value, c.config_operation if incremental else 0) for c in r.configs]
                ctx.dynamic_configs.alter_broker(r.resource_name, entries, incremental, req.validate_only)
            elif r.resource_type == GROUP:
                entries = [(c.name, c.value, c.config_operation if incremental else 0) for c in r.configs]
                await _alter_group(ctx, r.resource_name, entries, req.validate_only, replace=not incremental)
            else:
                raise KafkaError(ErrorCode.invalid_request, f"resource type {r.resource_type} is not supported")
        except KafkaError as e:
            res["error_code"] = e.code
            res["error_message"] = e.message
        out.append(res)
    return out


async def _alter_group(ctx: RequestContext, group_id: str, entries: list[tuple[str, str | None, int]],
                       validate_only: bool, replace: bool) -> None:
    """A group's configs (``replace``: AlterConfigs, every override of the group replaced). A
    change of its steering (gregor.assignment.*) must fit the group as its coordinator knows it
    (members, topics), else it is refused and nothing changes; once saved, the group gets a new
    epoch so that its members are reassigned. In a cluster the configs are ZooKeeper's
    (cluster/zk/group_configs.py): written there, applied by every broker, and the coordinator
    bumps the epoch."""
    dyn = ctx.dynamic_configs
    names_steering = any(k in steering.KEYS for k, _v, _op in entries)

    def compute(current: dict[str, str]) -> dict[str, str]:
        deletes = [(k, None, DELETE) for k in current] if replace else []
        new = dyn.preview_group(group_id, deletes + entries, current)
        if names_steering or steering_part(current) != steering_part(new):
            _check_steering(ctx, group_id, new)
        return new

    if dyn.group_store is not None:
        await dyn.group_store.alter(group_id, compute, validate_only)
        return
    current = dict(dyn.groups.get(group_id, {}))
    new = compute(current)
    if validate_only:
        return
    dyn.save_group(group_id, new)
    if names_steering or steering_part(current) != steering_part(new):
        await ctx.groups.steering_changed(group_id)


def _check_steering(ctx: RequestContext, group_id: str, new: dict[str, str]) -> None:
    wanted = steering.Steering.from_config(new)
    try:
        problems = ctx.groups.steering_problems(group_id, wanted)
    except KafkaError as e:
        if e.code != ErrorCode.not_coordinator:
            raise
        raise KafkaError(e.code, _not_the_coordinator(ctx, group_id, e.message)) from None
    if problems:
        raise KafkaError(ErrorCode.invalid_config, "; ".join(problems))


def _not_the_coordinator(ctx: RequestContext, group_id: str, why: str | None) -> str:
    """NOT_COORDINATOR's message for a steering change sent to another broker: where to send it."""
    leader = ctx.cluster.partition(OFFSETS_TOPIC, ctx.groups.partition_for(group_id)).leader
    me = ctx.cluster.node_id
    what = f"a steering change (gregor.assignment.*) of group {group_id} is checked against its members"
    if leader == me:
        return f"{what} by the group's coordinator, this broker ({me}), which is loading the group now: try again"
    if leader < 0:
        return (f"{what} by the group's coordinator, and the group has none now ({why}); send it to the "
                f"coordinator FindCoordinator names once there is one")
    return (f"{what} by the group's coordinator, broker {leader}, not broker {me}: send it to broker {leader} "
            f"(FindCoordinator names it; gregor groups assign does so)")


@handles(ApiKey.ALTER_CONFIGS, 0, 2)
async def alter_configs(ctx: RequestContext, req: Any) -> dict[str, Any]:
    return {"throttle_time": 0, "responses": await _alter(ctx, req, incremental=False)}


@handles(ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, 1)
async def incremental_alter_configs(ctx: RequestContext, req: Any) -> dict[str, Any]:
    return {"throttle_time": 0, "responses": await _alter(ctx, req, incremental=True)}
