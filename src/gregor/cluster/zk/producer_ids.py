"""Producer ids in a cluster: blocks claimed from ZooKeeper's ``/latest_producer_id_block`` by a
conditional write (Kafka's ZooKeeper-mode ProducerIdManager), so that no two brokers ever hand
out the same id; a broker that restarts claims a fresh block (the rest of its old one is
skipped, never reused)."""

from __future__ import annotations

import asyncio
import json

from gregor.cluster.producer_ids import BLOCK, ProducerIdManager
from gregor.cluster.zk.client import BadVersionError, NodeExistsError, ZkClient

PATH = "/latest_producer_id_block"


class ZkProducerIdManager(ProducerIdManager):
    def __init__(self, zk: ZkClient, broker_id: int) -> None:
        self.zk = zk
        self.broker_id = broker_id
        self._next = 0
        self._limit = 0  # exclusive end of the block in hand
        self._claiming = asyncio.Lock()

    def load(self) -> None:
        """Nothing local: blocks come from ZooKeeper."""

    def next_id(self) -> int:
        raise RuntimeError("in a cluster producer ids are allocated with allocate()")

    async def allocate(self) -> int:
        async with self._claiming:
            if self._next >= self._limit:
                self._next, self._limit = await self._claim_block()
            pid = self._next
            self._next += 1
            return pid

    async def _claim_block(self) -> tuple[int, int]:
        while True:
            got = await self.zk.get(PATH)
            if got is None or not got[0]:
                start = 0
                data = self._encode(start)
                try:
                    if got is None:
                        await self.zk.create(PATH, data, makepath=True)
                    else:
                        await self.zk.set(PATH, data, got[1].version)
                except (NodeExistsError, BadVersionError):
                    continue  # another broker claimed one first
                return start, start + BLOCK
            last_end = int(json.loads(got[0])["block_end"])
            start = last_end + 1
            try:
                await self.zk.set(PATH, self._encode(start), got[1].version)
            except BadVersionError:
                continue
            return start, start + BLOCK

    def _encode(self, start: int) -> bytes:
        return json.dumps({"version": 1, "broker": self.broker_id, "block_start": str(start),
                           "block_end": str(start + BLOCK - 1)}, separators=(",", ":")).encode()
