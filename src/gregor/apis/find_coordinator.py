"""FindCoordinator (10): on one node this broker coordinates every group; in a cluster the
coordinator of a group is the leader of its ``__consumer_offsets`` partition (created on the first
lookup once offsets.topic.replication.factor brokers are alive, as Kafka does). Batched lookups
from v4. A group without a coordinator gets COORDINATOR_NOT_AVAILABLE with a message saying why in
plain words (coordinator/group/locator.py); a group whose shard is loading gets its coordinator
and, in the message, the load's progress. A transactional id's coordinator (key type 1) is the
leader of its ``__transaction_state`` partition (created on the first lookup); a share-partition's
(key type 2, "group:topicId:partition", asked by share-partition leaders) the leader of its
``__share_group_state`` partition."""

from __future__ import annotations

import base64
import uuid
from typing import Any

from gregor.apis.authorization import GROUP as GROUP_RESOURCE
from gregor.apis.authorization import TXN_ID, Op, allowed, cluster_allowed, enabled
from gregor.apis.handler import RequestContext, handles
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode
from gregor.protocol.share_state_records import SharePartitionKey

GROUP, TRANSACTION, SHARE = 0, 1, 2


def _lookup(ctx: RequestContext, key: str, key_type: int) -> dict[str, Any]:
    entry: dict[str, Any] = {"key": key, "node_id": -1, "host": "", "port": -1,
                             "error_code": ErrorCode.none, "error_message": None}
    if enabled(ctx) and key_type in (GROUP, TRANSACTION) and not allowed(
            ctx, Op.DESCRIBE, TXN_ID if key_type == TRANSACTION else GROUP_RESOURCE, key):
        entry.update(error_code=ErrorCode.transactional_id_authorization_failed if key_type == TRANSACTION
                     else ErrorCode.group_authorization_failed)
    elif key_type == TRANSACTION:
        node_id, code, reason = ctx.transactions.locate(key)
        broker = ctx.cluster.broker(node_id) if not code else None
        entry.update(error_code=code, error_message=reason)
        ep = broker.at(ctx.listener_name) if broker is not None else None
        if broker is not None and ep is not None:
            entry.update(node_id=broker.node_id, host=ep[0], port=ep[1])
        elif not code:
            entry.update(error_code=ErrorCode.coordinator_not_available,
                         error_message=f"broker {node_id} (the transaction coordinator) is not alive")
    elif key_type == SHARE:  # a share-partition's coordinator (between brokers; CLUSTER_ACTION)
        _share_coordinator(ctx, key, entry)
    elif key_type != GROUP:
        entry.update(error_code=ErrorCode.invalid_request, error_message=f"unknown key type {key_type}")
    elif not key and ctx.version < 4:
        entry.update(error_code=ErrorCode.invalid_group_id, error_message="empty group id")
    else:
        where = ctx.groups.locate(key)
        entry.update(error_code=where.error, error_message=where.reason)
        broker = ctx.cluster.broker(where.node_id) if not where.error else None
        ep = broker.at(ctx.listener_name) if broker is not None else None
        if broker is not None and ep is not None:
            entry.update(node_id=broker.node_id, host=ep[0], port=ep[1])
        elif not where.error:  # the leader left between the two reads
            entry.update(error_code=ErrorCode.coordinator_not_available,
                         error_message=f"broker {where.node_id} (the coordinator) is not alive")
    if entry["error_code"]:
        entry.update(node_id=-1, host="", port=-1)
    return entry


def _share_coordinator(ctx: RequestContext, key: str, entry: dict[str, Any]) -> None:
    parts = key.rsplit(":", 2)
    spk = None
    if len(parts) == 3 and parts[2].lstrip("-").isdigit():
        try:
            spk = SharePartitionKey(parts[0], uuid.UUID(bytes=base64.urlsafe_b64decode(parts[1] + "==")),
                                    int(parts[2]))
        except ValueError:
            spk = None
    if spk is None:
        entry.update(error_code=ErrorCode.invalid_request, error_message=f"not a share-partition key: {key!r}")
        return
    if enabled(ctx) and not cluster_allowed(ctx, Op.CLUSTER_ACTION):
        entry.update(error_code=ErrorCode.cluster_authorization_failed)
        return
    node_id, code, reason = ctx.share_state.locate(spk)
    entry.update(error_code=code, error_message=reason)
    broker = ctx.cluster.broker(node_id) if not code else None
    ep = broker.at(ctx.listener_name) if broker is not None else None
    if broker is not None and ep is not None:
        entry.update(node_id=broker.node_id, host=ep[0], port=ep[1])
    elif not code:
        entry.update(error_code=ErrorCode.coordinator_not_available,
                     error_message=f"broker {node_id} (the share coordinator) is not alive")


@handles(ApiKey.FIND_COORDINATOR, 0, 6)
async def find_coordinator(ctx: RequestContext, req: Any) -> dict[str, Any]:
    key_type = getattr(req, "key_type", GROUP)
    if ctx.version >= 4:
        return {"throttle_time": 0, "coordinators": [_lookup(ctx, k, key_type) for k in req.coordinator_keys]}
    entry = _lookup(ctx, req.key, key_type)
    entry.pop("key")
    return {"throttle_time": 0, **entry}
