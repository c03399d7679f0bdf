"""What this broker knows of the cluster: its own identity and endpoint, the brokers, the
controller, and who leads each partition.

On one node the answer is always "this broker": it is the only broker, the controller, and the
leader of every partition, with itself as the only replica. In a ZooKeeper cluster,
``ZkClusterMetadata`` (cluster/zk/metadata.py) gives the cluster's answers to the same questions,
for the same callers (Metadata, DescribeCluster, DescribeTopicPartitions, CreateTopics).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionLeadership:
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    offline_replicas: list[int] = field(default_factory=list)  # replicas on brokers that are not alive


class ClusterMetadata:
    def __init__(self, node_id: int, rack: str | None = None) -> None:
        self.node_id = node_id
        self.rack = rack
        self.cluster_id = ""  # from meta.properties, once storage is open
        self._host = ""
        self._port = 0

    def set_endpoint(self, host: str, port: int) -> None:
        """The advertised endpoint, once the listener is bound (port 0 means the bound port)."""
        self._host, self._port = host, port

    @property
    def controller_id(self) -> int:
        return self.node_id

    def this_broker(self) -> BrokerEndpoint:
        return BrokerEndpoint(self.node_id, self._host, self._port, self.rack)

    def brokers(self) -> list[BrokerEndpoint]:
        """The live brokers, by node id."""
        return [self.this_broker()]

    def broker(self, node_id: int) -> BrokerEndpoint | None:
        """A live broker's endpoint."""
        return self.this_broker() if node_id == self.node_id else None

    def partition(self, topic: str, partition: int) -> PartitionLeadership:
        """Leader, leader epoch, replicas and ISR of a partition."""
        return PartitionLeadership(self.node_id, 0, [self.node_id], [self.node_id])
