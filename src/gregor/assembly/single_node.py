"""A single node: the default of ``gregor serve``. Every partition is led here (the replication
seam's cluster of one), topics are this broker's registry, the cluster id is kept in
``meta.properties``, and ``__consumer_offsets`` and the telemetry topic are created at start."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from gregor.apis.services import NoController, Services
from gregor.assembly.parts import BrokerParts
from gregor.cluster.acl_store import AclStore, FileAclStore
from gregor.cluster.credentials import ScramCredentials
from gregor.cluster.dynamic_configs import DynamicConfigs
from gregor.cluster.meta_properties import load_cluster_id
from gregor.cluster.metadata import ClusterMetadata
from gregor.cluster.producer_ids import ProducerIdManager
from gregor.cluster.topic_admin import TopicAdmin
from gregor.config import BrokerConfig
from gregor.coordinator.group.service import GroupCoordinatorService
from gregor.coordinator.share.dead_letters import DeadLetterWriter
from gregor.coordinator.share.persister import Persister
from gregor.coordinator.share.service import ShareService
from gregor.coordinator.share.share_partitions import SharePartitionManager, ShareSettings
from gregor.coordinator.share.state_service import ShareStateService
from gregor.coordinator.transaction.markers import LocalMarkers
from gregor.coordinator.transaction.service import TransactionCoordinatorService
from gregor.coordinator.transaction.views import TransactionViews
from gregor.log.log_manager import LogManager
from gregor.log.topic_registry import TopicRegistry
from gregor.metrics.registry import BrokerMetrics
from gregor.metrics.share_groups import ShareMetrics
from gregor.metrics.telemetry import LeaderSink, TelemetryWriter
from gregor.metrics.transactions import TransactionMetrics
from gregor.replication.leader_producer import LeaderProducer
from gregor.replication.single_node import SingleNodeReplicas
from gregor.security.acl import Authorizer, parse_super_users
from gregor.security.listeners import Listener


class SingleNodeMembership:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config

    def open_storage(self, data_dir: Path, cluster: ClusterMetadata) -> None:
        cluster.cluster_id = load_cluster_id(data_dir, self.config["node.id"], self.config["cluster.id"])

    async def join(self, endpoints: tuple[Listener, ...], inter_broker: str) -> None:
        pass

    async def leave(self, final_telemetry: Callable[[], Awaitable[None]]) -> None:
        pass

    async def finish(self, final_telemetry: Callable[[], Awaitable[None]]) -> None:
        await final_telemetry()  # everything served, up to the last request

    async def abandon(self) -> None:
        pass


def build_single_node(config: BrokerConfig, connections: Callable[[], int]) -> BrokerParts:
    node_id: int = config["node.id"]
    registry = TopicRegistry(config.data_dir)
    logs = LogManager(config.data_dir, config.topic_defaults(), registry, hosts_all_partitions=True)
    cluster = ClusterMetadata(node_id)
    topics = TopicAdmin(config, registry, logs)
    replicas = SingleNodeReplicas(config, node_id, logs, registry)
    topics.on_created.append(replicas.topic_created)
    topics.on_deleted.append(replicas.topic_deleted)
    return _common(config, registry, logs, cluster, topics, replicas, ProducerIdManager(config.data_dir),
                   SingleNodeMembership(config), connections, create_internal_topics_at_start=True,
                   offsets_replication_factor=1, controller=NoController(), transaction_replication_factor=1)


def _common(config: BrokerConfig, registry: TopicRegistry, logs: LogManager, cluster: ClusterMetadata,
            topics: TopicAdmin, replicas: Any, producer_ids: ProducerIdManager, membership: Any,
            connections: Callable[[], int], create_internal_topics_at_start: bool, offsets_replication_factor: int,
            controller: Any, transaction_replication_factor: int, share_replication_factor: int = 1,
            credentials: Any = None,
            acls: Callable[[Authorizer], AclStore] | None = None) -> BrokerParts:
    """The parts both builders make the same way, over the parts that differ."""
    node_id: int = config["node.id"]
    dynamic_configs = DynamicConfigs(config, node_id, logs, registry)
    groups = GroupCoordinatorService(config, registry, logs, topics.create_topic, cluster, replicas,
                                     group_settings=lambda g: dynamic_configs.group_config(g)[0],
                                     create_topic_at_start=create_internal_topics_at_start,
                                     offsets_replication_factor=offsets_replication_factor)
    topics.on_deleted.append(groups.on_topic_deleted)
    transactions = TransactionCoordinatorService(config, registry, logs, topics.create_topic, cluster, replicas,
                                                 producer_ids, LocalMarkers(replicas, groups),
                                                 replication_factor=transaction_replication_factor)
    # metrics off (no endpoint and no telemetry): nothing is counted on the hot paths
    metrics_on = bool(config["metrics.listener"]) or config["telemetry.interval.ms"] > 0
    metrics = BrokerMetrics(groups.views, logs, connections, TransactionMetrics(
        TransactionViews(transactions), logs, replicas.leads)) if metrics_on else None
    telemetry: TelemetryWriter | None = None
    if metrics is not None and config["telemetry.interval.ms"] > 0:
        # every broker writes what it served and the lag of what it leads, to each telemetry
        # partition's leader (docs/metrics.md)
        telemetry = TelemetryWriter(node_id, topics, logs, metrics, config["telemetry.topic.num.partitions"],
                                    LeaderSink(cluster, replicas),
                                    create_topic_at_start=create_internal_topics_at_start)
    share_state = ShareStateService(config, registry, logs, topics.create_topic, cluster, replicas,
                                    replication_factor=share_replication_factor)
    shares = _share_delivery(config, logs, replicas, share_state, cluster, dynamic_configs, registry,
                             topics.create_topic)
    if metrics is not None:
        metrics.shares = ShareMetrics(shares.partitions.views, lambda t, p: _high_watermark(logs, t, p),
                                      shares.sessions.members_of)
    acl_store: AclStore | None = None
    if config["authorizer.class.name"]:
        authorizer = Authorizer(parse_super_users(config["super.users"]), config["allow.everyone.if.no.acl.found"])
        acl_store = (acls or (lambda a: FileAclStore(config.data_dir, a)))(authorizer)
    services = Services(config=config, cluster=cluster, logs=logs, topics=topics, groups=groups,
                        producer_ids=producer_ids, dynamic_configs=dynamic_configs,
                        credentials=credentials if credentials is not None else ScramCredentials(config.data_dir),
                        metrics=metrics, replicas=replicas,
                        controller=controller, transactions=transactions, acls=acl_store, shares=shares,
                        share_state=share_state)
    return BrokerParts(config, registry, logs, cluster, topics, replicas, producer_ids, dynamic_configs, groups,
                       metrics, telemetry, services, membership, transactions, share_state, shares)


def _high_watermark(logs: LogManager, topic: str, partition: int) -> int | None:
    plog = logs.get(topic, partition)
    return plog.high_watermark if plog is not None else None


def _share_delivery(config: BrokerConfig, logs: LogManager, replicas: Any, share_state: ShareStateService,
                    cluster: ClusterMetadata, dynamic_configs: DynamicConfigs, registry: TopicRegistry,
                    create_topic: Callable[..., Any]) -> ShareService:
    """Share groups' delivery: the share-partitions led here, their state through the share
    coordinator, the share sessions, the dead-letter copies."""

    def settings(group_id: str) -> ShareSettings:
        values = dynamic_configs.group_config(group_id)[0]
        return ShareSettings(int(values["share.record.lock.duration.ms"]), int(values["share.delivery.count.limit"]),
                             int(values["share.partition.max.record.locks"]), str(values["share.auto.offset.reset"]),
                             values["share.isolation.level"] == "read_committed",
                             str(values["errors.deadletterqueue.topic.name"]),
                             values["errors.deadletterqueue.copy.record.enable"] == "true")

    dead_letters = DeadLetterWriter(config, registry, create_topic,
                                    LeaderProducer(cluster, replicas, f"gregor-{cluster.node_id}-dead-letters"))
    partitions = SharePartitionManager(logs, replicas, Persister(share_state, cluster), settings,
                                       dead_letters=dead_letters, refresh_settings=dynamic_configs.refresh_group)
    return ShareService(partitions, settings, logs.notifier.wait, config["group.share.max.share.sessions"])
