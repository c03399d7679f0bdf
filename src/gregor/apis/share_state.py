"""The share coordinator's APIs between brokers (KIP-932): ReadShareGroupState (84) and
WriteShareGroupState (85), sent by share-partition leaders to the broker coordinating a
share-partition's state, InitializeShareGroupState (83) and DeleteShareGroupState (86), sent by the
group coordinator when an operator resets or deletes a share group's offsets
(coordinator/share/persister.py). CLUSTER_ACTION, as Kafka."""

from __future__ import annotations

import uuid
from typing import Any

from gregor.apis.authorization import Op, cluster_allowed, enabled
from gregor.apis.handler import RequestContext, handles
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.share_state_records import PersistedBatch, SharePartitionKey

NO_STATE_EPOCH = -1  # persister.py's answer for a share-partition without state


def _refusal(ctx: RequestContext) -> ErrorCode:
    if enabled(ctx) and not cluster_allowed(ctx, Op.CLUSTER_ACTION):
        return ErrorCode.cluster_authorization_failed
    return ErrorCode.none


async def _each_partition(ctx: RequestContext, req: Any, call: Any, defaults: dict[str, Any] | None = None
                          ) -> dict[str, Any]:
    """Every partition of the request through ``call(key, partition data)``, which may return
    fields of the partition's answer; a KafkaError is that partition's error."""
    refused = _refusal(ctx)
    results = []
    for t in req.topics:
        partitions = []
        for p in t.partitions:
            entry: dict[str, Any] = {"partition": p.partition, "error_code": refused, "error_message": None,
                                     **(defaults or {})}
            if not refused and not isinstance(t.topic_id, uuid.UUID):
                entry.update(error_code=ErrorCode.invalid_request, error_message="a topic id is required")
            elif not refused:
                try:
                    entry.update(await call(SharePartitionKey(req.group_id, t.topic_id, p.partition), p) or {})
                except KafkaError as e:
                    entry.update(error_code=e.code, error_message=e.message)
            partitions.append(entry)
        results.append({"topic_id": t.topic_id, "partitions": partitions})
    return {"results": results}


@handles(ApiKey.READ_SHARE_GROUP_STATE, 0, 0)
async def read_share_group_state(ctx: RequestContext, req: Any) -> dict[str, Any]:
    async def read(key: SharePartitionKey, p: Any) -> dict[str, Any] | None:
        state = await ctx.share_state.read(key)
        if state is None:
            return None
        return {"state_epoch": state.state_epoch, "start_offset": state.start_offset, "state_batches": [
            {"first_offset": b.first_offset, "last_offset": b.last_offset, "delivery_state": b.delivery_state,
             "delivery_count": b.delivery_count} for b in state.batches]}

    return await _each_partition(ctx, req, read, {"state_epoch": NO_STATE_EPOCH, "start_offset": -1,
                                                  "state_batches": []})


@handles(ApiKey.WRITE_SHARE_GROUP_STATE, 0, 1)
async def write_share_group_state(ctx: RequestContext, req: Any) -> dict[str, Any]:
    async def write(key: SharePartitionKey, p: Any) -> None:
        batches = [PersistedBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                   for b in p.state_batches]
        await ctx.share_state.write(key, p.state_epoch, p.leader_epoch, p.start_offset, batches)

    return await _each_partition(ctx, req, write)


@handles(ApiKey.INITIALIZE_SHARE_GROUP_STATE, 0, 0)
async def initialize_share_group_state(ctx: RequestContext, req: Any) -> dict[str, Any]:
    return await _each_partition(ctx, req, lambda key, p: ctx.share_state.initialize(key, p.state_epoch,
                                                                                       p.start_offset))


@handles(ApiKey.DELETE_SHARE_GROUP_STATE, 0, 0)
async def delete_share_group_state(ctx: RequestContext, req: Any) -> dict[str, Any]:
    return await _each_partition(ctx, req, lambda key, p: ctx.share_state.delete(key))
