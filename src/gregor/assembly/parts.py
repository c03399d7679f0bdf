"""What a builder returns: the broker's parts, wired, and its membership (how it joins and leaves
what it belongs to: nothing on one node, the ZooKeeper cluster otherwise)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

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
    from gregor.log.topic_registry import TopicRegistry
    from gregor.metrics.registry import BrokerMetrics
    from gregor.metrics.telemetry import TelemetryWriter
    from gregor.replication.replica_manager import ReplicaManager
    from gregor.security.listeners import Listener


class Membership(Protocol):
    """How the broker joins and leaves. ``open_storage`` runs once the logs are open (the cluster
    id of one node); ``join`` once it listens (a cluster: ZooKeeper, registration, the controller
    election); ``leave`` before the listener stops (a cluster: controlled shutdown, then stop
    fetching, ``final_telemetry`` while the telemetry partitions' leaders can still be reached);
    ``finish`` after every connection is closed (one node: the last telemetry, covering every
    request served); ``abandon`` when the log directory failed and the broker halts (a cluster:
    close the session so that the controller moves its leaderships at once)."""

    def open_storage(self, data_dir: Path, cluster: ClusterMetadata) -> None: ...

    async def join(self, endpoints: tuple[Listener, ...], inter_broker: str) -> None: ...

    async def leave(self, final_telemetry: Callable[[], Awaitable[None]]) -> None: ...

    async def finish(self, final_telemetry: Callable[[], Awaitable[None]]) -> None: ...

    async def abandon(self) -> None: ...


@dataclass
class BrokerParts:
    config: BrokerConfig
    registry: TopicRegistry
    logs: LogManager
    cluster: ClusterMetadata
    topics: TopicAdmin
    replicas: ReplicaManager
    producer_ids: ProducerIdManager
    dynamic_configs: DynamicConfigs
    groups: GroupCoordinatorService
    metrics: BrokerMetrics | None
    telemetry: TelemetryWriter | None
    services: Services
    membership: Membership
    transactions: TransactionCoordinatorService
    share_state: ShareStateService
    shares: ShareService


def build_parts(config: BrokerConfig, connections: Callable[[], int],
                on_log_dir_failure: Callable[[str], None]) -> BrokerParts:
    """The parts of a single node, or of a broker of a ZooKeeper cluster when
    ``zookeeper.connect`` is set. ``connections()`` counts the open client connections (metrics);
    ``on_log_dir_failure(reason)`` is called when the log directory fails in a cluster."""
    if config["zookeeper.connect"]:
        from gregor.assembly.zk_cluster import build_zk_cluster  # kazoo is imported only in a cluster

        return build_zk_cluster(config, connections, on_log_dir_failure)
    from gregor.assembly.single_node import build_single_node

    return build_single_node(config, connections)
