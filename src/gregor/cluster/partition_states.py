"""Where a cluster keeps its partitions' states (leader, leader epoch, ISR), as the replica manager
writes them: a leader's ISR change is a conditional write on the version it last saw (Kafka's
AlterIsr over ZooKeeper). One implementation today, ZooKeeper's state nodes
(cluster/zk/partition_states.py); the replica manager's unit tests use an in-memory one.

A write has three outcomes, and the difference between the last two matters for safety:
- written: the new state, with the store's new version and write id (zxid);
- ``StateConflict``: the state changed since it was read (the controller moved leadership or
  shrank the ISR); nothing was written, read it again and decide again;
- ``StateUnavailable``: the store did not answer (connection lost, session expired); the write
  may or may not have been applied, and until a read says which, the writer must act as if
  both states held (the replica manager keeps the maximal ISR).
"""

from __future__ import annotations

from typing import Protocol

from gregor.cluster.zk.znodes import PartitionState


class StateConflict(Exception):
    """The state changed since the version the write was conditional on."""


class StateUnavailable(Exception):
    """The store did not answer; the write's outcome is unknown."""


class PartitionStateStore(Protocol):
    async def write_isr(self, topic: str, partition: int, state: PartitionState) -> PartitionState:
        """Write ``state`` if the stored one is still at ``state.zk_version``; the state as
        written (new version and zxid). StateConflict or StateUnavailable."""
        ...

    async def read(self, topic: str, partition: int) -> PartitionState | None:
        """The stored state (None: there is none). StateUnavailable."""
        ...
