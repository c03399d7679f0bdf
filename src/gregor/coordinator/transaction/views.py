"""The transaction coordinator as metrics read it: a read-only summary of each shard loaded here
(each ``__transaction_state`` partition this broker coordinates), from the shard's own state.

- ``ongoing``: transactional ids in state Ongoing (partitions added, no EndTxn yet);
  ``completing``: in PrepareCommit/PrepareAbort, waiting for their markers.
- ``committed`` / ``aborted``: transactions completed since the shard loaded here, counted when a
  CompleteCommit/CompleteAbort record is replayed over its Prepare record (the shard's counters);
  ``timed_out``: those of the aborts the coordinator started itself because the transaction
  outlived its transaction.timeout.ms. Replaying the log at load counts nothing, so a shard that
  moves here or reloads starts again from zero (a counter reset to Prometheus).

A shard still loading, failed or unloaded is left out: its transactions are reported by the
broker that coordinates them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from gregor.coordinator.runtime.shard_runtime import ShardRuntime, ShardState
from gregor.coordinator.transaction.metadata import PREPARE_STATES
from gregor.coordinator.transaction.shard import TransactionCoordinatorShard
from gregor.protocol.transaction_log import TxnState


@dataclass(frozen=True, slots=True)
class TransactionShardSummary:
    partition: int  # of __transaction_state
    ongoing: int
    completing: int
    committed: int
    aborted: int
    timed_out: int  # of ``aborted``


class ShardDirectory(Protocol):
    """What the views need of the service (TransactionCoordinatorService): its shard runtimes."""

    runtimes: dict[int, ShardRuntime[TransactionCoordinatorShard]]


class TransactionViews:
    def __init__(self, shards: ShardDirectory) -> None:
        self.shards = shards

    def shard_summaries(self) -> Iterator[TransactionShardSummary]:
        """One summary per shard loaded and active here, by partition."""
        for partition, runtime in sorted(self.shards.runtimes.items()):
            shard = runtime.shard
            if runtime.state is not ShardState.ACTIVE or shard is None:
                continue
            ongoing = completing = 0
            for m in shard.transactions.values():
                if m.state is TxnState.ONGOING:
                    ongoing += 1
                elif m.state in PREPARE_STATES:
                    completing += 1
            yield TransactionShardSummary(partition, ongoing, completing, shard.commits_completed,
                                          shard.aborts_completed, shard.timed_out_aborts_completed)
