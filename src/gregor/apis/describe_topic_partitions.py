"""DescribeTopicPartitions (75, KIP-966): topics and their partitions, paged by a cursor, as
kafka-python's ``describe_topic_partitions`` and Kafka's own admin client (3.7+) ask for them.

Topics are answered in name order (all topics when the request names none); at most
``response_partition_limit`` partitions per answer (and never more than 2,000, Kafka's default
``max.request.partition.size.limit``); when more remain, ``next_cursor`` names the topic and
partition to ask from next. A topic that does not exist answers UNKNOWN_TOPIC_OR_PARTITION.
Authorized operations are always filled in (every topic operation: there is no authorizer).
"""

from __future__ import annotations

from typing import Any

from gregor.apis.authorization import TOPIC, Op, allowed_names, authorized_operations, enabled
from gregor.apis.handler import RequestContext, handles
from gregor.apis.metadata import NO_ID, TOPIC_OPERATIONS
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode

MAX_PARTITIONS_PER_RESPONSE = 2000


@handles(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, 0)
async def describe_topic_partitions(ctx: RequestContext, req: Any) -> dict[str, Any]:
    topics = ctx.topics
    names = sorted({t.name for t in req.topics}) if req.topics else topics.names()
    visible = allowed_names(ctx, Op.DESCRIBE, TOPIC, names) if enabled(ctx) else None
    if visible is not None and not req.topics:
        names = [n for n in names if n in visible]  # Kafka lists only the topics the principal may describe
    limit = max(1, min(req.response_partition_limit, MAX_PARTITIONS_PER_RESPONSE))
    cursor = req.cursor
    if cursor is not None:
        names = [n for n in names if n >= cursor.topic_name]
    out: list[dict[str, Any]] = []
    next_cursor: dict[str, Any] | None = None
    for i, name in enumerate(names):
        topic = topics.get(name)
        if visible is not None and name not in visible:
            out.append({"error_code": ErrorCode.topic_authorization_failed, "name": name, "topic_id": NO_ID,
                        "is_internal": False, "partitions": [], "topic_authorized_operations": 0})
            continue
        if topic is None:
            out.append({"error_code": ErrorCode.unknown_topic_or_partition, "name": name, "topic_id": NO_ID,
                         "is_internal": False, "partitions": [], "topic_authorized_operations": TOPIC_OPERATIONS})
            continue
        if limit == 0:
            next_cursor = {"topic_name": name, "partition_index": 0}
            break
        first = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        first = max(first, 0)
        last = min(topic.partitions, first + limit)
        out.append({
            "error_code": ErrorCode.none, "name": name, "topic_id": topic.topic_id.bytes,
            "is_internal": topic.internal, "topic_authorized_operations": authorized_operations(ctx, TOPIC, name),
            "partitions": [
                {"error_code": ErrorCode.none, "partition_index": p, "leader_id": lp.leader,
                 "leader_epoch": lp.leader_epoch, "replica_nodes": lp.replicas, "isr_nodes": lp.isr,
                 "eligible_leader_replicas": [], "last_known_elr": [], "offline_replicas": []}
                for p in range(first, last) for lp in (ctx.cluster.partition(name, p),)
            ],
        })
        limit -= last - first
        if last < topic.partitions:
            next_cursor = {"topic_name": name, "partition_index": last}
            break
        if limit == 0 and any(topics.get(n) is not None for n in names[i + 1 :]):
            next_cursor = {"topic_name": names[i + 1], "partition_index": 0}
            break
    return {"throttle_time": 0, "topics": out, "next_cursor": next_cursor}
