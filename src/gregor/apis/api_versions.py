"""ApiVersions (18): the versions in the dispatch table, nothing more."""

from __future__ import annotations

from typing import Any

from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode
from gregor.server.dispatcher import REGISTRY, RequestContext, handles


def api_versions_body(error: ErrorCode = ErrorCode.none) -> dict[str, Any]:
    return {
        "error_code": error,
        "api_keys": [
            {"api_key": r.api_key, "min_version": r.min_version, "max_version": r.max_version}
            for r in sorted(REGISTRY.values(), key=lambda r: r.api_key)
        ],
        "throttle_time": 0,
    }


@handles(ApiKey.API_VERSIONS, 0, 4)
async def api_versions(ctx: RequestContext, req: Any) -> dict[str, Any]:
    return api_versions_body()
