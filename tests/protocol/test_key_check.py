"""protocol/key_check.py: the keyless records of a batch, for every codec, with bounded memory."""

from __future__ import annotations

import resource

import pytest

from gregor.protocol import compression
from gregor.protocol.key_check import InflatedTooLarge, keyless_records
from gregor.protocol.record_batch import InvalidBatch, read_header
from gregor.protocol.records import Record, build_batch, decode_records

CODECS = [compression.NONE, compression.GZIP, compression.SNAPPY, compression.LZ4, compression.ZSTD]


@pytest.mark.parametrize("codec", CODECS)
def test_keyless_indexes_match_a_full_decode(codec):
    recs = [(None if i % 7 == 3 else b"key-%d" % i, b"value" * i) for i in range(60)]
    batch = build_batch(recs, timestamp=1000, codec=codec)
    h = read_header(batch, 0)
    expected = [i for i, r in enumerate(decode_records(batch, h)) if r.key is None]
    assert keyless_records(batch, h, 1 << 20) == expected == [i for i in range(60) if i % 7 == 3]
    assert keyless_records(build_batch([(b"", b"v")], codec=codec), read_header(build_batch([(b"", b"v")],
                           codec=codec), 0), 1 << 20) == []  # an empty key is a key


@pytest.mark.parametrize("codec", CODECS[1:])
def test_a_batch_inflating_past_the_bound_is_refused_without_holding_it(codec):
    big = build_batch([Record(0, 0, b"k", bytes(64 << 20))], codec=codec)
    h = read_header(big, 0)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(InflatedTooLarge):
        keyless_records(big, h, 8 << 20)
    # the 64 MiB value was never held: the peak grew by about the 8 MiB bound at most
    assert (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) < 32 << 10
    assert keyless_records(big, h, 65 << 20) == []


@pytest.mark.parametrize("codec", CODECS)
def test_malformed_records_are_invalid(codec):
    batch = bytearray(build_batch([(b"k", b"v"), (None, b"w")], codec=codec))
    h = read_header(batch, 0)
    h.records_count = 5  # more records than the data holds
    with pytest.raises(InvalidBatch):
        keyless_records(batch, h, 1 << 20)
    if codec != compression.NONE:
        h = read_header(batch, 0)
        body_start = 61
        batch[body_start + 4 : body_start + 12] = b"\xff" * 8  # corrupt the compressed stream
        with pytest.raises((InvalidBatch, InflatedTooLarge)):
            keyless_records(batch, h, 1 << 20)


def test_xerial_snappy_blocks_past_the_bound():
    big = build_batch([Record(0, 0, b"k", bytes(1 << 20))], codec=compression.SNAPPY)  # 32 KiB blocks
    h = read_header(big, 0)
    with pytest.raises(InflatedTooLarge):
        keyless_records(big, h, 100_000)
    assert keyless_records(big, h, 2 << 20) == []
