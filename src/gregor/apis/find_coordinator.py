"""FindCoordinator (10): this broker coordinates every group (single node). Batched lookups from
v4. A group whose ``__consumer_offsets`` partition failed to load gets COORDINATOR_NOT_AVAILABLE
with a message naming the partition and the reason; transactions are not offered."""

from __future__ import annotations

from typing import Any

from gregor.apis.handler import RequestContext, handles
from gregor.apis.metadata import broker_entries
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode

GROUP, TRANSACTION = 0, 1


def _lookup(ctx: RequestContext, key: str, key_type: int) -> dict[str, Any]:
    b = broker_entries(ctx)[0]
    entry: dict[str, Any] = {"key": key, "node_id": b["node_id"], "host": b["host"], "port": b["port"],
                             "error_code": ErrorCode.none, "error_message": None}
    if key_type == TRANSACTION:
        entry.update(error_code=ErrorCode.transactional_id_authorization_failed,
                     error_message="transactions are not supported by this broker")
    elif key_type != GROUP:
        entry.update(error_code=ErrorCode.invalid_request, error_message=f"unknown key type {key_type}")
    elif not key and ctx.version < 4:
        entry.update(error_code=ErrorCode.invalid_group_id, error_message="empty group id")
    else:
        code, message = ctx.groups.coordinator_status(key)
        entry.update(error_code=code, error_message=message)
    if entry["error_code"]:
        entry.update(node_id=-1, host="", port=-1)
    return entry


@handles(ApiKey.FIND_COORDINATOR, 0, 6)
async def find_coordinator(ctx: RequestContext, req: Any) -> dict[str, Any]:
    key_type = getattr(req, "key_type", GROUP)
    if ctx.version >= 4:
        return {"throttle_time": 0, "coordinators": [_lookup(ctx, k, key_type) for k in req.coordinator_keys]}
    entry = _lookup(ctx, req.key, key_type)
    entry.pop("key")
    return {"throttle_time": 0, **entry}
