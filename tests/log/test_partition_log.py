import os

import pytest

from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.record_batch import validate_batches
from gregor.protocol.records import build_batch, iter_batches
from tests.support.partition_logs import read_all


def batch(n=1, size=10, ts=1_700_000_000_000, key=b"k", **kw):
    return build_batch([(key, b"x" * size)] * n, timestamp=ts, **kw)


def test_offsets_are_assigned_contiguously(make_log):
    plog = make_log()
    assert plog.append(batch(3)).base_offset == 0
    assert plog.append(batch(2)).base_offset == 3
    assert plog.log_end_offset == plog.high_watermark == 5
    assert [r.offset for r in read_all(plog)] == [0, 1, 2, 3, 4]


def test_read_from_the_middle_of_a_batch_returns_that_batch(make_log):
    plog = make_log()
    plog.append(batch(5))
    data = plog.read(3, 1 << 20).records
    (h,) = list(iter_batches(data))
    assert h.base_offset == 0 and h.last_offset == 4


def test_read_limits_and_first_batch_rule(make_log):
    plog = make_log()
    for _ in range(10):
        plog.append(batch(1, size=1000))
    one = len(batch(1, size=1000))
    assert len(plog.read(0, 10).records) == one  # KIP-74: first batch whole even if over the limit
    assert plog.read(0, 10, min_one_batch=False).records == plog.read(0, 10, min_one_batch=False).records
    assert len(plog.read(0, 3 * one).records) == 3 * one
    with pytest.raises(KafkaError) as e:
        plog.read(11, 100)
    assert e.value.code == ErrorCode.offset_out_of_range
    assert plog.read(10, 100).records == b""


def test_roll_by_size_and_index_lookup(make_log):
    plog = make_log(**{"segment.bytes": 4096, "index.interval.bytes": 256})
    for _ in range(200):
        plog.append(batch(2, size=50))
    assert len(plog.segments) > 5
    names = sorted(p.name for p in plog.dir.glob("*.log"))
    assert names[0] == "00000000000000000000.log" and len(names) == len(plog.segments)
    for off in (0, 1, 57, 200, 399):
        data = plog.read(off, 100).records
        h = next(iter_batches(data))
        assert h.base_offset <= off <= h.last_offset


def test_roll_by_time(make_log, clock):
    plog = make_log(**{"segment.ms": 1000})
    plog.append(batch())
    clock.now += 2000
    plog.append(batch())
    assert len(plog.segments) == 2 and plog.segments[1].base_offset == 1


def test_oversized_and_corrupt_batches_are_refused(make_log):
    plog = make_log(**{"max.message.bytes": 500})
    with pytest.raises(KafkaError) as e:
        plog.append(batch(1, size=1000))
    assert e.value.code == ErrorCode.message_too_large
    bad = bytearray(batch())
    bad[-1] ^= 1
    with pytest.raises(KafkaError) as e:
        plog.append(bytes(bad))
    assert e.value.code == ErrorCode.corrupt_message
    with pytest.raises(KafkaError) as e:
        plog.append(batch() + batch())
    assert e.value.code == ErrorCode.invalid_record
    assert plog.log_end_offset == 0


def test_clean_restart_loads_indexes(make_log):
    plog = make_log(**{"segment.bytes": 2048})
    for _ in range(50):
        plog.append(batch(3))
    before = read_all(plog)
    plog.close()
    again = make_log(clean=True, **{"segment.bytes": 2048})
    assert again.log_end_offset == 150
    assert read_all(again) == before


def test_torn_tail_is_truncated_on_unclean_start(make_log):
    plog = make_log()
    for _ in range(10):
        plog.append(batch(2))
    good_end = plog.active.size
    seg_path = plog.active.path
    for s in plog.segments:
        s.close()
    with open(seg_path, "ab") as f:
        f.write(batch(3)[:40])  # a crash in the middle of a write
    again = make_log(clean=False)
    assert again.log_end_offset == 20
    assert again.active.size == good_end == os.path.getsize(seg_path)
    assert again.append(batch()).base_offset == 20


def test_corrupt_batch_in_the_middle_truncates_from_there(make_log):
    plog = make_log()
    for _ in range(5):
        plog.append(batch(1, size=100))
    one = len(batch(1, size=100))
    path = plog.active.path
    plog.active.close()
    with open(path, "r+b") as f:
        f.seek(2 * one + 70)
        f.write(b"\xff")
    again = make_log(clean=False)
    assert again.log_end_offset == 2
    validate_batches(again.read(0, 1 << 20).records, 1 << 20)


def test_index_files_rebuilt_when_missing(make_log):
    plog = make_log(**{"index.interval.bytes": 100})
    for _ in range(30):
        plog.append(batch(1, size=100))
    plog.close()
    for p in plog.dir.glob("*.index"):
        p.unlink()
    again = make_log(clean=True, **{"index.interval.bytes": 100})
    assert len(again.active.index) > 5
    assert next(iter_batches(again.read(17, 10).records)).base_offset == 17


def test_retention_by_time_and_size(make_log, clock):
    plog = make_log(**{"segment.bytes": 1024, "retention.ms": 60_000})
    old = clock.now
    for _ in range(30):
        plog.append(batch(1, size=100, ts=old))
    clock.now += 120_000
    plog.append(batch(1, size=100, ts=clock.now))
    deleted = plog.delete_old_segments()
    assert deleted > 0
    assert plog.log_start_offset > 0 and plog.segments[0].max_timestamp == clock.now
    with pytest.raises(KafkaError):
        plog.read(0, 100)

    sized = make_log(**{"segment.bytes": 1024, "retention.bytes": 2048})
    sized.dir = sized.dir  # same directory fixture is fine: new log over the same data
    for _ in range(60):
        sized.append(batch(1, size=100))
    sized.delete_old_segments()
    assert sized.size_bytes - sized.segments[0].size < 2048


def test_offset_for_timestamp(make_log):
    plog = make_log()
    for i in range(10):
        plog.append(build_batch([(b"k", b"v"), (b"k", b"w")], timestamp=1000 + 10 * i))
    assert plog.offset_for_timestamp(1000) == (0, 1000)
    assert plog.offset_for_timestamp(1031) == (8, 1040)
    assert plog.offset_for_timestamp(5000) is None
    assert plog.max_timestamp_offset() == (18, 1090)  # the first record with it (KAFKA-16310)


def test_idempotent_producer_dedup_and_gaps(make_log):
    plog = make_log()
    b0 = batch(2, producer_id=7, producer_epoch=0, base_sequence=0)
    b1 = batch(2, producer_id=7, producer_epoch=0, base_sequence=2)
    assert plog.append(b0).base_offset == 0
    assert plog.append(b1).base_offset == 2
    dup = plog.append(b1)
    assert dup.duplicate and dup.base_offset == 2 and plog.log_end_offset == 4
    with pytest.raises(KafkaError) as e:
        plog.append(batch(1, producer_id=7, producer_epoch=0, base_sequence=9))
    assert e.value.code == ErrorCode.out_of_order_sequence_number
    with pytest.raises(KafkaError) as e:
        plog.append(batch(1, producer_id=8, producer_epoch=0, base_sequence=3))
    assert e.value.code == ErrorCode.out_of_order_sequence_number
    # new epoch starts over at 0; the old epoch is fenced
    assert plog.append(batch(1, producer_id=7, producer_epoch=1, base_sequence=0)).base_offset == 4
    with pytest.raises(KafkaError) as e:
        plog.append(batch(1, producer_id=7, producer_epoch=0, base_sequence=4))
    assert e.value.code == ErrorCode.invalid_producer_epoch


@pytest.mark.parametrize("clean", [True, False])
def test_producer_state_survives_restart(make_log, clean):
    plog = make_log()
    b0 = batch(1, producer_id=3, producer_epoch=0, base_sequence=0)
    plog.append(b0)
    plog.append(batch(1, producer_id=3, producer_epoch=0, base_sequence=1))
    if clean:
        plog.close()
    else:
        for s in plog.segments:
            s.close()
    again = make_log(clean=clean)
    assert again.append(b0).duplicate
    assert again.append(batch(1, producer_id=3, producer_epoch=0, base_sequence=2)).base_offset == 2


def test_log_append_time_topic(make_log, clock):
    plog = make_log(**{"message.timestamp.type": "LogAppendTime"})
    res = plog.append(batch(ts=5))
    assert res.log_append_time == clock.now
    h = next(iter_batches(plog.read(0, 1000).records))
    assert h.max_timestamp == clock.now


def test_compacted_topic_requires_keys(make_log):
    plog = make_log(**{"cleanup.policy": "compact"})
    with pytest.raises(KafkaError) as e:
        plog.append(build_batch([(None, b"v")]))
    assert e.value.code == ErrorCode.invalid_record


def test_read_reports_the_offset_after_the_data(make_log):
    plog = make_log(**{"index.interval.bytes": 200})
    for _ in range(20):
        plog.append(batch(5, size=40))
    one = len(batch(5, size=40))
    res = plog.read(7, 3 * one)
    assert len(res.records) == 3 * one and res.next_offset == 20  # batches 5-9, 10-14, 15-19
    assert plog.read(0, 10).next_offset == 5  # KIP-74: one batch over the limit
    assert plog.read(100, 10).next_offset == -1
