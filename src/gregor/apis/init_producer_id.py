"""InitProducerId (22): a fresh producer id for an idempotent producer, or, with a transactional
id, the id and epoch of the transactional producer from its transaction coordinator
(coordinator/transaction/: epoch bumps, zombie fencing, KIP-360 recovery with the producer id
and epoch the producer had). v6's two-phase commit (KIP-939, ``enable_2pc``) is not served: such a
version is not advertised (v0-v5 are)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from gregor.apis.authorization import TOPIC, TXN_ID, Op, allowed, cluster_allowed, host_of
from gregor.apis.handler import RequestContext, handles
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode, KafkaError


def millis(value: Any) -> int:
    """A kio duration (timedelta) or an int of milliseconds, as int milliseconds."""
    if isinstance(value, timedelta):
        return int(value.total_seconds() * 1000)
    return int(value)


@handles(ApiKey.INIT_PRODUCER_ID, 0, 5)
async def init_producer_id(ctx: RequestContext, req: Any) -> dict[str, Any]:
    store = getattr(ctx.services, "acls", None)
    if req.transactional_id is None:
        # Kafka: IDEMPOTENT_WRITE on the cluster, or WRITE on some topic
        if store is not None and not (
                cluster_allowed(ctx, Op.IDEMPOTENT_WRITE)
                or store.authorizer.authorize_any(str(ctx.principal), host_of(ctx), Op.WRITE, TOPIC)):
            return {"throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed, "producer_id": -1,
                    "producer_epoch": -1}
        return {"throttle_time": 0, "error_code": ErrorCode.none, "producer_id": await ctx.producer_ids.allocate(),
                "producer_epoch": 0}
    if store is not None and not allowed(ctx, Op.WRITE, TXN_ID, req.transactional_id):
        return {"throttle_time": 0, "error_code": ErrorCode.transactional_id_authorization_failed,
                "producer_id": -1, "producer_epoch": -1}
    expected_id = int(getattr(req, "producer_id", -1))  # v3+ (KIP-360)
    expected_epoch = int(getattr(req, "producer_epoch", -1))
    try:
        result = await ctx.transactions.init_producer_id(req.transactional_id, millis(req.transaction_timeout),
                                                         expected_id, expected_epoch)
    except KafkaError as e:
        return {"throttle_time": 0, "error_code": e.code, "producer_id": -1, "producer_epoch": -1}
    code = result.error
    if code == ErrorCode.producer_fenced and ctx.version < 4:
        code = ErrorCode.invalid_producer_epoch  # PRODUCER_FENCED is v4+ (KIP-588)
    return {"throttle_time": 0, "error_code": code, "producer_id": result.producer_id,
            "producer_epoch": result.producer_epoch}
