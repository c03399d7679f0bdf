"""Each topic's KIP-1101 hash (metadata_hash.py) as this broker knows the topic: its id, its
partition count and the racks of each partition's replicas.

A broker's rack is the last one it registered with, kept while the broker is away: Kafka hashes
the racks of every registered broker, fenced ones included, so a replica that restarts does not
change the hash twice (gone, back) and rebalance the groups twice; a broker that comes back with
another rack changes it once. In a ZooKeeper cluster the registrations of brokers that are away
are gone, so the racks they had are remembered here from when they were seen. A hash is kept for
``ttl_s`` (the replica assignment of a partition may change without its count changing) and
recomputed at once when the topic's id or partition count, or a rack, changed. Without a cluster
(a shard built without a broker: tests, benchmarks) the racks are unknown and count as none.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from gregor.cluster.metadata import ClusterMetadata
from gregor.coordinator.group.metadata_hash import topic_hash

TTL_S = 10.0
BROKERS_EVERY_S = 1.0


class TopicHashes:
    def __init__(self, topic_metadata: Callable[[str], tuple[uuid.UUID, int] | None], cluster: ClusterMetadata | None,
                 clock: Callable[[], float] = time.monotonic, ttl_s: float = TTL_S) -> None:
        self.topic_metadata = topic_metadata
        self.cluster = cluster
        self.clock = clock
        self.ttl_s = ttl_s
        self.racks: dict[int, str] = {}  # broker id -> the last rack it registered with
        self.racks_version = 0
        self._brokers_read_at = float("-inf")
        # name -> (topic id, partitions, racks version, computed at, hash)
        self._cache: dict[str, tuple[uuid.UUID, int, int, float, int]] = {}

    def _read_brokers(self, now: float) -> None:
        if self.cluster is None or now - self._brokers_read_at < BROKERS_EVERY_S:
            return
        self._brokers_read_at = now
        changed = False
        for b in self.cluster.brokers():
            if b.rack is not None and self.racks.get(b.node_id) != b.rack:
                self.racks[b.node_id] = b.rack
                changed = True
        if changed:
            self.racks_version += 1

    def hash_of(self, name: str) -> int:
        """The topic's hash; 0 if there is no such topic."""
        meta = self.topic_metadata(name)
        if meta is None:
            self._cache.pop(name, None)
            return 0
        now = self.clock()
        self._read_brokers(now)
        topic_id, partitions = meta
        hit = self._cache.get(name)
        if (hit is not None and hit[0] == topic_id and hit[1] == partitions and hit[2] == self.racks_version
                and now - hit[3] < self.ttl_s):
            return hit[4]
        racks: list[list[str]] = []
        for p in range(partitions):
            replicas = self.cluster.partition(name, p).replicas if self.cluster is not None else []
            racks.append([r for b in replicas if (r := self.racks.get(b)) is not None])
        h = topic_hash(topic_id, name, racks)
        self._cache[name] = (topic_id, partitions, self.racks_version, now, h)
        return h
