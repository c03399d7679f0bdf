"""The partitions' states in ZooKeeper (``/brokers/topics/<t>/partitions/<p>/state``), as a
leader reads and conditionally writes them (cluster/partition_states.py). A state this broker
wrote is remembered by the metadata cache at once, before its own watch says so."""

from __future__ import annotations

from gregor.cluster.partition_states import StateConflict, StateUnavailable
from gregor.cluster.zk import znodes as zn
from gregor.cluster.zk.client import BadVersionError, KazooException, NoNodeError, ZkClient
from gregor.cluster.zk.metadata import ZkClusterMetadata


class ZkPartitionStates:
    def __init__(self, zk: ZkClient, metadata: ZkClusterMetadata) -> None:
        self.zk = zk
        self.metadata = metadata

    async def write_isr(self, topic: str, partition: int, state: zn.PartitionState) -> zn.PartitionState:
        try:
            stat = await self.zk.set(zn.state_path(topic, partition), state.encode(), state.zk_version)
        except (BadVersionError, NoNodeError) as e:
            raise StateConflict(type(e).__name__) from None
        except KazooException as e:
            raise StateUnavailable(type(e).__name__) from None
        written = state.written(stat.version, stat.mzxid)
        self.metadata.remember_state(topic, partition, written)
        return written

    async def read(self, topic: str, partition: int) -> zn.PartitionState | None:
        path = zn.state_path(topic, partition)
        try:
            got = await self.zk.get(path)
        except KazooException as e:
            raise StateUnavailable(type(e).__name__) from None
        if got is None:
            return None
        st = zn.PartitionState.decode(got[0], got[1].version, path, got[1].mzxid)
        self.metadata.remember_state(topic, partition, st)
        return st
