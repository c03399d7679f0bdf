"""The client side of a listener's security: what a broker connecting to another broker's
inter-broker listener, or a command-line tool connecting to any listener, needs (a TLS context;
a SASL mechanism with a username and password).

Brokers take it from their own settings for the inter-broker listener (Kafka's
``sasl.mechanism.inter.broker.protocol`` and the ``username``/``password`` options of that
listener's JAAS entry for the mechanism); tools from Kafka's client properties
(``security.protocol``, ``sasl.mechanism``, ``sasl.jaas.config``, ``ssl.truststore.location``, ...)
as in a ``--command-config`` file."""

from __future__ import annotations

import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gregor.security.jaas import JaasError, parse_jaas
from gregor.security.listeners import SECURITY_PROTOCOLS, Listener
from gregor.security.tls import TlsConfigError, client_context

CLIENT_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class ClientSecurityError(ValueError):
    pass


@dataclass(frozen=True)
class ClientSecurity:
    ssl_context: ssl.SSLContext | None = None
    sasl_mechanism: str | None = None
    username: str = ""
    password: str = ""

    @property
    def protocol(self) -> str:
        tls = self.ssl_context is not None
        if self.sasl_mechanism:
            return "SASL_SSL" if tls else "SASL_PLAINTEXT"
        return "SSL" if tls else "PLAINTEXT"


def _credentials(jaas: str | None, mechanism: str, where: str) -> tuple[str, str]:
    if not jaas:
        raise ClientSecurityError(f"{where}: SASL {mechanism} needs a sasl.jaas.config with username and password")
    try:
        modules = parse_jaas(jaas)
    except JaasError as e:
        raise ClientSecurityError(f"{where}: {e}") from None
    for m in modules:
        if "username" in m.options and "password" in m.options:
            return m.options["username"], m.options["password"]
    raise ClientSecurityError(f"{where}: the sasl.jaas.config for {mechanism} has no username and password options")


def inter_broker_security(listener: Listener, setting: Callable[[str], Any]) -> ClientSecurity | None:
    """A broker's security towards the other brokers' ``listener`` (the inter-broker one);
    None for PLAINTEXT. ``setting``: the broker's keys with the listener's prefix applied."""
    if listener.protocol == "PLAINTEXT":
        return None
    ctx = None
    if listener.tls:
        try:
            ctx = client_context(setting)
        except TlsConfigError as e:
            raise ClientSecurityError(f"inter-broker listener {listener.name}: {e}") from None
    if not listener.sasl:
        return ClientSecurity(ctx)
    mechanism = str(setting("sasl.mechanism.inter.broker.protocol") or "GSSAPI").upper()
    if mechanism not in CLIENT_MECHANISMS:
        raise ClientSecurityError(f"sasl.mechanism.inter.broker.protocol={mechanism}: brokers authenticate to "
                                  f"each other with {', '.join(CLIENT_MECHANISMS)} only")
    jaas = setting(f"{mechanism.lower()}.sasl.jaas.config") or setting("sasl.jaas.config")
    username, password = _credentials(jaas, mechanism, f"inter-broker listener {listener.name}")
    return ClientSecurity(ctx, mechanism, username, password)


def client_security_from_properties(props: Mapping[str, str]) -> ClientSecurity | None:
    """Kafka's client properties (a ``--command-config`` file); None for PLAINTEXT."""
    protocol = props.get("security.protocol", "PLAINTEXT").strip().upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise ClientSecurityError(f"security.protocol={protocol}: must be one of {', '.join(SECURITY_PROTOCOLS)}")
    if protocol == "PLAINTEXT":
        return None
    listener = Listener("CLIENT", protocol, "", 0)
    defaults = {"ssl.endpoint.identification.algorithm": "https", "ssl.truststore.type": "PEM",
                "ssl.keystore.type": "PEM",
                "sasl.mechanism.inter.broker.protocol": props.get("sasl.mechanism", "GSSAPI")}

    def setting(key: str) -> Any:
        value = props.get(key, defaults.get(key))
        if key == "ssl.enabled.protocols" and isinstance(value, str):
            return tuple(v.strip() for v in value.split(",") if v.strip())
        return value

    try:
        return inter_broker_security(listener, setting)
    except ClientSecurityError as e:
        raise ClientSecurityError(str(e).replace("inter-broker listener CLIENT", "client properties")
                                  .replace("sasl.mechanism.inter.broker.protocol", "sasl.mechanism")) from None
