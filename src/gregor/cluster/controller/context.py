"""What the active controller knows (Kafka's ControllerContext): the live brokers with their
epochs, the brokers shutting down, every topic's assignment, every partition's last known
leadership and its phase in the partition state machine. Loaded from ZooKeeper when the broker
becomes controller and kept up to date by the controller's events; dropped when it resigns.

A partition's leader in this cache is exact (only the controller changes leaders); its ISR may be
behind, since partition leaders shrink and expand the ISR in ZooKeeper themselves: every decision
that depends on the ISR reads the state node first.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from gregor.cluster.zk.znodes import PartitionState

TopicPartition = tuple[str, int]


class Phase(enum.Enum):
    """A partition in the controller's partition state machine."""
    NEW = "new"  # assigned, no state node yet (no replica was alive to lead it)
    ONLINE = "online"  # has a live leader
    OFFLINE = "offline"  # its leader is gone (or -1) and no new one could be elected yet


@dataclass
class ControllerContext:
    epoch: int = 0  # the controller epoch this controller was elected with
    epoch_zk_version: int = -1  # /controller_epoch's version then: the condition of every write
    broker_epochs: dict[int, int] = field(default_factory=dict)  # live (incl. shutting down) -> czxid
    shutting_down: set[int] = field(default_factory=set)
    assignments: dict[str, dict[int, list[int]]] = field(default_factory=dict)
    topic_ids: dict[str, uuid.UUID] = field(default_factory=dict)
    topic_versions: dict[str, int] = field(default_factory=dict)  # topic node versions last read
    leadership: dict[TopicPartition, PartitionState] = field(default_factory=dict)
    phases: dict[TopicPartition, Phase] = field(default_factory=dict)
    topics_to_delete: set[str] = field(default_factory=set)

    # -- brokers ---------------------------------------------------------------------------------
    def live_broker_ids(self) -> set[int]:
        """Brokers that may lead: registered and not shutting down."""
        return set(self.broker_epochs) - self.shutting_down

    def live_or_shutting_down_ids(self) -> set[int]:
        return set(self.broker_epochs)

    def is_replica_online(self, broker_id: int, include_shutting_down: bool = False) -> bool:
        if include_shutting_down:
            return broker_id in self.broker_epochs
        return broker_id in self.broker_epochs and broker_id not in self.shutting_down

    # -- partitions ------------------------------------------------------------------------------
    def replicas(self, tp: TopicPartition) -> list[int]:
        return self.assignments.get(tp[0], {}).get(tp[1], [])

    def all_partitions(self) -> list[TopicPartition]:
        return [(t, p) for t, parts in self.assignments.items() for p in parts]

    def partitions_of(self, topic: str) -> list[TopicPartition]:
        return [(topic, p) for p in self.assignments.get(topic, {})]

    def partitions_on_broker(self, broker_id: int) -> list[TopicPartition]:
        return [(t, p) for t, parts in self.assignments.items() for p, r in parts.items() if broker_id in r]

    def is_queued_for_deletion(self, topic: str) -> bool:
        return topic in self.topics_to_delete

    def partitions_in(self, phases: Iterable[Phase], topic: str | None = None) -> list[TopicPartition]:
        wanted = set(phases)
        return [tp for tp, ph in self.phases.items() if ph in wanted and (topic is None or tp[0] == topic)]

    def partitions_with_offline_leader(self) -> list[TopicPartition]:
        return [tp for tp, st in self.leadership.items()
                if not self.is_replica_online(st.leader) and not self.is_queued_for_deletion(tp[0])]

    def partition_leaders_on_broker(self, broker_id: int) -> list[TopicPartition]:
        """Partitions ``broker_id`` leads that another replica could lead (replication factor
        above one): what a controlled shutdown reports as not moved."""
        return sorted(tp for tp, st in self.leadership.items()
                      if st.leader == broker_id and not self.is_queued_for_deletion(tp[0])
                      and len(self.replicas(tp)) > 1)

    def remove_topic(self, topic: str) -> None:
        self.assignments.pop(topic, None)
        self.topic_ids.pop(topic, None)
        self.topic_versions.pop(topic, None)
        self.topics_to_delete.discard(topic)
        for tp in [tp for tp in self.leadership if tp[0] == topic]:
            del self.leadership[tp]
        for tp in [tp for tp in self.phases if tp[0] == topic]:
            del self.phases[tp]
