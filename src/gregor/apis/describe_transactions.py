"""DescribeTransactions (65): the state of transactional ids this broker coordinates (Kafka's
state names, producer id and epoch, timeout, start time, partitions); an id coordinated elsewhere
answers NOT_COORDINATOR, an unknown one TRANSACTIONAL_ID_NOT_FOUND."""

from __future__ import annotations

from typing import Any

from gregor.apis.authorization import TOPIC, TXN_ID, Op, allowed, allowed_names, enabled
from gregor.apis.handler import RequestContext, handles
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode


@handles(ApiKey.DESCRIBE_TRANSACTIONS, 0, 0)
async def describe_transactions(ctx: RequestContext, req: Any) -> dict[str, Any]:
    states = []
    for tid in req.transactional_ids:
        if enabled(ctx) and not allowed(ctx, Op.DESCRIBE, TXN_ID, tid):
            states.append({"error_code": ErrorCode.transactional_id_authorization_failed, "transactional_id": tid,
                           "transaction_state": "", "transaction_timeout": 0, "transaction_start_time": -1,
                           "producer_id": -1, "producer_epoch": -1, "topics": []})
            continue
        d = ctx.transactions.describe(tid)
        topics = d.topics
        if enabled(ctx):  # Kafka shows only the topics the principal may describe
            visible = allowed_names(ctx, Op.DESCRIBE, TOPIC, topics)
            topics = {t: ps for t, ps in topics.items() if t in visible}
        states.append({"error_code": d.error, "transactional_id": tid, "transaction_state": d.state,
                       "transaction_timeout": d.transaction_timeout_ms,
                       "transaction_start_time": d.transaction_start_time_ms, "producer_id": d.producer_id,
                       "producer_epoch": d.producer_epoch,
                       "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()]})
    return {"throttle_time": 0, "transaction_states": states}
