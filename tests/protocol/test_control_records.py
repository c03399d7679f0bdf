"""Transaction markers (protocol/control_records.py): Kafka's control batch layout, byte for byte."""

from __future__ import annotations

import struct

import pytest

from gregor.protocol import record_batch as rb
from gregor.protocol.control_records import (
    ABORT,
    COMMIT,
    CONTROL_ATTRIBUTES,
    EndTxnMarker,
    build_marker_batch,
    control_type,
    parse_marker_record,
    read_marker,
)
from gregor.protocol.records import build_batch, decode_records


def test_commit_marker_layout():
    batch = build_marker_batch(producer_id=7, producer_epoch=3, coordinator_epoch=11, commit=True, timestamp=1234)
    (h,) = rb.validate_batches(batch, 1 << 20)
    assert h.attributes == CONTROL_ATTRIBUTES == 0x30
    assert h.is_control and h.is_transactional
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.records_count) == (7, 3, -1, 1)
    assert (h.base_timestamp, h.max_timestamp) == (1234, 1234)
    (rec,) = decode_records(batch, h)
    assert rec.key == struct.pack(">hh", 0, COMMIT) == b"\x00\x00\x00\x01"
    assert rec.value == struct.pack(">hi", 0, 11) == b"\x00\x00\x00\x00\x00\x0b"
    assert read_marker(batch, h) == EndTxnMarker(commit=True, coordinator_epoch=11)


def test_abort_marker_round_trip():
    batch = build_marker_batch(5, 0, 2, commit=False, timestamp=0)
    h = rb.read_header(batch, 0)
    marker = read_marker(batch, h)
    assert marker == EndTxnMarker(False, 2) and marker.control_type == ABORT


def test_later_versions_are_read_as_version_0():
    key = struct.pack(">hh", 1, COMMIT) + b"extra"
    value = struct.pack(">hi", 3, 9) + b"\x00"
    assert parse_marker_record(key, value) == EndTxnMarker(True, 9)


@pytest.mark.parametrize(("key", "value"), [
    (None, b"\x00\x00\x00\x00\x00\x01"),
    (b"\x00", b"\x00\x00\x00\x00\x00\x01"),
    (struct.pack(">hh", 0, 2), b"\x00\x00\x00\x00\x00\x01"),  # not a transaction marker type
    (struct.pack(">hh", -1, 0), b"\x00\x00\x00\x00\x00\x01"),
    (struct.pack(">hh", 0, 0), b"\x00\x00"),
    (struct.pack(">hh", 0, 0), None),
    (struct.pack(">hh", 0, 0), struct.pack(">hi", -1, 0)),
])
def test_malformed_markers_are_refused(key, value):
    with pytest.raises(rb.InvalidBatch):
        parse_marker_record(key, value)


def test_other_control_types_and_data_batches():
    assert control_type(struct.pack(">hh", 0, 5)) == 5
    other = build_batch([(struct.pack(">hh", 0, 5), b"")], producer_id=1, producer_epoch=0,
                        attributes=CONTROL_ATTRIBUTES)
    assert read_marker(other, rb.read_header(other, 0)) is None  # a control record that is no marker
    data = build_batch([(b"k", b"v")])
    with pytest.raises(rb.InvalidBatch):
        read_marker(data, rb.read_header(data, 0))
