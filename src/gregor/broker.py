"""The broker's lifecycle: open storage, start, stop, and halt when the log directory fails.

The parts are built by the assembly (assembly/: a single node, or a broker of a ZooKeeper
cluster, the same parts either way); nothing here asks which. No request is handled here and no
part reaches another through this object: handlers get their services in their request context
(``apis/services.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os

from gregor.assembly import build_parts
from gregor.config import BrokerConfig, parse_http_listener
from gregor.housekeeping import run_housekeeping
from gregor.log.storage_errors import FD_CACHE
from gregor.metrics.http import serve_metrics
from gregor.security.authenticator import build_listener_security
from gregor.security.listeners import Listener as SecurityListener
from gregor.security.listeners import listener_setting
from gregor.server.listener import Listener

log = logging.getLogger(__name__)

HALT_EXIT_CODE = 1  # as Kafka's Exit.halt(1) when its last log directory failed
HALT_GRACE_S = 3.0  # at most this long to close the ZooKeeper session before halting


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.node_id: int = config["node.id"]
        self.data_dir = config.data_dir
        FD_CACHE.capacity = config["log.segment.open.files.max"]
        parts = build_parts(config, self._connection_count, self.halt)
        self.parts = parts
        self.logs = parts.logs
        self.topics = parts.topics
        self.cluster = parts.cluster
        self.replicas = parts.replicas
        self.groups = parts.groups
        self.transactions = parts.transactions
        self.share_state = parts.share_state
        self.shares = parts.shares
        self.producer_ids = parts.producer_ids
        self.dynamic_configs = parts.dynamic_configs
        self.metrics = parts.metrics
        self.telemetry = parts.telemetry
        self.services = parts.services
        self.membership = parts.membership
        self.listeners: list[Listener] = []
        self.metrics_server: asyncio.Server | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._halting = False

    def _connection_count(self) -> int:
        return len(self.listeners[0].connections) if self.listeners else 0  # the listeners share the set

    # -- lifecycle ---------------------------------------------------------------------------
    def open_storage(self) -> None:
        self.dynamic_configs.load()  # before the logs: dynamic broker configs are topic defaults
        self.logs.startup()
        self.producer_ids.load()
        self.membership.open_storage(self.data_dir, self.cluster)

    async def start(self) -> None:
        self.open_storage()
        await self.replicas.start()
        await self.groups.start()
        await self.transactions.start()
        await self.share_state.start()
        if self.telemetry is not None:
            self.telemetry.start()
        configured = self.config.listeners()
        endpoints = []
        first: Listener | None = None
        for spec in configured.bound:
            security = build_listener_security(
                spec, functools.partial(listener_setting, self.config, spec.name), self.services.credentials.lookup)
            listener = Listener(self.config, self.services, security, *(
                (first.limits, first.dispatcher, first.connections) if first is not None else ()))
            first = first or listener
            self.listeners.append(listener)
            bound = await listener.start(spec.host or "0.0.0.0", spec.port, serve=False)
            adv = configured.advertised_named(spec.name)
            endpoints.append(SecurityListener(spec.name, spec.protocol, adv.host or "127.0.0.1", adv.port or bound))
        self.cluster.set_endpoints(tuple(endpoints), configured.inter_broker)
        # as Kafka's KafkaServer.startup: requests are processed once the broker has joined (a
        # broker answering before it knows its cluster made librdkafka drop every broker it knew)
        await self.membership.join(tuple(endpoints), configured.inter_broker)
        for listener in self.listeners:
            await listener.start_serving()
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(run_housekeeping(self.config, self.logs, self.metrics, self.telemetry)))
        if self.metrics is not None and self.config["metrics.listener"]:
            mhost, mport = parse_http_listener(self.config["metrics.listener"])
            self.metrics_server = await serve_metrics(self.metrics.registry, mhost, mport)
        log.info("Gregor broker %d (cluster %s) listening on %s, data in %s", self.node_id, self.cluster.cluster_id,
                 ", ".join(f"{spec.name}://{spec.host or '0.0.0.0'}:{lst.bound_port} ({spec.protocol})"
                           for spec, lst in zip(configured.bound, self.listeners, strict=True)), self.data_dir)

    @property
    def bound_port(self) -> int:
        """The first listener's port."""
        assert self.listeners
        return self.listeners[0].bound_port

    def bound_port_of(self, name: str) -> int:
        for spec, listener in zip(self.config.listeners().bound, self.listeners, strict=True):
            if spec.name == name:
                return listener.bound_port
        raise KeyError(name)

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

    async def stop(self) -> None:
        """Leave what the broker belongs to (a cluster: controlled shutdown), stop accepting, let
        in-flight requests finish (bounded), flush, close the logs."""
        await self.membership.leave(self._final_telemetry)
        for listener in self.listeners:
            listener.stop_accepting()
        if self.metrics_server is not None:
            self.metrics_server.close()
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        for listener in self.listeners:
            await listener.close()
        await self.membership.finish(self._final_telemetry)
        await self.transactions.stop()
        await self.shares.stop()
        await self.share_state.stop()
        await self.groups.stop()
        await self.replicas.stop()
        if self.telemetry is not None:
            await self.telemetry.close()
        self.logs.shutdown()
        log.info("broker %d stopped cleanly", self.node_id)

    def halt(self, reason: str) -> None:
        """The log directory failed (a cluster): stop at once, as Kafka halts a broker whose last
        log directory failed, after closing the ZooKeeper session so that the controller moves
        this broker's leaderships to healthy replicas right away. The logs are not flushed (the
        directory cannot be trusted); the next start recovers them. An operator frees the space
        or replaces the disk and starts the broker again."""
        if self._halting:
            return
        self._halting = True
        log.critical("halting broker %d: its log directory %s failed (%s). Its partitions move to other "
                     "replicas; fix the directory and start the broker again", self.node_id, self.data_dir, reason)
        asyncio.get_running_loop().create_task(self._halt())

    async def _halt(self) -> None:
        for listener in self.listeners:
            listener.stop_accepting()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.membership.abandon(), HALT_GRACE_S)
        logging.shutdown()
        os._exit(HALT_EXIT_CODE)
