"""One transactional id's state and its legal transitions (Kafka's TransactionMetadata,
TxnTransitMetadata and TransactionState's valid previous states), transactions V1 and V2.

``TxnMetadata`` is immutable: a transition returns the next state, which the shard writes as a
TransactionLogValue and applies by replaying it. Every transition checks the state it leaves is a
legal previous state of the one it enters (``IllegalTransition`` otherwise: a bug, never a
client's error). As in Kafka, ``previous_producer_id`` is the producer id the transition left
(a rotation's old id), and ``last_producer_epoch`` (KIP-360's retry check) is not in the record:
it lives in memory only and is -1 after a load.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gregor.coordinator.transaction.api import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, TopicPartition, by_topic
from gregor.protocol.transaction_log import TransactionLogValue, TxnState

MAX_EPOCH = 32767  # Short.MAX_VALUE

TV_0 = 0  # the client's transaction version as Kafka stores it: 0 for V1 clients
TV_2 = 2  # KIP-890 part 2: EndTxn v5+, the epoch bumped at every end

VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    TxnState.EMPTY: frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}),
    TxnState.ONGOING: frozenset({TxnState.ONGOING, TxnState.EMPTY, TxnState.COMPLETE_COMMIT,
                                 TxnState.COMPLETE_ABORT}),
    TxnState.PREPARE_COMMIT: frozenset({TxnState.ONGOING}),
    TxnState.PREPARE_ABORT: frozenset({TxnState.ONGOING, TxnState.PREPARE_EPOCH_FENCE, TxnState.EMPTY,
                                       TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}),
    TxnState.COMPLETE_COMMIT: frozenset({TxnState.PREPARE_COMMIT}),
    TxnState.COMPLETE_ABORT: frozenset({TxnState.PREPARE_ABORT}),
    TxnState.DEAD: frozenset({TxnState.EMPTY, TxnState.COMPLETE_ABORT, TxnState.COMPLETE_COMMIT}),
    TxnState.PREPARE_EPOCH_FENCE: frozenset({TxnState.ONGOING}),
}

PREPARE_STATES = frozenset({TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT})
COMPLETE_STATES = frozenset({TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT})
# states whose id may expire (Kafka's isExpirationAllowed)
EXPIRABLE_STATES = frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT})


class IllegalTransition(RuntimeError):
    """A transition Kafka's state machine does not allow: a coordinator bug."""


def epoch_exhausted(epoch: int) -> bool:
    """Kafka never hands out Short.MAX_VALUE, so a producer can always be fenced by one bump."""
    return epoch >= MAX_EPOCH - 1


@dataclass(frozen=True, slots=True)
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition]
    start_ms: int  # when the first partition was added; -1 while Empty
    last_update_ms: int
    previous_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID  # TV2: the id the producer moves to when its epoch ran out
    client_version: int = TV_0
    last_producer_epoch: int = NO_PRODUCER_EPOCH  # in memory only (KIP-360 retries)

    @property
    def exhausted(self) -> bool:
        return epoch_exhausted(self.producer_epoch)

    @property
    def tv2(self) -> bool:
        return self.client_version >= TV_2

    # -- records ---------------------------------------------------------------------------
    def to_value(self, version: int) -> TransactionLogValue:
        if self.state is TxnState.EMPTY and self.partitions:
            raise IllegalTransition(f"{self.transactional_id}: Empty with partitions {sorted(self.partitions)}")
        partitions: tuple[tuple[str, tuple[int, ...]], ...] | None = None
        if self.state is not TxnState.EMPTY:
            partitions = tuple((t, tuple(ps)) for t, ps in by_topic(sorted(self.partitions)).items())
        return TransactionLogValue(self.producer_id, self.producer_epoch, self.timeout_ms, self.state, partitions,
                                   self.last_update_ms, self.start_ms, self.previous_producer_id,
                                   self.next_producer_id, self.client_version, version)

    @classmethod
    def from_value(cls, transactional_id: str, v: TransactionLogValue) -> TxnMetadata:
        partitions: frozenset[TopicPartition] = frozenset()
        if v.state is not TxnState.EMPTY and v.partitions is not None:
            partitions = frozenset((topic, p) for topic, ids in v.partitions for p in ids)
        return cls(transactional_id, v.producer_id, v.producer_epoch, v.transaction_timeout_ms, v.state, partitions,
                   v.start_timestamp_ms, v.last_update_timestamp_ms, v.previous_producer_id, v.next_producer_id,
                   v.client_transaction_version)

    # -- transitions -----------------------------------------------------------------------
    def _to(self, state: TxnState, **changes: object) -> TxnMetadata:
        if self.state not in VALID_PREVIOUS[state]:
            raise IllegalTransition(f"{self.transactional_id}: {self.state.kafka_name} -> {state.kafka_name}")
        nxt = replace(self, state=state, previous_producer_id=self.producer_id, **changes)  # type: ignore[arg-type]
        if state is not TxnState.DEAD and nxt.producer_epoch < 0:
            raise IllegalTransition(f"{self.transactional_id}: epoch {nxt.producer_epoch}")
        return nxt

    def increment_epoch(self, timeout_ms: int, expected_epoch: int | None, now: int) -> TxnMetadata | None:
        """InitProducerId on Empty/Complete* (Kafka's prepareIncrementProducerEpoch): the next
        epoch, or, for a KIP-360 retry of a call that succeeded (``expected_epoch`` the epoch
        before it), the same one again; None: the expected epoch is fenced."""
        epoch, last = self.producer_epoch, self.last_producer_epoch
        if expected_epoch is None:
            new_epoch, new_last = epoch + 1, NO_PRODUCER_EPOCH
        elif epoch == NO_PRODUCER_EPOCH or expected_epoch == epoch:
            new_epoch, new_last = epoch + 1, epoch
        elif expected_epoch == last:
            new_epoch, new_last = epoch, last
        else:
            return None
        if new_epoch != epoch and self.exhausted:
            raise IllegalTransition(f"{self.transactional_id}: epoch {epoch} is exhausted; rotate the producer id")
        return self._to(TxnState.EMPTY, producer_epoch=new_epoch, last_producer_epoch=new_last, timeout_ms=timeout_ms,
                        partitions=frozenset(), start_ms=-1, last_update_ms=now)

    def rotate_producer_id(self, producer_id: int, timeout_ms: int, now: int, record_last_epoch: bool) -> TxnMetadata:
        """InitProducerId when the epoch is exhausted: a new producer id at epoch 0."""
        return self._to(TxnState.EMPTY, producer_id=producer_id, producer_epoch=0,
                        last_producer_epoch=self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
                        timeout_ms=timeout_ms, partitions=frozenset(), start_ms=-1, last_update_ms=now)

    def add_partitions(self, partitions: frozenset[TopicPartition], now: int, client_version: int) -> TxnMetadata:
        start = now if self.state in (TxnState.EMPTY, *COMPLETE_STATES) else self.start_ms
        return self._to(TxnState.ONGOING, partitions=self.partitions | partitions, start_ms=start,
                        last_update_ms=now, client_version=client_version)

    def fence(self, now: int) -> TxnMetadata:
        """Abort an Ongoing transaction from the coordinator (a timeout, or InitProducerId of a
        new instance): PrepareAbort at the epoch bumped once, so the zombie producer is fenced
        (Kafka's prepareFenceProducerEpoch, then the abort with that epoch and no last epoch)."""
        if self.state is not TxnState.ONGOING:
            raise IllegalTransition(f"{self.transactional_id}: fencing in {self.state.kafka_name}")
        epoch = self.producer_epoch if self.producer_epoch == MAX_EPOCH else self.producer_epoch + 1
        return self._to(TxnState.PREPARE_ABORT, producer_epoch=epoch, last_producer_epoch=NO_PRODUCER_EPOCH,
                        next_producer_id=NO_PRODUCER_ID, last_update_ms=now)

    def prepare_end(self, commit: bool, client_version: int, next_producer_id: int, now: int) -> TxnMetadata:
        """EndTxn: PrepareCommit or PrepareAbort (Kafka's prepareAbortOrCommit). With TV2 the
        epoch is bumped (not past Short.MAX_VALUE on an abort) and ``next_producer_id`` is the id
        the producer continues with when that exhausts it; a TV2 abort from Empty/Complete* has
        no partitions and starts now."""
        state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        epoch, last = self.producer_epoch, self.last_producer_epoch
        if client_version >= TV_2:
            if not (epoch == MAX_EPOCH and not commit):
                epoch += 1
            last = self.producer_epoch
        no_partitions_added = self.state is not TxnState.ONGOING
        return self._to(state, producer_epoch=epoch, last_producer_epoch=last, next_producer_id=next_producer_id,
                        start_ms=now if no_partitions_added else self.start_ms, last_update_ms=now,
                        client_version=client_version)

    def complete(self, now: int) -> TxnMetadata:
        """The markers are written: CompleteCommit or CompleteAbort, no partitions; a TV2
        transaction whose epoch ran out moves to its next producer id at epoch 0."""
        if self.state not in PREPARE_STATES:
            raise IllegalTransition(f"{self.transactional_id}: completing in {self.state.kafka_name}")
        state = TxnState.COMPLETE_COMMIT if self.state is TxnState.PREPARE_COMMIT else TxnState.COMPLETE_ABORT
        pid, epoch = self.producer_id, self.producer_epoch
        if self.tv2 and self.next_producer_id != NO_PRODUCER_ID:
            pid, epoch = self.next_producer_id, 0
        return self._to(state, producer_id=pid, producer_epoch=epoch, next_producer_id=NO_PRODUCER_ID,
                        partitions=frozenset(), last_update_ms=now)
