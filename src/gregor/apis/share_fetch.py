"""ShareFetch (78) and ShareAcknowledge (79): share consumers' records and acknowledgements
(KIP-932), served by the share-partitions' leaders (coordinator/share/service.py)."""

from __future__ import annotations

import uuid
from typing import Any

from gregor.apis.authorization import TOPIC, Op, allowed_names, enabled
from gregor.apis.handler import RequestContext, handles
from gregor.coordinator.share.service import Acks, PartitionAnswer, ShareAnswer, ack_batches
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode

BATCH_OPTIMIZED, RECORD_LIMIT = 0, 1  # ShareFetch v2's ShareAcquireMode


def _names(ctx: RequestContext, topic_ids: set[Any]) -> dict[Any, str]:
    out = {}
    for tid in topic_ids:
        topic = ctx.topics.get_by_id(tid) if isinstance(tid, uuid.UUID) else None
        if topic is not None:
            out[tid] = topic.name
    return out


def _readable(ctx: RequestContext, names: dict[Any, str]) -> set[str]:
    wanted = set(names.values())
    return allowed_names(ctx, Op.READ, TOPIC, wanted) if enabled(ctx) else wanted


def _acks(topics: Any, names: dict[Any, str], readable: set[str], refused: list[PartitionAnswer]) -> Acks:
    acks: Acks = {}
    for t in topics:
        name = names.get(t.topic_id)
        for p in t.partitions:
            if not p.acknowledgement_batches:
                continue
            if name is None or name not in readable:
                code = ErrorCode.unknown_topic_id if name is None else ErrorCode.topic_authorization_failed
                refused.append(PartitionAnswer(t.topic_id, p.partition_index, ack_error=code))
                continue
            acks[(name, p.partition_index)] = (t.topic_id, ack_batches(p.acknowledgement_batches))
    return acks


def _partition(ctx: RequestContext, a: PartitionAnswer, names: dict[Any, str], fetch: bool) -> dict[str, Any]:
    name = names.get(a.topic_id)
    leader_id, leader_epoch = -1, -1
    if name is not None:
        meta = ctx.cluster.partition(name, a.partition)
        leader_id, leader_epoch = meta.leader, meta.leader_epoch
    out: dict[str, Any] = {"partition_index": a.partition, "error_code": a.error, "error_message": a.message,
                           "acknowledge_error_code": a.ack_error, "acknowledge_error_message": a.ack_message,
                           "current_leader": {"leader_id": leader_id, "leader_epoch": leader_epoch}}
    if fetch:
        f = a.fetched
        out["records"] = f.records if f is not None else None
        out["acquired_records"] = [{"first_offset": r.first_offset, "last_offset": r.last_offset,
                                    "delivery_count": r.delivery_count} for r in (f.acquired if f else [])]
    return out


def _endpoints(ctx: RequestContext, answers: list[PartitionAnswer]) -> list[dict[str, Any]]:
    """The current leaders of the partitions answered NOT_LEADER_OR_FOLLOWER."""
    out = {}
    for a in answers:
        if a.error == ErrorCode.not_leader_or_follower:
            topic = ctx.topics.get_by_id(a.topic_id)
            leader = ctx.cluster.partition(topic.name, a.partition).leader if topic is not None else -1
            broker = ctx.cluster.broker(leader) if leader >= 0 else None
            if broker is not None:
                endpoint = broker.at(ctx.listener_name)
                if endpoint is not None:
                    out[leader] = {"node_id": leader, "host": endpoint[0], "port": endpoint[1], "rack": broker.rack}
    return list(out.values())


def _by_topic(ctx: RequestContext, answer: ShareAnswer, names: dict[Any, str], fetch: bool) -> list[dict[str, Any]]:
    grouped: dict[Any, list[dict[str, Any]]] = {}
    for a in answer.partitions:
        grouped.setdefault(a.topic_id, []).append(_partition(ctx, a, names, fetch))
    return [{"topic_id": tid, "partitions": ps} for tid, ps in grouped.items()]


@handles(ApiKey.SHARE_FETCH, 1, 2, protocol="share")
async def share_fetch(ctx: RequestContext, req: Any) -> dict[str, Any]:
    mode = int(getattr(req, "share_acquire_mode", BATCH_OPTIMIZED))  # KIP-1206, v2
    if mode not in (BATCH_OPTIMIZED, RECORD_LIMIT):
        return {"throttle_time": 0, "error_code": ErrorCode.invalid_request,
                "error_message": f"unknown share acquire mode {mode}", "acquisition_lock_timeout": 0,
                "responses": [], "node_endpoints": []}
    ids = {t.topic_id for t in req.topics} | {t.topic_id for t in req.forgotten_topics_data}
    names = _names(ctx, ids)
    readable = _readable(ctx, names)
    refused: list[PartitionAnswer] = []
    wanted = []
    for t in req.topics:
        name = names.get(t.topic_id)
        for p in t.partitions:
            if name is None:
                refused.append(PartitionAnswer(t.topic_id, p.partition_index, ErrorCode.unknown_topic_id))
            elif name not in readable:
                refused.append(PartitionAnswer(t.topic_id, p.partition_index, ErrorCode.topic_authorization_failed))
            else:
                wanted.append((name, p.partition_index, t.topic_id))
    forgotten = [(names[t.topic_id], p) for t in req.forgotten_topics_data if t.topic_id in names for p in t.partitions]
    acks = _acks(req.topics, names, readable, refused)
    answer = await ctx.shares.share_fetch(
        req.group_id or "", req.member_id or "", req.share_session_epoch, wanted, forgotten, acks,
        req.max_records, min(max(req.max_bytes, 0), ctx.config["fetch.max.bytes"]), req.max_wait.total_seconds(),
        ctx.shares.connection_token(ctx.connection_state), record_limit=mode == RECORD_LIMIT)
    answer.partitions += refused
    return {"throttle_time": 0, "error_code": answer.error, "error_message": answer.message,
            "acquisition_lock_timeout": answer.lock_timeout_ms,
            "responses": _by_topic(ctx, answer, names, fetch=True) if not answer.error else [],
            "node_endpoints": _endpoints(ctx, answer.partitions)}


@handles(ApiKey.SHARE_ACKNOWLEDGE, 1, 2, protocol="share")
async def share_acknowledge(ctx: RequestContext, req: Any) -> dict[str, Any]:
    names = _names(ctx, {t.topic_id for t in req.topics})
    readable = _readable(ctx, names)
    refused: list[PartitionAnswer] = []
    acks = _acks(req.topics, names, readable, refused)
    answer = await ctx.shares.share_acknowledge(req.group_id or "", req.member_id or "", req.share_session_epoch,
                                                acks, ctx.shares.connection_token(ctx.connection_state))
    answer.partitions += refused
    for a in answer.partitions:  # ShareAcknowledge answers its errors in error_code
        a.error, a.message = a.ack_error, a.ack_message
    return {"throttle_time": 0, "error_code": answer.error, "error_message": answer.message,
            "acquisition_lock_timeout": answer.lock_timeout_ms,
            "responses": _by_topic(ctx, answer, names, fetch=False) if not answer.error else [],
            "node_endpoints": _endpoints(ctx, answer.partitions)}
