"""TxnOffsetCommit (28): offsets committed inside a producer's transaction, sent to the group's
coordinator after AddOffsetsToTxn. They are written in the producer's transactional batch and
become the group's committed offsets when the transaction's COMMIT marker reaches the group's
``__consumer_offsets`` partition (dropped on ABORT). v3+ names the member and generation the
offsets were consumed under (KIP-447): a zombie is fenced with ILLEGAL_GENERATION."""

from __future__ import annotations

from typing import Any

from gregor.apis.handler import RequestContext, handles
from gregor.coordinator.group.api import CommitPartition, CommitRequest
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode, KafkaError


@handles(ApiKey.TXN_OFFSET_COMMIT, 0, 4)
async def txn_offset_commit(ctx: RequestContext, req: Any) -> dict[str, Any]:
    partitions = [CommitPartition(t.name, p.partition_index, p.committed_offset,
                                  getattr(p, "committed_leader_epoch", -1), p.committed_metadata)
                  for t in req.topics for p in t.partitions]
    commit = CommitRequest(req.group_id, getattr(req, "generation_id", -1), getattr(req, "member_id", "") or "",
                           getattr(req, "group_instance_id", None), partitions, api_version=9)
    try:
        codes = await ctx.groups.txn_commit_offsets(commit, req.producer_id, req.producer_epoch)
    except KafkaError as e:
        codes = {(p.topic, p.partition): e.code for p in partitions}
    topics: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), code in codes.items():
        if code == ErrorCode.producer_fenced and ctx.version < 2:
            code = ErrorCode.invalid_producer_epoch
        topics.setdefault(topic, []).append({"partition_index": partition, "error_code": code})
    return {"throttle_time": 0, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
