"""Topic administration in ZooKeeper, what Kafka's AdminZkClient does for CreateTopics,
CreatePartitions, DeleteTopics, AlterConfigs and auto-creation on any broker of the cluster.

These functions only write the topic's nodes; the controller reacts to them (it initialises the
partitions' states of a new topic or of added partitions, and deletes a topic whose deletion was
requested), and every broker follows ZooKeeper from there. Errors are ``KafkaError`` with Kafka's
codes, ready for a response.

- ``create_topic`` writes ``/config/topics/<t>`` and ``/brokers/topics/<t>`` in one multi-op (Kafka
  writes them one after the other): either the topic exists with its configs or nothing was
  written.
- ``add_partitions`` rewrites the topic node on the condition that it is still at the version
  read (Kafka writes it unconditionally): two concurrent CreatePartitions cannot both succeed.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from gregor.cluster.replica_assignment import BrokerMetadata
from gregor.cluster.zk import znodes
from gregor.cluster.zk.client import BadVersionError, NodeExistsError, NoNodeError, Op, ZkClient
from gregor.log.topic_registry import validate_topic_name
from gregor.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ZkTopic:
    """A topic as ZooKeeper holds it."""
    name: str
    assignment: dict[int, list[int]]  # partition -> replicas, the first the preferred leader
    topic_id: uuid.UUID | None
    version: int  # the topic node's version: the condition of add_partitions
    configs: dict[str, str]  # /config/topics/<t> (overrides only)
    marked_for_deletion: bool  # /admin/delete_topics/<t> exists

    @property
    def replication_factor(self) -> int:
        return len(self.assignment.get(0, next(iter(self.assignment.values()), [])))


async def read_topic(zk: ZkClient, name: str) -> ZkTopic | None:
    """The topic's assignment, id, version and configs; None if it does not exist."""
    got = await zk.get(znodes.topic_path(name))
    if got is None:
        return None
    data, stat = got
    assignment = znodes.TopicAssignment.decode(name, data)
    config = await zk.get(znodes.topic_config_path(name))
    configs = znodes.decode_topic_config(name, config[0]) if config is not None else {}
    marked = await zk.exists(znodes.delete_topic_path(name)) is not None
    return ZkTopic(name, assignment.partitions, assignment.topic_id, stat.version, configs, marked)


async def topic_names(zk: ZkClient) -> list[str]:
    return await zk.get_children(znodes.BROKERS_TOPICS)


async def live_brokers(zk: ZkClient) -> list[BrokerMetadata]:
    """The registered brokers with their racks, sorted by id: what replica placement works over."""
    out: list[BrokerMetadata] = []
    for child in await zk.get_children(znodes.BROKERS_IDS):
        if not child.isdigit():
            continue
        got = await zk.get(znodes.broker_path(int(child)))
        if got is None:  # gone while listing
            continue
        reg = znodes.BrokerRegistration.decode(int(child), got[0])
        out.append(BrokerMetadata(reg.broker_id, reg.rack))
    return sorted(out, key=lambda b: b.broker_id)


def validate_replica_assignment(assignment: Mapping[int, Sequence[int]], broker_ids: Collection[int]) -> None:
    """A manual assignment for a new topic (CreateTopics' ``assignments``): partitions 0..n-1,
    each with at least one replica, no broker twice, every broker registered, the same number of
    replicas everywhere. Raises INVALID_REPLICA_ASSIGNMENT with what is wrong."""
    if not assignment:
        raise KafkaError(ErrorCode.invalid_replica_assignment, "the replica assignment has no partitions")
    if sorted(assignment) != list(range(len(assignment))):
        raise KafkaError(ErrorCode.invalid_replica_assignment,
                         f"partitions should be a consecutive 0-based integer sequence, got {sorted(assignment)}")
    for p, replicas in sorted(assignment.items()):
        _check_replicas(p, replicas, broker_ids)
    sizes = {len(r) for r in assignment.values()}
    if len(sizes) != 1:
        raise KafkaError(ErrorCode.invalid_replica_assignment,
                         "all partitions should have the same number of replicas, got "
                         + ", ".join(f"{p}: {len(r)}" for p, r in sorted(assignment.items())))


def validate_added_partitions(assignments: Sequence[Sequence[int]], existing: Mapping[int, Sequence[int]],
                              total: int, broker_ids: Collection[int]) -> dict[int, list[int]]:
    """CreatePartitions' manual ``assignments`` for the partitions added to reach ``total``:
    one per added partition, each as many replicas as partition 0 has, registered brokers only.
    Returns them numbered from the current partition count."""
    adding = total - len(existing)
    if adding <= 0:
        raise KafkaError(ErrorCode.invalid_partitions,
                         f"topic has {len(existing)} partitions; {total} would not be an increase")
    unknown = sorted({b for replicas in assignments for b in replicas} - set(broker_ids))
    if unknown:
        raise KafkaError(ErrorCode.invalid_replica_assignment,
                         f"unknown broker(s) in replica assignment: {', '.join(map(str, unknown))}")
    if len(assignments) != adding:
        raise KafkaError(ErrorCode.invalid_replica_assignment,
                         f"increasing the number of partitions by {adding} but {len(assignments)} assignments provided")
    rf = len(existing[0]) if 0 in existing else None
    out: dict[int, list[int]] = {}
    for i, replicas in enumerate(assignments):
        p = len(existing) + i
        _check_replicas(p, replicas, broker_ids)
        if rf is not None and len(replicas) != rf:
            raise KafkaError(ErrorCode.invalid_replica_assignment,
                             f"inconsistent replication factor: partition 0 has {rf} replicas, "
                             f"partition {p} would have {len(replicas)}")
        out[p] = list(replicas)
    return out


def _check_replicas(partition: int, replicas: Sequence[int], broker_ids: Collection[int]) -> None:
    if not replicas:
        raise KafkaError(ErrorCode.invalid_replica_assignment, f"partition {partition} has no replicas")
    if len(set(replicas)) != len(replicas):
        raise KafkaError(ErrorCode.invalid_replica_assignment,
                         f"duplicate brokers in the replicas of partition {partition}: {list(replicas)}")
    unknown = sorted(set(replicas) - set(broker_ids))
    if unknown:
        raise KafkaError(ErrorCode.invalid_replica_assignment,
                         f"partition {partition}: broker(s) {', '.join(map(str, unknown))} are not registered")


def _collides(a: str, b: str) -> bool:
    """Kafka's Topic.hasCollision: '.' and '_' are the same character in metric names."""
    return a.replace(".", "_") == b.replace(".", "_")


async def create_topic(zk: ZkClient, name: str, assignment: Mapping[int, Sequence[int]], configs: Mapping[str, str],
                       topic_id: uuid.UUID | None) -> None:
    """Write a new topic: its configs (``/config/topics/<t>``, written even when empty, as Kafka
    does) and its assignment (``/brokers/topics/<t>``), atomically. TOPIC_ALREADY_EXISTS if the
    topic exists or its deletion is still pending; INVALID_TOPIC_EXCEPTION for a bad name or one
    that collides with an existing topic's ('.' versus '_')."""
    validate_topic_name(name)
    if await zk.exists(znodes.topic_path(name)) is not None:
        raise KafkaError(ErrorCode.topic_already_exists, f"topic '{name}' already exists")
    if await zk.exists(znodes.delete_topic_path(name)) is not None:
        raise KafkaError(ErrorCode.topic_already_exists, f"topic '{name}' is marked for deletion")
    if "." in name or "_" in name:
        colliding = [t for t in await topic_names(zk) if t != name and _collides(t, name)]
        if colliding:
            raise KafkaError(ErrorCode.invalid_topic_exception,
                             f"topic '{name}' collides with existing topics: {', '.join(colliding)}")
    config_data = znodes.encode_topic_config(dict(configs))
    topic_data = znodes.TopicAssignment(name, {p: list(r) for p, r in assignment.items()}, topic_id).encode()
    # a config node left over by an older topic of that name is overwritten
    config_stat = await zk.exists(znodes.topic_config_path(name))
    config_op = (Op.set(znodes.topic_config_path(name), config_data, config_stat.version)
                 if config_stat is not None else Op.create(znodes.topic_config_path(name), config_data))
    ops = [config_op, Op.create(znodes.topic_path(name), topic_data)]
    try:
        try:
            await zk.multi(ops)
        except NoNodeError:  # no broker has created the top-level paths yet
            await zk.ensure_path(znodes.BROKERS_TOPICS)
            await zk.ensure_path(znodes.CONFIG_TOPICS)
            await zk.multi(ops)
    except NodeExistsError:
        if await zk.exists(znodes.topic_path(name)) is not None:
            raise KafkaError(ErrorCode.topic_already_exists, f"topic '{name}' already exists") from None
        raise KafkaError(ErrorCode.unknown_server_error,
                         f"topic '{name}': its config node was created concurrently; try again") from None
    except BadVersionError:
        raise KafkaError(ErrorCode.unknown_server_error,
                         f"topic '{name}': its config node changed concurrently; try again") from None
    log.info("created topic %s with %d partitions, replicas %s, configs %s", name, len(assignment),
             {p: list(r) for p, r in sorted(assignment.items())}, dict(configs))


async def add_partitions(zk: ZkClient, topic: str, new_assignment: Mapping[int, Sequence[int]],
                         expected_version: int) -> None:
    """Rewrite the topic's assignment as ``new_assignment`` (all partitions: the existing ones
    unchanged and the added ones), on the condition that the topic node is still at
    ``expected_version`` (``ZkTopic.version`` when read). The controller then initialises the
    added partitions. UNKNOWN_TOPIC_OR_PARTITION if the topic is gone; INVALID_PARTITIONS if it
    changed since it was read or if ``new_assignment`` does not extend it."""
    got = await zk.get(znodes.topic_path(topic))
    if got is None:
        raise KafkaError(ErrorCode.unknown_topic_or_partition, f"topic '{topic}' does not exist")
    current = znodes.TopicAssignment.decode(topic, got[0])
    if got[1].version != expected_version:
        raise KafkaError(ErrorCode.invalid_partitions, f"topic '{topic}' changed concurrently; try again")
    for p, replicas in current.partitions.items():
        if list(new_assignment.get(p, ())) != replicas:
            raise KafkaError(ErrorCode.invalid_partitions,
                             f"topic '{topic}': partition {p} would change from {replicas} to "
                             f"{list(new_assignment.get(p, []))}; only new partitions may be added")
    if sorted(new_assignment) != list(range(len(new_assignment))) or len(new_assignment) <= len(current.partitions):
        raise KafkaError(ErrorCode.invalid_partitions,
                         f"topic '{topic}': partitions {sorted(new_assignment)} do not extend "
                         f"0..{len(current.partitions) - 1}")
    data = znodes.TopicAssignment(topic, {p: list(r) for p, r in new_assignment.items()}, current.topic_id).encode()
    try:
        await zk.set(znodes.topic_path(topic), data, expected_version)
    except BadVersionError:
        raise KafkaError(ErrorCode.invalid_partitions, f"topic '{topic}' changed concurrently; try again") from None
    except NoNodeError:
        raise KafkaError(ErrorCode.unknown_topic_or_partition, f"topic '{topic}' does not exist") from None
    added = {p: list(r) for p, r in sorted(new_assignment.items()) if p not in current.partitions}
    log.info("topic %s: added partitions %s", topic, added)


async def request_delete(zk: ZkClient, topic: str) -> None:
    """Ask the controller to delete ``topic`` (``/admin/delete_topics/<t>``).
    UNKNOWN_TOPIC_OR_PARTITION if it does not exist; asking twice is not an error (Kafka swallows
    its TopicAlreadyMarkedForDeletion and waits for the deletion as for the first request)."""
    if await zk.exists(znodes.topic_path(topic)) is None:
        raise KafkaError(ErrorCode.unknown_topic_or_partition, f"topic '{topic}' does not exist")
    try:
        await zk.create(znodes.delete_topic_path(topic), makepath=True)
    except NodeExistsError:
        log.debug("topic %s is already marked for deletion", topic)
        return
    log.info("topic %s marked for deletion", topic)


async def set_topic_config(zk: ZkClient, topic: str, configs: Mapping[str, str]) -> None:
    """Replace the topic's config overrides (``/config/topics/<t>``). UNKNOWN_TOPIC_OR_PARTITION
    if the topic does not exist."""
    if await zk.exists(znodes.topic_path(topic)) is None:
        raise KafkaError(ErrorCode.unknown_topic_or_partition, f"topic '{topic}' does not exist")
    data = znodes.encode_topic_config(dict(configs))
    path = znodes.topic_config_path(topic)
    try:
        await zk.set(path, data)
    except NoNodeError:
        try:
            await zk.create(path, data, makepath=True)
        except NodeExistsError:  # created meanwhile: ours is the later write
            await zk.set(path, data)
    log.info("topic %s: configs set to %s", topic, dict(configs))
