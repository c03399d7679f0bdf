"""TxnOffsetCommit (28): transactions are not offered, so no producer id is ever mapped to a
transactional id here; every partition answers INVALID_PRODUCER_ID_MAPPING, a fatal error that
transactional clients surface at once instead of retrying."""

from __future__ import annotations

from typing import Any

from gregor.apis.handler import RequestContext, handles
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode


@handles(ApiKey.TXN_OFFSET_COMMIT, 0, 3)
async def txn_offset_commit(ctx: RequestContext, req: Any) -> dict[str, Any]:
    return {"throttle_time": 0, "topics": [
        {"name": t.name, "partitions": [{"partition_index": p.partition_index,
                                         "error_code": ErrorCode.invalid_producer_id_mapping}
                                        for p in t.partitions]}
        for t in req.topics]}
