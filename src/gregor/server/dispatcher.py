"""The dispatch table: ``@handles(api_key, min, max)`` registers an API handler; the same table
answers ApiVersions, so what is advertised is exactly what is implemented."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gregor.log.file_region import FileRegion
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from gregor.broker import Broker
    from gregor.protocol.codec import RequestHeader


@dataclass(slots=True)
class RequestContext:
    broker: Broker
    header: RequestHeader
    client_host: str
    # state that lives as long as the connection (one client instance): the fetch path keeps the
    # group each partition's fetches on this connection were attributed to
    connection_state: dict[Any, Any] = field(default_factory=dict)

    @property
    def version(self) -> int:
        return self.header.api_version


# A handler returns the response as a dict (built into the version's schema by the connection),
# as already-encoded body bytes, or as a list of body buffers written one after another (Fetch,
# so record data is never copied into one big buffer, and large ranges stay in the file as
# FileRegions until the socket takes them); None means "no response" (acks=0).
Response = dict[str, Any] | bytes | list[bytes] | list[bytes | FileRegion] | None
Handler = Callable[[RequestContext, Any], Awaitable[Response]]


@dataclass(frozen=True, slots=True)
class Registration:
    api_key: int
    min_version: int
    max_version: int
    handler: Handler


REGISTRY: dict[int, Registration] = {}


def handles(api_key: ApiKey, min_version: int, max_version: int) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        if api_key in REGISTRY:
            raise RuntimeError(f"{api_key.name} registered twice")
        REGISTRY[int(api_key)] = Registration(int(api_key), min_version, max_version, fn)
        return fn

    return register


def api_versions_body(error: ErrorCode = ErrorCode.none) -> dict[str, Any]:
    """The ApiVersions answer: exactly what the dispatch table holds."""
    return {
        "error_code": error,
        "api_keys": [
            {"api_key": r.api_key, "min_version": r.min_version, "max_version": r.max_version}
            for r in sorted(REGISTRY.values(), key=lambda r: r.api_key)
        ],
        "throttle_time": 0,
    }


def load_all_apis() -> dict[int, Registration]:
    """Import every module under gregor.apis so that their registrations run."""
    import importlib
    import pkgutil

    import gregor.apis as apis

    for mod in pkgutil.iter_modules(apis.__path__):
        importlib.import_module(f"gregor.apis.{mod.name}")
    return REGISTRY
