"""EndTxn (26): commit or abort a producer's transaction at its coordinator. Answered once the
PrepareCommit/PrepareAbort record is replicated; the coordinator then writes the markers in every
partition of the transaction (coordinator/transaction/markers.py). v5 (transactions V2, KIP-890
part 2): the producer's epoch is bumped by every end, and the answer names the producer id and
epoch it goes on with (a new producer id at epoch 0 once the epoch is exhausted)."""

from __future__ import annotations

from typing import Any

from gregor.apis.handler import RequestContext, handles
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode, KafkaError


@handles(ApiKey.END_TXN, 0, 5)
async def end_txn(ctx: RequestContext, req: Any) -> dict[str, Any]:
    tv2 = ctx.version >= 5  # transactions V2 (KIP-890 part 2): the epoch is bumped at every end
    producer_id, producer_epoch = -1, -1
    try:
        result = await ctx.transactions.end_txn(req.transactional_id, req.producer_id, req.producer_epoch,
                                                bool(req.committed), tv2)
        code = result.error
        producer_id, producer_epoch = result.producer_id, result.producer_epoch
    except KafkaError as e:
        code = e.code
    if code == ErrorCode.producer_fenced and ctx.version < 2:
        code = ErrorCode.invalid_producer_epoch
    return {"throttle_time": 0, "error_code": code, "producer_id": producer_id, "producer_epoch": producer_epoch}
