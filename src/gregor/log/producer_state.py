"""Producer state of one partition (Kafka: ProducerStateManager, ProducerAppendInfo).

For each producer id: its epoch, the metadata of its last five batches, the coordinator epoch of
its last transaction marker, its last timestamp, and the first offset of its ongoing transaction.
An incoming data batch is
- a duplicate if it matches one of those five (answered with the offsets it got the first time,
  nothing appended),
- in sequence if its first sequence follows the last one (wrapping at 2^31),
- otherwise OUT_OF_ORDER_SEQUENCE_NUMBER; an older epoch is INVALID_PRODUCER_EPOCH (Kafka 2.7+
  answers fenced producers this way, transactional or not);
- INVALID_TXN_STATE if it is not transactional while its producer has a transaction ongoing.

A transactional data batch starts a transaction when its producer has none ongoing. A marker
(control batch, appended with ``complete_txn``) ends it: checked first with ``check_marker``
(an epoch below the producer's is INVALID_PRODUCER_EPOCH, a coordinator epoch below the last one
seen is TRANSACTION_COORDINATOR_FENCED). A completed transaction stays *unreplicated* until the
high watermark passes its marker (Kafka's unreplicatedTxns); the first unstable offset is the
first offset of the earliest ongoing or unreplicated transaction, and the partition's last stable
offset is that, bounded by the high watermark. An aborted transaction is returned to the caller
(the log) for its segment's transaction index.

State survives restarts through a snapshot written at clean shutdown (ongoing transactions
included) and, after a crash, by re-reading batch headers from the log (and the one record of
each control batch, never the records of data batches).
"""

from __future__ import annotations

import json
import os
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from gregor.log.transaction_index import AbortedTxn
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.record_batch import NO_SEQUENCE, BatchHeader

MAX_CACHED_BATCHES = 5
_SEQ_MOD = 1 << 31


@dataclass(slots=True)
class BatchMeta:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(slots=True)
class ProducerEntry:
    epoch: int
    batches: deque[BatchMeta] = field(default_factory=lambda: deque(maxlen=MAX_CACHED_BATCHES))
    last_timestamp: int = -1
    coordinator_epoch: int = -1  # of the last marker of this producer (-1: none seen)
    txn_first_offset: int | None = None  # first offset of the ongoing transaction

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    def set_epoch(self, epoch: int) -> None:
        """A new producer epoch forgets the batches of the old one (Kafka's
        maybeUpdateProducerEpoch); the ongoing transaction and coordinator epoch stay."""
        if epoch != self.epoch:
            self.batches.clear()
            self.epoch = epoch


class VerificationGuard:
    """One verification of a producer's transaction with its coordinator (compared by identity).
    ``epoch``: the lowest epoch of the batches it verifies; ``epoch_bump``: they come from a
    transactions V2 producer (Produce v12+, TxnOffsetCommit v5+), whose markers carry the epoch
    its next transaction runs at (Kafka's VerificationStateEntry)."""

    __slots__ = ("epoch", "epoch_bump", "producer_id")

    def __init__(self, producer_id: int, epoch: int, epoch_bump: bool) -> None:
        self.producer_id = producer_id
        self.epoch = epoch
        self.epoch_bump = epoch_bump


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    aborted: bool


@dataclass(frozen=True, slots=True)
class ProducerInfo:
    """One producer as DescribeProducers shows it (-1: unknown / none)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int


class ProducerStateManager:
    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}
        # producer id -> first offset of its ongoing transaction, in the order they started (so in
        # offset order: the first item is the earliest)
        self.ongoing: dict[int, int] = {}
        # completed transactions whose marker the high watermark has not passed, in marker order
        self.unreplicated: list[CompletedTxn] = []
        # KIP-890 verification in progress: producer id -> the guard of the check asked of its
        # transaction coordinator (Kafka's VerificationGuard); a marker of the producer drops it
        self.verifications: dict[int, VerificationGuard] = {}

    # -- transaction verification (KIP-890) ----------------------------------------------------
    def _in_ongoing_txn(self, producer_id: int, producer_epoch: int) -> bool:
        """Whether a batch at ``producer_epoch`` belongs to the producer's transaction ongoing
        here (Kafka's hasOngoingTransaction: the same epoch; with transactions V2 the next
        transaction runs at a bumped epoch while the last one's marker may not be here yet)."""
        if producer_id not in self.ongoing:
            return False
        entry = self.producers.get(producer_id)
        return entry is not None and entry.epoch == producer_epoch

    def start_verification(self, producer_id: int, producer_epoch: int,
                           epoch_bump: bool = False) -> VerificationGuard | None:
        """Before a transactional batch is appended: None if it belongs to the producer's
        transaction ongoing here already (its coordinator said so when it started), else the
        guard, valid until a marker of the producer is appended (for a V2 producer, a marker of
        an older epoch: the one at the guard's epoch ends the last transaction, the batch begins
        the next), for the batch to bring once the coordinator confirmed that this partition is
        in the ongoing transaction. One guard per producer, shared by concurrent checks and
        dropped when a transactional batch of the producer is appended."""
        if self._in_ongoing_txn(producer_id, producer_epoch):
            return None
        guard = self.verifications.get(producer_id)
        if guard is None:
            guard = self.verifications[producer_id] = VerificationGuard(producer_id, producer_epoch, epoch_bump)
        elif producer_epoch > guard.epoch:
            guard.epoch, guard.epoch_bump = producer_epoch, epoch_bump
        return guard

    def check_verification(self, h: BatchHeader, guard: VerificationGuard | None) -> None:
        """A verified transactional batch (``guard`` from start_verification, or None when its
        transaction was ongoing then) may start a transaction only with the guard still valid:
        INVALID_TXN_STATE if a marker ended the transaction while it was being verified."""
        if not h.is_transactional or self._in_ongoing_txn(h.producer_id, h.producer_epoch):
            return
        if guard is None or self.verifications.get(h.producer_id) is not guard:
            raise KafkaError(ErrorCode.invalid_txn_state,
                             f"the transaction of producer {h.producer_id} ended (a marker was written) while the "
                             "partition was being verified with its coordinator: the batch would open a transaction "
                             "nobody will end")

    def check(self, h: BatchHeader) -> BatchMeta | None:
        """Validate a data batch before append. Returns the earlier append if it is a duplicate."""
        if h.producer_id < 0:
            return None
        entry = self.producers.get(h.producer_id)
        if h.base_sequence == NO_SEQUENCE:
            if entry is not None:
                self._check_epoch(h, entry)
                self._check_txn_state(h, entry)
            return None
        first, last = h.base_sequence, h.last_sequence
        if entry is None:
            if first != 0:
                raise KafkaError(
                    ErrorCode.out_of_order_sequence_number,
                    f"producer {h.producer_id} is unknown here and its first sequence is {first}, not 0",
                )
            return None
        self._check_epoch(h, entry)
        if h.producer_epoch > entry.epoch:
            if first != 0:
                raise KafkaError(
                    ErrorCode.out_of_order_sequence_number,
                    f"producer {h.producer_id} bumped its epoch to {h.producer_epoch} with sequence {first}",
                )
            self._check_txn_state(h, entry)
            return None
        for b in entry.batches:
            if b.first_seq == first and b.last_seq == last:
                return b
        expected = (entry.last_seq + 1) % _SEQ_MOD
        if first != expected:
            raise KafkaError(
                ErrorCode.out_of_order_sequence_number,
                f"producer {h.producer_id} sent sequence {first}, expected {expected}",
            )
        self._check_txn_state(h, entry)
        return None

    @staticmethod
    def _check_epoch(h: BatchHeader, entry: ProducerEntry) -> None:
        if h.producer_epoch < entry.epoch:
            raise KafkaError(
                ErrorCode.invalid_producer_epoch,
                f"producer {h.producer_id} epoch {h.producer_epoch} is older than {entry.epoch}",
            )

    @staticmethod
    def _check_txn_state(h: BatchHeader, entry: ProducerEntry) -> None:
        if entry.txn_first_offset is not None and not h.is_transactional:
            raise KafkaError(
                ErrorCode.invalid_txn_state,
                f"producer {h.producer_id} sent a non-transactional batch while its transaction from offset "
                f"{entry.txn_first_offset} is ongoing",
            )

    def expected_sequence(self, producer_id: int, epoch: int) -> int | None:
        """The sequence the producer's next batch at ``epoch`` must start with (None: unknown)."""
        entry = self.producers.get(producer_id)
        if entry is None or epoch > entry.epoch:
            return 0  # a producer new here, or at a new epoch, starts at 0
        if entry.epoch != epoch or not entry.batches:
            return None
        return (entry.last_seq + 1) % _SEQ_MOD

    def update(self, h: BatchHeader) -> None:
        """Record an appended data batch (offsets assigned); a transactional one starts its
        producer's transaction if none is ongoing. (Control batches go to ``complete_txn``.)"""
        if h.producer_id < 0:
            return
        entry = self.producers.get(h.producer_id)
        if entry is None:
            entry = self.producers[h.producer_id] = ProducerEntry(h.producer_epoch)
        else:
            entry.set_epoch(h.producer_epoch)
        if h.base_sequence != NO_SEQUENCE:
            entry.batches.append(BatchMeta(h.base_sequence, h.last_sequence, h.base_offset, h.last_offset,
                                           h.max_timestamp))
        entry.last_timestamp = max(entry.last_timestamp, h.max_timestamp)
        if h.is_transactional:
            # the transaction has its first offset here: its verification is done (Kafka's
            # LogAppendInfo clears the VerificationStateEntry on every transactional append)
            self.verifications.pop(h.producer_id, None)
            if entry.txn_first_offset is None:
                entry.txn_first_offset = h.base_offset
                self.ongoing[h.producer_id] = h.base_offset

    # -- transaction markers -----------------------------------------------------------------
    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> None:
        """A marker the coordinator asks this leader to write (Kafka's appendEndTxnMarker with
        origin COORDINATOR): an epoch below the producer's is INVALID_PRODUCER_EPOCH, a coordinator
        epoch below the last one seen TRANSACTION_COORDINATOR_FENCED. A producer unknown here (its
        transaction wrote nothing to this partition, or retention removed it) is accepted."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        if producer_epoch < entry.epoch:
            raise KafkaError(
                ErrorCode.invalid_producer_epoch,
                f"marker for producer {producer_id} at epoch {producer_epoch}, older than its epoch {entry.epoch}",
            )
        if coordinator_epoch < entry.coordinator_epoch:
            raise KafkaError(
                ErrorCode.transaction_coordinator_fenced,
                f"marker for producer {producer_id} from coordinator epoch {coordinator_epoch}, older than "
                f"{entry.coordinator_epoch}",
            )

    def complete_txn(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, marker_offset: int,
                     timestamp: int, commit: bool) -> AbortedTxn | None:
        """Record an appended marker: the producer's ongoing transaction (if any) is complete and
        unreplicated until the high watermark passes ``marker_offset``. Returns the aborted
        transaction to add to the marker's segment's transaction index (None for a commit or a
        marker with no transaction ongoing here), with the last stable offset once it completed:
        the first offset of the earliest other ongoing transaction, else past the marker."""
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerEntry(producer_epoch)
        else:
            entry.set_epoch(producer_epoch)
        entry.coordinator_epoch = coordinator_epoch
        entry.last_timestamp = max(entry.last_timestamp, timestamp)
        guard = self.verifications.get(producer_id)
        if guard is not None and not (guard.epoch_bump and guard.epoch == producer_epoch):
            del self.verifications[producer_id]
        first = entry.txn_first_offset
        if first is None:
            return None
        entry.txn_first_offset = None
        self.ongoing.pop(producer_id, None)
        self.unreplicated.append(CompletedTxn(producer_id, first, marker_offset, not commit))
        if commit:
            return None
        lso = next(iter(self.ongoing.values()), marker_offset + 1)
        return AbortedTxn(producer_id, first, marker_offset, lso)

    def on_high_watermark(self, high_watermark: int) -> None:
        """Completed transactions whose marker is below the high watermark are stable."""
        if self.unreplicated and self.unreplicated[0].last_offset < high_watermark:
            self.unreplicated = [t for t in self.unreplicated if t.last_offset >= high_watermark]

    def first_unstable_offset(self) -> int | None:
        """First offset of the earliest ongoing or unreplicated transaction (None: all stable)."""
        first = next(iter(self.ongoing.values()), None)
        for t in self.unreplicated:
            if first is None or t.first_offset < first:
                first = t.first_offset
        return first

    def ongoing_transactions(self) -> list[tuple[int, int]]:
        """(producer id, first offset) of every ongoing transaction, earliest first."""
        return sorted(self.ongoing.items(), key=lambda kv: kv[1])

    def producer_infos(self) -> list[ProducerInfo]:
        return [ProducerInfo(pid, e.epoch, e.last_seq, e.last_timestamp, e.coordinator_epoch,
                             -1 if e.txn_first_offset is None else e.txn_first_offset)
                for pid, e in self.producers.items()]

    # -- snapshots ---------------------------------------------------------------------------
    def write_snapshot(self, directory: Path, offset: int) -> None:
        """Write the snapshot at ``offset``, then remove older ones. On failure (a full disk) the
        temporary file is removed and OSError raised; the start-up then rebuilds the state from
        the log, as the older snapshot no longer matches the log end."""
        data = {
            str(pid): {"epoch": e.epoch, "ts": e.last_timestamp, "coordinator_epoch": e.coordinator_epoch,
                       "txn_first_offset": e.txn_first_offset,
                       "batches": [[b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp]
                                   for b in e.batches]}
            for pid, e in self.producers.items()
        }
        path = directory / f"{offset:020d}.snapshot"
        tmp = path.with_suffix(".snapshot.tmp")
        try:
            with open(tmp, "w") as f:
                json.dump(data, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError:
            tmp.unlink(missing_ok=True)
            raise
        for old in directory.glob("*.snapshot"):
            if old != path:
                old.unlink(missing_ok=True)

    @staticmethod
    def delete_snapshots_above(directory: Path, offset: int) -> None:
        """Remove the snapshots taken past ``offset`` (the log was truncated below them)."""
        for snap in directory.glob("*.snapshot"):
            try:
                at = int(snap.stem)
            except ValueError:
                continue
            if at > offset:
                snap.unlink(missing_ok=True)

    def load_snapshot(self, directory: Path) -> int | None:
        """Load the newest snapshot; returns its offset, or None."""
        snaps = sorted(directory.glob("*.snapshot"))
        if not snaps:
            return None
        try:
            data = json.loads(snaps[-1].read_text())
        except (OSError, ValueError):
            return None
        self.producers.clear()
        self.ongoing.clear()
        self.unreplicated.clear()
        for pid, e in data.items():
            # (snapshots written before transactions were supported lack the last two keys)
            entry = ProducerEntry(e["epoch"], last_timestamp=e["ts"],
                                  coordinator_epoch=e.get("coordinator_epoch", -1),
                                  txn_first_offset=e.get("txn_first_offset"))
            for b in e["batches"]:
                entry.batches.append(BatchMeta(*b))
            self.producers[int(pid)] = entry
        for pid, first in sorted(((p, e.txn_first_offset) for p, e in self.producers.items()
                                  if e.txn_first_offset is not None), key=lambda kv: kv[1]):
            self.ongoing[pid] = first
        return int(snaps[-1].stem)
