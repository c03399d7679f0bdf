"""DescribeCluster (60): this broker, the cluster id, and itself as controller."""

from __future__ import annotations

from typing import Any

from gregor.apis.authorization import CLUSTER, authorized_operations
from gregor.apis.handler import RequestContext, handles
from gregor.apis.metadata import OMITTED, broker_entries
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode
from gregor.security.acl import CLUSTER_NAME


@handles(ApiKey.DESCRIBE_CLUSTER, 0, 1)
async def describe_cluster(ctx: RequestContext, req: Any) -> dict[str, Any]:
    brokers = [{"broker_id": b["node_id"], "host": b["host"], "port": b["port"], "rack": b["rack"]}
               for b in broker_entries(ctx)]
    return {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None, "endpoint_type": 1,
            "cluster_id": ctx.cluster.cluster_id, "controller_id": ctx.cluster.controller_id, "brokers": brokers,
            "cluster_authorized_operations": (authorized_operations(ctx, CLUSTER, CLUSTER_NAME)
                                              if req.include_cluster_authorized_operations else OMITTED)}
