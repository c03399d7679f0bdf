"""Broker-wide limits on connections and on the memory their requests hold, with Kafka's meaning.

- ``max.connections.per.ip`` (and ``max.connections.per.ip.overrides``): a new connection from an
  address that already has that many is closed at once (Kafka's ConnectionQuotas does the same).
- ``max.connections``: beyond it a new connection is accepted but not read from; it waits, as a
  Kafka broker's blocked acceptor leaves it waiting in the listen backlog, and is served when
  another connection closes. At most ``MAX_WAITING`` wait; the ones after are closed.
- ``queued.max.request.bytes``: a pool of bytes for requests read but not yet answered, all
  connections together (Kafka's SimpleMemoryPool, non-strict). A request's size prefix reserves its
  whole size before any of its payload is read; when nothing is left, the connection stops reading
  until some request is answered and its bytes return to the pool. -1: no limit.
- ``connections.max.idle.ms``: a connection with no bytes read or written for that long is closed
  (Kafka's idle expiry). A connection whose request is being worked on is not idle.
"""

from __future__ import annotations

import logging
import socket
from collections import deque
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

MAX_WAITING = 1024  # connections held unread beyond max.connections (the listen backlog's size)


class RequestMemoryPool:
    """Bytes reserved by requests between their size prefix and their answer. ``limit <= 0``:
    unbounded (reservations always succeed, only counted)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._waiters: deque[Callable[[], None]] = deque()

    def try_reserve(self, size: int) -> bool:
        # non-strict as Kafka's pool: granted while anything is left, even if size exceeds it, so a
        # request as large as the pool is never starved
        if self.limit > 0 and self.used >= self.limit:
            return False
        self.used += size
        return True

    def release(self, size: int) -> None:
        self.used -= size
        while self._waiters and (self.limit <= 0 or self.used < self.limit):
            self._waiters.popleft()()

    def wait(self, wake: Callable[[], None]) -> None:
        """Call ``wake`` once memory is available again (the caller retries its reservation)."""
        self._waiters.append(wake)

    def forget(self, wake: Callable[[], None]) -> None:
        try:
            self._waiters.remove(wake)
        except ValueError:
            pass


class ConnectionQuotas:
    def __init__(self, max_connections: int, max_per_ip: int, overrides: dict[str, int]) -> None:
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        self.overrides = resolve_overrides(overrides)
        self.per_ip: dict[str, int] = {}
        self.active = 0
        self.waiting: deque[Any] = deque()  # connections held unread until a slot frees
        self.max_waiting = MAX_WAITING

    def limit_for(self, host: str) -> int:
        return self.overrides.get(host, self.max_per_ip)

    def admit_ip(self, host: str) -> bool:
        """Count a new connection from ``host``; False (nothing counted) if over its limit."""
        n = self.per_ip.get(host, 0)
        if n >= self.limit_for(host):
            return False
        self.per_ip[host] = n + 1
        return True

    def release_ip(self, host: str) -> None:
        n = self.per_ip.get(host, 0) - 1
        if n > 0:
            self.per_ip[host] = n
        else:
            self.per_ip.pop(host, None)

    def has_slot(self) -> bool:
        return self.active < self.max_connections


class ConnectionLimits:
    """What the listener's connections share, built from the broker's configuration."""

    def __init__(self, config: Any) -> None:
        from gregor.config import ip_overrides

        self.pool = RequestMemoryPool(config["queued.max.request.bytes"])
        self.quotas = ConnectionQuotas(config["max.connections"], config["max.connections.per.ip"],
                                       ip_overrides(config["max.connections.per.ip.overrides"]))
        idle_ms = config["connections.max.idle.ms"]
        self.max_idle_s: float | None = idle_ms / 1000 if idle_ms >= 0 else None


def resolve_overrides(overrides: dict[str, int]) -> dict[str, int]:
    """Overrides by address: host names are resolved once (Kafka resolves them when configured)."""
    out: dict[str, int] = {}
    for host, count in overrides.items():
        try:
            addrs = {info[4][0] for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)}
        except OSError as e:
            log.warning("max.connections.per.ip.overrides: cannot resolve %s (%s); ignored", host, e)
            continue
        for addr in addrs:
            out[str(addr)] = count
    return out
