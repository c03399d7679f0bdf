"""Drive a transaction coordinator shard without network or event loop: a helper for the
``test_transaction_*`` modules, not a test module (as harness.py is for groups).

``TxnHarness.run`` does what the runtime does with an operation's result, synchronously: records
go through the real encoders into ``log`` and back through the decoders into ``replay``; then the
completions run (the write is committed), which is when markers are handed over (into
``markers``). ``sleep(ms)`` advances the manual clock and runs the due timers as operations.
``reload()`` continues on a shard loaded from ``log`` with the runtime's own loader reduction.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gregor.coordinator.runtime import loader
from gregor.coordinator.runtime.result import CoordinatorResult
from gregor.coordinator.runtime.timer import ManualClock, ManualTimer
from gregor.coordinator.transaction.api import TransactionConfig, TxnMarkers
from gregor.coordinator.transaction.metadata import TxnMetadata
from gregor.coordinator.transaction.shard import RECORD_SERDE, TransactionCoordinatorShard
from gregor.protocol.errors import ErrorCode
from gregor.protocol.transaction_log import (
    TransactionLogKey,
    TransactionLogValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from tests.coordinator.harness import TimedHarness

COORDINATOR_EPOCH = 7


class TxnHarness(TimedHarness):
    def __init__(self, config: TransactionConfig | None = None, coordinator_epoch: int = COORDINATOR_EPOCH) -> None:
        self.config = config if config is not None else TransactionConfig()
        self.coordinator_epoch = coordinator_epoch
        self.clock = ManualClock()
        self.timer = ManualTimer(self.clock)
        self.log: list[tuple[bytes, bytes | None]] = []
        self.markers: list[TxnMarkers] = []  # every marker request handed over, in order
        self.last_records: list[Any] = []
        self.next_producer_id = 1000
        self.shard = self._new_shard(self.timer)
        self.shard.on_loaded()

    def _new_shard(self, timer: ManualTimer) -> TransactionCoordinatorShard:
        return TransactionCoordinatorShard(0, self.config, self.clock, timer, self.coordinator_epoch,
                                           send_markers=self.markers.append)

    # -- the runtime's part ------------------------------------------------------------------
    def run(self, result: CoordinatorResult[Any], committed: bool = True) -> Any:
        """Write ``result``'s records and replay them; ``committed`` False: the write failed (its
        completions run with an error, as the runtime runs them before it reloads)."""
        written = [(encode_key(k), encode_value(v)) for k, v in result.records]
        if not committed:
            for fn in self.shard.take_completions():
                fn(RuntimeError("append failed"))
            return result.response
        self.log += written
        for kb, vb in written:
            key = decode_key(kb)
            self.shard.replay(key, decode_value(key, vb))
        for fn in self.shard.take_completions():
            fn(None)
        self.last_records = result.records
        return result.response

    def load_fresh(self, timer: ManualTimer | None = None,
                   markers: list[TxnMarkers] | None = None) -> TransactionCoordinatorShard:
        """A new shard loaded from everything written so far (newest value per key, in log
        order), then told it is loaded (its markers go to ``markers``: a throwaway list unless
        given)."""
        shard = TransactionCoordinatorShard(0, self.config, self.clock,
                                            timer if timer is not None else ManualTimer(self.clock),
                                            self.coordinator_epoch,
                                            send_markers=(markers if markers is not None else []).append)
        latest: dict[bytes, bytes | None] = {}
        loader.keep_newest(latest, self.log)
        loader.replay_newest(shard, RECORD_SERDE, latest, "__transaction_state-0")
        shard.on_loaded()
        return shard

    def reload(self) -> TransactionCoordinatorShard:
        """Continue on a shard freshly loaded from the log (a restart or a new leader)."""
        self.timer = ManualTimer(self.clock)
        self.shard = self.load_fresh(self.timer, self.markers)
        return self.shard

    def seed(self, transactional_id: str, value: TransactionLogValue) -> None:
        """Write a record as if an earlier coordinator had, and reload."""
        self.log.append((encode_key(TransactionLogKey(transactional_id)), encode_value(value)))
        self.reload()

    # -- requests ------------------------------------------------------------------------------
    def allocate(self) -> int:
        self.next_producer_id += 1
        return self.next_producer_id

    def init(self, tid: str, timeout: int = 60_000, expected: tuple[int, int] | None = None) -> Any:
        new = self.allocate() if self.shard.needs_new_producer_id(tid) else -1
        pid, epoch = expected if expected is not None else (-1, -1)
        return self.run(self.shard.init_producer_id(tid, timeout, pid, epoch, new))

    def begin(self, tid: str, partitions: list[tuple[str, int]], timeout: int = 60_000) -> tuple[int, int]:
        """InitProducerId, then the partitions added: (producer id, epoch)."""
        r = self.init(tid, timeout)
        assert r.error == ErrorCode.none, r
        added = self.add(tid, r.producer_id, r.producer_epoch, partitions)
        assert added.error == ErrorCode.none, added
        return r.producer_id, r.producer_epoch

    def add(self, tid: str, pid: int, epoch: int, partitions: list[tuple[str, int]], verify_only: bool = False,
            tv2: bool = False) -> Any:
        return self.run(self.shard.add_partitions(tid, pid, epoch, partitions, verify_only, tv2))

    def end(self, tid: str, pid: int, epoch: int, commit: bool, tv2: bool = False) -> Any:
        m = self.shard.transactions.get(tid)
        new = self.allocate() if tv2 and m is not None and m.exhausted else -1
        return self.run(self.shard.end_txn(tid, pid, epoch, commit, tv2, new))

    def complete(self, markers: TxnMarkers) -> Any:
        return self.run(self.shard.complete_markers(markers.transactional_id, markers.producer_id,
                                                    markers.producer_epoch))

    def complete_all(self) -> None:
        """The service writes every marker handed over so far, and reports each done."""
        pending, self.markers[:] = list(self.markers), []
        for m in pending:
            self.complete(m)

    def state(self, tid: str) -> str:
        return self.shard.describe_transaction(tid).state

    def meta(self, tid: str) -> TxnMetadata:
        return self.shard.transactions[tid]


def persisted(shard: TransactionCoordinatorShard) -> dict[str, TxnMetadata]:
    """The shard's state as a load gives it back: everything but the last epoch, which Kafka's
    record does not hold either."""
    return {tid: replace(m, last_producer_epoch=-1) for tid, m in shard.transactions.items()}
