"""From a request frame to its response buffers: parse the header, find the handler in the
registry (``gregor.apis``), decode the body (bounded walk, then kio), run the handler with a
request context, encode its answer for the negotiated version.

An unknown API key or a malformed header or body raises CloseConnection (the connection closes,
as Kafka's does); an unsupported version is answered UNSUPPORTED_VERSION where the schema allows.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from gregor.apis import REGISTRY
from gregor.apis.authorization import gate
from gregor.apis.handler import AUTHENTICATOR, CloseConnection, RequestContext, api_versions_body
from gregor.apis.services import Services
from gregor.log.file_region import FileRegion
from gregor.protocol import codec
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.encoder import encode
from gregor.protocol.errors import ErrorCode

log = logging.getLogger("gregor.server.connection")

API_VERSIONS_V0_UNSUPPORTED = 0


class Dispatcher:
    def __init__(self, services: Services) -> None:
        self.services = services
        self.metrics = services.metrics

    async def handle(self, frame: bytes, peer: str, connection_state: dict[Any, Any]
                     ) -> list[bytes | FileRegion] | None:
        """Answer one request frame; returns the buffers of the size-prefixed response (None: no
        response)."""
        try:
            api_key, version, corr = codec.parse_header_prefix(frame)
        except codec.RequestDecodeError as e:
            log.warning("closing connection from %s: %s", peer, e)
            raise CloseConnection from None
        reg = REGISTRY.get(api_key)
        if reg is None:
            log.warning("closing connection from %s: unknown API key %d", peer, api_key)
            raise CloseConnection
        auth = connection_state.get(AUTHENTICATOR)
        if auth is not None and not auth.allows(api_key):
            if auth.authenticated:  # KIP-368: the session ended and the client did not re-authenticate
                log.info("closing connection from %s: its SASL session (%s) expired without re-authentication",
                         peer, auth.principal)
            else:  # Kafka's SaslServerAuthenticator: only ApiVersions and the SASL APIs come first
                log.info("closing connection from %s: %s before SASL authentication completed", peer,
                         _name(api_key))
            raise CloseConnection
        if not reg.min_version <= version <= reg.max_version or not reg.enabled(self.services.config):
            return self._unsupported_version(peer, api_key, version, corr)
        try:
            header = codec.parse_header(frame, codec.is_flexible(api_key, version))
            request = codec.decode_request(api_key, version, frame, header.body_offset)
        except codec.RequestDecodeError as e:
            log.warning("closing connection from %s: malformed request: %s", peer, e)
            raise CloseConnection from None
        ctx = RequestContext(self.services, header, peer.rsplit(":", 1)[0], connection_state)
        started = time.perf_counter()
        refused = gate(ctx, api_key, request) if getattr(self.services, "acls", None) is not None else None
        if refused is not None:  # one resource, and the principal may not: the error alone
            log.info("%s v%d from %s (%s) refused: %s", ApiKey(api_key).name, version, peer, ctx.principal, refused)
            refusal = error_body(api_key, version, ErrorCode[refused])
            if refusal is None:
                raise CloseConnection
            refusal_head = codec.response_header(api_key, version, corr)
            encoded = encode(codec.response_schema(api_key, version), refusal)
            return [(len(refusal_head) + len(encoded)).to_bytes(4, "big") + refusal_head + encoded]
        try:
            result = await reg.handler(ctx, request)
        except CloseConnection:
            raise
        except Exception:
            log.exception("%s v%d from %s (client %s) failed", ApiKey(api_key).name, version, peer,
                          header.client_id)
            result = error_body(api_key, version, ErrorCode.unknown_server_error)
            if result is None:
                raise CloseConnection from None
        if self.metrics is not None:
            self.metrics.request(api_key, time.perf_counter() - started)
        if result is None:
            return None
        head = codec.response_header(api_key, version, corr)
        if isinstance(result, list):
            size = len(head) + sum(len(b) for b in result)
            return [size.to_bytes(4, "big") + head, *result]
        body = result if isinstance(result, bytes) else encode(codec.response_schema(api_key, version), result)
        return [(len(head) + len(body)).to_bytes(4, "big") + head + body]

    def _unsupported_version(self, peer: str, api_key: int, version: int, corr: int) -> list[bytes | FileRegion]:
        if api_key == ApiKey.API_VERSIONS:
            # Kafka answers with a v0 response carrying UNSUPPORTED_VERSION and its versions, so
            # that the client can retry with one it has in common.
            body = encode(codec.response_schema(api_key, API_VERSIONS_V0_UNSUPPORTED),
                          api_versions_body(ErrorCode.unsupported_version, self.services.config))
            return [(4 + len(body)).to_bytes(4, "big") + corr.to_bytes(4, "big", signed=True) + body]
        result = error_body(api_key, version, ErrorCode.unsupported_version)
        if result is None:
            log.warning("closing connection from %s: %s v%d is not supported", peer, ApiKey(api_key).name, version)
            raise CloseConnection
        body = encode(codec.response_schema(api_key, version), result)
        head = codec.response_header(api_key, version, corr)
        return [(len(head) + len(body)).to_bytes(4, "big") + head + body]


def error_body(api_key: int, version: int, code: ErrorCode) -> dict[str, Any] | None:
    """A response carrying ``code`` at the top level, where the schema has such a field."""
    try:
        cls = codec.response_schema(api_key, version)
    except Exception:  # noqa: BLE001 - kio has no schema for that version
        return None
    if "error_code" not in getattr(cls, "__dataclass_fields__", {}):
        return None
    return {"error_code": code}


def _name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return f"API key {api_key}"
