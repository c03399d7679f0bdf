"""The broker's listeners as Kafka configures them: ``listeners`` (NAME://host:port, several),
``advertised.listeners`` (what Metadata tells the clients of each listener),
``listener.security.protocol.map`` (NAME:PROTOCOL; by default each of Kafka's four protocols is
its own listener name), ``inter.broker.listener.name`` or ``security.inter.broker.protocol`` (the
listener brokers use among themselves).

Per-listener settings are Kafka's ``listener.name.<name>.<key>`` (the name in lower case) over the
broker-wide ``<key>``: ``listener_setting``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL = "PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"
SECURITY_PROTOCOLS = (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)
DEFAULT_PROTOCOL_MAP = ",".join(f"{p}:{p}" for p in SECURITY_PROTOCOLS)


class ListenerConfigError(ValueError):
    """A listener setting that cannot work; the message names the keys."""


@dataclass(frozen=True, slots=True)
class Listener:
    name: str
    protocol: str
    host: str  # "" binds every address
    port: int

    @property
    def tls(self) -> bool:
        return self.protocol in (SSL, SASL_SSL)

    @property
    def sasl(self) -> bool:
        return self.protocol in (SASL_PLAINTEXT, SASL_SSL)

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class Listeners:
    bound: tuple[Listener, ...]  # what the broker listens on, in the configured order
    advertised: tuple[Listener, ...]  # what it tells clients and other brokers, same names
    inter_broker: str  # the listener name brokers connect to each other on

    def named(self, name: str) -> Listener:
        for listener in self.bound:
            if listener.name == name:
                return listener
        raise KeyError(name)

    def advertised_named(self, name: str) -> Listener:
        for listener in self.advertised:
            if listener.name == name:
                return listener
        raise KeyError(name)


def _endpoints(value: str, key: str) -> list[tuple[str, str, int]]:
    out = []
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, hostport = item.partition("://")
        host, _, port = hostport.rpartition(":")
        if not sep or not name or not port.isdigit():
            raise ListenerConfigError(f"{key}: {item!r} is not NAME://host:port")
        host = host.strip("[]")
        out.append((name.upper() if name.upper() in SECURITY_PROTOCOLS else name, host, int(port)))
    return out


def protocol_map(value: str) -> dict[str, str]:
    """``listener.security.protocol.map``: NAME:PROTOCOL pairs."""
    out: dict[str, str] = {}
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, protocol = item.partition(":")
        protocol = protocol.strip().upper()
        if not sep or not name.strip() or protocol not in SECURITY_PROTOCOLS:
            raise ListenerConfigError(f"listener.security.protocol.map: {item!r} is not NAME:PROTOCOL with "
                                      f"PROTOCOL one of {', '.join(SECURITY_PROTOCOLS)}")
        if name.strip() in out:
            raise ListenerConfigError(f"listener.security.protocol.map names {name.strip()} twice")
        out[name.strip()] = protocol
    return out


def parse_listeners(listeners: str, advertised: str | None, protocol_map_value: str | None,
                    inter_broker_name: str | None, inter_broker_protocol: str | None) -> Listeners:
    """Kafka's checks: listener names unique, each in the protocol map, the advertised names among
    the listeners (an advertised listener per listener, its host defaulting to the bound one), the
    inter-broker listener one of them (by name, or by protocol: the listener of that name)."""
    pmap = protocol_map(protocol_map_value or DEFAULT_PROTOCOL_MAP)
    bound: list[Listener] = []
    for name, host, port in _endpoints(listeners, "listeners"):
        if any(listener.name == name for listener in bound):
            raise ListenerConfigError(f"listeners names {name} twice; each listener needs its own name")
        if name not in pmap:
            raise ListenerConfigError(f"listener {name} has no security protocol: add {name}:PROTOCOL to "
                                      "listener.security.protocol.map")
        bound.append(Listener(name, pmap[name], host, port))
    if not bound:
        raise ListenerConfigError("listeners: no listener")
    ports = [listener.port for listener in bound if listener.port]
    if len(ports) != len(set(ports)):
        raise ListenerConfigError(f"listeners: each listener needs its own port ({listeners})")
    adv: dict[str, Listener] = {}
    if advertised:
        for name, host, port in _endpoints(advertised, "advertised.listeners"):
            if not any(listener.name == name for listener in bound):
                raise ListenerConfigError(f"advertised.listeners names {name}, which is not in listeners")
            if name in adv:
                raise ListenerConfigError(f"advertised.listeners names {name} twice")
            adv[name] = Listener(name, pmap[name], host, port)
    advertised_all = tuple(adv.get(listener.name, listener) for listener in bound)
    if inter_broker_name and inter_broker_protocol:
        raise ListenerConfigError("set inter.broker.listener.name or security.inter.broker.protocol, not both")
    inter = inter_broker_name or (inter_broker_protocol or PLAINTEXT).upper()
    if not any(listener.name == inter for listener in bound):
        if inter_broker_name or len(bound) > 1 or inter_broker_protocol:
            raise ListenerConfigError(f"the inter-broker listener {inter} is not in listeners ({listeners}); set "
                                      "inter.broker.listener.name to one of them")
        inter = bound[0].name  # a single listener of another name serves the brokers too
    return Listeners(tuple(bound), advertised_all, inter)


def listener_setting(config: Mapping[str, Any] | Any, listener: str, key: str) -> Any:
    """``listener.name.<listener>.<key>`` if set, else ``<key>`` (Kafka's listener prefix; the
    name is lower-cased in the prefix). ``config`` is the broker's BrokerConfig (or a mapping)."""
    prefixed = f"listener.name.{listener.lower()}.{key}"
    get = config.get if isinstance(config, Mapping) else config.setting
    value = get(prefixed)
    return value if value is not None else get(key)
