"""Topics in a ZooKeeper cluster: ZooKeeper holds them; every broker mirrors them.

Creating, deleting and growing a topic writes ZooKeeper (``zk/admin.py``: the assignment, the
configs, the deletion request); nothing local changes until ZooKeeper says so. Every broker keeps
its local topic registry as a mirror of ``/brokers/topics`` (``mirror`` / ``mirror_deleted``,
called by the metadata cache's watches): names, ids, partition counts and configs of all topics, so
that Metadata and every handler that looks a topic up answer for the whole cluster. The partition
logs are made by the replica manager, only for the partitions assigned to this broker; a deleted
topic's local replicas are deleted here, also at start-up for topics deleted while this broker
was down.

Auto-creation (Metadata, the coordinator's ``__consumer_offsets``) starts the ZooKeeper write and
answers at once with LEADER_NOT_AVAILABLE, as Kafka does: the client asks again.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

from gregor.cluster.replica_assignment import BrokerMetadata, assign_new_partitions, assign_replicas_to_brokers
from gregor.cluster.topic_admin import MAX_PARTITIONS, TopicAdmin, apply_config_ops
from gregor.cluster.zk import admin as zk_admin
from gregor.cluster.zk import znodes as zn
from gregor.cluster.zk.client import BadVersionError, KazooException, NodeExistsError, ZkClient
from gregor.cluster.zk.metadata import ZkClusterMetadata
from gregor.config import BrokerConfig, ConfigError, parse_topic_config
from gregor.log.log_manager import LogManager
from gregor.log.topic_registry import Topic, TopicRegistry, validate_topic_name
from gregor.protocol.consumer_offsets import OFFSETS_TOPIC
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.share_state_records import SHARE_STATE_TOPIC
from gregor.protocol.telemetry_records import TELEMETRY_TOPIC
from gregor.protocol.transaction_log import TRANSACTION_STATE_TOPIC

log = logging.getLogger(__name__)

INTERNAL_TOPICS = {OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, SHARE_STATE_TOPIC}


class ZkTopicAdmin(TopicAdmin):
    def __init__(self, config: BrokerConfig, registry: TopicRegistry, logs: LogManager, zk: ZkClient,
                 metadata: ZkClusterMetadata) -> None:
        super().__init__(config, registry, logs)
        self.zk = zk
        self.metadata = metadata
        self._pending: dict[str, asyncio.Task[None]] = {}  # auto-creations under way

    # -- the mirror ----------------------------------------------------------------------------
    def mirror(self, assignment: zn.TopicAssignment, configs: dict[str, str]) -> None:
        name = assignment.topic
        parsed: dict[str, Any] = {}
        for k, v in configs.items():
            try:
                parsed[k] = parse_topic_config(k, v)
            except ConfigError as e:
                log.warning("topic %s: ignoring config %s=%s from ZooKeeper (%s)", name, k, v, e)
        count = len(assignment.partitions)
        topic = self.registry.get(name)
        tid = assignment.topic_id
        if topic is not None and tid is not None and topic.topic_id != tid:
            log.info("topic %s was deleted and created again (id %s -> %s): deleting the old replicas",
                     name, topic.topic_id, tid)
            self._delete_local(name)
            topic = None
        if topic is None:
            topic = Topic(name, tid or uuid.uuid5(uuid.NAMESPACE_URL, f"gregor-topic:{name}"), count, parsed,
                          internal=name in INTERNAL_TOPICS)
            self.registry.add_topic(topic)
            log.info("topic %s: %d partitions, configs %s", name, count, parsed)
            return
        changed = False
        if count > topic.partitions:
            topic.partitions = count
            changed = True
        if parsed != topic.configs:
            topic.configs = parsed
            self.logs.reconfigure(topic)
            changed = True
        if changed:
            self.registry.save()

    async def alter_topic_configs_async(self, name: str, configs: dict[str, Any],
                                        incremental_ops: dict[str, int] | None, validate_only: bool) -> None:
        """A topic's overrides live in ZooKeeper (``/config/topics/<t>``, as text): read them,
        apply the operations, validate, and write them back conditionally on the version read (a
        concurrent change makes this start again); every broker's mirror then applies them, this
        one at once so that a DescribeConfigs right after sees the change."""
        topic = self.registry.get(name)
        if topic is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"topic '{name}' does not exist")
        path = zn.topic_config_path(name)
        for _ in range(10):
            got = await self.zk.get(path)
            current = zn.decode_topic_config(name, got[0]) if got is not None else {}
            new: dict[str, str] = apply_config_ops(dict(current) if incremental_ops is not None else {}, configs,
                                                   incremental_ops, _as_text)
            parsed = self.parse_topic_configs(dict(new))  # INVALID_CONFIG before anything is written
            if validate_only:
                return
            try:
                if got is not None:
                    await self.zk.set(path, zn.encode_topic_config(new), got[1].version)
                elif await self.zk.exists(zn.topic_path(name)) is None:
                    raise KafkaError(ErrorCode.unknown_topic_or_partition, f"topic '{name}' does not exist")
                else:
                    await self.zk.create(path, zn.encode_topic_config(new), makepath=True)
            except (BadVersionError, NodeExistsError):
                continue  # changed meanwhile: apply the operations to the newer overrides
            if self.registry.get(name) is topic and parsed != topic.configs:
                self.set_topic_configs(topic, parsed)
            log.info("topic %s: configs set to %s", name, new)
            return
        raise KafkaError(ErrorCode.request_timed_out, f"topic '{name}': its configs kept changing; try again")

    def mirror_deleted(self, name: str) -> None:
        if self.registry.get(name) is not None:
            self._delete_local(name)

    def _delete_local(self, name: str) -> None:
        topic = self.registry.get(name)
        if topic is None:
            return
        dirs = self.forget_topic(topic)
        asyncio.get_running_loop().create_task(self.logs.purge(topic, dirs))
        log.info("deleted the local replicas of topic %s", name)

    def forget_topics_not_in(self, names: set[str]) -> None:
        """At start-up, once ZooKeeper's topics are known: drop topics deleted while this broker
        was down."""
        for name in list(self.registry.by_name):
            if name not in names:
                log.info("topic %s was deleted while this broker was down", name)
                self._delete_local(name)

    # -- operations: ZooKeeper writes ----------------------------------------------------------
    def replication_factor_of(self, replication_factor: int, assignments: dict[int, list[int]] | None) -> int:
        if assignments:
            return len(next(iter(assignments.values())))
        return replication_factor if replication_factor != -1 else int(self.config["default.replication.factor"])

    def _brokers(self) -> list[BrokerMetadata]:
        return [BrokerMetadata(b.node_id, b.rack) for b in self.metadata.brokers()]

    def _plan(self, name: str, partitions: int, replication_factor: int,
              assignments: dict[int, list[int]] | None, configs: dict[str, str | None]
              ) -> tuple[dict[int, list[int]], dict[str, str]]:
        validate_topic_name(name)
        if self.registry.get(name) is not None or name in self.metadata.assignments:
            raise KafkaError(ErrorCode.topic_already_exists, f"topic '{name}' already exists")
        self.parse_topic_configs(configs)  # validation: INVALID_CONFIG
        strs = {k: v for k, v in configs.items() if v is not None}
        if assignments:
            zk_admin.validate_replica_assignment(assignments, [b.node_id for b in self.metadata.brokers()])
            return assignments, strs
        if partitions == -1:
            partitions = self.config["num.partitions"]
        if replication_factor == -1:
            replication_factor = self.config["default.replication.factor"]
        if not 1 <= partitions <= MAX_PARTITIONS:
            raise KafkaError(ErrorCode.invalid_partitions, f"number of partitions must be 1..{MAX_PARTITIONS}")
        return assign_replicas_to_brokers(self._brokers(), partitions, replication_factor), strs

    def create_topic(self, name: str, partitions: int, configs: dict[str, str | None],
                     validate_only: bool = False, internal: bool = False) -> Topic | None:
        """Auto-creation: starts the ZooKeeper write and raises LEADER_NOT_AVAILABLE (the client
        asks again and finds the topic once its leaders are elected)."""
        if name in self._pending:
            raise KafkaError(ErrorCode.leader_not_available, f"topic '{name}' is being created")
        rf = self.config["offsets.topic.replication.factor"] if name == OFFSETS_TOPIC else -1
        if name == TRANSACTION_STATE_TOPIC:
            rf = self.config["transaction.state.log.replication.factor"]
        if name == SHARE_STATE_TOPIC:
            rf = self.config["share.coordinator.state.topic.replication.factor"]
        if name == TELEMETRY_TOPIC:  # replicated like the offsets topic, as far as the brokers allow
            rf = max(1, min(self.config["offsets.topic.replication.factor"], len(self.metadata.brokers())))
        assignment, strs = self._plan(name, partitions, rf, None, configs)
        if validate_only:
            return None
        task = asyncio.get_running_loop().create_task(self._create(name, assignment, strs))
        self._pending[name] = task
        task.add_done_callback(lambda _: self._pending.pop(name, None))
        raise KafkaError(ErrorCode.leader_not_available, f"topic '{name}' is being created")

    async def _create(self, name: str, assignment: dict[int, list[int]], configs: dict[str, str]) -> None:
        try:
            await zk_admin.create_topic(self.zk, name, assignment, configs, uuid.uuid4())
            log.info("created topic %s in ZooKeeper: assignment %s", name, assignment)
        except KafkaError as e:
            if e.code != ErrorCode.topic_already_exists:
                log.warning("cannot create topic %s: %s", name, e.message)
        except KazooException as e:  # ZooKeeper unreachable, or the session expired: the client asks again
            log.warning("cannot create topic %s now: ZooKeeper did not answer (%s)", name, type(e).__name__)
        except Exception:
            log.exception("cannot create topic %s", name)

    async def create_topic_async(self, name: str, partitions: int, configs: dict[str, str | None],
                                 validate_only: bool = False, replication_factor: int = -1,
                                 assignments: dict[int, list[int]] | None = None,
                                 timeout_s: float = 30.0) -> Topic | None:
        """CreateTopics: the assignment and configs written to ZooKeeper; answered once every
        partition has a leader (or after ``timeout_s``: the topic exists, leaders will follow)."""
        assignment, strs = self._plan(name, partitions, replication_factor, assignments, configs)
        if validate_only:
            return None
        await zk_admin.create_topic(self.zk, name, assignment, strs, uuid.uuid4())
        log.info("created topic %s: assignment %s, configs %s", name, assignment, strs)
        await self._wait(lambda: self.registry.get(name) is not None and all(
            self.metadata.partition(name, p).leader >= 0 for p in assignment), timeout_s)
        return self.registry.get(name)

    async def delete_topic_async(self, name: str) -> Topic:
        if not self.config["delete.topic.enable"]:
            raise KafkaError(ErrorCode.topic_deletion_disabled, "delete.topic.enable is false")
        topic = self.registry.get(name)
        if topic is None or name not in self.metadata.assignments:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"topic '{name}' does not exist")
        if topic.internal:
            raise KafkaError(ErrorCode.topic_authorization_failed, f"internal topic '{name}' cannot be deleted")
        await zk_admin.request_delete(self.zk, name)
        await self._wait(lambda: name not in self.metadata.assignments, 30.0)
        return topic

    async def add_partitions_async(self, name: str, count: int, validate_only: bool = False,
                                   assignments: list[list[int]] | None = None) -> None:
        super().add_partitions(name, count, validate_only=True)  # the same checks and errors
        current = await zk_admin.read_topic(self.zk, name)
        if current is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"topic '{name}' does not exist")
        if assignments is not None:
            new = zk_admin.validate_added_partitions(assignments, current.assignment, count,
                                                     [b.node_id for b in self.metadata.brokers()])
        else:
            new = assign_new_partitions(self._brokers(), current.assignment, count)
        if validate_only:
            return
        await zk_admin.add_partitions(self.zk, name, {**current.assignment, **new}, current.version)
        await self._wait(lambda: (t := self.registry.get(name)) is not None and t.partitions >= count, 30.0)

    @staticmethod
    async def _wait(done: Any, timeout_s: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not done() and loop.time() < deadline:
            await asyncio.sleep(0.05)


def _as_text(configs: dict[str, str | None]) -> dict[str, str]:
    """Set values as ZooKeeper keeps them (text; a null SET removes nothing and sets nothing)."""
    return {k: v for k, v in configs.items() if v is not None}
