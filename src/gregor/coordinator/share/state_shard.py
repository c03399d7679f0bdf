"""One shard of the share coordinator: the persisted state of every share-partition whose key maps
to one ``__share_group_state`` partition (Kafka's ShareCoordinatorShard), on the generic runtime.

State per share-partition: its state epoch (bumped when an operator resets it), the leader epoch
of the share-partition leader that wrote last, the share-partition start offset and the in-flight
state batches. Operations return the records that change it; replay applies them:

- ``initialize``: a new state (start offset, state epoch), as InitializeShareGroupState;
- ``write``: a leader's state (WriteShareGroupState). Its batches are merged over the stored ones
  (offsets below the start offset dropped) and the whole state is written as one ShareSnapshot, so
  that the compacted topic keeps exactly the latest state of each share-partition. A write from an
  older leader epoch is FENCED_LEADER_EPOCH, from an older state epoch FENCED_STATE_EPOCH;
- ``delete``: the snapshot's tombstone (DeleteShareGroupState).

Replay also reads ShareUpdate records (Kafka writes them between snapshots) by merging them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gregor.coordinator.runtime.committed import CommittedReads
from gregor.coordinator.runtime.result import CoordinatorResult
from gregor.coordinator.runtime.shard import Completion, RecordSerde
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.share_state_records import (
    PersistedBatch,
    SharePartitionKey,
    ShareSnapshotKey,
    ShareSnapshotValue,
    ShareUpdateKey,
    ShareUpdateValue,
    StateFormatError,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)

RECORD_SERDE = RecordSerde(encode_key, encode_value, decode_key, decode_value, StateFormatError)


@dataclass
class PartitionState:
    state_epoch: int
    leader_epoch: int
    start_offset: int
    batches: list[PersistedBatch] = field(default_factory=list)
    snapshot_epoch: int = 0
    create_timestamp: int = -1
    write_timestamp: int = -1
    delivery_complete_count: int = -1


def merge(old: list[PersistedBatch], new: list[PersistedBatch], start_offset: int) -> list[PersistedBatch]:
    """``new`` over ``old``, nothing below ``start_offset``, as ranges (never offset by offset:
    a batch may span any number of offsets)."""
    out = [c for c in (_clip(b, start_offset) for b in sorted(old, key=lambda b: b.first_offset)) if c is not None]
    for b in sorted(new, key=lambda b: b.first_offset):
        c = _clip(b, start_offset)
        if c is None:
            continue
        kept: list[PersistedBatch] = []
        for o in out:
            if o.last_offset < c.first_offset or o.first_offset > c.last_offset:
                kept.append(o)
                continue
            if o.first_offset < c.first_offset:  # the part of o before c
                kept.append(PersistedBatch(o.first_offset, c.first_offset - 1, o.delivery_state, o.delivery_count))
            if o.last_offset > c.last_offset:  # and after
                kept.append(PersistedBatch(c.last_offset + 1, o.last_offset, o.delivery_state, o.delivery_count))
        kept.append(c)
        out = sorted(kept, key=lambda b: b.first_offset)
    joined: list[PersistedBatch] = []
    for b in out:
        last = joined[-1] if joined else None
        if last is not None and last.last_offset == b.first_offset - 1 and (
                last.delivery_state, last.delivery_count) == (b.delivery_state, b.delivery_count):
            joined[-1] = PersistedBatch(last.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
        else:
            joined.append(b)
    return joined


def _clip(b: PersistedBatch, start_offset: int) -> PersistedBatch | None:
    first = max(b.first_offset, start_offset)
    if first > b.last_offset:
        return None
    return PersistedBatch(first, b.last_offset, b.delivery_state, b.delivery_count)


class ShareStateShard:
    def __init__(self, partition: int, clock: Any) -> None:
        self.partition = partition
        self.clock = clock
        self.states: dict[SharePartitionKey, PartitionState] = {}
        self._reads = CommittedReads()

    @property
    def committed_reads(self) -> CommittedReads:
        return self._reads

    # -- operations ---------------------------------------------------------------------------------
    # Each answers None, or the KafkaError to answer with (an operation never raises: the runtime
    # would take that for a broken shard and reload it).
    def initialize(self, key: SharePartitionKey, state_epoch: int,
                   start_offset: int) -> CoordinatorResult[KafkaError | None]:
        old = self.states.get(key)
        if old is not None and state_epoch < old.state_epoch:
            return CoordinatorResult([], KafkaError(ErrorCode.fenced_state_epoch, (
                f"state epoch {state_epoch} is older than the stored {old.state_epoch}")))
        now = self.clock()
        value = ShareSnapshotValue((old.snapshot_epoch + 1) if old is not None else 0, state_epoch,
                                   old.leader_epoch if old is not None else -1, start_offset, now, now, [])
        return CoordinatorResult([(ShareSnapshotKey(key), value)], None)

    def write(self, key: SharePartitionKey, state_epoch: int, leader_epoch: int, start_offset: int,
              batches: list[PersistedBatch], delivery_complete_count: int = -1
              ) -> CoordinatorResult[KafkaError | None]:
        old = self.states.get(key)
        now = self.clock()
        if old is not None:
            if leader_epoch != -1 and leader_epoch < old.leader_epoch:
                return CoordinatorResult([], KafkaError(ErrorCode.fenced_leader_epoch, (
                    f"leader epoch {leader_epoch} is older than the stored {old.leader_epoch}")))
            if state_epoch < old.state_epoch:
                return CoordinatorResult([], KafkaError(ErrorCode.fenced_state_epoch, (
                    f"state epoch {state_epoch} is older than the stored {old.state_epoch}")))
            start = start_offset if start_offset >= 0 else old.start_offset
            merged = merge(old.batches, batches, start)
            value = ShareSnapshotValue(old.snapshot_epoch + 1, max(state_epoch, old.state_epoch),
                                       max(leader_epoch, old.leader_epoch), start, old.create_timestamp, now, merged,
                                       delivery_complete_count)
        else:
            start = max(start_offset, 0)
            value = ShareSnapshotValue(0, max(state_epoch, 0), leader_epoch, start, now, now,
                                       merge([], batches, start), delivery_complete_count)
        return CoordinatorResult([(ShareSnapshotKey(key), value)], None)

    def delete(self, keys: list[SharePartitionKey]) -> CoordinatorResult[None]:
        return CoordinatorResult([(ShareSnapshotKey(k), None) for k in keys if k in self.states])

    # -- reads --------------------------------------------------------------------------------------
    def read(self, key: SharePartitionKey) -> PartitionState | None:
        return self.states.get(key)

    def keys_of(self, group: str) -> list[SharePartitionKey]:
        return [k for k in self.states if k.group == group]

    # -- replay -------------------------------------------------------------------------------------
    def replay(self, key: Any, value: Any) -> None:
        spk = key.key
        if isinstance(key, ShareSnapshotKey):
            if value is None:
                self.states.pop(spk, None)
                return
            self.states[spk] = PartitionState(value.state_epoch, value.leader_epoch, value.start_offset,
                                              list(value.batches), value.snapshot_epoch, value.create_timestamp,
                                              value.write_timestamp, value.delivery_complete_count)
        elif isinstance(key, ShareUpdateKey) and isinstance(value, ShareUpdateValue):
            state = self.states.get(spk)
            if state is None:
                return  # an update without its snapshot (Kafka never writes one first)
            start = value.start_offset if value.start_offset >= 0 else state.start_offset
            state.batches = merge(state.batches, value.batches, start)
            state.start_offset = start
            state.leader_epoch = max(state.leader_epoch, value.leader_epoch)

    def on_loaded(self) -> None:
        pass

    def on_unloaded(self) -> None:
        self._reads.clear()

    def take_completions(self) -> Sequence[Completion]:
        return ()

