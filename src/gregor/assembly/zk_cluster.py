"""A broker of a ZooKeeper cluster (``zookeeper.connect`` set), as Kafka 2.8 in ZooKeeper mode:
the metadata cache over ZooKeeper's watches, topics written to ZooKeeper and mirrored locally, the
replica manager with its fetchers, the controller election, producer id blocks and group configs
in ZooKeeper. ``ZkMembership`` is Kafka's start-up and shutdown order."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from gregor.assembly.parts import BrokerParts
from gregor.assembly.single_node import _common
from gregor.cluster.broker_client import set_inter_broker_security
from gregor.cluster.controller import Controller
from gregor.cluster.meta_properties import store_cluster_id, stored_cluster_id
from gregor.cluster.metadata import ClusterMetadata
from gregor.cluster.zk import znodes
from gregor.cluster.zk.acl_store import ZkAclStore
from gregor.cluster.zk.client import ConnectionLoss, SessionExpiredError, ZkClient
from gregor.cluster.zk.group_configs import ZkGroupConfigs
from gregor.cluster.zk.metadata import ZkClusterMetadata
from gregor.cluster.zk.partition_states import ZkPartitionStates
from gregor.cluster.zk.producer_ids import ZkProducerIdManager
from gregor.cluster.zk.registration import BrokerRegistrar
from gregor.cluster.zk.scram_credentials import ZkScramCredentials
from gregor.cluster.zk.session_guard import SessionGuard
from gregor.cluster.zk.topic_admin import ZkTopicAdmin
from gregor.config import BrokerConfig
from gregor.log.log_manager import LogManager
from gregor.log.topic_registry import TopicRegistry
from gregor.replication.cluster_replicas import ClusterReplicas
from gregor.security.client import inter_broker_security
from gregor.security.listeners import Listener, listener_setting

log = logging.getLogger("gregor.broker")

T = TypeVar("T")

LEAVE_TIMEOUT_S = 60  # controlled shutdown (its retries included) and the rest of leaving the cluster


class ZkMembership:
    def __init__(self, config: BrokerConfig, zk: ZkClient, metadata: ZkClusterMetadata, topics: ZkTopicAdmin,
                 replicas: ClusterReplicas, controller: Controller, group_configs: ZkGroupConfigs,
                 credentials: ZkScramCredentials,
                 data_dir: Path) -> None:
        self.config = config
        self.node_id: int = config["node.id"]
        self.zk = zk
        self.metadata = metadata
        self.topics = topics
        self.replicas = replicas
        self.controller = controller
        self.group_configs = group_configs
        self.credentials = credentials
        self.acls: ZkAclStore | None = None
        self.data_dir = data_dir
        self.registrar: BrokerRegistrar | None = None
        self.session_guard = SessionGuard(zk, znodes.broker_path(self.node_id), zk.session_timeout_ms)
        replicas.trusted = self.session_guard.trusted
        self._joined = False  # registered (a controlled shutdown makes sense)

    def open_storage(self, data_dir: Path, cluster: ClusterMetadata) -> None:
        pass  # the cluster id comes from ZooKeeper (join)

    async def join(self, endpoints: tuple[Listener, ...], inter_broker: str) -> None:
        """Kafka's start-up order: ZooKeeper session, cluster id, the cluster's topics mirrored
        and the replicas' states read (no role is taken before this broker is registered), then
        this broker registered (its roles follow, clients and the controller may use it from then
        on), then the controller election."""
        await self.zk.start()
        # ZooKeeper may go away while this broker starts (restarted, paused): every step waits for
        # it to come back, as Kafka's retryRequestsUntilConnected (SIGTERM still stops the broker)
        await until_connected(self.group_configs.start, "reading the group configs")  # before coordinating
        await until_connected(self.credentials.start, "reading the SCRAM credentials")  # before serving
        if self.acls is not None:
            await until_connected(self.acls.start, "reading the ACLs")  # before serving
        await self.metadata.start()
        self.topics.forget_topics_not_in(set(self.metadata.assignments))
        stored = stored_cluster_id(self.data_dir, self.node_id)
        mine = next((e for e in endpoints if e.name == inter_broker), endpoints[0])
        registrar = self.registrar = BrokerRegistrar(
            self.zk, znodes.BrokerRegistration(self.node_id, mine.host, mine.port, self.config["broker.rack"],
                                               mine.name, endpoints))
        registrar.add_listener(self.replicas.set_broker_epoch)
        self.metadata.cluster_id = await until_connected(lambda: registrar.start(stored), "registering this broker")
        if stored is None:
            store_cluster_id(self.data_dir, self.node_id, self.metadata.cluster_id)
        await self.session_guard.start()
        await self.controller.start()
        # ready means usable: a client's first Metadata names a controller (librdkafka sends
        # CreateTopics only to a known controller and may wait minutes for its next refresh)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.zk.connection_timeout_ms / 1000
        while self.metadata.controller_id < 0 and loop.time() < deadline:
            await asyncio.sleep(0.02)
        self._joined = True
        log.info("broker %d joined the cluster at %s (controller: %d)", self.node_id, self.zk.connect,
                 self.metadata.controller_id)

    async def leave(self, final_telemetry: Callable[[], Awaitable[None]]) -> None:
        leaving = asyncio.ensure_future(self._leave(final_telemetry))
        done, _ = await asyncio.wait({leaving}, timeout=LEAVE_TIMEOUT_S)
        if not done:  # stopping must never hang: what did not finish is logged, the rest goes on
            log.error("leaving the cluster did not finish within %d s; stopping anyway", LEAVE_TIMEOUT_S)
            leaving.cancel()
        elif leaving.exception() is not None:
            log.error("leaving the cluster failed; stopping anyway", exc_info=leaving.exception())

    async def _leave(self, final_telemetry: Callable[[], Awaitable[None]]) -> None:
        if self.config["controlled.shutdown.enable"] and self._joined:
            # from now on a partition whose leadership moved away, or whose ISR this broker left,
            # is not fetched again (Kafka's StopReplica): no leader takes it back into an ISR
            self.replicas.begin_controlled_shutdown()
            try:
                from gregor.cluster.controller.shutdown_client import request_controlled_shutdown

                epoch = self.registrar.broker_epoch if self.registrar is not None else -1
                moved = await request_controlled_shutdown(self.zk, self.node_id, epoch, self.config, self.controller)
                if not moved:
                    log.warning("controlled shutdown could not move every leadership away; stopping anyway")
            except Exception:
                log.exception("controlled shutdown failed; stopping anyway")
        # stop following at once: leaving the controller election can take seconds, and a broker
        # that fetches meanwhile is taken back into ISRs (acks=all would wait for it)
        await _step("stopping the replica fetchers", self.replicas.stop_fetching(), 5)
        # no longer a candidate for controller: a broker elected while it stops would handle other
        # brokers' controlled shutdowns while it leaves itself
        await _step("leaving the controller election", self.controller.stop(), 15)
        # what this broker served since its last telemetry row, while the telemetry partitions'
        # leaders can still be found (its own leaderships have moved away)
        await final_telemetry()
        await _step("stopping the replicas", self.replicas.stop(), 5)
        await self.session_guard.stop()
        if self.registrar is not None:
            await self.registrar.stop()
        await self.metadata.stop()
        await self.group_configs.stop()
        self.credentials.stop()
        if self.acls is not None:
            self.acls.stop()
        await _step("closing the ZooKeeper session", self.zk.stop(), 5)

    async def finish(self, final_telemetry: Callable[[], Awaitable[None]]) -> None:
        pass

    async def abandon(self) -> None:
        """The log directory failed: close the session now, so that this broker's registration
        goes at once and the controller moves its leaderships (rather than after the session
        timeout)."""
        await self.session_guard.stop()
        if self.registrar is not None:
            await self.registrar.stop()
        await _step("closing the ZooKeeper session", self.zk.stop(), 3)


async def until_connected(step: Callable[[], Awaitable[T]], what: str) -> T:
    """Run an idempotent start-up step again, after a pause, for as long as ZooKeeper's connection is
    lost or the session expires under it."""
    delay = 0.1
    while True:
        try:
            return await step()
        except (ConnectionLoss, SessionExpiredError) as e:
            log.warning("%s: ZooKeeper did not answer (%s); trying again", what, type(e).__name__)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)


async def _step(what: str, step: Awaitable[None], timeout_s: float) -> None:
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


def build_zk_cluster(config: BrokerConfig, connections: Callable[[], int],
                     on_log_dir_failure: Callable[[str], None]) -> BrokerParts:
    node_id: int = config["node.id"]
    registry = TopicRegistry(config.data_dir)
    # a broker of a cluster hosts only the partitions assigned to it
    logs = LogManager(config.data_dir, config.topic_defaults(), registry, hosts_all_partitions=False)
    zk = ZkClient(config["zookeeper.connect"], config["zookeeper.session.timeout.ms"],
                  config["zookeeper.connection.timeout.ms"])
    listeners = config.listeners()
    metadata = ZkClusterMetadata(zk, node_id, config["broker.rack"], listeners.inter_broker)
    # every connection to another broker (replica fetchers, controlled shutdown, markers, ...) goes
    # to its inter-broker listener with this broker's security for it
    inter = listeners.named(listeners.inter_broker)
    set_inter_broker_security(inter_broker_security(inter, functools.partial(listener_setting, config, inter.name)))
    topics = ZkTopicAdmin(config, registry, logs, zk, metadata)
    replicas = ClusterReplicas(config, node_id, logs, registry, metadata, ZkPartitionStates(zk, metadata),
                               on_log_dir_failure)
    metadata.on_topic.append(topics.mirror)  # before the replica manager hears of partitions
    metadata.on_topic_deleted.append(topics.mirror_deleted)
    controller = Controller(zk, node_id, config)
    credentials = ZkScramCredentials(zk)  # SCRAM users: ZooKeeper's, mirrored by every broker
    parts = _common(config, registry, logs, metadata, topics, replicas, ZkProducerIdManager(zk, node_id),
                    None, connections, create_internal_topics_at_start=False,
                    offsets_replication_factor=config["offsets.topic.replication.factor"], controller=controller,
                    transaction_replication_factor=config["transaction.state.log.replication.factor"],
                    share_replication_factor=config["share.coordinator.state.topic.replication.factor"],
                    credentials=credentials, acls=lambda authorizer: ZkAclStore(zk, authorizer))
    # a cluster's group configs are ZooKeeper's, mirrored by every broker
    group_configs = ZkGroupConfigs(zk, parts.dynamic_configs, parts.groups)
    parts.membership = membership = ZkMembership(config, zk, metadata, topics, replicas, controller, group_configs,
                                                 credentials, config.data_dir)
    membership.acls = parts.services.acls  # type: ignore[assignment]  # a ZkAclStore when set
    return parts
