"""CreateTopics (19), DeleteTopics (20), CreatePartitions (37): thin wrappers over the broker's
topic operations; each topic is answered on its own, one failure does not fail the others.

One request may create at most ``topic.creation.max.partitions`` partitions, summed over its
topics in order; a topic that would exceed what is left is answered POLICY_VIOLATION (as a
CreateTopicPolicy would), the others are created. Files are made off the event loop."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from gregor.apis.authorization import TOPIC, TOPIC_REFUSED, Op, allowed, cluster_allowed, enabled
from gregor.apis.describe_configs import topic_config_entries
from gregor.apis.handler import RequestContext, handles
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from gregor.config import BrokerConfig


@handles(ApiKey.CREATE_TOPICS, 2, 7)
async def create_topics(ctx: RequestContext, req: Any) -> dict[str, Any]:
    """Every topic checked in request order (duplicates, the partition budget), then all created
    at once: on a cluster each creation waits for its leaders, and 100 topics wait once, not 100
    times."""
    results = []
    seen: set[str] = set()
    budget = PartitionBudget(ctx.config)
    creations = []
    secured = enabled(ctx)  # Kafka: CREATE on the cluster, or on each topic
    may_create_any = secured and cluster_allowed(ctx, Op.CREATE)
    for t in req.topics:
        res: dict[str, Any] = {"name": t.name, "error_code": ErrorCode.none, "error_message": None,
                               "num_partitions": -1, "replication_factor": -1, "configs": None,
                               "topic_id": None}
        results.append(res)
        try:
            if secured and not (may_create_any or allowed(ctx, Op.CREATE, TOPIC, t.name)):
                raise KafkaError(ErrorCode.topic_authorization_failed, TOPIC_REFUSED)
            if t.name in seen:
                raise KafkaError(ErrorCode.invalid_request, f"topic '{t.name}' appears twice in the request")
            seen.add(t.name)
            assignments: dict[int, list[int]] | None = None
            if t.assignments:
                if t.num_partitions != -1 or t.replication_factor != -1:
                    raise KafkaError(ErrorCode.invalid_request,
                                     "give either replica assignments or partitions and replication factor")
                assignments = {a.partition_index: list(a.broker_ids) for a in t.assignments}
                partitions = len(t.assignments)
            else:
                partitions = t.num_partitions
            budget.take(partitions if partitions != -1 else ctx.config["num.partitions"])
            creations.append(_create_one(ctx, req, t, res, partitions, assignments))
        except KafkaError as e:
            res["error_code"] = e.code
            res["error_message"] = e.message
    await asyncio.gather(*creations)
    return {"throttle_time": 0, "topics": results}


async def _create_one(ctx: RequestContext, req: Any, t: Any, res: dict[str, Any], partitions: int,
                      assignments: dict[int, list[int]] | None) -> None:
    try:
        configs = {c.name: c.value for c in t.configs}
        topic = await ctx.topics.create_topic_async(
            t.name, partitions, configs, validate_only=req.validate_only,
            replication_factor=t.replication_factor, assignments=assignments,
            timeout_s=max(req.timeout.total_seconds(), 0))
        res["num_partitions"] = partitions if partitions != -1 else ctx.config["num.partitions"]
        res["replication_factor"] = ctx.topics.replication_factor_of(t.replication_factor, assignments)
        if topic is not None and enabled(ctx) and not allowed(ctx, Op.DESCRIBE_CONFIGS, TOPIC, t.name):
            res["topic_id"] = topic.topic_id  # Kafka: created, its configs not shown
            res["topic_config_error_code"] = ErrorCode.topic_authorization_failed
        elif topic is not None:
            res["topic_id"] = topic.topic_id
            res["configs"] = [
                {"name": e["name"], "value": e["value"], "read_only": False,
                 "config_source": e["config_source"], "is_sensitive": False}
                for e in topic_config_entries(ctx, topic, None)
            ]
    except KafkaError as e:
        res["error_code"] = e.code
        res["error_message"] = e.message


@handles(ApiKey.DELETE_TOPICS, 1, 6)
async def delete_topics(ctx: RequestContext, req: Any) -> dict[str, Any]:
    """Every topic's deletion started at once and waited for together."""
    requests: list[tuple[str | None, Any]]
    if ctx.version >= 6:  # by name or by topic id
        requests = [(t.name, t.topic_id) for t in req.topics]
    else:
        requests = [(n, None) for n in req.topic_names]
    results = [{"name": name, "topic_id": tid, "error_code": ErrorCode.none, "error_message": None}
               for name, tid in requests]
    await asyncio.gather(*(_delete_one(ctx, res) for res in results))
    return {"throttle_time": 0, "responses": results}


async def _delete_one(ctx: RequestContext, res: dict[str, Any]) -> None:
    try:
        name = res["name"]
        if name is None:
            topic = ctx.topics.get_by_id(res["topic_id"])
            if topic is None:
                raise KafkaError(ErrorCode.unknown_topic_id, f"no topic has id {res['topic_id']}")
            if enabled(ctx) and not allowed(ctx, Op.DESCRIBE, TOPIC, topic.name):
                raise KafkaError(ErrorCode.topic_authorization_failed, TOPIC_REFUSED)  # the name stays hidden
            name = res["name"] = topic.name
        if enabled(ctx) and not allowed(ctx, Op.DELETE, TOPIC, name):
            raise KafkaError(ErrorCode.topic_authorization_failed, TOPIC_REFUSED)
        deleted = await ctx.topics.delete_topic_async(name)
        res["topic_id"] = deleted.topic_id
    except KafkaError as e:
        res["error_code"] = e.code
        res["error_message"] = e.message


@handles(ApiKey.CREATE_PARTITIONS, 0, 3)
async def create_partitions(ctx: RequestContext, req: Any) -> dict[str, Any]:
    results = []
    budget = PartitionBudget(ctx.config)
    for t in req.topics:
        res: dict[str, Any] = {"name": t.name, "error_code": ErrorCode.none, "error_message": None}
        try:
            if enabled(ctx) and not allowed(ctx, Op.ALTER, TOPIC, t.name):
                raise KafkaError(ErrorCode.topic_authorization_failed, TOPIC_REFUSED)
            existing = ctx.topics.get(t.name)
            if existing is not None and t.count > existing.partitions:
                budget.take(t.count - existing.partitions)
            await ctx.topics.add_partitions_async(
                t.name, t.count, validate_only=req.validate_only,
                assignments=[list(a.broker_ids) for a in t.assignments] if t.assignments is not None else None)
        except KafkaError as e:
            res["error_code"] = e.code
            res["error_message"] = e.message
        results.append(res)
    return {"throttle_time": 0, "results": results}


class PartitionBudget:
    """What is left of ``topic.creation.max.partitions`` for the rest of one request."""

    def __init__(self, config: BrokerConfig) -> None:
        self.limit = int(config["topic.creation.max.partitions"])
        self.left = self.limit

    def take(self, n: int) -> None:
        if n > self.left:
            raise KafkaError(ErrorCode.policy_violation,
                             f"{n} partitions would exceed topic.creation.max.partitions={self.limit} for one "
                             f"request ({self.left} left)")
        if n > 0:
            self.left -= n
