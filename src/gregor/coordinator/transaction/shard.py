"""One shard of the transaction coordinator: every transactional id of one ``__transaction_state``
partition (Kafka's TransactionCoordinator and TransactionStateManager, for one partition, as a
pure state machine on the generic runtime). Implements the runtime's CoordinatorShard protocol;
``RECORD_SERDE`` is the record serde the runtime is built with for it.

Operations are sync calls that return a CoordinatorResult: the TransactionLogValue record of the
transition (none when the request is refused or changes nothing) and the answer, which the
runtime releases once the record is committed. Replay is the only mutator: an operation computes
the next ``TxnMetadata`` and writes it, and the state changes when the record is replayed.
Refusals are Kafka's error codes in the results (api.py), never exceptions.

**Markers.** Once a PrepareCommit/PrepareAbort record is committed, the shard hands the
transaction's markers (``TxnMarkers``) to ``send_markers`` (a collaborator given at
construction; without one they queue for ``take_markers()``). The service writes them in every
partition and then calls ``complete_markers(transactional_id, producer_id, producer_epoch)``,
which writes CompleteCommit/CompleteAbort. A transaction with no partitions (a TV2 abort of an
Empty or completed transaction) has no markers: its Prepare and Complete records are written in
one batch. ``on_loaded`` hands over again the markers of every transaction left in Prepare*: a new
coordinator completes what the old one started. ``send_markers`` is called from the runtime's
write path: it must only queue the work (never call back into the runtime synchronously).

**Producer ids.** The caller allocates producer ids (the allocation is asynchronous) and passes
``new_producer_id`` to ``init_producer_id`` and ``end_txn``; ``needs_new_producer_id`` says when
one will be used (an unknown transactional id, or an exhausted epoch). If one is needed and
missing, the answer is CONCURRENT_TRANSACTIONS (the client retries).

**Timers**: every transaction.abort.timed.out.transaction.cleanup.interval.ms, Ongoing
transactions older than their timeout are aborted with the epoch bumped (the producer is fenced);
every transaction.remove.expired.transaction.cleanup.interval.ms, ids idle in Empty/Complete*
for transactional.id.expiration.ms are removed with a tombstone.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import replace
from typing import Any

from gregor.coordinator.runtime.committed import ABSENT, CommittedReads
from gregor.coordinator.runtime.result import CoordinatorResult, Record
from gregor.coordinator.runtime.shard import Completion, RecordSerde
from gregor.coordinator.runtime.timer import Timer
from gregor.coordinator.transaction.api import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    AddPartitionsResult,
    EndTxnResult,
    InitProducerIdResult,
    ListedTransaction,
    ListTransactionsResult,
    TopicPartition,
    TransactionConfig,
    TransactionDescription,
    TxnMarkers,
    by_topic,
)
from gregor.coordinator.transaction.metadata import (
    COMPLETE_STATES,
    EXPIRABLE_STATES,
    MAX_EPOCH,
    PREPARE_STATES,
    TV_0,
    TV_2,
    TxnMetadata,
    epoch_exhausted,
)
from gregor.protocol.consumer_offsets import OFFSETS_TOPIC
from gregor.protocol.errors import ErrorCode
from gregor.protocol.transaction_log import (
    TRANSACTION_STATE_TOPIC,
    RecordFormatError,
    TransactionLogKey,
    TransactionLogValue,
    TxnState,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)

log = logging.getLogger("gregor.coordinator.transaction")

RECORD_SERDE = RecordSerde(encode_key, encode_value, decode_key, decode_value, RecordFormatError)

ABORT_TIMER = "transaction-abort"
EXPIRE_TIMER = "transactional-id-expiration"

E = ErrorCode


def _answer(response: Any) -> CoordinatorResult[Any]:
    return CoordinatorResult([], response)


class TransactionCoordinatorShard:
    """``partition``: the ``__transaction_state`` partition; ``clock()``: now in ms;
    ``coordinator_epoch``: that partition's leader epoch, written into every marker."""

    def __init__(self, partition: int, config: TransactionConfig, clock: Callable[[], int], timer: Timer,
                 coordinator_epoch: int = 0, send_markers: Callable[[TxnMarkers], object] | None = None) -> None:
        self.partition = partition
        self.config = config
        self.clock = clock
        self.timer = timer
        self.coordinator_epoch = coordinator_epoch
        self.send_markers = send_markers
        self.transactions: dict[str, TxnMetadata] = {}
        self._reads = CommittedReads()
        self._completions: list[Completion] = []
        self._outbox: list[TxnMarkers] = []
        # last_producer_epoch is not in the record (as in Kafka): an operation leaves it here for
        # the replay of its own record, keyed by what the record holds
        self._last_epochs: dict[tuple[str, TxnState, int, int], int] = {}
        # metrics (views.py): transactions completed (a Complete* record replayed over its Prepare*)
        # since the shard loaded, and of the aborts those the coordinator made past their timeout
        self.commits_completed = 0
        self.aborts_completed = 0
        self.timed_out_aborts_completed = 0
        self._counting = False  # set once loaded: replaying the log is not completing
        self._timing_out: set[tuple[str, int, int]] = set()  # (id, producer id, epoch) of their PrepareAbort

    # -- the runtime's protocol ---------------------------------------------------------------
    @property
    def committed_reads(self) -> CommittedReads:
        return self._reads

    def replay(self, key: Any, value: Any) -> None:
        if not isinstance(key, TransactionLogKey):
            raise RecordFormatError(f"not a transaction log key: {key!r}")
        tid = key.transactional_id
        self._reads.changing(tid, self.transactions.get(tid, ABSENT))
        if value is None or value.state is TxnState.DEAD:
            self.transactions.pop(tid, None)
            return
        assert isinstance(value, TransactionLogValue)
        m = TxnMetadata.from_value(tid, value)
        last = self._last_epochs.pop((tid, m.state, m.producer_id, m.producer_epoch), None)
        if last is not None:
            m = replace(m, last_producer_epoch=last)
        prev = self.transactions.get(tid)
        self.transactions[tid] = m
        if self._counting and prev is not None and prev.state in PREPARE_STATES:
            if m.state is TxnState.COMPLETE_COMMIT:
                self.commits_completed += 1
            elif m.state is TxnState.COMPLETE_ABORT:
                self.aborts_completed += 1
                key = (tid, prev.producer_id, prev.producer_epoch)
                if key in self._timing_out:
                    self._timing_out.discard(key)
                    self.timed_out_aborts_completed += 1

    def on_loaded(self) -> None:
        self._counting = True
        self.timer.schedule(ABORT_TIMER, self.config.abort_timed_out_transactions_interval_ms,
                            self.abort_timed_out_transactions)
        self.timer.schedule(EXPIRE_TIMER, self.config.remove_expired_transactional_ids_interval_ms,
                            self.expire_transactional_ids)
        for m in self.transactions.values():
            if m.state in PREPARE_STATES:
                log.info("Completing %s's transaction left in %s (producer id %d, epoch %d) on %s-%d",
                         m.transactional_id, m.state.kafka_name, m.producer_id, m.producer_epoch,
                         TRANSACTION_STATE_TOPIC, self.partition)
                self._emit(self._markers(m))

    def on_unloaded(self) -> None:
        self._outbox.clear()
        self._timing_out.clear()
        self._last_epochs.clear()

    def take_completions(self) -> Sequence[Completion]:
        out, self._completions = self._completions, []
        return out

    # -- markers ----------------------------------------------------------------------------
    def take_markers(self) -> list[TxnMarkers]:
        """The markers handed over since the last call (without a ``send_markers`` collaborator)."""
        out, self._outbox = self._outbox, []
        return out

    def pending_markers(self) -> list[TxnMarkers]:
        """The markers of every transaction waiting for them (in PrepareCommit/PrepareAbort)."""
        return [self._markers(m) for m in self.transactions.values() if m.state in PREPARE_STATES]

    def _markers(self, m: TxnMetadata) -> TxnMarkers:
        return TxnMarkers(m.transactional_id, m.producer_id, m.producer_epoch, m.state is TxnState.PREPARE_COMMIT,
                          m.partitions, self.coordinator_epoch, m.client_version)

    def _emit(self, markers: TxnMarkers) -> None:
        if self.send_markers is not None:
            self.send_markers(markers)
        else:
            self._outbox.append(markers)

    # -- writing ----------------------------------------------------------------------------
    def _now(self, now: int | None) -> int:
        return self.clock() if now is None else now

    def _record(self, m: TxnMetadata) -> Record:
        self._last_epochs[(m.transactional_id, m.state, m.producer_id, m.producer_epoch)] = m.last_producer_epoch
        return TransactionLogKey(m.transactional_id), m.to_value(self.config.log_value_version)

    def _prepare_records(self, prepared: TxnMetadata, now: int) -> list[Record]:
        """The records of a transaction entering Prepare*: with partitions, the Prepare record and
        its markers once it is committed; without, Prepare and Complete at once."""
        if not prepared.partitions:
            return [self._record(prepared), self._record(prepared.complete(now))]
        markers = self._markers(prepared)

        def send(error: BaseException | None) -> None:
            if error is None:
                self._emit(markers)

        self._completions.append(send)
        return [self._record(prepared)]

    def needs_new_producer_id(self, transactional_id: str) -> bool:
        """Whether InitProducerId or a TV2 EndTxn of ``transactional_id`` would use a new producer
        id now (the id is unknown, or its epoch is exhausted)."""
        m = self.transactions.get(transactional_id)
        return m is None or m.exhausted

    # -- InitProducerId -----------------------------------------------------------------------
    def init_producer_id(self, transactional_id: str, transaction_timeout_ms: int,
                         expected_producer_id: int = NO_PRODUCER_ID, expected_epoch: int = NO_PRODUCER_EPOCH,
                         new_producer_id: int = NO_PRODUCER_ID,
                         now: int | None = None) -> CoordinatorResult[InitProducerIdResult]:
        """InitProducerId with a transactional id (Kafka's handleInitProducerId).

        A new id gets ``new_producer_id`` at epoch 0. Empty/Complete*: the epoch is bumped (a new
        producer id at epoch 0 once it is exhausted); with KIP-360's expected producer id and
        epoch, a retry of a call that succeeded gets the same epoch again and a stale one is
        PRODUCER_FENCED. Ongoing: the transaction is aborted with the epoch bumped (markers
        follow) and the answer is CONCURRENT_TRANSACTIONS, as while Prepare*: the client retries.
        """
        now = self._now(now)
        if not transactional_id:
            return _answer(InitProducerIdResult(E.invalid_request))
        if not 0 < transaction_timeout_ms <= self.config.transaction_max_timeout_ms:
            return _answer(InitProducerIdResult(E.invalid_transaction_timeout))
        if (expected_producer_id == NO_PRODUCER_ID) != (expected_epoch == NO_PRODUCER_EPOCH):
            return _answer(InitProducerIdResult(E.invalid_request))
        expected = expected_producer_id != NO_PRODUCER_ID
        m = self.transactions.get(transactional_id)
        if m is None:
            if new_producer_id < 0:
                return self._no_producer_id(transactional_id, InitProducerIdResult(E.concurrent_transactions))
            m = TxnMetadata(transactional_id, new_producer_id, NO_PRODUCER_EPOCH, transaction_timeout_ms,
                            TxnState.EMPTY, frozenset(), -1, now)
        if expected and not (m.producer_epoch == NO_PRODUCER_EPOCH or expected_producer_id == m.producer_id
                             or (expected_producer_id == m.previous_producer_id and epoch_exhausted(expected_epoch))):
            return _answer(InitProducerIdResult(E.producer_fenced))
        if m.state in PREPARE_STATES:
            return _answer(InitProducerIdResult(E.concurrent_transactions))
        if m.state is TxnState.ONGOING:
            log.info("Aborting %s's ongoing transaction (producer id %d, epoch %d) for a new InitProducerId",
                     transactional_id, m.producer_id, m.producer_epoch)
            return CoordinatorResult(self._prepare_records(m.fence(now), now),
                                     InitProducerIdResult(E.concurrent_transactions))
        if m.state is TxnState.EMPTY or m.state in COMPLETE_STATES:
            nxt: TxnMetadata | None
            if m.exhausted and (not expected or expected_epoch == m.producer_epoch):
                if new_producer_id < 0:
                    return self._no_producer_id(transactional_id, InitProducerIdResult(E.concurrent_transactions))
                nxt = m.rotate_producer_id(new_producer_id, transaction_timeout_ms, now, expected)
            else:
                nxt = m.increment_epoch(transaction_timeout_ms, expected_epoch if expected else None, now)
            if nxt is None:
                return _answer(InitProducerIdResult(E.producer_fenced))
            log.info("Initialized transactionalId %s with producerId %d and producer epoch %d on partition %s-%d",
                     transactional_id, nxt.producer_id, nxt.producer_epoch, TRANSACTION_STATE_TOPIC, self.partition)
            return CoordinatorResult([self._record(nxt)],
                                     InitProducerIdResult(E.none, nxt.producer_id, nxt.producer_epoch))
        log.error("%s is in state %s, which no record should leave", transactional_id, m.state.kafka_name)
        return _answer(InitProducerIdResult(E.unknown_server_error))

    @staticmethod
    def _no_producer_id(transactional_id: str, response: Any) -> CoordinatorResult[Any]:
        log.warning("%s needs a new producer id and none was allocated; answering %s", transactional_id, response)
        return _answer(response)

    # -- AddPartitionsToTxn, AddOffsetsToTxn ----------------------------------------------------
    def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                       partitions: Iterable[TopicPartition], verify_only: bool = False,
                       client_version_tv2: bool = False,
                       now: int | None = None) -> CoordinatorResult[AddPartitionsResult]:
        """AddPartitionsToTxn (Kafka's handleAddPartitionsToTransaction and, with
        ``verify_only``, handleVerifyPartitionsInTransaction: whether each partition is in the
        ongoing transaction, NONE or TRANSACTION_ABORTABLE, nothing written).
        ``client_version_tv2``: the add comes for a transactions V2 producer (v5+ from a partition
        leader, the partitions added implicitly)."""
        now = self._now(now)
        parts = list(dict.fromkeys((t, p) for t, p in partitions))

        def every(code: ErrorCode) -> CoordinatorResult[AddPartitionsResult]:
            return _answer(AddPartitionsResult(code, dict.fromkeys(parts, code)))

        if not transactional_id:
            return every(E.invalid_request)
        m = self.transactions.get(transactional_id)
        if m is None or m.producer_id != producer_id:
            return every(E.invalid_producer_id_mapping)
        if m.producer_epoch != producer_epoch:
            return every(E.producer_fenced)
        if m.state in PREPARE_STATES:
            return every(E.concurrent_transactions)
        if verify_only:
            return _answer(AddPartitionsResult(E.none, {tp: E.none if tp in m.partitions else E.transaction_abortable
                                                        for tp in parts}))
        added = frozenset(parts)
        if m.state is TxnState.ONGOING and added <= m.partitions:
            return every(E.none)
        if m.state is not TxnState.EMPTY and m.state is not TxnState.ONGOING and m.state not in COMPLETE_STATES:
            return every(E.unknown_server_error)
        nxt = m.add_partitions(added, now, TV_2 if client_version_tv2 else TV_0)
        return CoordinatorResult([self._record(nxt)], AddPartitionsResult(E.none, dict.fromkeys(parts, E.none)))

    def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int, group_partition: int,
                    client_version_tv2: bool = False, now: int | None = None) -> CoordinatorResult[ErrorCode]:
        """AddOffsetsToTxn: the group's ``__consumer_offsets`` partition (``group_partition``,
        from the caller) joins the transaction."""
        result = self.add_partitions(transactional_id, producer_id, producer_epoch, [(OFFSETS_TOPIC, group_partition)],
                                     client_version_tv2=client_version_tv2, now=now)
        response = result.response
        assert isinstance(response, AddPartitionsResult)
        return CoordinatorResult(result.records, response.partitions[(OFFSETS_TOPIC, group_partition)])

    # -- EndTxn ------------------------------------------------------------------------------
    def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool,
                client_version_tv2: bool = False, new_producer_id: int = NO_PRODUCER_ID,
                now: int | None = None) -> CoordinatorResult[EndTxnResult]:
        """EndTxn (Kafka's endTransaction, V1 before EndTxn v5, V2 from it). The answer is
        released once the Prepare record is committed; the markers follow. ``new_producer_id``
        (V2 only): the producer id to continue with when this end exhausts the epoch."""
        now = self._now(now)
        if not transactional_id:
            return _answer(EndTxnResult(E.invalid_request))
        m = self.transactions.get(transactional_id)
        if m is None:
            return _answer(EndTxnResult(E.invalid_producer_id_mapping))
        if client_version_tv2:
            return self._end_v2(m, producer_id, producer_epoch, commit, new_producer_id, now)
        if m.producer_id != producer_id:
            return _answer(EndTxnResult(E.invalid_producer_id_mapping))
        if m.producer_epoch != producer_epoch:
            return _answer(EndTxnResult(E.producer_fenced))
        state = m.state
        if state is TxnState.ONGOING:
            return CoordinatorResult(self._prepare_records(m.prepare_end(commit, TV_0, NO_PRODUCER_ID, now), now),
                                     EndTxnResult(E.none))
        if state is (TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT):
            return _answer(EndTxnResult(E.none))  # a retry of the end that completed
        if state is (TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT):
            return _answer(EndTxnResult(E.concurrent_transactions))
        return self._invalid_state(m, commit)

    def _end_v2(self, m: TxnMetadata, producer_id: int, producer_epoch: int, commit: bool, new_producer_id: int,
                now: int) -> CoordinatorResult[EndTxnResult]:
        # a retry of an end that bumped the epoch, or that moved to the next producer id
        retry_on_overflow = (m.previous_producer_id == producer_id and producer_epoch == MAX_EPOCH - 1
                             and m.producer_epoch == 0)
        retry_on_bump = m.producer_epoch == producer_epoch + 1
        state = m.state
        if state in PREPARE_STATES and (m.producer_id == producer_id or retry_on_overflow):
            # the last end's markers are being written (Kafka: a pending transition), answered before
            # the epoch is judged (KAFKA-18464): the client retries, as after any concurrent change
            return _answer(EndTxnResult(E.concurrent_transactions))
        if state in PREPARE_STATES:
            valid_epoch = retry_on_bump
        elif state in COMPLETE_STATES:
            valid_epoch = retry_on_bump or retry_on_overflow or producer_epoch == m.producer_epoch
        else:
            valid_epoch = producer_epoch == m.producer_epoch
        if m.producer_id != producer_id and not retry_on_overflow:
            return _answer(EndTxnResult(E.invalid_producer_id_mapping))
        if not valid_epoch:
            return _answer(EndTxnResult(E.producer_fenced))
        retry = retry_on_bump or retry_on_overflow

        def end(end_commit: bool) -> CoordinatorResult[EndTxnResult]:
            next_id = NO_PRODUCER_ID
            if m.exhausted:
                if new_producer_id < 0:
                    return self._no_producer_id(m.transactional_id, EndTxnResult(E.concurrent_transactions))
                next_id = new_producer_id
            prepared = m.prepare_end(end_commit, TV_2, next_id, now)
            done = prepared.complete(now)  # what the producer continues with
            return CoordinatorResult(self._prepare_records(prepared, now),
                                     EndTxnResult(E.none, done.producer_id, done.producer_epoch))

        if state is TxnState.ONGOING:
            return end(commit)
        if state is TxnState.EMPTY:
            return end(False) if not commit else self._invalid_state(m, commit)
        if state is TxnState.COMPLETE_COMMIT:
            if commit:
                return _answer(EndTxnResult(E.none, m.producer_id, m.producer_epoch)) if retry \
                    else self._invalid_state(m, commit)
            return self._invalid_state(m, commit) if retry else end(False)
        if state is TxnState.COMPLETE_ABORT:
            if not commit:
                return _answer(EndTxnResult(E.none, m.producer_id, m.producer_epoch)) if retry else end(False)
            return self._invalid_state(m, commit)
        if state is (TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT):
            return _answer(EndTxnResult(E.concurrent_transactions))
        return self._invalid_state(m, commit)

    def ends_next_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int) -> bool:
        """Whether an EndTxn V2 at ``producer_epoch`` ends the transaction after the one whose
        markers are being written (the id is in Prepare* at that epoch, the one the last end gave)."""
        m = self.transactions.get(transactional_id)
        return (m is not None and m.state in PREPARE_STATES and m.producer_id == producer_id
                and m.producer_epoch == producer_epoch)

    @staticmethod
    def _invalid_state(m: TxnMetadata, commit: bool) -> CoordinatorResult[EndTxnResult]:
        log.warning("TransactionalId: %s's state is %s, but received transaction marker result to send: %s",
                    m.transactional_id, m.state.kafka_name, "COMMIT" if commit else "ABORT")
        return _answer(EndTxnResult(E.invalid_txn_state))

    # -- markers written ------------------------------------------------------------------------
    def complete_markers(self, transactional_id: str, producer_id: int, producer_epoch: int,
                         dropped: Collection[TopicPartition] = (),
                         now: int | None = None) -> CoordinatorResult[ErrorCode]:
        """Every marker of the transaction prepared at ``producer_id``/``producer_epoch`` is
        written: CompleteCommit/CompleteAbort. ``dropped``: partitions the service skipped because
        they no longer exist (their topic was deleted: Kafka skips a partition without a leader),
        logged. Stale calls (the transaction is no longer that one in Prepare*) write nothing and
        answer INVALID_TXN_STATE."""
        now = self._now(now)
        m = self.transactions.get(transactional_id)
        if (m is None or m.state not in PREPARE_STATES
                or (m.producer_id, m.producer_epoch) != (producer_id, producer_epoch)):
            log.info("Markers completed for %s (producer id %d, epoch %d), which no longer waits for them",
                     transactional_id, producer_id, producer_epoch)
            return _answer(E.invalid_txn_state)
        if dropped:
            log.info("Couldn't find leader endpoint for partitions %s while trying to send transaction markers "
                     "for %s, these partitions are likely deleted already and hence can be skipped",
                     sorted(dropped), transactional_id)
        return CoordinatorResult([self._record(m.complete(now))], E.none)

    # -- timers ------------------------------------------------------------------------------
    def abort_timed_out_transactions(self, now: int | None = None) -> CoordinatorResult[list[str]]:
        """Abort every Ongoing transaction open longer than its timeout, the epoch bumped so the
        producer is fenced; runs every transaction.abort.timed.out.transaction.cleanup.interval.ms."""
        now = self._now(now)
        self.timer.schedule(ABORT_TIMER, self.config.abort_timed_out_transactions_interval_ms,
                            self.abort_timed_out_transactions)
        records: list[Record] = []
        aborted = []
        for tid, m in list(self.transactions.items()):
            if m.state is TxnState.ONGOING and m.start_ms + m.timeout_ms < now:
                log.info("Aborting %s's transaction (producer id %d, epoch %d): open for %d ms, its timeout is %d ms",
                         tid, m.producer_id, m.producer_epoch, now - m.start_ms, m.timeout_ms)
                fenced = m.fence(now)
                self._timing_out.add((tid, fenced.producer_id, fenced.producer_epoch))
                records += self._prepare_records(fenced, now)
                aborted.append(tid)
        return CoordinatorResult(records, aborted)

    def expire_transactional_ids(self, now: int | None = None) -> CoordinatorResult[list[str]]:
        """Remove (tombstone) every id idle in Empty/Complete* for transactional.id.expiration.ms;
        runs every transaction.remove.expired.transaction.cleanup.interval.ms."""
        now = self._now(now)
        self.timer.schedule(EXPIRE_TIMER, self.config.remove_expired_transactional_ids_interval_ms,
                            self.expire_transactional_ids)
        expired = [tid for tid, m in self.transactions.items()
                   if m.state in EXPIRABLE_STATES
                   and m.last_update_ms <= now - self.config.transactional_id_expiration_ms]
        for tid in expired:
            log.info("Removing expired transactionalId %s", tid)
        return CoordinatorResult([(TransactionLogKey(tid), None) for tid in expired], expired)

    # -- reads (the committed state) -----------------------------------------------------------
    def _committed(self, tid: str) -> TxnMetadata | None:
        m = self._reads.value(tid, self.transactions.get(tid, ABSENT))
        return None if m is ABSENT else m

    def committed_transactions(self) -> dict[str, TxnMetadata]:
        """Every id's committed state (what the reads see)."""
        out = {}
        for tid in set(self.transactions) | {k for k in self._reads.changed_keys() if isinstance(k, str)}:
            m = self._committed(tid)
            if m is not None:
                out[tid] = m
        return out

    def describe_transaction(self, transactional_id: str) -> TransactionDescription:
        """DescribeTransactions of one id."""
        if not transactional_id:
            return TransactionDescription(transactional_id, E.invalid_request)
        m = self._committed(transactional_id)
        if m is None:
            return TransactionDescription(transactional_id, E.transactional_id_not_found)
        return TransactionDescription(transactional_id, E.none, m.state.kafka_name, m.producer_id, m.producer_epoch,
                                      m.timeout_ms, m.start_ms, by_topic(sorted(m.partitions)))

    def list_transactions(self, states: Collection[str] = (), producer_ids: Collection[int] = (),
                          duration_ms: int = -1, transactional_id_pattern: str | None = None,
                          now: int | None = None) -> ListTransactionsResult:
        """ListTransactions: by Kafka's state names, producer ids, KIP-994's duration (only
        transactions started more than ``duration_ms`` ago; -1: no filter) and KIP-1152's
        transactional id pattern (a regular expression matched against the whole id)."""
        now = self._now(now)
        wanted: set[TxnState] = set()
        unknown: list[str] = []
        for name in states:
            state = TxnState.from_kafka_name(name)
            if state is None:
                unknown.append(name)
            else:
                wanted.add(state)
        pattern = re.compile(transactional_id_pattern) if transactional_id_pattern else None
        pids = set(producer_ids)
        out = []
        for tid, m in sorted(self.committed_transactions().items()):
            if pids and m.producer_id not in pids:
                continue
            if states and m.state not in wanted:
                continue
            if duration_ms >= 0 and now - m.start_ms <= duration_ms:
                continue
            if pattern is not None and not pattern.fullmatch(tid):
                continue
            out.append(ListedTransaction(tid, m.producer_id, m.state.kafka_name))
        return ListTransactionsResult(out, unknown)
