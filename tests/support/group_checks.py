"""Groups and their coordinators on a cluster of real brokers, for the cluster tests of group
failover (tests/cluster/test_group_failover.py, tests/cluster/test_consumer_protocol_failover.py):
the cluster they start, waiting with an explanation, the controller and a group's coordinator now,
the leaders of a partition over time, the check that no group skipped an offset, and a
consumer-protocol group as its coordinator describes it (ConsumerGroupDescribe)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka.admin import AdminClient
from kazoo.client import KazooClient

from gregor.admin.client import AdminClient as GregorAdmin
from gregor.cluster.zk import znodes as zn
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode
from tests.support import waiting
from tests.support.cluster import BrokerCluster
from tests.support.group_load import Gaps, GroupConsumer

# the cluster start_cluster starts: quick sessions and replica timers, __consumer_offsets of
# FAILOVER_OFFSETS_PARTITIONS partitions with RF 3, no initial rebalance delay
FAILOVER_OFFSETS_PARTITIONS = 6
FAILOVER_OVERRIDES = {"zookeeper.session.timeout.ms": "4000", "replica.lag.time.max.ms": "10000",
                      "replica.fetch.wait.max.ms": "200", "replica.fetch.backoff.ms": "200",
                      "controlled.shutdown.retry.backoff.ms": "500", "leader.imbalance.check.interval.seconds": "3600",
                      "offsets.topic.replication.factor": "3",
                      "offsets.topic.num.partitions": str(FAILOVER_OFFSETS_PARTITIONS),
                      "group.initial.rebalance.delay.ms": "0"}


def wait_for(cond: Callable[[], Any], timeout: float = 60, what: str = "condition",
             explain: Callable[[], str] | None = None) -> Any:
    """tests/support/waiting.py's wait_for; on a timeout, ``explain()`` (the state then) is added."""
    try:
        return waiting.wait_for(cond, timeout, what)
    except AssertionError as e:
        if explain is None:
            raise
        raise AssertionError(f"{e}: {explain()}") from None


def start_cluster(cluster_factory: Callable[..., BrokerCluster], **overrides: str) -> BrokerCluster:
    """Three brokers, each naming the controller in its Metadata (librdkafka's admin client sends
    CreateTopics only to a known controller)."""
    cluster = cluster_factory(3, overrides={**FAILOVER_OVERRIDES, **overrides})
    for b in cluster.ids:
        admin = AdminClient({"bootstrap.servers": cluster.broker(b).bootstrap})
        wait_for(lambda admin=admin: admin.list_topics(timeout=10).controller_id >= 0, 30,
                 f"broker {b} to know the controller")
    return cluster


def bootstrap_of(cluster: BrokerCluster, ids: list[int]) -> str:
    return ",".join(cluster.broker(i).bootstrap for i in ids)


def controller_of(cluster: BrokerCluster) -> int:
    with cluster.zk_client() as zk:
        if not zk.exists(zn.CONTROLLER):
            return -1
        return zn.decode_controller(zk.get(zn.CONTROLLER)[0])


def find_coordinator(address: str, group: str) -> tuple[int, ErrorCode, str | None]:
    """(node id or -1, error, error message) as the broker at ``address`` answers FindCoordinator."""
    admin = GregorAdmin(address)
    try:
        node, code, message = admin.find_coordinator(group)
    finally:
        admin.close()
    return (node.node_id if node else -1), code, message


def coordinator(cluster: BrokerCluster, group: str) -> int:
    """The coordinator a live broker names for ``group`` (-1: none now)."""
    node, code, _ = find_coordinator(cluster.broker(cluster.alive_ids()[0]).bootstrap, group)
    return node if code == ErrorCode.none else -1


def check_nothing_skipped(missing: dict[str, Gaps], members_by_group: dict[str, list[GroupConsumer]]) -> None:
    """Every group read every offset (at least once); a gap fails, with the members' out-of-order
    reads (a member that read n, then more than n + 1, skipped what lies between)."""
    if not any(missing.values()):
        return
    jumps = {g: [(m.name, j) for m in ms for j in m.jumps] for g, ms in members_by_group.items()}
    detail = f"offsets never read {missing}; offsets read out of order (member, (when, partition, after, read)): " \
             f"{ {g: js for g, js in jumps.items() if missing[g]} }"
    raise AssertionError(f"messages lost to the group: {detail}")


class LeaderWatch:
    """The leaders of one partition over time, from a ZooKeeper watch on its state node."""

    def __init__(self, cluster: BrokerCluster, topic: str, partition: int) -> None:
        self.zk = KazooClient(hosts=cluster.zookeeper_connect, timeout=10)
        self.zk.start(10)
        self.leaders: list[int] = []
        path = zn.state_path(topic, partition)

        def changed(data: bytes | None, stat: object) -> None:
            if data is not None:
                leader = zn.PartitionState.decode(data, -1, path).leader
                if not self.leaders or self.leaders[-1] != leader:
                    self.leaders.append(leader)

        self.zk.DataWatch(path, changed)

    def moves(self) -> int:
        """How many times the leadership went from one broker to another (through -1 or not)."""
        live = [b for b in self.leaders if b >= 0]
        return sum(1 for a, b in zip(live, live[1:], strict=False) if a != b)

    def close(self) -> None:
        self.zk.stop()
        self.zk.close()


# -- a consumer-protocol group as its coordinator describes it -------------------------------------
@dataclass(frozen=True)
class Member:
    member_id: str
    instance_id: str | None
    client_id: str
    epoch: int
    assignment: frozenset[int]
    target: frozenset[int]


@dataclass(frozen=True)
class Snapshot:
    at: float
    coordinator: int
    state: str
    group_epoch: int
    assignment_epoch: int
    members: dict[str, Member]  # by member id

    def settled(self, n: int) -> bool:
        """Stable, ``n`` members, each holding exactly its target at the group's epoch."""
        return (self.state == "Stable" and len(self.members) == n and all(
            m.epoch == self.group_epoch == self.assignment_epoch and m.assignment == m.target
            for m in self.members.values()))

    def brief(self) -> str:
        return (f"{self.state} on broker {self.coordinator}, group epoch {self.group_epoch}, assignment epoch "
                f"{self.assignment_epoch}, members " + ", ".join(
                    f"{m.client_id}({m.member_id[:8]}, epoch {m.epoch}, {sorted(m.assignment)}"
                    + (f", target {sorted(m.target)}" if m.target != m.assignment else "") + ")"
                    for m in sorted(self.members.values(), key=lambda m: m.client_id)))


def _partitions(assignment: Any) -> frozenset[int]:
    return frozenset(p for t in assignment.topic_partitions for p in t.partitions)


def snapshot(bootstrap: str, group: str) -> Snapshot | None:
    """ConsumerGroupDescribe at the coordinator a broker of ``bootstrap`` names; None when there is
    none now, it does not answer, or it answers an error (a partition still loading)."""
    admin = GregorAdmin(bootstrap, timeout=5)
    try:
        node, code, _ = admin.find_coordinator(group)
        if node is None:
            return None
        g = admin.conn(node).call(ApiKey.CONSUMER_GROUP_DESCRIBE, {"group_ids": [group],
                                                                   "include_authorized_operations": False}).groups[0]
    except Exception:  # noqa: BLE001 - a dead broker, a timeout: ask again
        return None
    finally:
        admin.close()
    if g.error_code != ErrorCode.none:
        return None
    members = {m.member_id: Member(m.member_id, m.instance_id, m.client_id, m.member_epoch,
                                   _partitions(m.assignment), _partitions(m.target_assignment)) for m in g.members}
    return Snapshot(time.monotonic(), node.node_id, g.group_state, g.group_epoch, g.assignment_epoch, members)
