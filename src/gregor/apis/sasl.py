"""SaslHandshake (17) and SaslAuthenticate (36), as Kafka's SaslServerAuthenticator answers them
on a SASL listener (security/authenticator.py holds the connection's state):

- SaslHandshake v0/v1: the mechanism, or UNSUPPORTED_SASL_MECHANISM with the enabled ones (the
  connection then closes); a second one before the first completed is ILLEGAL_SASL_STATE. After
  authentication a v1 handshake starts a re-authentication (KIP-368).
- SaslAuthenticate v0-v2: the mechanism's tokens; a failure is SASL_AUTHENTICATION_FAILED with
  the mechanism's message, answered after ``connection.failed.authentication.delay.ms`` and
  followed by the close; v1+ answers carry the session lifetime (``connections.max.reauth.ms``).

SaslHandshake v0 clients sent raw SASL tokens without Kafka framing after the handshake (Kafka
0.10.0): not served; such a client's next bytes do not parse as a request and its connection is
closed. On a listener without SASL both APIs are answered ILLEGAL_SASL_STATE, as Kafka's
KafkaApis answers them."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from gregor.apis.handler import AUTHENTICATOR, CLOSE_AFTER_RESPONSE, RequestContext, handles
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode
from gregor.security.authenticator import Authenticator, IllegalSaslState, Refusal
from gregor.security.sasl import SaslAuthenticationError

log = logging.getLogger(__name__)


@handles(ApiKey.SASL_HANDSHAKE, 0, 1)
async def sasl_handshake(ctx: RequestContext, req: Any) -> dict[str, Any]:
    auth: Authenticator | None = ctx.connection_state.get(AUTHENTICATOR)
    if auth is None:
        return {"error_code": ErrorCode.illegal_sasl_state, "mechanisms": []}
    refusal = auth.handshake(req.mechanism)
    enabled = list(auth.settings.enabled)
    if refusal is Refusal.UNSUPPORTED_MECHANISM:
        log.info("SASL handshake from %s: mechanism %r is not enabled (enabled: %s)", ctx.client_host, req.mechanism,
                 ", ".join(enabled))
        ctx.connection_state[CLOSE_AFTER_RESPONSE] = True
        await _delay(auth)
        return {"error_code": ErrorCode.unsupported_sasl_mechanism, "mechanisms": enabled}
    if refusal is Refusal.ILLEGAL_STATE:
        ctx.connection_state[CLOSE_AFTER_RESPONSE] = True
        return {"error_code": ErrorCode.illegal_sasl_state, "mechanisms": enabled}
    if refusal is Refusal.NOT_NOW:  # no re-authentication now: answered, the connection stays
        return {"error_code": ErrorCode.illegal_sasl_state, "mechanisms": enabled}
    return {"error_code": ErrorCode.none, "mechanisms": enabled}


@handles(ApiKey.SASL_AUTHENTICATE, 0, 2)
async def sasl_authenticate(ctx: RequestContext, req: Any) -> dict[str, Any]:
    auth: Authenticator | None = ctx.connection_state.get(AUTHENTICATOR)
    if auth is None:
        return _failure(ErrorCode.illegal_sasl_state, "SaslAuthenticate on a listener without SASL")
    try:
        token, complete = auth.authenticate(bytes(req.auth_bytes))
    except IllegalSaslState as e:
        if not e.keep_open:
            ctx.connection_state[CLOSE_AFTER_RESPONSE] = True
        return _failure(ErrorCode.illegal_sasl_state, str(e))
    except SaslAuthenticationError as e:
        log.info("Failed authentication with %s (%s) on %s: %s", ctx.client_host, auth.mechanism, ctx.listener_name,
                 e)
        if ctx.metrics is not None:
            ctx.metrics.authentication(False)
        ctx.connection_state[CLOSE_AFTER_RESPONSE] = True
        await _delay(auth)
        return _failure(ErrorCode.sasl_authentication_failed, str(e))
    if complete:
        log.debug("%s authenticated as %s with %s", ctx.client_host, auth.principal, auth.mechanism)
        if ctx.metrics is not None:
            ctx.metrics.authentication(True)
    return {"error_code": ErrorCode.none, "error_message": None, "auth_bytes": token,
            "session_lifetime": auth.session_lifetime_ms() if complete else 0}


async def _delay(auth: Authenticator) -> None:
    """Kafka's connection.failed.authentication.delay.ms before a failure's answer and close."""
    delay = auth.settings.failed_delay_ms / 1000
    if delay > 0:
        await asyncio.sleep(delay)


def _failure(code: ErrorCode, message: str) -> dict[str, Any]:
    return {"error_code": code, "error_message": message, "auth_bytes": b"", "session_lifetime": 0}
