"""EndTxn (26): commit or abort a producer's transaction at its coordinator. Answered once the
PrepareCommit/PrepareAbort record is replicated; the coordinator then writes the markers in every
partition of the transaction (coordinator/transaction/markers.py)."""

from __future__ import annotations

from typing import Any

from gregor.apis.handler import RequestContext, handles
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode, KafkaError


@handles(ApiKey.END_TXN, 0, 4)
async def end_txn(ctx: RequestContext, req: Any) -> dict[str, Any]:
    try:
        result = await ctx.transactions.end_txn(req.transactional_id, req.producer_id, req.producer_epoch,
                                                bool(req.committed))
        code = result.error
    except KafkaError as e:
        code = e.code
    if code == ErrorCode.producer_fenced and ctx.version < 2:
        code = ErrorCode.invalid_producer_epoch
    return {"throttle_time": 0, "error_code": code}
