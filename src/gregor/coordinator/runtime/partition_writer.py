"""How a coordinator writes its partition (Kafka's PartitionWriter): append a batch as the
partition's leader, and hear when the partition's high watermark moves.

The broker's writer is the replication seam (replication/replica_manager.py), built once, the same
on one node and in a cluster: on one node an append moves the high watermark at once, in a cluster
when the in-sync replicas have it. ``LogWriter`` writes straight to a log, for tests and
benchmarks of the runtime without a broker (Kafka's InMemoryPartitionWriter plays that part).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from gregor.log.partition_log import NO_VERIFICATION, PartitionLog

HighWatermarkListener = Callable[[str, int, int], None]


class PartitionWriter(Protocol):
    on_high_watermark: list[HighWatermarkListener]

    def append_internal(self, topic: str, partition: int, batch: bytes, verification: Any = NO_VERIFICATION) -> int:
        """Append ``batch`` as the partition's leader; its base offset. KafkaError
        (NOT_LEADER_OR_FOLLOWER, KAFKA_STORAGE_ERROR; INVALID_TXN_STATE when ``verification``, the
        KIP-890 guard of a transactional write, is no longer valid) when it cannot."""
        ...


class LogWriter:
    """Appends to one log; its high watermark is its log end (``on_high_watermark`` is told of
    every append)."""

    def __init__(self, plog: PartitionLog) -> None:
        self.plog = plog
        self.on_high_watermark: list[HighWatermarkListener] = []

    def append_internal(self, topic: str, partition: int, batch: bytes, verification: Any = NO_VERIFICATION) -> int:
        base = self.plog.append_batch_unchecked(batch, verification=verification)
        for fn in self.on_high_watermark:
            fn(topic, partition, self.plog.high_watermark)
        return base
