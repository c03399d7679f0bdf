"""ListTransactions (66): the transactional ids this broker coordinates, filtered by state,
producer id, KIP-994's duration (v1+) and KIP-1152's transactional id pattern (v2+)."""

from __future__ import annotations

import re
from typing import Any

from gregor.apis.authorization import TXN_ID, Op, allowed_names, enabled
from gregor.apis.handler import RequestContext, handles
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode


@handles(ApiKey.LIST_TRANSACTIONS, 0, 2)
async def list_transactions(ctx: RequestContext, req: Any) -> dict[str, Any]:
    pattern = getattr(req, "transactional_id_pattern", None) or None
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error:
            return {"throttle_time": 0, "error_code": ErrorCode.invalid_request, "unknown_state_filters": [],
                    "transaction_states": []}
    result = ctx.transactions.list_transactions(list(req.state_filters), [int(p) for p in req.producer_id_filters],
                                                int(getattr(req, "duration_filter", -1)), pattern)
    code = ErrorCode.coordinator_load_in_progress if ctx.transactions.loading() else ErrorCode.none
    listed = result.transactions
    if enabled(ctx):  # Kafka lists only the transactional ids the principal may describe
        visible = allowed_names(ctx, Op.DESCRIBE, TXN_ID, {t.transactional_id for t in listed})
        listed = [t for t in listed if t.transactional_id in visible]
    return {"throttle_time": 0, "error_code": code, "unknown_state_filters": result.unknown_state_filters,
            "transaction_states": [{"transactional_id": t.transactional_id, "producer_id": t.producer_id,
                                    "transaction_state": t.state} for t in listed]}
