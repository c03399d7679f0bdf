"""ShareGroupHeartbeat (76), ShareGroupDescribe (77) and DescribeShareGroupOffsets (90): share-group
membership and progress (KIP-932), served and advertised when group.coordinator.rebalance.protocols
lists ``share`` (the default)."""

from __future__ import annotations

import uuid
from typing import Any

from gregor.apis.authorization import GROUP, Op, allowed, authorized_operations, denied_topics, enabled
from gregor.apis.handler import RequestContext, handles
from gregor.apis.metadata import GROUP_OPERATIONS, OMITTED
from gregor.coordinator.group.share_group import ShareGroup
from gregor.coordinator.group.share_group_manager import ShareHeartbeatRequest
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode, KafkaError

ASSIGNOR = "simple"  # KIP-932's share assignor (assignment/share.py)


def _refused(code: ErrorCode, message: str | None) -> dict[str, Any]:
    return {"throttle_time": 0, "error_code": code, "error_message": message, "member_id": None,
            "member_epoch": 0, "heartbeat_interval": 0, "assignment": None}


@handles(ApiKey.SHARE_GROUP_HEARTBEAT, 1, 1, protocol="share")
async def share_group_heartbeat(ctx: RequestContext, req: Any) -> dict[str, Any]:
    names = req.subscribed_topic_names
    if names and enabled(ctx) and denied_topics(ctx, Op.DESCRIBE, names):
        # Kafka: a member may subscribe only to topics it may describe
        return _refused(ErrorCode.topic_authorization_failed, "Topic authorization failed.")
    hb = ShareHeartbeatRequest(group_id=req.group_id, member_id=req.member_id, member_epoch=req.member_epoch,
                               client_id=ctx.header.client_id or "", client_host=f"/{ctx.client_host}",
                               rack_id=req.rack_id, subscribed_topic_names=list(names) if names is not None else None)
    try:
        r = await ctx.groups.share_group_heartbeat(hb)
    except KafkaError as e:
        return _refused(e.code, e.message or None)
    assignment = None
    if r.assignment is not None:
        assignment = {"topic_partitions": [{"topic_id": t, "partitions": sorted(ps)}
                                           for t, ps in sorted(r.assignment.items(), key=lambda i: str(i[0]))]}
    return {"throttle_time": 0, "error_code": r.error, "error_message": r.message, "member_id": r.member_id,
            "member_epoch": r.member_epoch, "heartbeat_interval": r.heartbeat_interval_ms, "assignment": assignment}


def _described(ctx: RequestContext, group_id: str, group: ShareGroup | None, ops: int) -> dict[str, Any]:
    if group is None:
        return _error(group_id, ErrorCode.group_id_not_found, f"Group {group_id} not found.", ops)
    names: dict[Any, str] = {}
    for m in group.members.values():
        for t in m.assigned:
            if t not in names:
                topic = ctx.topics.get_by_id(t)
                names[t] = topic.name if topic is not None else ""
    members = [{"member_id": m.member_id, "rack_id": m.rack_id, "member_epoch": m.member_epoch,
                "client_id": m.client_id, "client_host": m.client_host,
                "subscribed_topic_names": list(m.subscribed_topic_names),
                "assignment": {"topic_partitions": [
                    {"topic_id": t, "topic_name": names.get(t, ""), "partitions": sorted(ps)}
                    for t, ps in sorted(m.assigned.items(), key=lambda i: names.get(i[0], ""))]}}
               for m in sorted(group.members.values(), key=lambda m: m.member_id)]
    return {"error_code": ErrorCode.none, "error_message": None, "group_id": group_id, "group_state": group.state,
            "group_epoch": group.group_epoch, "assignment_epoch": group.assignment_epoch, "assignor_name": ASSIGNOR,
            "members": members, "authorized_operations": ops}


def _error(group_id: str, code: ErrorCode, message: str | None, ops: int) -> dict[str, Any]:
    return {"error_code": code, "error_message": message, "group_id": group_id, "group_state": "",
            "group_epoch": 0, "assignment_epoch": 0, "assignor_name": "", "members": [], "authorized_operations": ops}


@handles(ApiKey.SHARE_GROUP_DESCRIBE, 1, 1, protocol="share")
async def share_group_describe(ctx: RequestContext, req: Any) -> dict[str, Any]:
    out = []
    for group_id in req.group_ids:
        ops = ((authorized_operations(ctx, GROUP, group_id) if enabled(ctx) else GROUP_OPERATIONS)
               if req.include_authorized_operations else OMITTED)
        if enabled(ctx) and not allowed(ctx, Op.DESCRIBE, GROUP, group_id):
            out.append(_error(group_id, ErrorCode.group_authorization_failed, None, OMITTED))
            continue
        try:
            out.append(_described(ctx, group_id, await ctx.groups.describe_share_group(group_id), ops))
        except KafkaError as e:
            out.append(_error(group_id, e.code, e.message or None, ops))
    return {"throttle_time": 0, "groups": out}



@handles(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 0, 1, protocol="share")
async def describe_share_group_offsets(ctx: RequestContext, req: Any) -> dict[str, Any]:
    """The share-partitions' start offsets (and, v1, lag) of share groups, from the share
    coordinator: every partition the group initialised, or the topics asked for."""
    out = []
    for g in req.groups:
        entry: dict[str, Any] = {"group_id": g.group_id, "topics": [], "error_code": ErrorCode.none,
                                 "error_message": None}
        out.append(entry)
        if enabled(ctx) and not allowed(ctx, Op.DESCRIBE, GROUP, g.group_id):
            entry["error_code"] = ErrorCode.group_authorization_failed
            continue
        try:
            group = await ctx.groups.describe_share_group(g.group_id)
        except KafkaError as e:
            entry.update(error_code=e.code, error_message=e.message)
            continue
        if group is None:
            entry.update(error_code=ErrorCode.group_id_not_found, error_message=f"Group {g.group_id} not found.")
            continue
        wanted: list[tuple[str, Any, list[int]]] = []
        if g.topics is None:
            for tid, (name, held) in sorted(group.initialized.items(), key=lambda i: i[1][0]):
                wanted.append((name, tid, sorted(held)))
        else:
            for t in g.topics:
                topic = ctx.topics.get(t.topic_name)
                wanted.append((t.topic_name, topic.topic_id if topic is not None else None, list(t.partitions)))
        for name, tid, ps in wanted:
            if tid is None:
                entry["topics"].append({"topic_name": name, "topic_id": uuid.UUID(int=0), "partitions": [
                    {"partition_index": p, "start_offset": -1, "leader_epoch": -1, "lag": -1,
                     "error_code": ErrorCode.unknown_topic_or_partition, "error_message": None} for p in ps]})
                continue
            answers = await ctx.shares.describe_offsets(g.group_id, [(name, p, tid) for p in ps])
            entry["topics"].append({"topic_name": name, "topic_id": tid, "partitions": [
                {"partition_index": p, "start_offset": start, "leader_epoch": epoch, "lag": lag, "error_code": code,
                 "error_message": message} for p, (start, epoch, lag, code, message) in zip(ps, answers, strict=True)]})
    return {"throttle_time": 0, "groups": out}


async def _group_refusal(ctx: RequestContext, group_id: str, added: dict[Any, tuple[str, frozenset[int]]],
                         removed: set[Any]) -> tuple[ErrorCode, str | None]:
    """The group coordinator's say on an operator's change of a share group's offsets: the group
    is created empty if it does not exist (as Kafka), must have no members, and lists the
    partitions with state afterwards."""
    if enabled(ctx) and not allowed(ctx, Op.READ, GROUP, group_id):
        return ErrorCode.group_authorization_failed, None
    try:
        code = await ctx.groups.share_offsets_changed(group_id, added, removed)
    except KafkaError as e:
        return e.code, e.message
    if code == ErrorCode.non_empty_group:
        return code, f"The share group {group_id} has members: its offsets can be changed only while it is empty."
    if code == ErrorCode.group_id_not_found:
        return code, f"Group {group_id} is not a share group."
    return code, None


@handles(ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, 0, protocol="share")
async def alter_share_group_offsets(ctx: RequestContext, req: Any) -> dict[str, Any]:
    """An empty share group's share-partitions start again at the offsets given (nothing in
    flight), as kafka-share-groups.sh --reset-offsets."""
    added = {}
    for t in req.topics:
        topic = ctx.topics.get(t.topic_name)
        if topic is not None:
            added[topic.topic_id] = (t.topic_name, frozenset(p.partition_index for p in t.partitions
                                                             if 0 <= p.partition_index < topic.partitions))
    code, message = await _group_refusal(ctx, req.group_id, added, set())
    if code:
        return {"throttle_time": 0, "error_code": code, "error_message": message, "responses": []}
    out = []
    for t in req.topics:
        topic = ctx.topics.get(t.topic_name)
        if topic is None:
            out.append({"topic_name": t.topic_name, "topic_id": uuid.UUID(int=0), "partitions": [
                {"partition_index": p.partition_index, "error_code": ErrorCode.unknown_topic_or_partition,
                 "error_message": None} for p in t.partitions]})
            continue
        wanted = [(t.topic_name, p.partition_index, topic.topic_id, max(int(p.start_offset), 0))
                  for p in t.partitions]
        answers = await ctx.shares.reset_offsets(req.group_id, wanted)
        out.append({"topic_name": t.topic_name, "topic_id": topic.topic_id, "partitions": [
            {"partition_index": p.partition_index, "error_code": c, "error_message": m}
            for p, (c, m) in zip(t.partitions, answers, strict=True)]})
    return {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None, "responses": out}


@handles(ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0, 0, protocol="share")
async def delete_share_group_offsets(ctx: RequestContext, req: Any) -> dict[str, Any]:
    """An empty share group forgets where it is in the topics given: its next consumer starts as
    share.auto.offset.reset says."""
    known = [ctx.topics.get(t.topic_name) for t in req.topics]
    code, message = await _group_refusal(ctx, req.group_id, {}, {t.topic_id for t in known if t is not None})
    if code:
        return {"throttle_time": 0, "error_code": code, "error_message": message, "responses": []}
    out = []
    for t in req.topics:
        topic = ctx.topics.get(t.topic_name)
        if topic is None:
            out.append({"topic_name": t.topic_name, "topic_id": uuid.UUID(int=0),
                        "error_code": ErrorCode.unknown_topic_or_partition, "error_message": None})
            continue
        answers = await ctx.shares.reset_offsets(req.group_id, [(t.topic_name, p, topic.topic_id, -1)
                                                                for p in range(topic.partitions)])
        failed = [(c, m) for c, m in answers if c]
        out.append({"topic_name": t.topic_name, "topic_id": topic.topic_id,
                    "error_code": failed[0][0] if failed else ErrorCode.none,
                    "error_message": failed[0][1] if failed else None})
    return {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None, "responses": out}
