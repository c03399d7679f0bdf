"""AddOffsetsToTxn (25): the group's ``__consumer_offsets`` partition joins the producer's
transaction, so that the offsets it commits with TxnOffsetCommit commit or abort with it."""

from __future__ import annotations

from typing import Any

from gregor.apis.handler import RequestContext, handles
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode, KafkaError


@handles(ApiKey.ADD_OFFSETS_TO_TXN, 0, 4)
async def add_offsets_to_txn(ctx: RequestContext, req: Any) -> dict[str, Any]:
    try:
        group_partition = ctx.groups.partition_for(req.group_id)
        code = await ctx.transactions.add_offsets(req.transactional_id, req.producer_id, req.producer_epoch,
                                                  group_partition)
    except KafkaError as e:
        code = e.code
    if code == ErrorCode.producer_fenced and ctx.version < 2:
        code = ErrorCode.invalid_producer_epoch
    return {"throttle_time": 0, "error_code": code}
