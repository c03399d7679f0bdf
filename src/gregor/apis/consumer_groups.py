"""ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69): the consumer group protocol
(KIP-848). Served, and advertised in ApiVersions, only when group.coordinator.rebalance.protocols
lists ``consumer``."""

from __future__ import annotations

from typing import Any

from gregor.apis.authorization import GROUP, Op, allowed, authorized_operations, enabled
from gregor.apis.handler import RequestContext, handles
from gregor.apis.metadata import GROUP_OPERATIONS, OMITTED
from gregor.coordinator.group.api import ConsumerGroupView, ConsumerHeartbeatRequest, ConsumerMemberView
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode, KafkaError


def _owned(parts: Any) -> dict[Any, frozenset[int]] | None:
    if parts is None:
        return None
    owned: dict[Any, frozenset[int]] = {}
    for tp in parts:
        if tp.topic_id is not None and tp.partitions:
            owned[tp.topic_id] = owned.get(tp.topic_id, frozenset()) | frozenset(tp.partitions)
    return owned


def _timeout_ms(value: Any) -> int:
    """kio gives int32 durations as timedelta; -1 (not sent) as a negative one."""
    if value is None:
        return -1
    if hasattr(value, "total_seconds"):
        return int(round(value.total_seconds() * 1000))
    return int(value)


def _refusal(req: Any, version: int) -> str | None:
    """Why the coordinator must not see ``req`` (None: it may). Kafka checks the member id of v1+
    first, before its group coordinator's other checks. (A group id, member id or regex longer
    than a record key can hold never gets here: the request walk refuses any string over 32767
    bytes, as Kafka's readers do.)"""
    if version >= 1 and not req.member_id.strip():
        return "MemberId can't be empty."
    return None


@handles(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, 1, protocol="consumer")
async def consumer_group_heartbeat(ctx: RequestContext, req: Any) -> dict[str, Any]:
    refusal = _refusal(req, ctx.header.api_version)
    if refusal is not None:
        return {"throttle_time": 0, "error_code": ErrorCode.invalid_request, "error_message": refusal,
                "member_id": None, "member_epoch": 0, "heartbeat_interval": 0, "assignment": None}
    names = req.subscribed_topic_names
    hb = ConsumerHeartbeatRequest(
        group_id=req.group_id, member_id=req.member_id, member_epoch=req.member_epoch,
        client_id=ctx.header.client_id or "", client_host=f"/{ctx.client_host}", instance_id=req.instance_id,
        rack_id=req.rack_id, rebalance_timeout_ms=_timeout_ms(req.rebalance_timeout),
        subscribed_topic_names=list(names) if names is not None else None,
        subscribed_topic_regex=getattr(req, "subscribed_topic_regex", None), server_assignor=req.server_assignor,
        owned=_owned(req.topic_partitions))
    try:
        r = await ctx.groups.consumer_group_heartbeat(hb)
    except KafkaError as e:
        return {"throttle_time": 0, "error_code": e.code, "error_message": e.message or None,
                "member_id": None, "member_epoch": 0, "heartbeat_interval": 0, "assignment": None}
    assignment = None
    if r.assignment is not None:
        assignment = {"topic_partitions": [{"topic_id": t, "partitions": sorted(ps)}
                                           for t, ps in sorted(r.assignment.items(), key=lambda i: str(i[0]))]}
    return {"throttle_time": 0, "error_code": r.error, "error_message": r.error_message, "member_id": r.member_id,
            "member_epoch": r.member_epoch, "heartbeat_interval": r.heartbeat_interval_ms, "assignment": assignment}


def _assignment(parts: dict[Any, list[int]], names: dict[Any, str]) -> dict[str, Any]:
    return {"topic_partitions": [{"topic_id": t, "topic_name": names.get(t, ""), "partitions": ps}
                                 for t, ps in sorted(parts.items(), key=lambda i: names.get(i[0], str(i[0])))]}


# ConsumerGroupDescribe v1's MemberType (KIP-1099): how the member talks to the group
CLASSIC_MEMBER, CONSUMER_MEMBER = 0, 1


def _member(m: ConsumerMemberView, names: dict[Any, str]) -> dict[str, Any]:
    return {"member_id": m.member_id, "instance_id": m.instance_id, "rack_id": m.rack_id,
            "member_epoch": m.member_epoch, "client_id": m.client_id, "client_host": m.client_host,
            "subscribed_topic_names": m.subscribed_topic_names, "subscribed_topic_regex": m.subscribed_topic_regex,
            "assignment": _assignment(m.assigned, names), "target_assignment": _assignment(m.target, names),
            "member_type": CLASSIC_MEMBER if m.classic else CONSUMER_MEMBER}


def _described(group_id: str, view: ConsumerGroupView | None, ops: int) -> dict[str, Any]:
    if view is None:
        return {"error_code": ErrorCode.group_id_not_found, "error_message": f"Group {group_id} not found.",
                "group_id": group_id, "group_state": "", "group_epoch": 0, "assignment_epoch": 0,
                "assignor_name": "", "members": [], "authorized_operations": ops}
    return {"error_code": ErrorCode.none, "error_message": None, "group_id": group_id, "group_state": view.state,
            "group_epoch": view.group_epoch, "assignment_epoch": view.assignment_epoch,
            "assignor_name": view.assignor, "members": [_member(m, view.topic_names) for m in view.members],
            "authorized_operations": ops}


@handles(ApiKey.CONSUMER_GROUP_DESCRIBE, 0, 1, protocol="consumer")
async def consumer_group_describe(ctx: RequestContext, req: Any) -> dict[str, Any]:
    out = []
    for group_id in req.group_ids:
        ops = ((authorized_operations(ctx, GROUP, group_id) if enabled(ctx) else GROUP_OPERATIONS)
               if req.include_authorized_operations else OMITTED)
        if enabled(ctx) and not allowed(ctx, Op.DESCRIBE, GROUP, group_id):
            out.append({"error_code": ErrorCode.group_authorization_failed, "error_message": None,
                        "group_id": group_id, "group_state": "", "group_epoch": 0, "assignment_epoch": 0,
                        "assignor_name": "", "members": [], "authorized_operations": OMITTED})
            continue
        try:
            out.append(_described(group_id, await ctx.groups.describe_consumer_group(group_id), ops))
        except KafkaError as e:
            out.append({"error_code": e.code, "error_message": e.message or None, "group_id": group_id,
                        "group_state": "", "group_epoch": 0, "assignment_epoch": 0, "assignor_name": "",
                        "members": [], "authorized_operations": ops})
    return {"throttle_time": 0, "groups": out}
