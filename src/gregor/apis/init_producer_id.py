"""InitProducerId (22): a fresh producer id for idempotent producers. Transactions are not
offered by this broker: a transactional id is refused with TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
which clients report as a fatal, explicit error instead of retrying forever."""

from __future__ import annotations

from typing import Any

from gregor.apis.handler import RequestContext, handles
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode


@handles(ApiKey.INIT_PRODUCER_ID, 0, 5)
async def init_producer_id(ctx: RequestContext, req: Any) -> dict[str, Any]:
    if req.transactional_id is not None:
        return {"throttle_time": 0, "error_code": ErrorCode.transactional_id_authorization_failed,
                "producer_id": -1, "producer_epoch": -1}
    return {"throttle_time": 0, "error_code": ErrorCode.none, "producer_id": await ctx.producer_ids.allocate(),
            "producer_epoch": 0}
