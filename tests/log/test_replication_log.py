"""Replication primitives of the partition log (Kafka 2.8 kafka.log.Log, KIP-101/KIP-279): the
high watermark kept apart from the log end offset, reads bounded by it, leader epochs stamped and
cached, the follower's byte-for-byte append, truncation (to an offset, or fully), their
persistence across restarts. The log manager's side is in test_replication_manager.py."""

import os
import struct

import pytest

from gregor.config import BrokerConfig
from gregor.log.leader_epoch_cache import LEADER_EPOCH_CHECKPOINT, read_epoch_checkpoint
from gregor.log.partition_log import PartitionLog, UnexpectedAppendOffset, replica_batches
from gregor.protocol import record_batch as rb
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.records import build_batch, iter_batches
from tests.support.partition_logs import read_all

TS = 1_700_000_000_000


def batch(n=1, size=10, ts=TS, key=b"k", **kw):
    return build_batch([(key, b"x" * size)] * n, timestamp=ts, **kw)


@pytest.fixture
def new_log(tmp_path, clock):
    """A log in its own directory: ``new_log("leader")``, ``new_log("follower", **config)``."""
    def make(name="t-0", clean=False, recovery_point=0, **overrides):
        cfg = BrokerConfig.from_mapping({}).topic_defaults()
        cfg.update(overrides)
        plog = PartitionLog(tmp_path / name, "t", 0, cfg, clock)
        plog.open(clean_shutdown=clean, recovery_point=recovery_point)
        return plog

    return make


def stored_epochs(plog):
    """(base offset, partition leader epoch) of every batch as stored in the segment files."""
    out = []
    for seg in plog.segments:
        data = seg.path.read_bytes()
        for h in iter_batches(data):
            out.append((h.base_offset, struct.unpack_from(">i", data, h.position + rb.PARTITION_LEADER_EPOCH)[0]))
    return out


def log_bytes(plog, start=None, end=None):
    """The log's batches from ``start`` to ``end`` (exclusive, whole batches) as stored."""
    out = b""
    for seg in plog.segments:
        data = seg.path.read_bytes()
        for h in iter_batches(data):
            if (start is None or h.base_offset >= start) and (end is None or h.next_offset <= end):
                out += data[h.position : h.position + h.size]
    return out


def replicate(leader, follower, max_bytes=1 << 20):
    """Fetch from the leader at the follower's log end (as a follower: no bound) and append."""
    while follower.log_end_offset < leader.log_end_offset:
        res = leader.read(follower.log_end_offset, max_bytes)
        assert res.records
        follower.append_as_follower(res.records)


def close_segments(plog):
    for s in plog.segments:
        s.close()


# -- high watermark ------------------------------------------------------------------------------
def test_single_node_high_watermark_is_the_log_end_offset(new_log):
    plog = new_log()
    assert not plog.replicated
    plog.append(batch(3))
    assert plog.high_watermark == plog.log_end_offset == 3
    assert plog.read(0, 1 << 20).high_watermark == 3


def test_replicated_high_watermark_is_kept_apart_and_clamped(new_log):
    plog = new_log()
    for _ in range(5):
        plog.append(batch(2))
    plog.replicated = True
    assert plog.high_watermark == 0  # until the replica manager moves it
    assert plog.update_high_watermark(4)
    assert not plog.update_high_watermark(4)
    assert plog.high_watermark == 4 and plog.log_end_offset == 10
    assert plog.update_high_watermark(99) and plog.high_watermark == 10  # at most the log end
    assert plog.update_high_watermark(2) and plog.high_watermark == 2  # may go down (a follower)
    plog.append(batch())
    assert plog.high_watermark == 2  # appends do not move it
    plog.set_high_watermark_from_checkpoint(500)
    assert plog.high_watermark == 11


def test_high_watermark_is_at_least_the_log_start_offset(new_log):
    plog = new_log(**{"segment.bytes": 200})
    for _ in range(10):
        plog.append(batch(1, size=100))
    plog.replicated = True
    plog.update_high_watermark(10)
    plog.advance_log_start_offset(4)
    assert plog.update_high_watermark(1) and plog.high_watermark == 4  # clamped up to the log start


def test_delete_records_is_bounded_by_the_high_watermark(new_log):
    plog = new_log()
    for _ in range(10):
        plog.append(batch())
    plog.replicated = True
    plog.update_high_watermark(6)
    with pytest.raises(KafkaError) as e:
        plog.advance_log_start_offset(7)
    assert e.value.code == ErrorCode.offset_out_of_range
    assert plog.advance_log_start_offset(6) == 6


def test_retention_keeps_segments_not_below_the_high_watermark(new_log, clock):
    plog = new_log(**{"segment.bytes": 300, "retention.ms": 1000})
    for _ in range(12):
        plog.append(batch(1, size=100))
    assert len(plog.segments) > 3
    plog.replicated = True
    plog.update_high_watermark(plog.segments[2].base_offset)
    clock.now += 10 ** 9
    assert plog.delete_old_segments() == 2  # the first two end at or below the high watermark
    assert plog.log_start_offset == plog.high_watermark
    plog.update_high_watermark(plog.log_end_offset)
    assert plog.delete_old_segments() > 0 and plog.log_start_offset == plog.log_end_offset


# -- reads bounded by an offset --------------------------------------------------------------------
def test_read_bounded_by_the_high_watermark(new_log):
    plog = new_log(**{"index.interval.bytes": 100})
    for _ in range(10):
        plog.append(batch(3))  # batches 0-2, 3-5, ... 27-29
    plog.replicated = True
    plog.update_high_watermark(12)
    res = plog.read(0, 1 << 20, max_offset=plog.high_watermark)
    assert [h.base_offset for h in iter_batches(res.records)] == [0, 3, 6, 9]
    assert res.next_offset == 12 and res.high_watermark == 12
    # a batch straddling the bound is not served
    res = plog.read(0, 1 << 20, max_offset=11)
    assert [h.base_offset for h in iter_batches(res.records)] == [0, 3, 6]
    assert plog.read(9, 1 << 20, max_offset=11).records == b""
    # between the high watermark and the log end: valid, empty (not OFFSET_OUT_OF_RANGE)
    for offset in (12, 20, 29, 30):
        res = plog.read(offset, 1 << 20, max_offset=12)
        assert res.records == b"" and res.high_watermark == 12 and res.region is None
    with pytest.raises(KafkaError) as e:
        plog.read(31, 1 << 20, max_offset=12)
    assert e.value.code == ErrorCode.offset_out_of_range
    # followers read to the log end
    res = plog.read(12, 1 << 20)
    assert [h.base_offset for h in iter_batches(res.records)] == [12, 15, 18, 21, 24, 27]
    assert res.high_watermark == 12


def test_bounded_read_keeps_the_byte_limit_and_kip_74(new_log):
    plog = new_log()
    for _ in range(10):
        plog.append(batch(1, size=1000))
    one = len(batch(1, size=1000))
    plog.replicated = True
    plog.update_high_watermark(5)
    assert len(plog.read(0, 10, max_offset=5).records) == one  # the first batch whole
    assert plog.read(0, 10, min_one_batch=False, max_offset=5).records == b""
    assert len(plog.read(0, 3 * one, max_offset=5).records) == 3 * one
    assert len(plog.read(0, 100 * one, max_offset=5).records) == 5 * one
    assert plog.read(5, 10, max_offset=5).records == b""


def test_bounded_read_across_segments_and_index_entries(new_log):
    plog = new_log(**{"segment.bytes": 1000, "index.interval.bytes": 150})
    for _ in range(60):
        plog.append(batch(2, size=30))
    assert len(plog.segments) > 4
    for bound in range(0, 121, 2):
        offset = 0
        got = []
        while True:
            res = plog.read(offset, 400, max_offset=bound)
            if not res.records:
                break
            hs = list(iter_batches(res.records))
            got += [h.base_offset for h in hs]
            offset = hs[-1].next_offset
        assert got == list(range(0, bound, 2)), bound


def test_region_reads_respect_the_bound(new_log):
    plog = new_log(**{"index.interval.bytes": 100})
    for _ in range(20):
        plog.append(batch(1, size=200))
    one = len(batch(1, size=200))
    plog.replicated = True
    plog.update_high_watermark(7)
    res = plog.read(2, 1 << 20, region_above=1, max_offset=plog.high_watermark)
    assert res.region is not None and res.records == b""
    try:
        assert res.region.length == 5 * one and res.next_offset == 7 and res.high_watermark == 7
        data = res.region.read(0, res.region.length)
        assert [h.base_offset for h in iter_batches(data)] == [2, 3, 4, 5, 6]
    finally:
        res.region.close()
    assert plog.read(7, 1 << 20, region_above=1, max_offset=7).region is None


def test_single_node_reads_are_unchanged(new_log):
    plog = new_log()
    for _ in range(5):
        plog.append(batch(2))
    res = plog.read(0, 1 << 20)
    assert res.high_watermark == 10 and res.next_offset == 10
    assert plog.read(0, 1 << 20, max_offset=None).records == res.records


# -- leader epochs on append ----------------------------------------------------------------------
def test_appends_stamp_the_leader_epoch(new_log):
    plog = new_log()
    plog.append(batch(2))
    plog.append(batch(2), leader_epoch=3)
    plog.append_batch_unchecked(batch(1), leader_epoch=3)
    plog.append(batch(1), leader_epoch=5)
    plog.append_batch_unchecked(batch(1), leader_epoch=7)
    assert stored_epochs(plog) == [(0, 0), (2, 3), (4, 3), (5, 5), (6, 7)]
    assert plog.epochs.entries == [(0, 0), (3, 2), (5, 5), (7, 6)]
    # what a reader gets carries them too
    data = plog.read(0, 1 << 20).records
    assert [struct.unpack_from(">i", data, h.position + 12)[0] for h in iter_batches(data)] == [0, 3, 3, 5, 7]


def test_log_append_time_batches_carry_the_epoch(new_log, clock):
    plog = new_log(**{"message.timestamp.type": "LogAppendTime"})
    plog.append(batch(2), leader_epoch=4)
    assert stored_epochs(plog) == [(0, 4)]
    rb.validate_batches(plog.read(0, 1 << 20).records, 1 << 20)  # the CRC still holds


def test_single_node_epoch_entry_is_written_at_flush_not_per_append(new_log):
    plog = new_log()
    path = plog.dir / LEADER_EPOCH_CHECKPOINT
    plog.append(batch())
    plog.append(batch())
    assert plog.epochs.entries == [(0, 0)]
    assert not path.exists()  # no file write on the produce path
    plog.flush()
    assert read_epoch_checkpoint(path) == [(0, 0)]
    mtime = path.stat().st_mtime_ns
    plog.append(batch())
    plog.flush()
    assert path.stat().st_mtime_ns == mtime  # unchanged epochs: not rewritten


def test_a_failed_epoch_write_holds_the_recovery_point(new_log, monkeypatch):
    plog = new_log()
    plog.append(batch(), leader_epoch=1)
    from gregor.log import leader_epoch_cache

    def full_disk(path, entries):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(leader_epoch_cache, "write_epoch_checkpoint", full_disk)
    plog.flush()
    assert plog.recovery_point == 0 and plog.epochs.dirty  # the entry is not on disk yet
    monkeypatch.undo()
    plog.flush()
    assert plog.recovery_point == 1 and read_epoch_checkpoint(plog.dir / LEADER_EPOCH_CHECKPOINT) == [(1, 0)]


# -- follower append ------------------------------------------------------------------------------
def test_follower_copies_the_leaders_bytes(new_log):
    leader = new_log("leader", **{"segment.bytes": 800})
    follower = new_log("follower", **{"segment.bytes": 800})
    leader.append(batch(2), leader_epoch=1)
    leader.append(batch(3, producer_id=9, producer_epoch=0, base_sequence=0), leader_epoch=1)
    leader.append(batch(1), leader_epoch=4)
    for i in range(20):
        leader.append(batch(2, size=40), leader_epoch=4 if i < 10 else 6)
    replicate(leader, follower, max_bytes=300)
    assert follower.log_end_offset == leader.log_end_offset
    assert log_bytes(follower) == log_bytes(leader)
    assert stored_epochs(follower) == stored_epochs(leader)
    assert follower.epochs.entries == leader.epochs.entries == [(1, 0), (4, 5), (6, 26)]
    assert len(follower.segments) > 1
    assert follower.producer_state.producers[9].last_seq == 2
    # a follower that becomes leader detects the producer's duplicates
    assert follower.append(batch(3, producer_id=9, producer_epoch=0, base_sequence=0), leader_epoch=7).duplicate
    assert read_all(follower) == read_all(leader)


def test_follower_accepts_control_and_transactional_batches(new_log):
    follower = new_log()
    txn = bytearray(build_batch([(b"k", b"v")], base_offset=0, timestamp=TS, producer_id=4, producer_epoch=0,
                                base_sequence=0, attributes=rb.TRANSACTIONAL_BIT))
    marker = bytearray(build_batch([(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")], base_offset=1,
                                   timestamp=TS, producer_id=4, producer_epoch=0,
                                   attributes=rb.TRANSACTIONAL_BIT | rb.CONTROL_BIT))
    for b in (txn, marker):
        rb.set_partition_leader_epoch(b, 0, 2)
    assert follower.append_as_follower(bytes(txn + marker)) == 2
    assert stored_epochs(follower) == [(0, 2), (1, 2)]
    assert follower.epochs.entries == [(2, 0)]


def test_follower_ignores_a_trailing_partial_batch(new_log):
    leader, follower = new_log("leader"), new_log("follower")
    for _ in range(3):
        leader.append(batch(2))
    data = leader.read(0, 1 << 20).records
    one = len(batch(2))
    assert follower.append_as_follower(data[: 2 * one + 30]) == 4
    assert follower.append_as_follower(data[2 * one : 2 * one + 5]) == 4  # not even a length
    assert follower.append_as_follower(b"") == 4
    assert follower.append_as_follower(data[2 * one :]) == 6
    assert log_bytes(follower) == log_bytes(leader)


def test_follower_append_below_the_log_end_is_refused(new_log):
    leader, follower = new_log("leader"), new_log("follower")
    for _ in range(3):
        leader.append(batch(2))
    replicate(leader, follower)
    with pytest.raises(UnexpectedAppendOffset) as e:
        follower.append_as_follower(leader.read(2, 1 << 20).records)
    assert e.value.code == ErrorCode.offset_out_of_range
    assert (e.value.first_offset, e.value.last_offset) == (2, 3)
    assert follower.log_end_offset == 6 and log_bytes(follower) == log_bytes(leader)


def test_follower_accepts_an_offset_gap_as_compaction_leaves(new_log):
    # Kafka's appendAsFollower refuses only offsets below the log end: a leader whose cleaner
    # removed whole batches answers a fetch at offset N with the next batch it still has
    follower = new_log()
    follower.append_as_follower(build_batch([(b"a", b"1")], base_offset=0, timestamp=TS))
    assert follower.append_as_follower(build_batch([(b"b", b"2")], base_offset=5, timestamp=TS)) == 6
    assert [r.offset for r in read_all(follower)] == [0, 5]
    assert next(iter_batches(follower.read(2, 1 << 20).records)).base_offset == 5


def test_follower_refuses_offsets_going_back_and_corrupt_batches(new_log):
    follower = new_log()
    a = build_batch([(b"a", b"1")] * 3, base_offset=0, timestamp=TS)
    b = build_batch([(b"b", b"2")], base_offset=1, timestamp=TS)
    with pytest.raises(KafkaError) as e:
        follower.append_as_follower(a + b)
    assert e.value.code == ErrorCode.corrupt_message
    bad = bytearray(a)
    bad[-1] ^= 1
    with pytest.raises(KafkaError) as e:
        follower.append_as_follower(bytes(bad))
    assert e.value.code == ErrorCode.corrupt_message
    short = bytearray(a)
    struct.pack_into(">i", short, rb.LENGTH, 10)
    with pytest.raises(KafkaError):
        follower.append_as_follower(bytes(short))
    assert follower.log_end_offset == 0 and follower.size_bytes == 0


def test_replica_batches_accepts_compacted_batches(new_log):
    # a batch rewritten by compaction keeps its offsets: fewer records than its offset span
    from gregor.protocol.records import Record

    compacted = build_batch([Record(10, TS, b"a", b"1"), Record(14, TS, b"b", b"2")], timestamp=TS)
    headers, epochs = replica_batches(compacted)
    assert len(headers) == 1 and headers[0].records_count == 2 and headers[0].last_offset_delta == 4
    with pytest.raises(rb.InvalidBatch):
        rb.validate_batches(compacted, 1 << 20)  # what produce would say
    follower = new_log()
    assert follower.append_as_follower(compacted) == 15


def test_follower_rolls_segments_at_the_batch_offsets(new_log, clock):
    leader = new_log("leader")
    follower = new_log("follower", **{"segment.bytes": 500, "index.interval.bytes": 100})
    for _ in range(30):
        leader.append(batch(2, size=50))
    replicate(leader, follower)
    assert len(follower.segments) > 5
    for seg in follower.segments[1:]:
        first = next(iter_batches(seg.path.read_bytes()))
        assert first.base_offset == seg.base_offset
    for off in range(60):
        h = next(iter_batches(follower.read(off, 100).records))
        assert h.base_offset <= off <= h.last_offset


# -- truncation -----------------------------------------------------------------------------------
def many_batches(plog, n=40, epoch_every=10):
    for i in range(n):
        plog.append(batch(3, size=60, ts=TS + i), leader_epoch=i // epoch_every)


def check_offsets(plog):
    for off in range(plog.log_start_offset, plog.log_end_offset):
        h = next(iter_batches(plog.read(off, 10).records))
        assert h.base_offset <= off <= h.last_offset


def test_truncate_to_across_segments(new_log, clock):
    plog = new_log(**{"segment.bytes": 1000, "index.interval.bytes": 200})
    many_batches(plog)  # 120 offsets, epochs 0..3 from 0, 30, 60, 90
    assert len(plog.segments) > 4
    reference = log_bytes(plog, end=48)
    target = 48  # inside a segment, after an index entry
    seg_of_target = next(s for s in reversed(plog.segments) if s.base_offset <= target)
    assert plog.truncate_to(target)
    assert plog.log_end_offset == target and plog.active is seg_of_target
    assert [p.name for p in sorted(plog.dir.glob("*.log"))] == [s.path.name for s in plog.segments]
    assert log_bytes(plog) == reference
    assert plog.epochs.entries == [(0, 0), (1, 30)]
    assert read_epoch_checkpoint(plog.dir / LEADER_EPOCH_CHECKPOINT) == [(0, 0), (1, 30)]
    check_offsets(plog)
    # the indexes of the cut segment lead nowhere past the end
    act = plog.active
    assert all(act.base_offset + r < target for r in act.index.rel_offsets)
    assert all(p < act.size for p in act.index.positions)
    assert len(act.index) > 0 and act.base_offset < target
    assert act.max_timestamp == TS + 15 and plog.offset_for_timestamp(TS + 15) == (45, TS + 15)
    assert plog.offset_for_timestamp(TS + 16) is None
    # appends go on from there and are found again
    for i in range(20):
        plog.append(batch(3, size=60, ts=TS + 100 + i), leader_epoch=9)
    assert plog.log_end_offset == 108
    assert plog.epochs.entries == [(0, 0), (1, 30), (9, 48)]
    check_offsets(plog)
    assert plog.offset_for_timestamp(TS + 100) == (48, TS + 100)
    assert [r.offset for r in read_all(plog)] == list(range(108))


def test_truncate_to_inside_a_batch_drops_it_whole(new_log):
    plog = new_log()
    for _ in range(4):
        plog.append(batch(5))
    assert plog.truncate_to(12)
    assert plog.log_end_offset == 10
    assert [r.offset for r in read_all(plog)] == list(range(10))


def test_truncate_to_at_or_past_the_end_changes_nothing(new_log):
    plog = new_log()
    plog.append(batch(5), leader_epoch=1)
    plog.epochs.assign(2, 5)  # a leader epoch that wrote nothing
    assert not plog.truncate_to(5)
    assert plog.epochs.entries == [(1, 0)]  # entries at the log end go, as Kafka's truncateTo
    assert not plog.truncate_to(50)
    assert plog.log_end_offset == 5
    with pytest.raises(ValueError):
        plog.truncate_to(-1)


def test_truncate_clamps_high_watermark_and_recovery_point(new_log):
    plog = new_log()
    for _ in range(10):
        plog.append(batch(2))
    plog.flush()
    plog.replicated = True
    plog.update_high_watermark(20)
    plog.truncate_to(8)
    assert plog.high_watermark == 8 and plog.recovery_point == 8


def test_truncate_to_a_segment_base_and_to_zero(new_log):
    plog = new_log(**{"segment.bytes": 500})
    many_batches(plog, n=20)
    base = plog.segments[2].base_offset
    plog.truncate_to(base)
    assert plog.log_end_offset == base and plog.active.size == 0 and len(plog.segments) == 3
    plog.append(batch(3), leader_epoch=5)
    assert plog.segments[-1].base_offset == base and read_all(plog)[-1].offset == base + 2
    plog.truncate_to(0)
    assert plog.log_end_offset == 0 and len(plog.segments) == 1 and plog.epochs.entries == []
    assert plog.append(batch()).base_offset == 0


def test_truncation_rebuilds_producer_state(new_log):
    plog = new_log()
    plog.append(batch(2, producer_id=7, producer_epoch=0, base_sequence=0))
    plog.append(batch(2))
    plog.append(batch(2, producer_id=7, producer_epoch=0, base_sequence=2))
    plog.truncate_to(4)  # removes sequences 2-3
    assert plog.producer_state.producers[7].last_seq == 1
    res = plog.append(batch(2, producer_id=7, producer_epoch=0, base_sequence=2))
    assert not res.duplicate and res.base_offset == 4
    with pytest.raises(KafkaError) as e:
        plog.append(batch(1, producer_id=7, producer_epoch=0, base_sequence=9))
    assert e.value.code == ErrorCode.out_of_order_sequence_number


def test_truncate_fully_and_start_at(new_log, clock):
    plog = new_log(**{"segment.bytes": 500})
    many_batches(plog, n=20)
    plog.append(batch(1, producer_id=3, producer_epoch=0, base_sequence=0))
    plog.replicated = True
    plog.update_high_watermark(30)
    plog.truncate_fully_and_start_at(1000)
    assert plog.log_start_offset == plog.log_end_offset == plog.high_watermark == plog.recovery_point == 1000
    assert [s.base_offset for s in plog.segments] == [1000]
    assert [p.name for p in plog.dir.glob("*.log")] == ["00000000000000001000.log"]
    assert plog.epochs.entries == [] and read_epoch_checkpoint(plog.dir / LEADER_EPOCH_CHECKPOINT) == []
    assert plog.producer_state.producers == {}
    with pytest.raises(KafkaError):
        plog.read(999, 100)
    assert plog.read(1000, 100).records == b""
    follower_batch = build_batch([(b"k", b"v")] * 2, base_offset=1000, timestamp=TS)
    assert plog.append_as_follower(follower_batch) == 1002
    assert plog.append(batch(), leader_epoch=2).base_offset == 1002
    assert [r.offset for r in read_all(plog)] == [1000, 1001, 1002]
    # starting over at an offset a deleted segment had as its base
    plog.truncate_fully_and_start_at(1000)
    assert plog.log_end_offset == 1000 and plog.active.size == 0 and os.path.getsize(plog.active.path) == 0


def test_truncate_to_below_the_first_segment_starts_the_log_there(new_log):
    plog = new_log()
    plog.truncate_fully_and_start_at(50)
    plog.append(batch(5))
    assert plog.truncate_to(20)
    assert plog.log_start_offset == plog.log_end_offset == 20


@pytest.mark.parametrize("clean", [True, False])
def test_restart_after_truncation(new_log, clean):
    plog = new_log(**{"segment.bytes": 1000, "index.interval.bytes": 200})
    many_batches(plog)
    plog.flush()
    plog.truncate_to(50)  # cuts a batch: ends at 48
    for i in range(5):
        plog.append(batch(3, size=60, ts=TS + 200 + i), leader_epoch=7)
    before = read_all(plog)
    entries = plog.epochs.entries
    assert entries == [(0, 0), (1, 30), (7, 48)]
    if clean:
        plog.close()
    else:
        close_segments(plog)
    again = new_log(clean=clean, recovery_point=plog.recovery_point,
                    **{"segment.bytes": 1000, "index.interval.bytes": 200})
    assert again.log_end_offset == 63
    assert again.epochs.entries == entries
    assert read_all(again) == before
    check_offsets(again)


# -- epoch cache persistence and recovery ----------------------------------------------------------
def test_epochs_survive_a_clean_restart(new_log):
    plog = new_log()
    plog.append(batch(2), leader_epoch=1)
    plog.append(batch(2), leader_epoch=4)
    plog.close()
    assert read_epoch_checkpoint(plog.dir / LEADER_EPOCH_CHECKPOINT) == [(1, 0), (4, 2)]
    again = new_log(clean=True, recovery_point=4)
    assert again.epochs.entries == [(1, 0), (4, 2)]


@pytest.mark.parametrize("damage", ["missing", "corrupt"])
def test_a_lost_epoch_checkpoint_is_rebuilt_from_the_batches(new_log, damage):
    plog = new_log(**{"segment.bytes": 500})
    many_batches(plog, n=20, epoch_every=4)
    plog.close()
    path = plog.dir / LEADER_EPOCH_CHECKPOINT
    if damage == "missing":
        path.unlink()
    else:
        path.write_text("0\n3\n1 1\n")
    again = new_log(clean=True, recovery_point=60, **{"segment.bytes": 500})
    expected = [(0, 0), (1, 12), (2, 24), (3, 36), (4, 48)]
    assert again.epochs.entries == expected
    again.close()
    assert read_epoch_checkpoint(path) == expected  # written back


def test_unclean_open_rebuilds_unflushed_entries_and_truncates_to_the_recovered_end(new_log):
    plog = new_log()
    plog.append(batch(2), leader_epoch=1)
    plog.flush()  # (1, 0) on disk, recovery point 2
    plog.append(batch(2), leader_epoch=3)  # (3, 2) in memory only
    plog.append(batch(2), leader_epoch=5)  # (5, 4) in memory only
    plog.epochs.assign(6, 6)  # written at once (a leader epoch with nothing written yet)
    assert read_epoch_checkpoint(plog.dir / LEADER_EPOCH_CHECKPOINT) == [(1, 0), (3, 2), (5, 4), (6, 6)]
    path = plog.active.path
    close_segments(plog)
    with open(path, "r+b") as f:  # the last batch torn by the crash
        f.truncate(os.path.getsize(path) - 5)
    again = new_log(clean=False, recovery_point=2)
    assert again.log_end_offset == 4
    assert again.epochs.entries == [(1, 0), (3, 2)]
    assert read_epoch_checkpoint(again.dir / LEADER_EPOCH_CHECKPOINT) == [(1, 0), (3, 2)]


def test_unclean_open_adds_entries_lost_before_a_flush(new_log):
    plog = new_log()
    plog.append(batch(2), leader_epoch=1)
    plog.flush()
    plog.append(batch(2), leader_epoch=2)
    close_segments(plog)  # crash: (2, 2) never written
    assert read_epoch_checkpoint(plog.dir / LEADER_EPOCH_CHECKPOINT) == [(1, 0)]
    again = new_log(clean=False, recovery_point=2)
    assert again.epochs.entries == [(1, 0), (2, 2)]


def test_epochs_follow_the_log_start_offset(new_log, clock):
    plog = new_log(**{"segment.bytes": 300, "retention.ms": 1000})
    late = TS + 10 ** 9
    for i in range(12):  # one batch per segment; the first eight expire
        plog.append(batch(1, size=100, ts=TS if i < 8 else late), leader_epoch=i // 4)
    plog.advance_log_start_offset(2)
    assert plog.epochs.entries == [(0, 2), (1, 4), (2, 8)]
    clock.now = late
    assert plog.delete_old_segments() == 8
    assert plog.log_start_offset == 8 and plog.epochs.entries == [(2, 8)]
    plog.close()
    again = new_log(clean=True, recovery_point=12, **{"segment.bytes": 300})
    assert again.log_start_offset == 8 and again.epochs.entries == [(2, 8)]


# -- KIP-101 / KIP-279: divergent logs -------------------------------------------------------------
def truncation_offset(leader, follower):
    """The follower's side of KIP-279: ask the leader where the follower's latest epoch ends,
    truncate to the end of that epoch's history on both sides, asking again while the follower
    does not know the epoch the leader answered with."""
    while True:
        epoch, leader_end = leader.epochs.end_offset_for(follower.epochs.latest_epoch, leader.log_end_offset)
        if leader_end == -1:
            return follower.high_watermark
        own_epoch, own_end = follower.epochs.end_offset_for(epoch, follower.log_end_offset)
        if own_epoch == epoch:
            return min(leader_end, own_end, follower.log_end_offset)
        follower.truncate_to(min(own_end, follower.log_end_offset))


def test_divergent_tail_after_a_leader_change(new_log):
    """KIP-101: the old leader (epoch 1) wrote offsets nobody replicated; the new leader (epoch 2)
    wrote others at the same offsets. The old leader, now a follower, truncates its tail."""
    leader, follower = new_log("leader", **{"segment.bytes": 600}), new_log("follower", **{"segment.bytes": 600})
    for _ in range(5):
        follower.append(batch(2), leader_epoch=1)  # follower was leader in epoch 1
    replicate(follower, leader)  # 0..9 replicated to the other broker
    for _ in range(3):
        follower.append(batch(2, key=b"old"), leader_epoch=1)  # 10..15: lost with the leader change
    for _ in range(6):
        leader.append(batch(3, key=b"new"), leader_epoch=2)  # 10..27 at epoch 2
    common = log_bytes(leader, end=10)
    assert log_bytes(follower, end=10) == common
    point = truncation_offset(leader, follower)
    assert point == 10
    follower.truncate_to(point)
    assert log_bytes(follower) == common
    replicate(leader, follower, max_bytes=200)
    assert log_bytes(follower) == log_bytes(leader)
    assert follower.epochs.entries == leader.epochs.entries == [(1, 0), (2, 10)]
    follower.append(batch(), leader_epoch=3)  # and then leads
    assert follower.log_end_offset == 29 and follower.epochs.latest_entry() == (3, 28)


def test_divergent_epochs_unknown_to_each_other(new_log):
    """KIP-279: each side has an epoch the other never saw. Leader epochs 0,1,2,4; follower epochs
    0,1,3. The follower asks for 3 (leader: epoch 2 ends at 20), does not know 2, truncates to the
    end of its epoch 1 (12) and asks for 1 (leader: ends at 8): truncation at 8."""
    leader, follower = new_log("leader"), new_log("follower")
    for e, n in ((0, 5), (1, 3), (2, 12), (4, 5)):
        for _ in range(n):
            leader.append(batch(1, key=b"L"), leader_epoch=e)
    assert leader.epochs.entries == [(0, 0), (1, 5), (2, 8), (4, 20)]
    follower.append_as_follower(leader.read(0, 1 << 20, max_offset=8).records)
    for e, n in ((1, 4), (3, 3)):
        for _ in range(n):
            follower.append(batch(1, key=b"F"), leader_epoch=e)
    assert follower.epochs.entries == [(0, 0), (1, 5), (3, 12)]
    assert leader.epochs.end_offset_for(3, leader.log_end_offset) == (2, 20)
    assert follower.epochs.end_offset_for(2, follower.log_end_offset) == (1, 12)
    point = truncation_offset(leader, follower)
    assert point == 8 and follower.log_end_offset == 12  # the first round cut to 12
    follower.truncate_to(point)
    assert log_bytes(follower) == log_bytes(leader, end=8)
    replicate(leader, follower)
    assert log_bytes(follower) == log_bytes(leader)
    assert follower.epochs.entries == leader.epochs.entries


def test_follower_that_lost_everything_behind_the_leaders_log_start(new_log):
    leader, follower = new_log("leader", **{"segment.bytes": 300}), new_log("follower")
    for _ in range(12):
        leader.append(batch(1, size=100), leader_epoch=2)
    leader.advance_log_start_offset(7)
    leader.delete_segments_below_start()
    follower.append_as_follower(build_batch([(b"x", b"y")], base_offset=0, timestamp=TS))
    assert follower.log_end_offset < leader.log_start_offset
    follower.truncate_fully_and_start_at(leader.log_start_offset)
    replicate(leader, follower)
    assert [r.offset for r in read_all(follower)] == list(range(7, 12))
    assert follower.epochs.entries == [(2, 7)]


# -- cleaner on a replicated log ------------------------------------------------------------------
def test_cleaner_keeps_epochs_and_stops_at_the_high_watermark(new_log, clock):
    import asyncio

    from gregor.log.cleaner import clean_partition

    plog = new_log(**{"cleanup.policy": "compact", "segment.bytes": 300, "min.compaction.lag.ms": 0})
    for i in range(12):
        plog.append(build_batch([(b"a", b"%d" % i), (b"b%d" % i, b"v")], timestamp=TS), leader_epoch=3)
    plog.replicated = True
    plog.update_high_watermark(plog.segments[2].base_offset)
    clock.now = TS + 10 ** 6
    asyncio.run(clean_partition(plog))
    assert {e for _, e in stored_epochs(plog)} == {3}
    above = [s for s in plog.segments if s.base_offset >= plog.high_watermark]
    assert sum(1 for s in above for _ in iter_batches(s.path.read_bytes())) == 12 - plog.high_watermark // 2


def test_cleaner_drops_a_rewrite_that_raced_a_truncation(new_log, clock):
    from gregor.log.cleaner import compact, swap_in

    plog = new_log(**{"cleanup.policy": "compact", "segment.bytes": 300, "min.compaction.lag.ms": 0})
    for i in range(12):
        plog.append(build_batch([(b"a", b"%d" % i)], timestamp=TS))
    clock.now = TS + 10 ** 6
    before = plog.truncations
    sealed, files, _ = compact(plog)
    plog.truncate_to(3)
    assert swap_in(plog, sealed, files, before) == 0
    assert [r.offset for r in read_all(plog)] == [0, 1, 2]
    assert not list(plog.dir.glob("*.cleaned"))
