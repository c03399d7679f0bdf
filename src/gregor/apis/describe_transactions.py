"""DescribeTransactions (65): the state of transactional ids this broker coordinates (Kafka's
state names, producer id and epoch, timeout, start time, partitions); an id coordinated elsewhere
answers NOT_COORDINATOR, an unknown one TRANSACTIONAL_ID_NOT_FOUND."""

from __future__ import annotations

from typing import Any

from gregor.apis.handler import RequestContext, handles
from gregor.protocol.api_keys import ApiKey


@handles(ApiKey.DESCRIBE_TRANSACTIONS, 0, 0)
async def describe_transactions(ctx: RequestContext, req: Any) -> dict[str, Any]:
    states = []
    for tid in req.transactional_ids:
        d = ctx.transactions.describe(tid)
        states.append({"error_code": d.error, "transactional_id": tid, "transaction_state": d.state,
                       "transaction_timeout": d.transaction_timeout_ms,
                       "transaction_start_time": d.transaction_start_time_ms, "producer_id": d.producer_id,
                       "producer_epoch": d.producer_epoch,
                       "topics": [{"topic": t, "partitions": ps} for t, ps in d.topics.items()]})
    return {"throttle_time": 0, "transaction_states": states}
