"""TxnOffsetCommit (28): offsets committed inside a producer's transaction, sent to the group's
coordinator after AddOffsetsToTxn. They are written in the producer's transactional batch and
become the group's committed offsets when the transaction's COMMIT marker reaches the group's
``__consumer_offsets`` partition (dropped on ABORT). v3+ names the member and generation the
offsets were consumed under (KIP-447): a zombie is fenced with ILLEGAL_GENERATION. The
producer's first offsets of a transaction are verified with its coordinator (KIP-890)."""

from __future__ import annotations

from typing import Any

from gregor.apis.authorization import commit_refusal
from gregor.apis.handler import RequestContext, handles
from gregor.coordinator.group.api import CommitPartition, CommitRequest
from gregor.log.partition_log import NO_VERIFICATION
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.consumer_offsets import OFFSETS_TOPIC
from gregor.protocol.errors import ErrorCode, KafkaError

# verification answers a client retries (Kafka's group coordinator normalizes them so)
_RETRIABLE = frozenset({ErrorCode.concurrent_transactions, ErrorCode.network_exception, ErrorCode.not_coordinator,
                        ErrorCode.coordinator_load_in_progress, ErrorCode.coordinator_not_available})


async def _verify(ctx: RequestContext, req: Any) -> Any:
    """KIP-890 for offsets: the producer's first TxnOffsetCommit of a transaction is written only
    once its transaction coordinator confirmed that the group's ``__consumer_offsets`` partition
    is in the ongoing transaction (AddOffsetsToTxn put it there), and only if no marker ended the
    transaction meanwhile: pending offsets of a transaction that already ended would hold the
    group's stable reads back for good. Returns the guard the write brings."""
    tv2 = ctx.version >= 5  # transactions V2: the group's partition joins the transaction here
    if not tv2 and not ctx.config["transaction.partition.verification.enable"]:
        return NO_VERIFICATION
    partition = ctx.groups.partition_for(req.group_id)
    try:
        guard = ctx.replicas.start_txn_verification(OFFSETS_TOPIC, partition, req.producer_id,
                                                   req.producer_epoch, tv2)
    except KafkaError as e:
        raise KafkaError(ErrorCode.not_coordinator, e.message) from None
    if guard is None:
        return None  # the transaction is ongoing in the partition: verified when it started
    codes = await ctx.transactions.verify(req.transactional_id, req.producer_id, req.producer_epoch,
                                          [(OFFSETS_TOPIC, partition)], add=tv2)
    code = codes.get((OFFSETS_TOPIC, partition), ErrorCode.unknown_server_error)
    if code in _RETRIABLE:
        raise KafkaError(ErrorCode.coordinator_load_in_progress if code == ErrorCode.concurrent_transactions
                         else ErrorCode.coordinator_not_available, f"verification: {code.name.upper()}")
    if code in (ErrorCode.transaction_abortable, ErrorCode.invalid_txn_state):
        raise KafkaError(ErrorCode.invalid_txn_state, f"{OFFSETS_TOPIC}-{partition} is not in the transaction")
    if code == ErrorCode.producer_fenced:
        raise KafkaError(ErrorCode.invalid_producer_epoch, "the producer's epoch is fenced by a newer one")
    if code:
        raise KafkaError(code)
    return guard


@handles(ApiKey.TXN_OFFSET_COMMIT, 0, 5)
async def txn_offset_commit(ctx: RequestContext, req: Any) -> dict[str, Any]:
    partitions = [CommitPartition(t.name, p.partition_index, p.committed_offset,
                                  getattr(p, "committed_leader_epoch", -1), p.committed_metadata)
                  for t in req.topics for p in t.partitions]
    commit = CommitRequest(req.group_id, getattr(req, "generation_id", -1), getattr(req, "member_id", "") or "",
                           getattr(req, "group_instance_id", None), partitions, api_version=9)
    refused, denied = commit_refusal(ctx, req.group_id, (t.name for t in req.topics), req.transactional_id)
    if refused is not None:
        codes = {(p.topic, p.partition): ErrorCode[refused] for p in partitions}
    else:  # the topics it may READ are committed, the others refused (Kafka's)
        commit.partitions = [p for p in partitions if p.topic not in denied]
        try:
            if commit.partitions:
                guard = await _verify(ctx, req)
                codes = await ctx.groups.txn_commit_offsets(commit, req.producer_id, req.producer_epoch, guard)
            else:
                codes = {}
        except KafkaError as e:
            codes = {(p.topic, p.partition): e.code for p in commit.partitions}
        codes.update({(p.topic, p.partition): ErrorCode.topic_authorization_failed for p in partitions
                      if p.topic in denied})
    topics: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), code in codes.items():
        if code == ErrorCode.producer_fenced and ctx.version < 2:
            code = ErrorCode.invalid_producer_epoch
        topics.setdefault(topic, []).append({"partition_index": partition, "error_code": code})
    return {"throttle_time": 0, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
