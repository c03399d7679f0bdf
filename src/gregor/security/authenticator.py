"""What each connection of a listener must do before it is served, as Kafka's
SaslServerAuthenticator and SslTransportLayer decide it (docs/security.md).

``ListenerSecurity`` is built once per listener from its settings: the TLS context, the SASL
mechanisms served with what each needs (PLAIN's users from the JAAS entry, SCRAM's credential
store), the SSL principal mapping, the re-authentication and failure-delay settings.

``Authenticator`` is one SASL connection's state: ApiVersions and SaslHandshake first, then
SaslAuthenticate rounds until the mechanism completes; nothing else is served before. Once
authenticated, a SaslHandshake (v1) starts a re-authentication (KIP-368), which must end with the
same principal and mechanism; a session with a lifetime (``connections.max.reauth.ms``) that ended
is refused any other request."""

from __future__ import annotations

import enum
import logging
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gregor.security.jaas import PLAIN_MODULE, JaasError, parse_jaas
from gregor.security.listeners import Listener
from gregor.security.principal import USER, Principal, SslPrincipalMapper
from gregor.security.sasl import SaslAuthenticationError, SaslServer
from gregor.security.sasl.oauthbearer import OAuthBearerServer, load_validator, unsecured_validator
from gregor.security.sasl.plain import PlainServer, plain_users
from gregor.security.sasl.scram import DIGESTS, CredentialLookup, ScramServer
from gregor.security.tls import Setting, TlsConfigError, certificate_subject, server_context

log = logging.getLogger(__name__)

SERVED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
PRE_AUTHENTICATION_APIS = frozenset({API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE})
AUTHENTICATION_TIMEOUT_S = 30.0  # a connection that has not authenticated by then is closed


class SecurityConfigError(ValueError):
    pass


class Refusal(enum.Enum):
    """Why a SASL request is refused (the API handlers answer Kafka's error codes)."""

    UNSUPPORTED_MECHANISM = "unsupported mechanism"  # answered, then the connection closes
    ILLEGAL_STATE = "illegal state"  # answered, then the connection closes
    NOT_NOW = "no re-authentication now"  # ILLEGAL_SASL_STATE, the connection stays open


class IllegalSaslState(Exception):
    """A SASL request out of order; ``keep_open``: answered without closing (Kafka's KafkaApis
    answers a SaslAuthenticate on an authenticated connection that way)."""

    def __init__(self, message: str, keep_open: bool = False) -> None:
        super().__init__(message)
        self.keep_open = keep_open


REAUTH_MIN_INTERVAL_S = 1.0  # Kafka re-authenticates a connection at most once a second


@dataclass
class SaslSettings:
    enabled: tuple[str, ...]  # served mechanisms, in the configured order
    servers: dict[str, Callable[[], SaslServer]]
    reauth_ms: int
    failed_delay_ms: int
    max_receive_size: int


@dataclass
class ListenerSecurity:
    listener: Listener
    ssl_context: ssl.SSLContext | None = None
    sasl: SaslSettings | None = None
    mapper: SslPrincipalMapper = field(default_factory=SslPrincipalMapper)

    def tls_principal(self, transport: Any) -> Principal:
        """A TLS connection's principal: the client certificate's mapped subject, ANONYMOUS
        without one (Kafka's DefaultKafkaPrincipalBuilder)."""
        sslobj = transport.get_extra_info("ssl_object")
        der = sslobj.getpeercert(binary_form=True) if sslobj is not None else None
        if not der:
            return Principal(USER, "ANONYMOUS")
        return Principal(USER, self.mapper.name(certificate_subject(der)))


def _jaas_for(setting: Setting, mechanism: str) -> str | None:
    return setting(f"{mechanism.lower()}.sasl.jaas.config") or setting("sasl.jaas.config")


def build_listener_security(listener: Listener, setting: Setting, scram: CredentialLookup) -> ListenerSecurity:
    """``setting(key)``: the listener's value of ``key`` (its ``listener.name.<l>.`` prefix first).
    SecurityConfigError names what is wrong."""
    try:
        mapper = SslPrincipalMapper(setting("ssl.principal.mapping.rules") or "DEFAULT")
    except ValueError as e:
        raise SecurityConfigError(str(e)) from None
    out = ListenerSecurity(listener, mapper=mapper)
    if listener.tls:
        try:
            out.ssl_context = server_context(setting)
        except TlsConfigError as e:
            raise SecurityConfigError(f"listener {listener.name}: {e}") from None
    if listener.sasl:
        enabled = tuple(setting("sasl.enabled.mechanisms") or ())
        served = tuple(m for m in enabled if m in SERVED_MECHANISMS)
        skipped = [m for m in enabled if m not in SERVED_MECHANISMS]
        if not served:
            raise SecurityConfigError(
                f"listener {listener.name} ({listener.protocol}) serves none of sasl.enabled.mechanisms="
                f"{','.join(enabled) or '(empty)'}: set it to some of {', '.join(SERVED_MECHANISMS)}")
        if skipped:
            log.warning("listener %s: SASL mechanism(s) %s are not served by Gregor; serving %s", listener.name,
                        ", ".join(skipped), ", ".join(served))
        servers: dict[str, Callable[[], SaslServer]] = {}
        for mechanism in served:
            if mechanism == "PLAIN":
                jaas = _jaas_for(setting, "PLAIN")
                if not jaas:
                    raise SecurityConfigError(
                        f"listener {listener.name} serves PLAIN but has no users: set listener.name."
                        f"{listener.name.lower()}.plain.sasl.jaas.config to {PLAIN_MODULE} required "
                        'user_<name>="<password>" ...;')
                try:
                    modules = parse_jaas(jaas)
                except JaasError as e:
                    raise SecurityConfigError(f"listener {listener.name}, PLAIN: {e}") from None
                users = {}
                for m in modules:
                    users.update(plain_users(m.options))
                servers[mechanism] = lambda users=users: PlainServer(users)  # type: ignore[misc]
            elif mechanism == "OAUTHBEARER":
                servers[mechanism] = _oauthbearer(listener, setting)
            else:
                servers[mechanism] = lambda mechanism=mechanism: ScramServer(mechanism, scram)  # type: ignore[misc]
        out.sasl = SaslSettings(served, servers, int(setting("connections.max.reauth.ms") or 0),
                                int(setting("connection.failed.authentication.delay.ms") or 0),
                                int(setting("sasl.server.max.receive.size") or 524288))
    return out


def _oauthbearer(listener: Listener, setting: Setting) -> Callable[[], SaslServer]:
    """OAUTHBEARER's validator: ``<l>.oauthbearer.sasl.server.callback.handler.class`` as
    ``package.module:function``, else Kafka's unsecured-JWT development validator with the options of
    the listener's OAuthBearerLoginModule JAAS entry (unsecuredValidator*)."""
    handler = setting("oauthbearer.sasl.server.callback.handler.class") or setting("sasl.server.callback.handler.class")
    if handler:
        try:
            validate = load_validator(str(handler))
        except ValueError as e:
            raise SecurityConfigError(f"listener {listener.name}, OAUTHBEARER: {e}") from None
    else:
        options: dict[str, str] = {}
        jaas = _jaas_for(setting, "OAUTHBEARER")
        if jaas:
            try:
                for m in parse_jaas(jaas):
                    options.update(m.options)
            except JaasError as e:
                raise SecurityConfigError(f"listener {listener.name}, OAUTHBEARER: {e}") from None
        log.warning("listener %s serves OAUTHBEARER with unsecured JWTs (Kafka's development validator): set "
                    "listener.name.%s.oauthbearer.sasl.server.callback.handler.class for production",
                    listener.name, listener.name.lower())
        validate = unsecured_validator(
            options.get("unsecuredValidatorPrincipalClaimName", "sub"),
            tuple(s.strip() for s in options.get("unsecuredValidatorRequiredScope", "").split(",") if s.strip()),
            int(options.get("unsecuredValidatorAllowableClockSkewMs", "0")) // 1000)
    return lambda: OAuthBearerServer(validate)


class Authenticator:
    """One SASL connection's authentication (see the module docstring)."""

    def __init__(self, settings: SaslSettings, clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self.clock = clock
        self.principal: Principal | None = None  # set once authenticated
        self.mechanism: str | None = None
        self._server: SaslServer | None = None
        self._state = "handshake"  # handshake -> authenticate -> done (-> reauth handshake ...)
        self._reauthenticating = False
        self._bad_reauth_mechanism: str | None = None
        self._expires_at: float | None = None  # monotonic seconds; None: no lifetime
        self.authenticated_at = 0.0

    @property
    def authenticated(self) -> bool:
        return self.principal is not None

    def allows(self, api_key: int) -> bool:
        """Whether a request of ``api_key`` may be served now (else the connection closes)."""
        if self.principal is None:
            return api_key in PRE_AUTHENTICATION_APIS
        if self._reauthenticating:  # Kafka: only SaslAuthenticate until the re-authentication ends
            return api_key == SASL_AUTHENTICATE
        if api_key in (SASL_HANDSHAKE, SASL_AUTHENTICATE):
            return True
        return not self.expired()

    def expired(self) -> bool:
        return self._expires_at is not None and self.clock() >= self._expires_at

    def handshake(self, mechanism: str) -> Refusal | None:
        if self._state == "done" and self.principal is not None:
            # KIP-368: a re-authentication, only of a session that expires, at most once a second
            if self._expires_at is None or self.clock() - self.authenticated_at < REAUTH_MIN_INTERVAL_S:
                return Refusal.NOT_NOW
            self._reauthenticating = True
            if mechanism != self.mechanism:  # answered NONE; the SaslAuthenticate then fails (Kafka's)
                self._bad_reauth_mechanism = mechanism
                self._state = "authenticate"
                return None
        elif self._state != "handshake":
            return Refusal.ILLEGAL_STATE
        if mechanism not in self.settings.enabled:
            return Refusal.UNSUPPORTED_MECHANISM
        self.mechanism = mechanism
        self._server = self.settings.servers[mechanism]()
        self._state = "authenticate"
        return None

    def authenticate(self, token: bytes) -> tuple[bytes, bool]:
        """One SaslAuthenticate round: (the server's token, complete). SaslAuthenticationError
        when the client failed; IllegalSaslState when no handshake came first."""
        if self._state == "done" and self.principal is not None:
            raise IllegalSaslState("SaslAuthenticate request received after successful authentication",
                                   keep_open=True)
        if self._state != "authenticate" or self._server is None:
            raise IllegalSaslState("SaslAuthenticate before a SaslHandshake")
        if self._bad_reauth_mechanism is not None:
            raise SaslAuthenticationError(
                f"SASL mechanism '{self._bad_reauth_mechanism}' requested by client is not supported for "
                f"re-authentication of mechanism '{self.mechanism}'")
        step = self._server.evaluate(token)
        if not step.complete:
            return step.challenge, False
        principal = Principal(USER, self._server.authorization_id)
        if self._reauthenticating and principal != self.principal:
            raise SaslAuthenticationError(f"Cannot change principals during re-authentication from {self.principal} "
                                          f"to {principal}")
        self.principal = principal
        self._state = "done"
        self._reauthenticating = False
        self.authenticated_at = self.clock()
        lifetime_ms = self.session_lifetime_ms()
        self._expires_at = self.authenticated_at + lifetime_ms / 1000 if lifetime_ms > 0 else None
        return step.challenge, True

    def session_lifetime_ms(self) -> int:
        limits = [ms for ms in (self.settings.reauth_ms, self._server.session_lifetime_ms if self._server else 0)
                  if ms > 0]
        return min(limits) if limits else 0


SCRAM_MECHANISMS = tuple(DIGESTS)
