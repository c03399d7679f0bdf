"""WriteTxnMarkers (27): a transaction coordinator asks the leader of each partition of a
transaction to write its COMMIT or ABORT marker (between brokers; the coordinator on this broker
writes its own partitions' markers the same way, without a request). A data partition's marker
is appended by the replication seam and answered once the in-sync replicas have it; a
``__consumer_offsets`` partition's goes through its group coordinator shard, which commits or drops
the producer's pending offsets (coordinator/transaction/markers.py, LocalMarkers)."""

from __future__ import annotations

from typing import Any

from gregor.apis.authorization import Op, cluster_allowed, enabled
from gregor.apis.handler import RequestContext, handles
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode


@handles(ApiKey.WRITE_TXN_MARKERS, 1, 1)
async def write_txn_markers(ctx: RequestContext, req: Any) -> dict[str, Any]:
    out = []
    refused = enabled(ctx) and not cluster_allowed(ctx, Op.CLUSTER_ACTION)  # brokers only (Kafka's)
    for m in req.markers:
        partitions = [(t.name, p) for t in m.topics for p in t.partition_indexes]
        codes = dict.fromkeys(partitions, ErrorCode.cluster_authorization_failed) if refused else \
            await ctx.transactions.local_markers.write(m.producer_id, m.producer_epoch, m.coordinator_epoch,
                                                           bool(m.transaction_result), partitions)
        topics: dict[str, list[dict[str, Any]]] = {}
        for (topic, partition), code in codes.items():
            topics.setdefault(topic, []).append({"partition_index": partition, "error_code": code})
        out.append({"producer_id": m.producer_id,
                    "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]})
    return {"markers": out}
