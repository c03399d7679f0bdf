"""What this broker knows of the cluster: its own identity and endpoint, the brokers, the
controller, and who leads each partition.

On one node the answer is always "this broker": it is the only broker, the controller, and the
leader of every partition, with itself as the only replica. In a ZooKeeper cluster,
``ZkClusterMetadata`` (cluster/zk/metadata.py) gives the cluster's answers to the same questions,
for the same callers (Metadata, DescribeCluster, DescribeTopicPartitions, CreateTopics).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gregor.security.listeners import Listener


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    """A broker: ``host``/``port`` are its inter-broker listener's endpoint (what other brokers
    connect to), ``listeners`` every advertised listener (what clients of each listener are told)."""

    node_id: int
    host: str
    port: int
    rack: str | None = None
    listeners: tuple[Listener, ...] = ()

    def at(self, listener_name: str | None) -> tuple[str, int] | None:
        """The broker's endpoint on ``listener_name`` (None: it has no such listener, so clients
        of that listener are not told of it, as Kafka's metadata cache leaves it out); no name (an
        in-process caller) or no listeners known: the inter-broker endpoint."""
        if listener_name is None or not self.listeners:
            return self.host, self.port
        for listener in self.listeners:
            if listener.name == listener_name:
                return listener.host, listener.port
        return None


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
        self._listeners: tuple[Listener, ...] = ()

    def set_endpoints(self, listeners: tuple[Listener, ...], inter_broker: str) -> None:
        """The advertised listeners once bound (ports resolved); ``inter_broker`` names the one
        other brokers connect to."""
        self._listeners = listeners
        chosen = next((lst for lst in listeners if lst.name == inter_broker), listeners[0])
        self._host, self._port = chosen.host, chosen.port

    def set_endpoint(self, host: str, port: int) -> None:
        """One PLAINTEXT endpoint (tests)."""
        self.set_endpoints((Listener("PLAINTEXT", "PLAINTEXT", host, port),), "PLAINTEXT")

    @property
    def controller_id(self) -> int:
        return self.node_id

    def this_broker(self) -> BrokerEndpoint:
        return BrokerEndpoint(self.node_id, self._host, self._port, self.rack, self._listeners)

    def brokers(self) -> list[BrokerEndpoint]:
        """The live brokers, by node id."""
        return [self.this_broker()]

    def broker(self, node_id: int) -> BrokerEndpoint | None:
        """A live broker's endpoint."""
        return self.this_broker() if node_id == self.node_id else None

    def partition(self, topic: str, partition: int) -> PartitionLeadership:
        """Leader, leader epoch, replicas and ISR of a partition."""
        return PartitionLeadership(self.node_id, 0, [self.node_id], [self.node_id])
