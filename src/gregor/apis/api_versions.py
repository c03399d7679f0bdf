"""ApiVersions (18): the versions in the dispatch table, nothing more."""

from __future__ import annotations

from typing import Any

from gregor.apis.handler import RequestContext, api_versions_body, handles
from gregor.protocol.api_keys import ApiKey


@handles(ApiKey.API_VERSIONS, 0, 4)
async def api_versions(ctx: RequestContext, req: Any) -> dict[str, Any]:
    return api_versions_body(config=ctx.config)
