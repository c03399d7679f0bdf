"""Metadata (3): brokers (this one), topics with their partitions; auto-creates requested topics
when ``auto.create.topics.enable`` and the request allow it."""

from __future__ import annotations

from typing import Any

from gregor.apis.authorization import (
    CLUSTER,
    TOPIC,
    Op,
    allowed,
    authorized_operations,
    cluster_allowed,
    enabled,
)
from gregor.apis.handler import RequestContext, handles
from gregor.cluster.metadata import ClusterMetadata
from gregor.log.topic_registry import Topic
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.security.acl import CLUSTER_NAME

NO_ID = b"\x00" * 16

# Authorized operations (KIP-430) as a bit field of Kafka's AclOperation codes. Without an
# authorizer Kafka grants every operation the resource type supports; "not asked" is INT32_MIN.
OMITTED = -2147483648
READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = 3, 4, 5, 6, 7, 8
CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = 9, 10, 11, 12


def _bits(*ops: int) -> int:
    return sum(1 << op for op in ops)


TOPIC_OPERATIONS = _bits(READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS)
CLUSTER_OPERATIONS = _bits(CREATE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE, ALTER,
                           DESCRIBE)
# groups have configs (GROUP config resources), so Kafka 4.0's five operations
GROUP_OPERATIONS = _bits(READ, DESCRIBE, DELETE, DESCRIBE_CONFIGS, ALTER_CONFIGS)


def topic_entry(topic: Topic, cluster: ClusterMetadata, authorized_operations: int = OMITTED) -> dict[str, Any]:
    return {
        "error_code": ErrorCode.none,
        "name": topic.name,
        "topic_id": topic.topic_id.bytes,
        "is_internal": topic.internal,
        "partitions": [
            {"error_code": ErrorCode.none, "partition_index": p, "leader_id": lp.leader,
             "leader_epoch": lp.leader_epoch, "replica_nodes": lp.replicas, "isr_nodes": lp.isr,
             "offline_replicas": lp.offline_replicas,
             **({"error_code": ErrorCode.leader_not_available} if lp.leader < 0 else {})}
            for p in range(topic.partitions) for lp in (cluster.partition(topic.name, p),)
        ],
        "topic_authorized_operations": authorized_operations,
    }


def broker_entries(ctx: RequestContext) -> list[dict[str, Any]]:
    """The live brokers as the client's listener reaches them (a broker without that listener is
    left out, as Kafka's metadata cache leaves it out)."""
    name = ctx.listener_name
    return [{"node_id": b.node_id, "host": ep[0], "port": ep[1], "rack": b.rack}
            for b in ctx.cluster.brokers() for ep in (b.at(name),) if ep is not None]


@handles(ApiKey.METADATA, 0, 12)
async def metadata(ctx: RequestContext, req: Any) -> dict[str, Any]:
    topics_ = ctx.topics
    requested = req.topics
    all_topics = requested is None or (ctx.version == 0 and len(requested) == 0)
    allow_auto = getattr(req, "allow_auto_topic_creation", True) and ctx.config["auto.create.topics.enable"]
    include_ops = getattr(req, "include_topic_authorized_operations", False)
    secured = enabled(ctx)

    def ops(name: str) -> int:
        if not include_ops:
            return OMITTED
        return authorized_operations(ctx, TOPIC, name) if secured else TOPIC_OPERATIONS

    def describable(name: str) -> bool:
        return not secured or allowed(ctx, Op.DESCRIBE, TOPIC, name)

    denied = {"error_code": ErrorCode.topic_authorization_failed, "topic_id": NO_ID, "partitions": [],
              "is_internal": False}
    topics: list[dict[str, Any]] = []
    if all_topics:
        for t in topics_.all():
            if describable(t.name):  # Kafka lists only the topics the principal may describe
                topics.append(topic_entry(t, ctx.cluster, ops(t.name)))
    else:
        for rt in requested:
            name = rt.name
            if name is None:
                tid = getattr(rt, "topic_id", None)
                found = topics_.get_by_id(tid) if tid is not None else None
                if found is None or not describable(found.name):
                    topics.append({"error_code": ErrorCode.unknown_topic_id, "name": None,
                                   "topic_id": tid.bytes if tid else NO_ID, "partitions": []})
                else:
                    topics.append(topic_entry(found, ctx.cluster, ops(found.name)))
                continue
            if not describable(name):  # Kafka does not tell whether it exists
                topics.append({**denied, "name": name})
                continue
            topic = topics_.get(name)
            if topic is None and allow_auto and secured and not (cluster_allowed(ctx, Op.CREATE)
                                                                  or allowed(ctx, Op.CREATE, TOPIC, name)):
                topics.append({**denied, "name": name})
                continue
            if topic is None and allow_auto:
                try:
                    topic = topics_.create_topic(name, -1, {})
                except KafkaError as e:
                    topics.append({"error_code": e.code, "name": name, "topic_id": NO_ID, "partitions": []})
                    continue
            if topic is None:
                topics.append({"error_code": ErrorCode.unknown_topic_or_partition, "name": name,
                               "topic_id": NO_ID, "partitions": []})
            else:
                topics.append(topic_entry(topic, ctx.cluster, ops(topic.name)))
    return {
        "throttle_time": 0,
        "brokers": broker_entries(ctx),
        "cluster_id": ctx.cluster.cluster_id,
        "controller_id": ctx.cluster.controller_id,
        "topics": topics,
        # v8-v10 only (moved to DescribeCluster in v11)
        "cluster_authorized_operations": (authorized_operations(ctx, CLUSTER, CLUSTER_NAME)
                                          if getattr(req, "include_cluster_authorized_operations", False)
                                          else OMITTED),
    }
