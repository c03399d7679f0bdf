"""The transaction coordinator's state machine, request by request, as Kafka's
TransactionCoordinator answers (no network: tests/coordinator/transaction_harness.py)."""

from __future__ import annotations

import pytest

from gregor.coordinator.transaction.api import TransactionConfig, TxnMarkers
from gregor.coordinator.transaction.metadata import MAX_EPOCH
from gregor.protocol.consumer_offsets import OFFSETS_TOPIC
from gregor.protocol.errors import ErrorCode as E
from gregor.protocol.transaction_log import TransactionLogKey, TransactionLogValue, TxnState
from tests.coordinator.transaction_harness import COORDINATOR_EPOCH, TxnHarness, persisted

T0 = ("t", 0)
T1 = ("t", 1)


@pytest.fixture
def h() -> TxnHarness:
    return TxnHarness()


def check_reload(h: TxnHarness) -> None:
    assert persisted(h.load_fresh()) == persisted(h.shard)


# -- InitProducerId ------------------------------------------------------------------------------
def test_init_new_id_writes_empty_at_epoch_zero(h):
    r = h.init("tx", timeout=30_000)
    assert (r.error, r.producer_id, r.producer_epoch) == (E.none, 1001, 0)
    [(key, value)] = h.last_records
    assert key == TransactionLogKey("tx")
    assert value.state is TxnState.EMPTY and value.partitions is None and value.start_timestamp_ms == -1
    assert value.transaction_timeout_ms == 30_000 and value.last_update_timestamp_ms == h.clock()
    assert h.state("tx") == "Empty"
    check_reload(h)


def test_init_again_bumps_the_epoch_of_the_same_producer_id(h):
    h.init("tx")
    r = h.init("tx", timeout=5000)
    assert (r.error, r.producer_id, r.producer_epoch) == (E.none, 1001, 1)
    assert h.meta("tx").timeout_ms == 5000
    check_reload(h)


@pytest.mark.parametrize("timeout", [0, -1, 900_001])
def test_init_refuses_timeouts_outside_the_maximum(h, timeout):
    assert h.init("tx", timeout=timeout).error == E.invalid_transaction_timeout
    assert h.last_records == [] and "tx" not in h.shard.transactions


def test_init_refuses_empty_id_and_half_expected_pairs(h):
    assert h.run(h.shard.init_producer_id("", 1000, new_producer_id=5)).error == E.invalid_request
    assert h.run(h.shard.init_producer_id("tx", 1000, 5, -1, 6)).error == E.invalid_request


def test_init_without_an_allocated_producer_id_is_retriable(h):
    r = h.run(h.shard.init_producer_id("tx", 1000))
    assert r.error == E.concurrent_transactions and "tx" not in h.shard.transactions


def test_init_on_ongoing_fences_aborts_and_answers_concurrent_transactions(h):
    pid, epoch = h.begin("tx", [T0, T1])
    r = h.init("tx")
    assert r.error == E.concurrent_transactions
    m = h.meta("tx")
    assert (m.state, m.producer_epoch, m.partitions) == (TxnState.PREPARE_ABORT, epoch + 1, frozenset({T0, T1}))
    assert h.markers == [TxnMarkers("tx", pid, epoch + 1, False, frozenset({T0, T1}), COORDINATOR_EPOCH, 0)]
    # meanwhile: the client retries and waits; the zombie is fenced
    assert h.init("tx").error == E.concurrent_transactions
    assert h.add("tx", pid, epoch, [("u", 0)]).error == E.producer_fenced
    assert h.end("tx", pid, epoch, commit=True).error == E.producer_fenced
    check_reload(h)
    h.complete_all()
    assert h.state("tx") == "CompleteAbort" and h.meta("tx").partitions == frozenset()
    r = h.init("tx")
    assert (r.error, r.producer_id, r.producer_epoch) == (E.none, pid, epoch + 2)
    check_reload(h)


def test_init_while_prepare_is_concurrent_transactions(h):
    pid, epoch = h.begin("tx", [T0])
    h.end("tx", pid, epoch, commit=True)
    assert h.init("tx").error == E.concurrent_transactions
    assert h.last_records == []


def test_kip360_expected_epoch_bumps_and_a_retry_gets_the_same_epoch(h):
    r0 = h.init("tx")
    r1 = h.init("tx", expected=(r0.producer_id, r0.producer_epoch))
    assert (r1.error, r1.producer_epoch) == (E.none, 1)
    retry = h.init("tx", expected=(r0.producer_id, r0.producer_epoch))
    assert (retry.error, retry.producer_id, retry.producer_epoch) == (E.none, r0.producer_id, 1)
    assert h.init("tx", expected=(r0.producer_id, 5)).error == E.producer_fenced
    assert h.init("tx", expected=(999, 1)).error == E.producer_fenced
    r2 = h.init("tx", expected=(r0.producer_id, 1))
    assert r2.producer_epoch == 2


def test_kip360_a_fresh_init_forgets_the_last_epoch(h):
    r0 = h.init("tx")
    h.init("tx", expected=(r0.producer_id, 0))  # epoch 1, last 0
    h.init("tx")  # another instance: epoch 2, no last epoch
    assert h.init("tx", expected=(r0.producer_id, 0)).error == E.producer_fenced


def test_kip360_with_an_unknown_id_gets_a_new_producer(h):
    r = h.init("tx", expected=(77, 3))
    assert (r.error, r.producer_epoch) == (E.none, 0)


def test_init_with_an_exhausted_epoch_rotates_the_producer_id(h):
    h.seed("tx", TransactionLogValue(50, MAX_EPOCH - 1, 60_000, TxnState.COMPLETE_COMMIT, (), 1, 1))
    r = h.init("tx")
    assert (r.error, r.producer_id, r.producer_epoch) == (E.none, 1001, 0)
    assert h.meta("tx").previous_producer_id == 50
    check_reload(h)


def test_init_retry_after_a_rotation_with_the_old_producer_id(h):
    h.seed("tx", TransactionLogValue(50, MAX_EPOCH - 1, 60_000, TxnState.COMPLETE_COMMIT, (), 1, 1))
    r = h.init("tx", expected=(50, MAX_EPOCH - 1))
    assert (r.producer_id, r.producer_epoch) == (1001, 0)
    retry = h.init("tx", expected=(50, MAX_EPOCH - 1))
    assert (retry.error, retry.producer_id, retry.producer_epoch) == (E.none, 1001, 0)


# -- AddPartitionsToTxn, AddOffsetsToTxn -----------------------------------------------------------
def test_add_partitions_starts_the_transaction(h):
    r = h.init("tx")
    h.clock.now_ms += 10
    res = h.add("tx", r.producer_id, r.producer_epoch, [T0, T1])
    assert res.error == E.none and res.partitions == {T0: E.none, T1: E.none}
    m = h.meta("tx")
    assert (m.state, m.partitions, m.start_ms) == (TxnState.ONGOING, frozenset({T0, T1}), h.clock())
    h.clock.now_ms += 10
    assert h.add("tx", r.producer_id, r.producer_epoch, [T0]).error == E.none
    assert h.last_records == []  # nothing new: nothing written
    h.add("tx", r.producer_id, r.producer_epoch, [("u", 3)])
    assert h.meta("tx").start_ms == h.clock() - 10  # the start stays
    check_reload(h)


def test_add_partitions_errors(h):
    r = h.init("tx")
    pid, epoch = r.producer_id, r.producer_epoch
    assert h.add("nope", pid, epoch, [T0]).partitions == {T0: E.invalid_producer_id_mapping}
    assert h.add("tx", pid + 1, epoch, [T0, T1]).partitions == {T0: E.invalid_producer_id_mapping,
                                                               T1: E.invalid_producer_id_mapping}
    assert h.add("tx", pid, epoch + 1, [T0]).error == E.producer_fenced
    assert h.add("", pid, epoch, [T0]).error == E.invalid_request
    h.add("tx", pid, epoch, [T0])
    h.end("tx", pid, epoch, commit=False)
    assert h.add("tx", pid, epoch, [T1]).partitions == {T1: E.concurrent_transactions}
    assert h.add("tx", pid, epoch, [T1], verify_only=True).error == E.concurrent_transactions


def test_verify_only_answers_per_partition_and_writes_nothing(h):
    pid, epoch = h.begin("tx", [T0])
    before = len(h.log)
    res = h.add("tx", pid, epoch, [T0, T1], verify_only=True)
    assert res.error == E.none and res.partitions == {T0: E.none, T1: E.transaction_abortable}
    assert len(h.log) == before and h.meta("tx").partitions == frozenset({T0})


def test_add_offsets_adds_the_groups_offsets_partition(h):
    r = h.init("tx")
    code = h.run(h.shard.add_offsets("tx", r.producer_id, r.producer_epoch, 17))
    assert code == E.none
    assert h.meta("tx").partitions == frozenset({(OFFSETS_TOPIC, 17)})
    assert h.run(h.shard.add_offsets("tx", r.producer_id, r.producer_epoch + 1, 17)) == E.producer_fenced


# -- EndTxn V1 -----------------------------------------------------------------------------------
def test_commit_v1_prepares_sends_markers_after_commit_then_completes(h):
    pid, epoch = h.begin("tx", [T0, T1])
    r = h.end("tx", pid, epoch, commit=True)
    assert (r.error, r.producer_id, r.producer_epoch) == (E.none, -1, -1)
    [(_, value)] = h.last_records
    assert value.state is TxnState.PREPARE_COMMIT and value.producer_epoch == epoch
    assert value.partitions == (("t", (0, 1)),)
    [markers] = h.markers
    assert markers == TxnMarkers("tx", pid, epoch, True, frozenset({T0, T1}), COORDINATOR_EPOCH, 0)
    check_reload(h)
    assert h.complete(markers) == E.none
    [(_, value)] = h.last_records
    assert value.state is TxnState.COMPLETE_COMMIT and value.partitions == () and value.producer_epoch == epoch
    assert h.state("tx") == "CompleteCommit"
    assert h.complete(markers) == E.invalid_txn_state  # stale: nothing written
    assert h.last_records == []
    check_reload(h)


def test_markers_are_not_sent_when_the_prepare_write_fails(h):
    pid, epoch = h.begin("tx", [T0])
    h.run(h.shard.end_txn("tx", pid, epoch, True), committed=False)
    assert h.markers == []


def test_end_v1_retries_and_wrong_decisions(h):
    pid, epoch = h.begin("tx", [T0])
    h.end("tx", pid, epoch, commit=True)
    assert h.end("tx", pid, epoch, commit=True).error == E.concurrent_transactions
    assert h.end("tx", pid, epoch, commit=False).error == E.invalid_txn_state
    h.complete_all()
    assert h.end("tx", pid, epoch, commit=True).error == E.none  # the retry after it completed
    assert h.last_records == []
    assert h.end("tx", pid, epoch, commit=False).error == E.invalid_txn_state


def test_end_v1_errors(h):
    r = h.init("tx")
    assert h.end("tx", r.producer_id, r.producer_epoch, commit=False).error == E.invalid_txn_state  # Empty
    assert h.end("nope", 1, 0, commit=True).error == E.invalid_producer_id_mapping
    assert h.end("tx", r.producer_id + 1, 0, commit=True).error == E.invalid_producer_id_mapping
    assert h.end("tx", r.producer_id, 5, commit=True).error == E.producer_fenced
    assert h.end("", 1, 0, commit=True).error == E.invalid_request


def test_abort_v1_and_complete_abort_retry(h):
    pid, epoch = h.begin("tx", [T0])
    h.end("tx", pid, epoch, commit=False)
    [markers] = h.markers
    assert not markers.commit and markers.producer_epoch == epoch
    h.complete_all()
    assert h.state("tx") == "CompleteAbort"
    assert h.end("tx", pid, epoch, commit=False).error == E.none
    assert h.end("tx", pid, epoch, commit=True).error == E.invalid_txn_state


def test_dropped_partitions_still_complete_the_transaction(h):
    pid, epoch = h.begin("tx", [T0, ("deleted", 0)])
    h.end("tx", pid, epoch, commit=True)
    code = h.run(h.shard.complete_markers("tx", pid, epoch, dropped=[("deleted", 0)]))
    assert code == E.none and h.state("tx") == "CompleteCommit"


def test_next_transaction_after_complete(h):
    pid, epoch = h.begin("tx", [T0])
    h.end("tx", pid, epoch, commit=True)
    h.complete_all()
    h.clock.now_ms += 100
    assert h.add("tx", pid, epoch, [T1]).error == E.none
    m = h.meta("tx")
    assert (m.state, m.partitions, m.start_ms) == (TxnState.ONGOING, frozenset({T1}), h.clock())


# -- EndTxn V2 (KIP-890) -------------------------------------------------------------------------
def test_commit_v2_bumps_the_epoch_at_every_end(h):
    pid, epoch = h.begin("tx", [T0])
    h.add("tx", pid, epoch, [T1], tv2=True)
    r = h.end("tx", pid, epoch, commit=True, tv2=True)
    assert (r.error, r.producer_id, r.producer_epoch) == (E.none, pid, epoch + 1)
    [markers] = h.markers
    assert (markers.producer_epoch, markers.transaction_version, markers.commit) == (epoch + 1, 2, True)
    # the client retries the end it sent at the old epoch
    assert h.end("tx", pid, epoch, commit=True, tv2=True).error == E.concurrent_transactions
    # while the markers are written every end of the producer is CONCURRENT_TRANSACTIONS (Kafka 4's
    # V2 answers a pending transition before judging the epoch or the result, KAFKA-18464)
    assert h.end("tx", pid, epoch, commit=False, tv2=True).error == E.concurrent_transactions
    check_reload(h)
    h.complete_all()
    m = h.meta("tx")
    assert (m.state, m.producer_epoch, m.client_version) == (TxnState.COMPLETE_COMMIT, epoch + 1, 2)
    retry = h.end("tx", pid, epoch, commit=True, tv2=True)
    assert (retry.error, retry.producer_id, retry.producer_epoch) == (E.none, pid, epoch + 1)
    assert h.end("tx", pid, epoch, commit=False, tv2=True).error == E.invalid_txn_state
    assert h.end("tx", pid, epoch - 1, commit=True, tv2=True).error == E.producer_fenced


def test_abort_v2_of_an_empty_or_completed_transaction_needs_no_markers(h):
    r = h.init("tx")
    pid, epoch = r.producer_id, r.producer_epoch
    res = h.end("tx", pid, epoch, commit=False, tv2=True)
    assert (res.error, res.producer_epoch) == (E.none, epoch + 1)
    states = [v.state for _, v in h.last_records]
    assert states == [TxnState.PREPARE_ABORT, TxnState.COMPLETE_ABORT]  # one batch
    assert h.markers == [] and h.state("tx") == "CompleteAbort"
    # the current epoch aborts again (EB); the old one is a retry (NONE)
    assert h.end("tx", pid, epoch, commit=False, tv2=True).producer_epoch == epoch + 1
    assert h.last_records == []
    again = h.end("tx", pid, epoch + 1, commit=False, tv2=True)
    assert (again.error, again.producer_epoch) == (E.none, epoch + 2)
    check_reload(h)


def test_commit_v2_of_empty_is_invalid_and_stale_epochs_are_fenced(h):
    r = h.init("tx")
    assert h.end("tx", r.producer_id, r.producer_epoch, commit=True, tv2=True).error == E.invalid_txn_state
    h.add("tx", r.producer_id, r.producer_epoch, [T0], tv2=True)
    assert h.end("tx", r.producer_id, r.producer_epoch - 1, commit=True, tv2=True).error == E.producer_fenced
    assert h.end("tx", r.producer_id + 5, r.producer_epoch, commit=True, tv2=True).error \
        == E.invalid_producer_id_mapping


def test_v2_epoch_overflow_moves_to_the_next_producer_id(h):
    h.seed("tx", TransactionLogValue(50, MAX_EPOCH - 1, 60_000, TxnState.ONGOING, (("t", (0,)),), 1, 1,
                                     client_transaction_version=2))
    r = h.end("tx", 50, MAX_EPOCH - 1, commit=True, tv2=True)
    assert (r.error, r.producer_id, r.producer_epoch) == (E.none, 1001, 0)
    [(_, value)] = h.last_records
    assert (value.producer_id, value.producer_epoch, value.next_producer_id) == (50, MAX_EPOCH, 1001)
    [markers] = h.markers
    assert (markers.producer_id, markers.producer_epoch) == (50, MAX_EPOCH)
    check_reload(h)
    h.complete_all()
    m = h.meta("tx")
    assert (m.producer_id, m.producer_epoch, m.previous_producer_id, m.next_producer_id) == (1001, 0, 50, -1)
    # the client retries the end with its old producer id and epoch
    retry = h.end("tx", 50, MAX_EPOCH - 1, commit=True, tv2=True)
    assert (retry.error, retry.producer_id, retry.producer_epoch) == (E.none, 1001, 0)
    check_reload(h)


def test_v2_overflow_without_an_allocated_id_is_retriable(h):
    h.seed("tx", TransactionLogValue(50, MAX_EPOCH - 1, 60_000, TxnState.ONGOING, (("t", (0,)),), 1, 1,
                                     client_transaction_version=2))
    r = h.run(h.shard.end_txn("tx", 50, MAX_EPOCH - 1, True, True))
    assert r.error == E.concurrent_transactions and h.state("tx") == "Ongoing"


# -- timers ----------------------------------------------------------------------------------------
def test_timed_out_transactions_are_aborted_with_the_epoch_bumped(h):
    h.config = TransactionConfig(abort_timed_out_transactions_interval_ms=1000)
    h.reload()
    pid, epoch = h.begin("tx", [T0], timeout=5000)
    h.begin("young", [T1], timeout=60_000)
    h.sleep(1000)
    assert h.state("tx") == "Ongoing"
    h.sleep(5000)
    m = h.meta("tx")
    assert (m.state, m.producer_epoch) == (TxnState.PREPARE_ABORT, epoch + 1)
    assert h.state("young") == "Ongoing"
    assert h.markers == [TxnMarkers("tx", pid, epoch + 1, False, frozenset({T0}), COORDINATOR_EPOCH, 0)]
    assert h.add("tx", pid, epoch, [T1]).error == E.producer_fenced  # the zombie
    h.complete_all()
    assert h.state("tx") == "CompleteAbort"
    assert h.sleep(1000) == []  # nothing more to abort, the timer runs on
    assert h.timer.is_scheduled("transaction-abort")


def test_idle_ids_expire_with_a_tombstone(h):
    h.config = TransactionConfig(transactional_id_expiration_ms=10_000,
                                 remove_expired_transactional_ids_interval_ms=5000)
    h.reload()
    h.init("idle")
    pid, epoch = h.begin("busy", [T0])
    h.sleep(5000)
    assert "idle" in h.shard.transactions
    records = h.sleep(5000)
    assert records == [(TransactionLogKey("idle"), None)]
    assert h.shard.describe_transaction("idle").error == E.transactional_id_not_found
    assert h.state("busy") == "Ongoing"
    check_reload(h)
    assert h.init("idle").producer_id == 1003  # a new producer


# -- loading -------------------------------------------------------------------------------------
def test_a_new_coordinator_sends_the_markers_left_in_prepare(h):
    pid, epoch = h.begin("tx", [T0])
    h.end("tx", pid, epoch, commit=True)
    h.begin("other", [T1])
    h.markers.clear()
    h.reload()
    assert h.markers == [TxnMarkers("tx", pid, epoch, True, frozenset({T0}), COORDINATOR_EPOCH, 0)]
    assert h.shard.pending_markers() == h.markers
    h.complete_all()
    assert h.state("tx") == "CompleteCommit" and h.shard.pending_markers() == []


def test_ongoing_transactions_keep_their_timeout_across_a_load(h):
    h.config = TransactionConfig(abort_timed_out_transactions_interval_ms=1000)
    h.reload()
    pid, epoch = h.begin("tx", [T0], timeout=3000)
    h.sleep(1000)
    h.reload()
    h.sleep(1000)
    assert h.state("tx") == "Ongoing"
    h.sleep(2000)
    assert h.state("tx") == "PrepareAbort"


def test_without_a_collaborator_markers_queue_for_take_markers():
    from gregor.coordinator.runtime.timer import ManualClock, ManualTimer
    from gregor.coordinator.transaction.shard import TransactionCoordinatorShard

    clock = ManualClock()
    shard = TransactionCoordinatorShard(3, TransactionConfig(), clock, ManualTimer(clock), coordinator_epoch=2)
    for k, v in shard.init_producer_id("tx", 1000, new_producer_id=9).records:
        shard.replay(k, v)
    for k, v in shard.add_partitions("tx", 9, 0, [T0]).records:
        shard.replay(k, v)
    for k, v in shard.end_txn("tx", 9, 0, True).records:
        shard.replay(k, v)
    assert shard.take_markers() == []  # not before the Prepare record is committed
    for fn in shard.take_completions():
        fn(None)
    assert shard.take_markers() == [TxnMarkers("tx", 9, 0, True, frozenset({T0}), 2, 0)]
    assert shard.take_markers() == []


# -- DescribeTransactions, ListTransactions ----------------------------------------------------------
def test_describe(h):
    pid, epoch = h.begin("tx", [T1, T0, ("a", 4)], timeout=9000)
    d = h.shard.describe_transaction("tx")
    assert (d.error, d.state, d.producer_id, d.producer_epoch, d.transaction_timeout_ms) == \
        (E.none, "Ongoing", pid, epoch, 9000)
    assert d.transaction_start_time_ms == h.clock() and d.topics == {"a": [4], "t": [0, 1]}
    assert h.shard.describe_transaction("nope").error == E.transactional_id_not_found
    assert h.shard.describe_transaction("").error == E.invalid_request


def test_list_filters(h):
    p1, _ = h.begin("a", [T0])
    h.clock.now_ms += 10_000
    p2, e2 = h.begin("b", [T1])
    h.end("b", p2, e2, commit=True)
    h.init("c")
    listed = h.shard.list_transactions()
    assert [(t.transactional_id, t.state) for t in listed.transactions] == \
        [("a", "Ongoing"), ("b", "PrepareCommit"), ("c", "Empty")]
    assert [t.transactional_id for t in h.shard.list_transactions(states=["Ongoing", "Bogus"]).transactions] == ["a"]
    assert h.shard.list_transactions(states=["Bogus"]).unknown_state_filters == ["Bogus"]
    assert h.shard.list_transactions(states=["Bogus"]).transactions == []
    assert [t.transactional_id for t in h.shard.list_transactions(producer_ids=[p1]).transactions] == ["a"]
    h.clock.now_ms += 1
    # started more than 5 s ago: "a" only ("c" has not started: its start is -1, far in the past,
    # as Kafka compares it too)
    assert [t.transactional_id for t in h.shard.list_transactions(states=["Ongoing", "PrepareCommit"],
                                                                   duration_ms=5000).transactions] == ["a"]
    assert [t.transactional_id for t in h.shard.list_transactions(transactional_id_pattern="[ab]").transactions] \
        == ["a", "b"]


def test_reads_see_the_committed_state():
    h = TxnHarness()
    h.init("tx")
    shard = h.shard
    reads = shard.committed_reads
    # a write the in-sync replicas do not have yet: replayed at offset 100, not committed
    records = shard.add_partitions("tx", 1001, 0, [T0]).records
    reads.pending = 100
    for k, v in records:
        shard.replay(k, v)
    reads.pending = -1
    assert shard.transactions["tx"].state is TxnState.ONGOING
    assert shard.describe_transaction("tx").state == "Empty"
    assert [t.state for t in shard.list_transactions().transactions] == ["Empty"]
    reads.committed(100)
    assert shard.describe_transaction("tx").state == "Ongoing"
