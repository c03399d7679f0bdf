import struct

import crc32c
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gregor.protocol import compression
from gregor.protocol import record_batch as rb
from gregor.protocol.records import Record, build_batch, decode_records, iter_batches


def test_golden_header_layout():
    batch = build_batch([(b"k", b"v")], base_offset=0, timestamp=1000)
    base, length, epoch, magic, crc = struct.unpack_from(">qiibI", batch, 0)
    assert (base, epoch, magic) == (0, 0, 2)
    assert length == len(batch) - 12
    assert crc == crc32c.crc32c(batch[21:])
    attrs, lod, base_ts, max_ts, pid, pepoch, seq, count = struct.unpack_from(">hiqqqhii", batch, 21)
    assert (attrs, lod, base_ts, max_ts, pid, pepoch, seq, count) == (0, 0, 1000, 1000, -1, -1, -1, 1)
    # one record: length, attrs, ts delta, offset delta, key len 1, 'k', value len 1, 'v', 0 headers
    assert batch[61:] == bytes([0x10, 0, 0, 0, 2]) + b"k" + bytes([2]) + b"v" + bytes([0])


def test_validate_accepts_good_and_rejects_bad_crc():
    batch = bytearray(build_batch([(b"k", b"v"), (None, b"w")]))
    (h,) = rb.validate_batches(batch, 1 << 20)
    assert h.records_count == 2 and h.last_offset_delta == 1
    batch[-1] ^= 0xFF
    with pytest.raises(rb.InvalidBatch, match="CRC"):
        rb.validate_batches(batch, 1 << 20)


def test_validate_rejects_truncation_magic_and_size():
    batch = build_batch([(b"k", b"v" * 100)])
    with pytest.raises(rb.InvalidBatch, match="truncated"):
        rb.validate_batches(batch[:-3], 1 << 20)
    with pytest.raises(rb.InvalidBatch, match="truncated"):
        rb.validate_batches(batch[:30], 1 << 20)
    old = bytearray(batch)
    old[16] = 1
    with pytest.raises(rb.InvalidBatch, match="magic 1"):
        rb.validate_batches(old, 1 << 20)
    with pytest.raises(rb.RecordTooLarge):
        rb.validate_batches(batch, 50)
    with pytest.raises(rb.InvalidBatch, match="empty"):
        rb.validate_batches(b"", 100)


def test_set_base_offset_keeps_crc_valid():
    batch = bytearray(build_batch([(b"a", b"b")]))
    rb.set_base_offset(batch, 0, 12345)
    (h,) = rb.validate_batches(batch, 1 << 20)
    assert h.base_offset == 12345


def test_log_append_time_resigns_crc():
    batch = bytearray(build_batch([(b"a", b"b")], timestamp=5))
    h = rb.read_header(batch, 0)
    rb.set_log_append_time(batch, h, 99)
    (h2,) = rb.validate_batches(batch, 1 << 20)
    assert h2.max_timestamp == 99 and h2.attributes & rb.TIMESTAMP_TYPE_BIT


@pytest.mark.parametrize("codec", [compression.NONE, compression.GZIP, compression.SNAPPY, compression.LZ4,
                                   compression.ZSTD])
def test_codecs_roundtrip(codec):
    recs = [Record(10 + i, 1000 + i, b"k%d" % i, b"v" * i, [("h", b"x")]) for i in range(50)]
    batch = build_batch(recs, codec=codec)
    (h,) = list(iter_batches(batch))
    assert h.compression == codec and h.base_offset == 10
    assert decode_records(batch, h) == recs


@given(st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=40)), st.one_of(st.none(), st.binary(max_size=200))),
                min_size=1, max_size=30), st.integers(0, 2**40))
def test_records_roundtrip_property(pairs, base):
    batch = build_batch(pairs, base_offset=base, timestamp=7)
    (h,) = rb.validate_batches(batch, 1 << 24)
    got = decode_records(batch, h)
    assert [(r.key, r.value) for r in got] == pairs
    assert [r.offset for r in got] == list(range(base, base + len(pairs)))
