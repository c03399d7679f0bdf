"""The handler contract: what an API handler receives, what it may return, and how it registers.

``@handles(api_key, min, max)`` registers a handler in ``REGISTRY``; the server dispatches from
that table and answers ApiVersions from it, so what is advertised is exactly what is
implemented. The package (``gregor.apis``) imports every handler module explicitly.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gregor.log.file_region import FileRegion
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode
from gregor.security.principal import ANONYMOUS_USER

if TYPE_CHECKING:
    from gregor.apis.services import Services
    from gregor.cluster.dynamic_configs import DynamicConfigs
    from gregor.cluster.metadata import ClusterMetadata
    from gregor.cluster.producer_ids import ProducerIdManager
    from gregor.cluster.topic_admin import TopicAdmin
    from gregor.config import BrokerConfig
    from gregor.coordinator.group.service import GroupCoordinatorService
    from gregor.coordinator.share.service import ShareService
    from gregor.coordinator.share.state_service import ShareStateService
    from gregor.coordinator.transaction.service import TransactionCoordinatorService
    from gregor.log.log_manager import LogManager
    from gregor.metrics.registry import BrokerMetrics
    from gregor.protocol.codec import RequestHeader
    from gregor.replication.replica_manager import ReplicaManager


class CloseConnection(Exception):
    """Raised by a handler (or the server) to close the client's connection without answering:
    what Kafka does, for example, after a failed acks=0 produce."""


# RequestContext.connection_state keys the server sets for a connection (server/listener.py)
LISTENER = "listener"  # the security.listeners.Listener the connection came in on
PRINCIPAL = "principal"  # its security.principal.Principal (a TLS certificate's, or ANONYMOUS)
AUTHENTICATOR = "authenticator"  # security.authenticator.Authenticator on a SASL listener
CLOSE_AFTER_RESPONSE = "close-after-response"  # a handler asks: answer, then close (a failed login)


@dataclass(slots=True)
class RequestContext:
    """One request: its header, where it came from, and the broker's services it may use."""

    services: Services
    header: RequestHeader
    client_host: str
    # state that lives as long as the connection (one client instance): the fetch path keeps the
    # group each partition's fetches on this connection were attributed to
    connection_state: dict[Any, Any] = field(default_factory=dict)

    @property
    def version(self) -> int:
        return self.header.api_version

    @property
    def listener_name(self) -> str | None:
        """The listener the request came in on (None: an in-process call, no listener)."""
        listener = self.connection_state.get(LISTENER)
        return listener.name if listener is not None else None

    @property
    def principal(self) -> Any:
        """Who sent the request: the SASL-authenticated principal, the TLS certificate's, or
        User:ANONYMOUS."""
        auth = self.connection_state.get(AUTHENTICATOR)
        if auth is not None and auth.principal is not None:
            return auth.principal
        return self.connection_state.get(PRINCIPAL, ANONYMOUS_USER)

    # the services, by name (see apis/services.py)
    @property
    def config(self) -> BrokerConfig:
        return self.services.config

    @property
    def cluster(self) -> ClusterMetadata:
        return self.services.cluster

    @property
    def logs(self) -> LogManager:
        return self.services.logs

    @property
    def topics(self) -> TopicAdmin:
        return self.services.topics

    @property
    def groups(self) -> GroupCoordinatorService:
        return self.services.groups

    @property
    def transactions(self) -> TransactionCoordinatorService:
        return self.services.transactions

    @property
    def producer_ids(self) -> ProducerIdManager:
        return self.services.producer_ids

    @property
    def dynamic_configs(self) -> DynamicConfigs:
        return self.services.dynamic_configs

    @property
    def metrics(self) -> BrokerMetrics | None:
        """None when metrics are off: nothing is counted on the hot paths."""
        return self.services.metrics

    @property
    def shares(self) -> ShareService:
        assert self.services.shares is not None, "share groups are not served by this broker"
        return self.services.shares

    @property
    def share_state(self) -> ShareStateService:
        assert self.services.share_state is not None, "share groups are not served by this broker"
        return self.services.share_state

    @property
    def replicas(self) -> ReplicaManager:
        """The partitions hosted here (the replication seam): leadership, appends, acks=all."""
        return self.services.replicas


# A handler returns the response as a dict (built into the version's schema by the server), as
# already-encoded body bytes, or as a list of body buffers written one after another (Fetch, so
# record data is never copied into one big buffer, and large ranges stay in the file as
# FileRegions until the socket takes them); None means "no response" (acks=0).
Response = dict[str, Any] | bytes | list[bytes] | list[bytes | FileRegion] | None
Handler = Callable[[RequestContext, Any], Awaitable[Response]]


@dataclass(frozen=True, slots=True)
class Registration:
    api_key: int
    min_version: int
    max_version: int
    handler: Handler
    # the group protocol the API belongs to (group.coordinator.rebalance.protocols); None: always on
    protocol: str | None = None

    def enabled(self, config: Any) -> bool:
        return self.protocol is None or config is None or self.protocol in config[REBALANCE_PROTOCOLS]


REBALANCE_PROTOCOLS = "group.coordinator.rebalance.protocols"


REGISTRY: dict[int, Registration] = {}


def handles(api_key: ApiKey, min_version: int, max_version: int,
            protocol: str | None = None) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        if api_key in REGISTRY:
            raise RuntimeError(f"{api_key.name} registered twice")
        REGISTRY[int(api_key)] = Registration(int(api_key), min_version, max_version, fn, protocol)
        return fn

    return register


def api_versions_body(error: ErrorCode = ErrorCode.none, config: Any = None) -> dict[str, Any]:
    """The ApiVersions answer: exactly what the registry holds and ``config`` enables (the APIs
    of a group protocol that is off are not advertised)."""
    body: dict[str, Any] = {
        "error_code": error,
        "api_keys": [
            {"api_key": r.api_key, "min_version": r.min_version, "max_version": r.max_version}
            for r in sorted(REGISTRY.values(), key=lambda r: r.api_key) if r.enabled(config)
        ],
        "throttle_time": 0,
    }
    if config is not None:
        # v3+ (tagged fields): Kafka's feature levels, which clients read to choose protocols
        # (transaction.version >= 2: transactions V2, KIP-890 part 2)
        level = config["transaction.version"]
        body["supported_features"] = [{"name": "transaction.version", "min_version": 0, "max_version": 2}]
        body["finalized_features_epoch"] = 0
        body["finalized_features"] = [{"name": "transaction.version", "max_version_level": level,
                                       "min_version_level": level}]
    return body
