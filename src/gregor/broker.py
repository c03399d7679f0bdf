"""The composition root: builds the broker's parts from its configuration, wires them together,
and owns their lifecycle (open storage, start, stop). No request is handled here and no part
reaches another through this object: handlers get their services in their request context
(``apis/services.py``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable
from typing import TYPE_CHECKING

from gregor.apis.services import Services
from gregor.cluster.credentials import ScramCredentials
from gregor.cluster.dynamic_configs import DynamicConfigs
from gregor.cluster.meta_properties import load_cluster_id, store_cluster_id, stored_cluster_id
from gregor.cluster.metadata import ClusterMetadata
from gregor.cluster.producer_ids import ProducerIdManager
from gregor.cluster.topic_admin import TopicAdmin
from gregor.config import BrokerConfig, parse_http_listener
from gregor.coordinator.group.service import GroupCoordinatorService
from gregor.housekeeping import run_housekeeping
from gregor.log.log_manager import LogManager
from gregor.log.storage_errors import FD_CACHE
from gregor.log.topic_registry import TopicRegistry
from gregor.metrics.http import serve_metrics
from gregor.metrics.registry import BrokerMetrics
from gregor.metrics.telemetry import ClusterSink, TelemetryWriter
from gregor.server.listener import Listener

if TYPE_CHECKING:
    from gregor.cluster.replica_manager import ReplicaManager
    from gregor.cluster.zk.client import ZkClient
    from gregor.cluster.zk_broker import BrokerRegistrar
    from gregor.cluster.zk_group_configs import ZkGroupConfigs

LEAVE_TIMEOUT_S = 60  # controlled shutdown (its retries included) and the rest of leaving the cluster

log = logging.getLogger(__name__)


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.node_id: int = config["node.id"]
        self.data_dir = config.data_dir
        FD_CACHE.capacity = config["log.segment.open.files.max"]
        registry = TopicRegistry(self.data_dir)
        # a broker of a cluster hosts only the partitions assigned to it
        self.logs = LogManager(self.data_dir, config.topic_defaults(), registry,
                               hosts_all_partitions=not config["zookeeper.connect"])
        # a cluster when zookeeper.connect is set, else the single-node default
        self.zk: ZkClient | None = None
        self.replicas: ReplicaManager | None = None
        self.registrar: BrokerRegistrar | None = None
        self.topics: TopicAdmin
        self.cluster: ClusterMetadata
        if config["zookeeper.connect"]:
            # the cluster's parts (and kazoo) are imported only in a cluster
            from gregor.cluster.controller import Controller
            from gregor.cluster.replica_manager import ReplicaManager
            from gregor.cluster.zk.client import ZkClient
            from gregor.cluster.zk_metadata import ZkClusterMetadata
            from gregor.cluster.zk_topic_admin import ZkTopicAdmin

            self.zk = ZkClient(config["zookeeper.connect"], config["zookeeper.session.timeout.ms"],
                               config["zookeeper.connection.timeout.ms"])
            zk_cluster = ZkClusterMetadata(self.zk, self.node_id, config["broker.rack"])
            self.cluster = zk_cluster
            self.topics = zk_topics = ZkTopicAdmin(config, registry, self.logs, self.zk, zk_cluster)
            self.replicas = ReplicaManager(config, self.node_id, self.zk, zk_cluster, self.logs, registry)
            zk_cluster.on_topic.append(zk_topics.mirror)  # before the replica manager hears of partitions
            zk_cluster.on_topic_deleted.append(zk_topics.mirror_deleted)
            self.controller = Controller(self.zk, self.node_id, config)
        else:
            self.cluster = ClusterMetadata(self.node_id)
            self.topics = TopicAdmin(config, registry, self.logs)
        self.producer_ids = ProducerIdManager(self.data_dir)
        if self.zk is not None:
            from gregor.cluster.zk_producer_ids import ZkProducerIdManager

            self.producer_ids = ZkProducerIdManager(self.zk, self.node_id)
        self.dynamic_configs = DynamicConfigs(config, self.node_id, self.logs, registry)
        self.groups = GroupCoordinatorService(config, registry, self.logs, self.topics.create_topic, self.cluster,
                                              group_settings=lambda g: self.dynamic_configs.group_config(g)[0])
        self.topics.on_deleted.append(self.groups.on_topic_deleted)
        self.group_configs: ZkGroupConfigs | None = None
        if self.zk is not None:  # a cluster's group configs are ZooKeeper's, mirrored by every broker
            from gregor.cluster.zk_group_configs import ZkGroupConfigs

            self.group_configs = ZkGroupConfigs(self.zk, self.dynamic_configs, self.groups)
        if self.replicas is not None:
            self.groups.attach_replication(self.replicas.append_internal)
            self.replicas.on_leadership.append(self.groups.on_leadership)
            self.replicas.on_high_watermark.append(self.groups.on_high_watermark)
        self.listener: Listener | None = None
        # metrics off (no endpoint and no telemetry): nothing is counted on the hot paths
        metrics_on = bool(config["metrics.listener"]) or config["telemetry.interval.ms"] > 0
        self.metrics = BrokerMetrics(self.groups, self.logs, self._connection_count) if metrics_on else None
        self.telemetry: TelemetryWriter | None = None
        if self.metrics is not None and config["telemetry.interval.ms"] > 0:
            # in a cluster every broker writes what it served and the lag of what it leads, to
            # each telemetry partition's leader (docs/metrics.md)
            sink = (ClusterSink(self.cluster, self.replicas.append_internal, self.logs.notifier.notify)
                    if self.replicas is not None else None)
            self.telemetry = TelemetryWriter(self.node_id, self.topics, self.logs, self.metrics,
                                             config["telemetry.topic.num.partitions"], sink)
        self.services = Services(config=config, cluster=self.cluster, logs=self.logs, topics=self.topics,
                                 groups=self.groups, producer_ids=self.producer_ids,
                                 dynamic_configs=self.dynamic_configs,
                                 credentials=ScramCredentials(self.data_dir), metrics=self.metrics,
                                 replicas=self.replicas,
                                 controller=self.controller if self.zk is not None else None)
        self.metrics_server: asyncio.Server | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._joined = False  # registered in a cluster (a controlled shutdown makes sense)

    def _connection_count(self) -> int:
        return len(self.listener.connections) if self.listener is not None else 0

    # -- lifecycle ---------------------------------------------------------------------------
    def open_storage(self) -> None:
        self.dynamic_configs.load()  # before the logs: dynamic broker configs are topic defaults
        self.logs.startup()
        self.producer_ids.load()
        if self.zk is None:  # in a cluster the id comes from ZooKeeper (_join_cluster)
            self.cluster.cluster_id = load_cluster_id(self.data_dir, self.node_id, self.config["cluster.id"])

    async def start(self) -> None:
        self.open_storage()
        await self.groups.start()
        if self.telemetry is not None and self.zk is None:
            self.telemetry.ensure_topic()  # in a cluster: on its first write, once brokers have joined
        host, port = self.config.listener()
        self.listener = Listener(self.config, self.services)
        bound = await self.listener.start(host, port)
        adv_host, adv_port = self.config.advertised()
        self.cluster.set_endpoint(adv_host, adv_port or bound)
        if self.zk is not None:
            await self._join_cluster(adv_host, adv_port or bound)
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(run_housekeeping(self.config, self.logs, self.metrics, self.telemetry)))
        if self.metrics is not None and self.config["metrics.listener"]:
            mhost, mport = parse_http_listener(self.config["metrics.listener"])
            self.metrics_server = await serve_metrics(self.metrics.registry, mhost, mport)
        log.info("Gregor broker %d (cluster %s) listening on %s:%d, data in %s", self.node_id,
                 self.cluster.cluster_id, host, bound, self.data_dir)

    async def _join_cluster(self, host: str, port: int) -> None:
        """Kafka's start-up order: ZooKeeper session, cluster id, the cluster's topics mirrored
        and the replicas' roles taken, then this broker registered (clients and the controller
        may use it from then on), then the controller election."""
        from gregor.cluster.zk import znodes
        from gregor.cluster.zk_broker import BrokerRegistrar
        from gregor.cluster.zk_metadata import ZkClusterMetadata
        from gregor.cluster.zk_topic_admin import ZkTopicAdmin

        assert self.zk is not None and self.replicas is not None
        assert isinstance(self.cluster, ZkClusterMetadata) and isinstance(self.topics, ZkTopicAdmin)
        await self.zk.start()
        if self.group_configs is not None:  # before this broker can coordinate a group
            await self.group_configs.start()
        self.replicas.start()
        await self.cluster.start()
        self.topics.forget_topics_not_in(set(self.cluster.assignments))
        stored = stored_cluster_id(self.data_dir, self.node_id)
        self.registrar = BrokerRegistrar(self.zk, znodes.BrokerRegistration(self.node_id, host, port,
                                                                            self.config["broker.rack"]))
        self.cluster.cluster_id = await self.registrar.start(stored)
        if stored is None:
            store_cluster_id(self.data_dir, self.node_id, self.cluster.cluster_id)
        await self.controller.start()
        # ready means usable: a client's first Metadata names a controller (librdkafka sends
        # CreateTopics only to a known controller and may wait minutes for its next refresh)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.zk.connection_timeout_ms / 1000
        while self.cluster.controller_id < 0 and loop.time() < deadline:
            await asyncio.sleep(0.02)
        self._joined = True
        log.info("broker %d joined the cluster at %s (controller: %d)", self.node_id, self.zk.connect,
                 self.cluster.controller_id)

    async def _leave_cluster(self) -> None:
        assert self.zk is not None and self.replicas is not None
        if self.config["controlled.shutdown.enable"] and self._joined:
            try:
                from gregor.cluster.controller.shutdown_client import request_controlled_shutdown

                epoch = self.registrar.broker_epoch if self.registrar is not None else -1
                moved = await request_controlled_shutdown(self.zk, self.node_id, epoch,
                                                          self.config, self.controller)
                if not moved:
                    log.warning("controlled shutdown could not move every leadership away; stopping anyway")
            except Exception:
                log.exception("controlled shutdown failed; stopping anyway")
        # no longer a candidate for controller: a broker elected while it stops would handle other
        # brokers' controlled shutdowns while it leaves itself
        await self._leaving_step("leaving the controller election", self.controller.stop(), 15)
        # what this broker served since its last telemetry row, while the telemetry partitions'
        # leaders can still be found (its own leaderships have moved away)
        await self._final_telemetry()
        # Kafka's StopReplica: a broker whose leaderships moved stops fetching at once, so that no
        # leader takes it back into an ISR it is about to leave (acks=all would wait for it)
        await self._leaving_step("stopping the replica fetchers", self.replicas.stop(), 5)
        if self.registrar is not None:
            await self.registrar.stop()
        from gregor.cluster.zk_metadata import ZkClusterMetadata

        if isinstance(self.cluster, ZkClusterMetadata):
            await self.cluster.stop()
        if self.group_configs is not None:
            await self.group_configs.stop()
        await self._leaving_step("closing the ZooKeeper session", self.zk.stop(), 5)

    async def _leaving_step(self, what: str, step: Awaitable[None], timeout_s: float) -> None:
        """One step of leaving the cluster, bounded: one that hangs is logged and left behind, so
        that stopping goes on; one that is slow is logged with how long it took."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            await asyncio.wait_for(step, timeout_s)
        except TimeoutError:
            log.warning("%s did not finish within %.0f s; stopping anyway", what, timeout_s)
            return
        except Exception:  # noqa: BLE001 - stopping goes on
            log.warning("%s failed; stopping anyway", what, exc_info=True)
            return
        took = loop.time() - started
        if took > 1:
            log.info("%s took %.1f s", what, took)

    async def _final_telemetry(self) -> None:
        """One last telemetry write when the broker stops, so that what it served since its last
        row is not lost (a rolling restart would otherwise drop up to telemetry.interval.ms of
        consumption from the lag report)."""
        if self.telemetry is None:
            return
        try:
            await asyncio.wait_for(self.telemetry.write(), 5)
        except Exception:  # noqa: BLE001 - stopping goes on
            log.warning("the last telemetry write before stopping failed", exc_info=True)

    @property
    def bound_port(self) -> int:
        assert self.listener is not None
        return self.listener.bound_port

    async def stop(self) -> None:
        """Stop accepting, let in-flight requests finish (bounded), flush, close the logs."""
        if self.zk is not None:
            leaving = asyncio.ensure_future(self._leave_cluster())
            done, _ = await asyncio.wait({leaving}, timeout=LEAVE_TIMEOUT_S)
            if not done:  # stopping must never hang: what did not finish is logged, the rest goes on
                log.error("leaving the cluster did not finish within %d s; stopping anyway", LEAVE_TIMEOUT_S)
                leaving.cancel()
            elif leaving.exception() is not None:
                log.error("leaving the cluster failed; stopping anyway", exc_info=leaving.exception())
        if self.listener is not None:
            self.listener.stop_accepting()
        if self.metrics_server is not None:
            self.metrics_server.close()
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        if self.listener is not None:
            await self.listener.close()
        if self.zk is None:
            await self._final_telemetry()  # one node: everything served, up to the last request
        await self.groups.stop()
        if self.telemetry is not None and isinstance(self.telemetry.sink, ClusterSink):
            await self.telemetry.sink.close()
        self.logs.shutdown()
        log.info("broker %d stopped cleanly", self.node_id)
