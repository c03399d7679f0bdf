"""Metadata (3): brokers (this one), topics with their partitions; auto-creates requested topics
when ``auto.create.topics.enable`` and the request allow it."""

from __future__ import annotations

from typing import Any

from gregor.cluster.topics import Topic
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.server.dispatcher import RequestContext, handles

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


def topic_entry(topic: Topic, node_id: int, authorized_operations: int = OMITTED) -> dict[str, Any]:
    return {
        "error_code": ErrorCode.none,
        "name": topic.name,
        "topic_id": topic.topic_id.bytes,
        "is_internal": topic.internal,
        "partitions": [
            {"error_code": ErrorCode.none, "partition_index": p, "leader_id": node_id, "leader_epoch": 0,
             "replica_nodes": [node_id], "isr_nodes": [node_id], "offline_replicas": []}
            for p in range(topic.partitions)
        ],
        "topic_authorized_operations": authorized_operations,
    }


def broker_entries(ctx: RequestContext) -> list[dict[str, Any]]:
    host, port = ctx.broker.config.advertised()
    if port == 0:
        port = ctx.broker.bound_port
    return [{"node_id": ctx.broker.node_id, "host": host, "port": port, "rack": None}]


@handles(ApiKey.METADATA, 0, 12)
async def metadata(ctx: RequestContext, req: Any) -> dict[str, Any]:
    broker = ctx.broker
    requested = req.topics
    all_topics = requested is None or (ctx.version == 0 and len(requested) == 0)
    allow_auto = getattr(req, "allow_auto_topic_creation", True) and broker.config["auto.create.topics.enable"]
    topic_ops = TOPIC_OPERATIONS if getattr(req, "include_topic_authorized_operations", False) else OMITTED
    topics: list[dict[str, Any]] = []
    if all_topics:
        for t in sorted(broker.topics.by_name.values(), key=lambda t: t.name):
            topics.append(topic_entry(t, broker.node_id, topic_ops))
    else:
        for rt in requested:
            name = rt.name
            if name is None:
                tid = getattr(rt, "topic_id", None)
                found = broker.topics.by_id.get(tid) if tid is not None else None
                if found is None:
                    topics.append({"error_code": ErrorCode.unknown_topic_id, "name": None,
                                   "topic_id": tid.bytes if tid else NO_ID, "partitions": []})
                else:
                    topics.append(topic_entry(found, broker.node_id, topic_ops))
                continue
            topic = broker.topics.get(name)
            if topic is None and allow_auto:
                try:
                    topic = broker.create_topic(name, -1, {})
                except KafkaError as e:
                    topics.append({"error_code": e.code, "name": name, "topic_id": NO_ID, "partitions": []})
                    continue
            if topic is None:
                topics.append({"error_code": ErrorCode.unknown_topic_or_partition, "name": name,
                               "topic_id": NO_ID, "partitions": []})
            else:
                topics.append(topic_entry(topic, broker.node_id, topic_ops))
    return {
        "throttle_time": 0,
        "brokers": broker_entries(ctx),
        "cluster_id": broker.cluster_id,
        "controller_id": broker.node_id,
        "topics": topics,
        # v8-v10 only (moved to DescribeCluster in v11)
        "cluster_authorized_operations": (CLUSTER_OPERATIONS if getattr(req, "include_cluster_authorized_operations",
                                                                        False) else OMITTED),
    }
