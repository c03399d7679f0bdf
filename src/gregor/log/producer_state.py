"""Idempotent-producer state of one partition (Kafka: ProducerStateManager).

For each producer id: its epoch and the metadata of its last five batches. An incoming batch is
- a duplicate if it matches one of those five (answered with the offsets it got the first time,
  nothing appended),
- in sequence if its first sequence follows the last one (wrapping at 2^31),
- otherwise OUT_OF_ORDER_SEQUENCE_NUMBER; an older epoch is INVALID_PRODUCER_EPOCH (Kafka 2.x+
  answers fenced producers this way for idempotent, non-transactional producers).

State survives restarts through a snapshot written at clean shutdown and, after a crash, by
re-reading batch headers (never records) from the log.
"""

from __future__ import annotations

import json
import os
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

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

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE


class ProducerStateManager:
    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}

    def check(self, h: BatchHeader) -> BatchMeta | None:
        """Validate a batch before append. Returns the earlier append if it is a duplicate."""
        if h.producer_id < 0 or h.base_sequence == NO_SEQUENCE:
            return None
        entry = self.producers.get(h.producer_id)
        first, last = h.base_sequence, h.last_sequence
        if entry is None:
            if first != 0:
                raise KafkaError(
                    ErrorCode.out_of_order_sequence_number,
                    f"producer {h.producer_id} is unknown here and its first sequence is {first}, not 0",
                )
            return None
        if h.producer_epoch < entry.epoch:
            raise KafkaError(
                ErrorCode.invalid_producer_epoch,
                f"producer {h.producer_id} epoch {h.producer_epoch} is older than {entry.epoch}",
            )
        if h.producer_epoch > entry.epoch:
            if first != 0:
                raise KafkaError(
                    ErrorCode.out_of_order_sequence_number,
                    f"producer {h.producer_id} bumped its epoch to {h.producer_epoch} with sequence {first}",
                )
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
        return None

    def expected_sequence(self, producer_id: int, epoch: int) -> int | None:
        """The sequence the producer's next batch at ``epoch`` must start with (None: unknown)."""
        entry = self.producers.get(producer_id)
        if entry is None or epoch > entry.epoch:
            return 0  # a producer new here, or at a new epoch, starts at 0
        if entry.epoch != epoch or not entry.batches:
            return None
        return (entry.last_seq + 1) % _SEQ_MOD

    def update(self, h: BatchHeader) -> None:
        """Record an appended batch (offsets assigned)."""
        if h.producer_id < 0:
            return
        entry = self.producers.get(h.producer_id)
        if entry is None or h.producer_epoch != entry.epoch:
            entry = ProducerEntry(h.producer_epoch)
            self.producers[h.producer_id] = entry
        if h.base_sequence != NO_SEQUENCE:
            entry.batches.append(BatchMeta(h.base_sequence, h.last_sequence, h.base_offset, h.last_offset,
                                           h.max_timestamp))
        entry.last_timestamp = max(entry.last_timestamp, h.max_timestamp)

    # -- snapshots ---------------------------------------------------------------------------
    def write_snapshot(self, directory: Path, offset: int) -> None:
        """Write the snapshot at ``offset``, then remove older ones. On failure (a full disk) the
        temporary file is removed and OSError raised; the start-up then rebuilds the state from
        the log, as the older snapshot no longer matches the log end."""
        data = {
            str(pid): {"epoch": e.epoch, "ts": e.last_timestamp,
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
        for pid, e in data.items():
            entry = ProducerEntry(e["epoch"], last_timestamp=e["ts"])
            for b in e["batches"]:
                entry.batches.append(BatchMeta(*b))
            self.producers[int(pid)] = entry
        return int(snaps[-1].stem)
