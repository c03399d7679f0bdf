"""SASL/OAUTHBEARER (RFC 7628, KIP-255) as Kafka's OAuthBearerSaslServer.

The client's message is ``n,[a=authzid],^Aauth=Bearer <token>^A[key=value^A...]^A``. The token is
checked by a validator: by default Kafka's development one (OAuthBearerUnsecuredValidatorCallbackHandler:
an unsecured JWT, ``alg`` none, whose ``sub`` claim is the principal, with ``exp`` in the future
and ``iat`` not in it, and the required scopes when configured), never for production. A real
validator is plugged with ``listener.name.<l>.oauthbearer.sasl.server.callback.handler.class`` set to
``package.module:function`` (Python): the function takes the token (str) and returns
``(principal name, lifetime in ms)`` or raises ValueError with the reason (docs/security.md).

A refused token is answered as Kafka answers it: a server challenge with a JSON error
(``{"status":"invalid_token"}``), to which the client replies ``^A``, and then the failure; the
session lifetime is the token's remaining life (KIP-368 re-authentication follows it)."""

from __future__ import annotations

import base64
import importlib
import json
import math
import time
from collections.abc import Callable

from gregor.security.sasl import SaslAuthenticationError, SaslServer, Step

MAX_LIFETIME_MS = 2**63 - 1
Validator = Callable[[str], tuple[str, int]]  # token -> (principal name, lifetime ms)
_SEP = "\x01"


def _b64url(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def unsecured_validator(principal_claim: str = "sub", required_scopes: tuple[str, ...] = (),
                        allowable_skew_s: int = 0, clock: Callable[[], float] = time.time) -> Validator:
    """Kafka's OAuthBearerUnsecuredValidatorCallbackHandler (options
    ``unsecuredValidatorPrincipalClaimName``, ``unsecuredValidatorRequiredScope``,
    ``unsecuredValidatorAllowableClockSkewMs``)."""

    def validate(token: str) -> tuple[str, int]:
        parts = token.split(".")
        if len(parts) != 3 or parts[2]:
            raise ValueError("not an unsecured JWT (three dot-separated parts, the signature empty)")
        try:
            header, claims = json.loads(_b64url(parts[0])), json.loads(_b64url(parts[1]))
        except (ValueError, UnicodeDecodeError):
            raise ValueError("the JWT's header or claims are not base64url JSON") from None
        if not isinstance(header, dict) or header.get("alg") != "none":
            raise ValueError("an unsecured JWT must have alg none")
        if not isinstance(claims, dict):
            raise ValueError("the JWT's claims are not a JSON object")
        now = clock()
        exp, iat = claims.get("exp"), claims.get("iat")
        if not isinstance(exp, (int, float)) or isinstance(exp, bool) or not math.isfinite(exp):
            raise ValueError("the JWT has no (finite) exp claim")
        if isinstance(iat, float) and not math.isfinite(iat):
            raise ValueError("the JWT's iat claim is not finite")
        if exp + allowable_skew_s <= now:
            raise ValueError("the JWT has expired")
        if isinstance(iat, (int, float)) and iat - allowable_skew_s > now:
            raise ValueError("the JWT was issued in the future")
        principal = claims.get(principal_claim)
        if not isinstance(principal, str) or not principal:
            raise ValueError(f"the JWT has no {principal_claim} claim")
        scope = claims.get("scope", [])
        scopes = set(scope.split() if isinstance(scope, str) else scope if isinstance(scope, list) else [])
        missing = [s for s in required_scopes if s not in scopes]
        if missing:
            raise ValueError(f"the JWT lacks the required scope(s) {', '.join(missing)}")
        return principal, min(MAX_LIFETIME_MS, max(1, int((exp - now) * 1000)))

    return validate


def load_validator(spec: str) -> Validator:
    """``package.module:function`` -> the function. ValueError when it cannot be loaded."""
    module, _, name = spec.partition(":")
    if not module or not name:
        raise ValueError(f"{spec!r}: expected package.module:function")
    try:
        fn = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"{spec!r} cannot be loaded: {e}") from None
    if not callable(fn):
        raise ValueError(f"{spec!r} is not callable")
    return fn


class OAuthBearerServer(SaslServer):
    mechanism = "OAUTHBEARER"

    def __init__(self, validate: Validator) -> None:
        self.validate = validate
        self._error: str | None = None

    def evaluate(self, token: bytes) -> Step:
        if self._error is not None:  # the client acknowledged the error challenge (^A)
            raise SaslAuthenticationError(self._error)
        try:
            message = token.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslAuthenticationError("Invalid OAUTHBEARER client message: not UTF-8") from None
        gs2, sep, rest = message.partition(_SEP)
        if not sep or not gs2.startswith("n,") or not gs2.endswith(","):
            raise SaslAuthenticationError("Invalid OAUTHBEARER client first message")
        authzid = gs2[2:-1]
        pairs = dict(kv.split("=", 1) for kv in rest.split(_SEP) if "=" in kv)
        auth = pairs.get("auth", "")
        if not auth.startswith("Bearer "):
            raise SaslAuthenticationError("Invalid OAUTHBEARER client first message: no bearer token")
        try:
            principal, lifetime_ms = self.validate(auth[len("Bearer "):].strip())
            if not isinstance(principal, str) or not principal or not isinstance(lifetime_ms, int):
                raise ValueError("the validator did not return (principal, lifetime in ms)")
        except Exception as e:  # noqa: BLE001 - whatever a (plugged) validator raises refuses the token
            self._error = f"Authentication failed: {e}"
            return Step(json.dumps({"status": "invalid_token"}).encode(), False)
        lifetime_ms = max(0, min(lifetime_ms, MAX_LIFETIME_MS))
        if authzid and authzid != f"a={principal}":
            raise SaslAuthenticationError("Authentication failed: the authorization id differs from the token's "
                                          "principal")
        self.authorization_id = principal
        self.session_lifetime_ms = lifetime_ms
        return Step(b"", True)
