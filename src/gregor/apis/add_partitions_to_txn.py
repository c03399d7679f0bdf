"""AddPartitionsToTxn (24): partitions join a producer's transaction at its coordinator. v0-v3
(clients): one transaction, a code per partition. v4+ (brokers, KIP-890): several transactions,
and ``verify_only`` asks whether partitions are in the ongoing transaction without adding them
(a partition leader's check before a producer's first transactional batch). v5 from a leader
adds the partitions of a transactions V2 producer (KIP-890 part 2: they join implicitly)."""

from __future__ import annotations

from typing import Any

from gregor.apis.authorization import TXN_ID, Op, allowed, cluster_allowed, denied_topics, enabled
from gregor.apis.handler import RequestContext, handles
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode, KafkaError


def _codes_by_topic(codes: dict[tuple[str, int], ErrorCode]) -> list[dict[str, Any]]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), code in codes.items():
        topics.setdefault(topic, []).append({"partition_index": partition, "partition_error_code": code})
    return [{"name": t, "results_by_partition": ps} for t, ps in topics.items()]


async def _add(ctx: RequestContext, transactional_id: str, producer_id: int, producer_epoch: int, topics: Any,
               verify_only: bool) -> dict[tuple[str, int], ErrorCode]:
    partitions = [(t.name, p) for t in topics for p in t.partitions]
    try:
        result = await ctx.transactions.add_partitions(transactional_id, producer_id, producer_epoch, partitions,
                                                       verify_only, tv2=ctx.version >= 5 and not verify_only)
    except KafkaError as e:
        return dict.fromkeys(partitions, e.code)
    codes = dict(result.partitions)
    if ctx.version < 4:
        for tp, code in codes.items():
            if code == ErrorCode.producer_fenced and ctx.version < 2:
                codes[tp] = ErrorCode.invalid_producer_epoch
    return codes


def _refusal(ctx: RequestContext, transactional_id: str, partitions: list[tuple[str, int]]
             ) -> dict[tuple[str, int], ErrorCode] | None:
    """Kafka's: WRITE on the transactional id (every partition refused), then WRITE on each topic
    (the refused ones TOPIC_AUTHORIZATION_FAILED, the others OPERATION_NOT_ATTEMPTED)."""
    if not enabled(ctx):
        return None
    if not allowed(ctx, Op.WRITE, TXN_ID, transactional_id):
        return dict.fromkeys(partitions, ErrorCode.transactional_id_authorization_failed)
    denied = denied_topics(ctx, Op.WRITE, {t for t, _ in partitions})
    if not denied:
        return None
    return {tp: ErrorCode.topic_authorization_failed if tp[0] in denied else ErrorCode.operation_not_attempted
            for tp in partitions}


@handles(ApiKey.ADD_PARTITIONS_TO_TXN, 0, 5)
async def add_partitions_to_txn(ctx: RequestContext, req: Any) -> dict[str, Any]:
    if ctx.version < 4:
        tid = req.v3_and_below_transactional_id
        partitions = [(t.name, p) for t in req.v3_and_below_topics for p in t.partitions]
        refused = _refusal(ctx, tid, partitions)
        codes = refused if refused is not None else await _add(
            ctx, tid, req.v3_and_below_producer_id, req.v3_and_below_producer_epoch, req.v3_and_below_topics, False)
        return {"throttle_time": 0, "results_by_topic_v3_and_below": _codes_by_topic(codes)}
    if enabled(ctx) and not cluster_allowed(ctx, Op.CLUSTER_ACTION):  # v4+: brokers only (Kafka's)
        return {"throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed, "results_by_transaction": []}
    results = []
    for txn in req.transactions:
        codes = await _add(ctx, txn.transactional_id, txn.producer_id, txn.producer_epoch, txn.topics,
                           bool(txn.verify_only))
        results.append({"transactional_id": txn.transactional_id, "topic_results": _codes_by_topic(codes)})
    return {"throttle_time": 0, "error_code": ErrorCode.none, "results_by_transaction": results}
