"""The composition root: builds the broker's parts from its configuration, wires them together,
and owns their lifecycle (open storage, start, stop). No request is handled here and no part
reaches another through this object: handlers get their services in their request context
(``apis/services.py``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from gregor.apis.services import Services
from gregor.cluster.credentials import ScramCredentials
from gregor.cluster.dynamic_configs import DynamicConfigs
from gregor.cluster.meta_properties import load_cluster_id
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
from gregor.metrics.telemetry import TelemetryWriter
from gregor.server.listener import Listener

log = logging.getLogger(__name__)


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.node_id: int = config["node.id"]
        self.data_dir = config.data_dir
        FD_CACHE.capacity = config["log.segment.open.files.max"]
        registry = TopicRegistry(self.data_dir)
        self.logs = LogManager(self.data_dir, config.topic_defaults(), registry)
        self.topics = TopicAdmin(config, registry, self.logs)
        self.cluster = ClusterMetadata(self.node_id)
        self.producer_ids = ProducerIdManager(self.data_dir)
        self.dynamic_configs = DynamicConfigs(config, self.node_id, self.logs, registry)
        self.groups = GroupCoordinatorService(config, registry, self.logs, self.topics.create_topic)
        self.topics.on_deleted.append(self.groups.on_topic_deleted)
        self.listener: Listener | None = None
        # metrics off (no endpoint and no telemetry): nothing is counted on the hot paths
        metrics_on = bool(config["metrics.listener"]) or config["telemetry.interval.ms"] > 0
        self.metrics = BrokerMetrics(self.groups, self.logs, self._connection_count) if metrics_on else None
        self.telemetry = (TelemetryWriter(self.node_id, self.topics, self.logs, self.metrics,
                                          config["telemetry.topic.num.partitions"])
                          if self.metrics is not None and config["telemetry.interval.ms"] > 0 else None)
        self.services = Services(config=config, cluster=self.cluster, logs=self.logs, topics=self.topics,
                                 groups=self.groups, producer_ids=self.producer_ids,
                                 dynamic_configs=self.dynamic_configs,
                                 credentials=ScramCredentials(self.data_dir), metrics=self.metrics)
        self.metrics_server: asyncio.Server | None = None
        self._tasks: list[asyncio.Task[None]] = []

    def _connection_count(self) -> int:
        return len(self.listener.connections) if self.listener is not None else 0

    # -- lifecycle ---------------------------------------------------------------------------
    def open_storage(self) -> None:
        self.dynamic_configs.load()  # before the logs: dynamic broker configs are topic defaults
        self.logs.startup()
        self.producer_ids.load()
        self.cluster.cluster_id = load_cluster_id(self.data_dir, self.node_id, self.config["cluster.id"])

    async def start(self) -> None:
        self.open_storage()
        await self.groups.start()
        if self.telemetry is not None:
            self.telemetry.ensure_topic()
        host, port = self.config.listener()
        self.listener = Listener(self.config, self.services)
        bound = await self.listener.start(host, port)
        adv_host, adv_port = self.config.advertised()
        self.cluster.set_endpoint(adv_host, adv_port or bound)
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(run_housekeeping(self.config, self.logs, self.metrics, self.telemetry)))
        if self.metrics is not None and self.config["metrics.listener"]:
            mhost, mport = parse_http_listener(self.config["metrics.listener"])
            self.metrics_server = await serve_metrics(self.metrics.registry, mhost, mport)
        log.info("Gregor broker %d (cluster %s) listening on %s:%d, data in %s", self.node_id,
                 self.cluster.cluster_id, host, bound, self.data_dir)

    @property
    def bound_port(self) -> int:
        assert self.listener is not None
        return self.listener.bound_port

    async def stop(self) -> None:
        """Stop accepting, let in-flight requests finish (bounded), flush, close the logs."""
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
        await self.groups.stop()
        self.logs.shutdown()
        log.info("broker %d stopped cleanly", self.node_id)
