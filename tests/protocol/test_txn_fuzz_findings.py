"""What fuzzing the transaction decoders found (tests/protocol/test_transaction_records_fuzz.py,
bench/fuzz.py), each pinned by the smallest input that showed it."""

from __future__ import annotations

import struct

import pytest

from gregor.protocol import record_batch as rb
from gregor.protocol.control_records import build_marker_batch, read_marker
from gregor.protocol.records import iter_key_values


def _with_codec(batch: bytes, codec: int) -> bytes:
    """``batch`` with its compression bits set to ``codec`` and its CRC made right again (what a
    follower or a crash rebuild reads has passed the CRC check)."""
    buf = bytearray(batch)
    (attrs,) = struct.unpack_from(">h", buf, rb.ATTRIBUTES)
    struct.pack_into(">h", buf, rb.ATTRIBUTES, (attrs & ~0x07) | codec)
    struct.pack_into(">I", buf, rb.CRC, rb.batch_crc(bytes(buf)))
    return bytes(buf)


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_a_marker_with_no_codec_is_an_invalid_batch(codec: int) -> None:
    """A control batch whose codec bits name no codec raised compression.UnsupportedCodec out of
    read_marker (an Exception, not an InvalidBatch), past the handlers of its callers
    (PartitionLog._replay_marker and _follow_marker, the coordinator loader's _txn_event catch
    InvalidBatch): a crash rebuild or a follower's append would have failed on it instead of
    logging and ignoring the batch. Fixed: UnsupportedCodec is an InvalidBatch."""
    batch = _with_codec(build_marker_batch(7, 1, 3, commit=True, timestamp=1000), codec)
    h = rb.read_header(batch, 0)
    with pytest.raises(rb.InvalidBatch):
        read_marker(batch, h)
    with pytest.raises(rb.InvalidBatch):
        iter_key_values(batch, h)
