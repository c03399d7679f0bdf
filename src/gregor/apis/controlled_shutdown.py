"""ControlledShutdown (7) v3: a broker about to stop asks the controller to move the leadership
of its partitions away. Answered by the active controller (the partitions the broker still leads
when it is done); elsewhere NOT_CONTROLLER, and the broker asks again where ``/controller`` points.

Kafka's ZooKeeper-mode brokers advertise this API, and so does every Gregor broker (clients
ignore it); a single node has no controller and answers NOT_CONTROLLER.
"""

from __future__ import annotations

from typing import Any

from gregor.apis.handler import RequestContext, handles
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode


@handles(ApiKey.CONTROLLED_SHUTDOWN, 3, 3)
async def controlled_shutdown(ctx: RequestContext, req: Any) -> dict[str, Any]:
    controller = ctx.services.controller
    if not controller.is_active:
        return {"error_code": ErrorCode.not_controller, "remaining_partitions": []}
    code, remaining = await controller.controlled_shutdown(int(req.broker_id), int(req.broker_epoch))
    return {"error_code": code,
            "remaining_partitions": [{"topic_name": t, "partition_index": p} for t, p in remaining]}
