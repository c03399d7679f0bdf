"""FindCoordinator (10): on one node this broker coordinates every group; in a cluster the
coordinator of a group is the leader of its ``__consumer_offsets`` partition (created on the first
lookup, as Kafka does). Batched lookups from v4. A group whose partition has no leader, or failed
to load, gets COORDINATOR_NOT_AVAILABLE with a message naming the partition and the reason;
transactions are not offered."""

from __future__ import annotations

from typing import Any

from gregor.apis.handler import RequestContext, handles
from gregor.apis.metadata import broker_entries
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.consumer_offsets import OFFSETS_TOPIC
from gregor.protocol.errors import ErrorCode, KafkaError

GROUP, TRANSACTION = 0, 1


def _lookup(ctx: RequestContext, key: str, key_type: int) -> dict[str, Any]:
    b = broker_entries(ctx)[0]
    entry: dict[str, Any] = {"key": key, "node_id": b["node_id"], "host": b["host"], "port": b["port"],
                             "error_code": ErrorCode.none, "error_message": None}
    if key_type == TRANSACTION:
        entry.update(error_code=ErrorCode.transactional_id_authorization_failed,
                     error_message="transactions are not supported by this broker")
    elif key_type != GROUP:
        entry.update(error_code=ErrorCode.invalid_request, error_message=f"unknown key type {key_type}")
    elif not key and ctx.version < 4:
        entry.update(error_code=ErrorCode.invalid_group_id, error_message="empty group id")
    elif ctx.cluster.clustered:
        entry.update(_cluster_coordinator(ctx, key))
    else:
        code, message = ctx.groups.coordinator_status(key)
        entry.update(error_code=code, error_message=message)
    if entry["error_code"]:
        entry.update(node_id=-1, host="", port=-1)
    return entry


def _cluster_coordinator(ctx: RequestContext, group: str) -> dict[str, Any]:
    topic = ctx.topics.get(OFFSETS_TOPIC)
    if topic is None:
        try:
            ctx.groups.ensure_topic()
        except KafkaError as e:
            return {"error_code": ErrorCode.coordinator_not_available,
                    "error_message": f"{OFFSETS_TOPIC} is being created: {e.message}"}
        return {"error_code": ErrorCode.coordinator_not_available,
                "error_message": f"{OFFSETS_TOPIC} is being created"}
    partition = ctx.groups.partition_for(group)
    lp = ctx.cluster.partition(OFFSETS_TOPIC, partition)
    leader = ctx.cluster.broker(lp.leader) if lp.leader >= 0 else None
    if leader is None:
        return {"error_code": ErrorCode.coordinator_not_available,
                "error_message": f"{OFFSETS_TOPIC}-{partition} has no live leader (replicas {lp.replicas}, "
                                 f"ISR {lp.isr}, offline {lp.offline_replicas})"}
    if leader.node_id == ctx.cluster.node_id:
        code, message = ctx.groups.coordinator_status(group)
        if code:
            return {"error_code": code, "error_message": message}
    return {"node_id": leader.node_id, "host": leader.host, "port": leader.port}


@handles(ApiKey.FIND_COORDINATOR, 0, 6)
async def find_coordinator(ctx: RequestContext, req: Any) -> dict[str, Any]:
    key_type = getattr(req, "key_type", GROUP)
    if ctx.version >= 4:
        return {"throttle_time": 0, "coordinators": [_lookup(ctx, k, key_type) for k in req.coordinator_keys]}
    entry = _lookup(ctx, req.key, key_type)
    entry.pop("key")
    return {"throttle_time": 0, **entry}
