"""Transactions on the partition (log/producer_state.py, log/partition_log.py): producer state,
every refusal, the last stable offset, aborted transactions across segments, recovery,
truncation and followers."""

from __future__ import annotations

import pytest

from gregor.log.producer_state import ProducerInfo
from gregor.log.transaction_index import AbortedTxn, TransactionIndex
from gregor.protocol import record_batch as rb
from gregor.protocol.control_records import build_marker_batch
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.records import build_batch


def txn(pid: int, seq: int, n: int = 1, epoch: int = 0, ts: int = 0) -> bytes:
    return build_batch([(None, b"v%d" % i) for i in range(n)], producer_id=pid, producer_epoch=epoch,
                       base_sequence=seq, attributes=rb.TRANSACTIONAL_BIT, timestamp=ts)


def idem(pid: int, seq: int, epoch: int = 0) -> bytes:
    return build_batch([(None, b"x")], producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def plain() -> bytes:
    return build_batch([(None, b"p")])


def marker(pid: int, commit: bool, epoch: int = 0, coordinator_epoch: int = 0) -> bytes:
    return build_marker_batch(pid, epoch, coordinator_epoch, commit, timestamp=0)


def code(exc: pytest.ExceptionInfo[KafkaError]) -> ErrorCode:
    return exc.value.code


# -- producer state and the last stable offset ----------------------------------------------------

def test_a_transaction_holds_the_last_stable_offset_until_its_marker(make_log):
    plog = make_log()
    plog.append(plain())                         # 0
    assert plog.last_stable_offset == 1
    plog.append(txn(1, 0, n=2))                  # 1-2
    plog.append(plain())                         # 3
    assert plog.ongoing_transactions() == [(1, 1)]
    assert plog.last_stable_offset == 1 and plog.high_watermark == 4
    res = plog.append_control(marker(1, commit=True), 0)  # 4
    assert res.base_offset == 4
    assert plog.ongoing_transactions() == [] and plog.last_stable_offset == 5
    assert plog.aborted_transactions(0, 5) == []


def test_interleaved_producers(make_log):
    plog = make_log()
    plog.append(txn(1, 0))                       # 0: p1 starts
    plog.append(txn(2, 0))                       # 1: p2 starts
    plog.append(txn(1, 1))                       # 2
    assert plog.last_stable_offset == 0
    plog.append_control(marker(2, commit=False), 0)  # 3: p2 aborted; p1 still holds the LSO
    assert plog.last_stable_offset == 0
    assert plog.active.txn_index.entries == [AbortedTxn(2, 1, 3, 0)]  # LSO at completion: p1's start
    plog.append(txn(2, 1))                       # 4: p2's next transaction (its sequence goes on)
    plog.append_control(marker(1, commit=True), 0)   # 5
    assert plog.last_stable_offset == 4
    plog.append_control(marker(2, commit=True), 0)   # 6
    assert plog.last_stable_offset == 7
    assert plog.aborted_transactions(0, 7) == [(2, 1)]
    assert plog.aborted_transactions(4, 7) == []  # the abort marker (3) is below the range


def test_producers_describe_state(make_log, clock):
    plog = make_log()
    plog.append(txn(1, 0, n=3, epoch=2, ts=55))
    plog.append(idem(9, 0))
    plog.append_control(marker(9, commit=True, coordinator_epoch=4), 0)  # a marker with nothing ongoing
    infos = {p.producer_id: p for p in plog.producers()}
    assert infos[1] == ProducerInfo(1, 2, 2, 55, -1, 0)
    assert infos[9] == ProducerInfo(9, 0, 0, 0, 4, -1)


def test_a_transactional_batch_with_an_older_epoch_is_invalid_producer_epoch(make_log):
    plog = make_log()
    plog.append(txn(1, 0, epoch=3))
    with pytest.raises(KafkaError) as e:
        plog.append(txn(1, 1, epoch=2))
    assert code(e) == ErrorCode.invalid_producer_epoch


def test_a_marker_with_an_older_epoch_is_invalid_producer_epoch(make_log):
    plog = make_log()
    plog.append(txn(1, 0, epoch=3))
    with pytest.raises(KafkaError) as e:
        plog.append_control(marker(1, commit=True, epoch=2), 0)
    assert code(e) == ErrorCode.invalid_producer_epoch
    assert plog.log_end_offset == 1 and plog.ongoing_transactions() == [(1, 0)]
    # KIP-890 (transactions v2): the coordinator ends the transaction at the bumped epoch
    plog.append_control(marker(1, commit=False, epoch=4), 0)
    assert plog.ongoing_transactions() == [] and plog.producers()[0].producer_epoch == 4


def test_a_marker_from_an_older_coordinator_is_fenced(make_log):
    plog = make_log()
    plog.append(txn(1, 0))
    plog.append_control(marker(1, commit=True, coordinator_epoch=5), 0)
    plog.append(txn(1, 1))
    with pytest.raises(KafkaError) as e:
        plog.append_control(marker(1, commit=True, coordinator_epoch=4), 0)
    assert code(e) == ErrorCode.transaction_coordinator_fenced
    plog.append_control(marker(1, commit=True, coordinator_epoch=5), 0)


def test_a_non_transactional_batch_during_a_transaction_is_invalid_txn_state(make_log):
    plog = make_log()
    plog.append(txn(1, 0))
    with pytest.raises(KafkaError) as e:
        plog.append(idem(1, 1))
    assert code(e) == ErrorCode.invalid_txn_state
    with pytest.raises(KafkaError) as e:
        plog.append(idem(1, 0, epoch=1))  # even at a new epoch, as Kafka
    assert code(e) == ErrorCode.invalid_txn_state
    plog.append_control(marker(1, commit=False), 0)
    plog.append(idem(1, 1))  # after the marker: fine


def test_sequences_are_checked_and_duplicates_found_for_transactional_batches(make_log):
    plog = make_log()
    first = plog.append(txn(1, 0, n=2))
    assert plog.append(txn(1, 0, n=2)).duplicate and first.base_offset == 0
    with pytest.raises(KafkaError) as e:
        plog.append(txn(1, 5))
    assert code(e) == ErrorCode.out_of_order_sequence_number
    plog.append(txn(1, 2))


def test_client_control_batches_and_bad_markers_are_refused(make_log):
    plog = make_log()
    with pytest.raises(KafkaError) as e:
        plog.append(marker(1, commit=True))
    assert code(e) == ErrorCode.invalid_record
    with pytest.raises(KafkaError) as e:
        plog.append_control(plain(), 0)
    assert code(e) == ErrorCode.invalid_record
    with pytest.raises(KafkaError) as e:  # transactional without a producer id
        plog.append(build_batch([(None, b"v")], attributes=rb.TRANSACTIONAL_BIT))
    assert code(e) == ErrorCode.invalid_record


def test_a_replicated_log_keeps_completed_transactions_unstable_until_the_high_watermark(make_log):
    plog = make_log()
    plog.replicated = True
    plog.append(txn(1, 0))                       # 0
    plog.append(plain())                         # 1
    plog.append_control(marker(1, commit=True), 0)  # 2
    assert plog.ongoing_transactions() == []
    plog.update_high_watermark(2)
    assert plog.last_stable_offset == 0          # the marker is not replicated yet
    plog.update_high_watermark(3)
    assert plog.last_stable_offset == 3
    plog.append(plain())
    assert plog.last_stable_offset == 3          # bounded by the high watermark


def test_the_last_stable_offset_is_at_least_the_log_start(make_log):
    plog = make_log(**{"segment.bytes": 200})
    plog.append(txn(1, 0))
    for _ in range(5):
        plog.append(plain())
    plog.advance_log_start_offset(3)
    assert plog.last_stable_offset == 3


# -- the transaction index on disk ---------------------------------------------------------------

def _aborts(plog, pid_base: int, count: int) -> None:
    for i in range(count):
        pid = pid_base + i
        plog.append(txn(pid, 0, n=3))
        plog.append(plain())
        plog.append_control(marker(pid, commit=i % 2 == 1), 0)


def test_aborted_transactions_across_segments(make_log):
    plog = make_log(**{"segment.bytes": 300})
    _aborts(plog, 100, 8)  # aborts: pids 100, 102, 104, 106
    assert len(plog.segments) > 2
    files = sorted(p.name for p in plog.dir.glob("*.txnindex"))
    assert files and all(len(n) == len("00000000000000000000.txnindex") for n in files)
    everything = plog.aborted_transactions(0, plog.log_end_offset)
    assert everything == [(100, 0), (102, 10), (104, 20), (106, 30)]
    assert plog.aborted_transactions(11, 25) == [(102, 10), (104, 20)]
    assert plog.aborted_transactions(35, 40) == []
    # a transaction whose marker is in a later segment than its data is found from its data
    plog2_first = plog.segments[1].base_offset
    assert all(t[1] < plog.log_end_offset for t in plog.aborted_transactions(plog2_first, plog.log_end_offset))


def test_clean_restart_keeps_ongoing_transactions_and_the_index(tmp_path, make_log):
    plog = make_log(**{"segment.bytes": 300})
    _aborts(plog, 100, 4)
    plog.append(txn(7, 0))
    lso, leo = plog.last_stable_offset, plog.log_end_offset
    plog.close()
    again = make_log(clean=True, recovery_point=leo, **{"segment.bytes": 300})
    assert again.ongoing_transactions() == [(7, leo - 1)] and again.last_stable_offset == lso == leo - 1
    assert again.aborted_transactions(0, leo) == [(100, 0), (102, 10)]
    again.append_control(marker(7, commit=False), 0)
    assert again.last_stable_offset == again.log_end_offset


def test_crash_recovery_rebuilds_ongoing_transactions_and_the_index(make_log):
    plog = make_log(**{"segment.bytes": 300})
    _aborts(plog, 100, 6)
    plog.append(txn(7, 0))
    leo = plog.log_end_offset
    plog.flush()
    indexes = {p.name: p.read_bytes() for p in plog.dir.glob("*.txnindex")}
    for p in plog.dir.glob("*.txnindex"):
        p.unlink()  # lost with the crash
    plog.close_files()  # no clean shutdown: no snapshot
    again = make_log(clean=False, recovery_point=0, **{"segment.bytes": 300})
    assert again.ongoing_transactions() == [(7, leo - 1)] and again.last_stable_offset == leo - 1
    assert again.aborted_transactions(0, leo) == [(100, 0), (102, 10), (104, 20)]
    assert {p.name: p.read_bytes() for p in again.dir.glob("*.txnindex")} == indexes


def test_crash_recovery_of_a_stale_index_entry(make_log):
    plog = make_log()
    plog.append(txn(1, 0))
    plog.append_control(marker(1, commit=True), 0)
    plog.flush()
    plog.close_files()
    bogus = TransactionIndex(plog.dir / "00000000000000000000.txnindex")
    bogus.append(AbortedTxn(1, 0, 1, 2))  # an abort the log does not hold
    again = make_log(clean=False)
    assert again.aborted_transactions(0, 2) == []
    assert not (again.dir / "00000000000000000000.txnindex").exists()


def test_truncation_rolls_back_transactions_and_the_index(make_log):
    plog = make_log(**{"segment.bytes": 300})
    _aborts(plog, 100, 4)                        # offsets 0-19, aborts 100@0-4, 102@10-14
    plog.append(txn(7, 0))                       # 20
    plog.append_control(marker(7, commit=False), 0)  # 21
    assert plog.aborted_transactions(0, 22)[-1] == (7, 20)
    plog.truncate_to(21)                         # the marker goes: 7's transaction is ongoing again
    assert plog.ongoing_transactions() == [(7, 20)] and plog.last_stable_offset == 20
    assert plog.aborted_transactions(0, 21) == [(100, 0), (102, 10)]
    plog.truncate_to(13)                         # its marker (14) goes: 102 is ongoing again
    assert plog.ongoing_transactions() == [(102, 10)]
    assert plog.aborted_transactions(0, 13) == [(100, 0)]
    plog.truncate_fully_and_start_at(50)
    assert plog.ongoing_transactions() == [] and plog.aborted_transactions(50, 60) == []
    assert list(plog.dir.glob("*.txnindex")) == []


def test_retention_deletes_the_index_with_its_segment(make_log, clock):
    plog = make_log(**{"segment.bytes": 300, "retention.bytes": 1})
    _aborts(plog, 100, 6)
    before = len(list(plog.dir.glob("*.txnindex")))
    assert before
    plog.delete_old_segments()
    left = {int(p.name[:20]) for p in plog.dir.glob("*.txnindex")}
    assert left <= {s.base_offset for s in plog.segments}


def test_follower_keeps_the_same_transaction_state(make_log, tmp_path):
    from gregor.config import BrokerConfig
    from gregor.log.partition_log import PartitionLog

    leader = make_log(**{"segment.bytes": 300})
    _aborts(leader, 100, 4)
    leader.append(txn(7, 0))
    cfg = BrokerConfig.from_mapping({}).topic_defaults()
    cfg["segment.bytes"] = 300
    follower = PartitionLog(tmp_path / "f-0", "f", 0, cfg)
    follower.open(clean_shutdown=False, recovery_point=0)
    follower.replicated = True
    offset = 0
    while offset < leader.log_end_offset:
        data = leader.read(offset, 250).records
        offset = follower.append_as_follower(data)
    follower.update_high_watermark(follower.log_end_offset)
    assert follower.ongoing_transactions() == leader.ongoing_transactions() == [(7, 20)]
    assert follower.last_stable_offset == 20
    assert follower.aborted_transactions(0, 21) == leader.aborted_transactions(0, 21) == [(100, 0), (102, 10)]
    assert sorted(follower.producers(), key=lambda p: p.producer_id) == \
        sorted(leader.producers(), key=lambda p: p.producer_id)
    # the follower, leader now: a marker is checked against the copied state
    with pytest.raises(KafkaError):
        follower.append_control(marker(7, commit=True, epoch=-1), 0)
    follower.append_control(marker(7, commit=True), 0)
    follower.update_high_watermark(follower.log_end_offset)
    assert follower.last_stable_offset == follower.log_end_offset


def test_read_committed_read_stops_at_the_last_stable_offset(make_log):
    plog = make_log()
    plog.append(plain())
    plog.append(txn(1, 0))
    plog.append(plain())
    res = plog.read(0, 1 << 20, max_offset=plog.last_stable_offset)
    assert res.next_offset == 1
