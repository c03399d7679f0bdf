"""Property tests over the transaction decoders' inputs: whatever the bytes,

- ``__transaction_state`` records (``protocol/transaction_log.py``): ``decode_key`` and
  ``decode_value`` return a record or raise ``RecordFormatError``, nothing else (a shard loading a
  damaged partition must see one error type); what they return encodes back to the same bytes
  when it is a canonical encoding;
- transaction markers (``protocol/control_records.py``): ``parse_marker_record`` and
  ``read_marker`` return a marker (or None) or raise ``InvalidBatch``, nothing else (the log reads
  markers during recovery and on followers' copies).

Inputs: arbitrary bytes, and valid records with counts, lengths, varints and bytes overwritten,
inserted, deleted or truncated (the mutations of bench/fuzz.py). The golden bytes are in
tests/coordinator/test_transaction_records.py and tests/protocol/test_control_records.py."""

from __future__ import annotations

import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gregor.protocol import compression
from gregor.protocol import record_batch as rb
from gregor.protocol.control_records import (
    CONTROL_ATTRIBUTES,
    EndTxnMarker,
    build_marker_batch,
    parse_marker_record,
    read_marker,
)
from gregor.protocol.records import Record, build_batch
from gregor.protocol.transaction_log import (
    RecordFormatError,
    TransactionLogKey,
    TransactionLogValue,
    TxnState,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from gregor.protocol.varint import uvarint_bytes

FUZZ = settings(max_examples=500, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow])

I32 = [0, 1, -1, 2**31 - 1, -(2**31), 0xFFFF, 0x10000, 0x7FFF, -2]
I16 = [0, 1, -1, 0x7FFF, -0x8000, 0xFF, 0x100, -2]
VARINTS = [uvarint_bytes(v) for v in (0, 1, 2, 127, 128, 2**31 - 1, 2**31, 2**32 - 1, 2**35, 2**64 - 1)] + [
    b"\x80" * 9 + b"\x01", b"\xff" * 10, b"\x80\x00"]

# -- __transaction_state ---------------------------------------------------------------------------

transactional_ids = st.text(max_size=40)
partitions = st.one_of(st.none(), st.lists(
    st.tuples(st.text(min_size=1, max_size=20), st.lists(st.integers(0, 2**31 - 1), max_size=5, unique=True)
              .map(lambda xs: tuple(sorted(xs)))),
    max_size=4, unique_by=lambda t: t[0]).map(lambda xs: tuple(sorted(xs))))


@st.composite
def log_values(draw: st.DrawFn) -> TransactionLogValue:
    version = draw(st.sampled_from([0, 1]))
    return TransactionLogValue(
        producer_id=draw(st.integers(-1, 2**63 - 1)), producer_epoch=draw(st.integers(-1, 2**15 - 1)),
        transaction_timeout_ms=draw(st.integers(0, 2**31 - 1)), state=draw(st.sampled_from(list(TxnState))),
        partitions=draw(partitions), last_update_timestamp_ms=draw(st.integers(-1, 2**62)),
        start_timestamp_ms=draw(st.integers(-1, 2**62)),
        previous_producer_id=draw(st.integers(-1, 2**63 - 1)) if version else -1,
        next_producer_id=draw(st.integers(-1, 2**63 - 1)) if version else -1,
        client_transaction_version=draw(st.integers(0, 2)) if version else 0, version=version)


@st.composite
def mutated(draw: st.DrawFn, valid: bytes) -> bytes:
    """``valid`` with one to four of bench/fuzz.py's mutations."""
    buf = bytearray(valid)
    for _ in range(draw(st.integers(1, 4))):
        p = draw(st.integers(0, max(len(buf), 1) - 1)) if buf else 0
        op = draw(st.sampled_from(["flip", "byte", "i16", "i32", "varint", "insert-varint", "insert", "delete",
                                   "truncate", "extend"]))
        if op == "flip" and buf:
            buf[p] ^= 1 << draw(st.integers(0, 7))
        elif op == "byte" and buf:
            buf[p] = draw(st.integers(0, 255))
        elif op == "i16":
            buf[p : p + 2] = struct.pack(">h", draw(st.sampled_from(I16)))
        elif op == "i32":
            buf[p : p + 4] = struct.pack(">i", draw(st.sampled_from(I32)))
        elif op == "varint":
            buf[p : p + draw(st.integers(1, 5))] = draw(st.sampled_from(VARINTS))
        elif op == "insert-varint":
            buf[p:p] = draw(st.sampled_from(VARINTS))
        elif op == "insert":
            buf[p:p] = draw(st.binary(min_size=1, max_size=16))
        elif op == "delete":
            del buf[p : p + draw(st.integers(1, 16))]
        elif op == "truncate":
            del buf[p:]
        else:
            buf += draw(st.binary(min_size=1, max_size=32))
    return bytes(buf)


def decode_value_or_format_error(data: bytes | None) -> TransactionLogValue | None:
    try:
        return decode_value(None, data)
    except RecordFormatError:
        return None


def test_valid_records_decode_to_themselves() -> None:
    @FUZZ
    @given(tid=transactional_ids, value=log_values())
    def prop(tid: str, value: TransactionLogValue) -> None:
        key = TransactionLogKey(tid)
        assert decode_key(encode_key(key)) == key
        data = encode_value(value)
        assert data is not None
        assert decode_value(key, data) == value

    prop()


def test_key_decoder_raises_only_record_format_error_on_any_bytes() -> None:
    @FUZZ
    @given(data=st.binary(max_size=80))
    def prop(data: bytes) -> None:
        try:
            key = decode_key(data)
        except RecordFormatError:
            return
        assert encode_key(key) == data  # one encoding per key: what decodes is canonical

    prop()


def test_key_decoder_on_mutated_keys() -> None:
    @FUZZ
    @given(data=transactional_ids.flatmap(lambda t: mutated(encode_key(TransactionLogKey(t)))))
    def prop(data: bytes) -> None:
        try:
            key = decode_key(data)
        except RecordFormatError:
            return
        assert encode_key(key) == data

    prop()


def test_value_decoder_raises_only_record_format_error_on_any_bytes() -> None:
    @FUZZ
    @given(data=st.one_of(st.binary(max_size=120),
                          # a plausible head, random rest: gets past the version and state checks
                          st.tuples(st.sampled_from([0, 1]), st.integers(0, 7), st.binary(max_size=100)).map(
                              lambda t: struct.pack(">hqhib", t[0], 1, 0, 60000, t[1]) + t[2])))
    def prop(data: bytes) -> None:
        value = decode_value_or_format_error(data)
        if value is not None:
            assert isinstance(value, TransactionLogValue)
            assert isinstance(value.state, TxnState)

    prop()


def test_value_decoder_on_mutated_values() -> None:
    @FUZZ
    @given(data=log_values().flatmap(lambda v: mutated(encode_value(v) or b"")))
    def prop(data: bytes) -> None:
        value = decode_value_or_format_error(data)
        if value is not None:
            # whatever decodes encodes again, and that encoding decodes to the same value
            again = encode_value(value)
            assert again is not None
            assert decode_value(None, again) == value

    prop()


def test_value_decoder_with_tagged_fields_of_any_shape() -> None:
    """v1's tagged fields: any count, tag, size and content (known tags with the wrong size
    included) are read or refused with RecordFormatError."""
    head = encode_value(TransactionLogValue(5, 1, 60000, TxnState.ONGOING, (("t", (0, 1)),), 10, 9,
                                            version=1))
    assert head is not None and head[-1:] == b"\x00"  # no tags: the count is the last byte
    base = head[:-1]

    @FUZZ
    @given(tags=st.lists(st.tuples(st.sampled_from([0, 1, 2, 3, 100, 2**31]), st.binary(max_size=12)), max_size=4),
           count=st.one_of(st.none(), st.sampled_from([0, 1, 5, 2**31 - 1, 2**32 - 1])),
           trail=st.binary(max_size=3))
    def prop(tags: list[tuple[int, bytes]], count: int | None, trail: bytes) -> None:
        data = base + uvarint_bytes(len(tags) if count is None else count)
        for tag, payload in tags:
            data += uvarint_bytes(tag) + uvarint_bytes(len(payload)) + payload
        decode_value_or_format_error(data + trail)

    prop()


# -- transaction markers ---------------------------------------------------------------------------

nullable_bytes = st.one_of(st.none(), st.binary(max_size=12))


def test_parse_marker_record_raises_only_invalid_batch() -> None:
    @FUZZ
    @given(key=st.one_of(nullable_bytes, st.tuples(st.integers(-(2**15), 2**15 - 1), st.integers(-3, 3),
                                                   st.binary(max_size=4)).map(
                                                       lambda t: struct.pack(">hh", t[0], t[1]) + t[2])),
           value=st.one_of(nullable_bytes, st.tuples(st.integers(-(2**15), 2**15 - 1), st.integers(-(2**31), 2**31 - 1),
                                                     st.binary(max_size=4)).map(
                                                         lambda t: struct.pack(">hi", t[0], t[1]) + t[2])))
    def prop(key: bytes | None, value: bytes | None) -> None:
        try:
            marker = parse_marker_record(key, value)
        except rb.InvalidBatch:
            return
        assert isinstance(marker, EndTxnMarker)

    prop()


def _marker_or_invalid(batch: bytes) -> EndTxnMarker | None:
    try:
        h = rb.read_header(batch, 0)
    except rb.InvalidBatch:
        return None
    try:
        return read_marker(batch, h)
    except rb.InvalidBatch:
        return None


def _refit(batch: bytes) -> bytes:
    """The batch's length field and CRC made right again (read_marker runs after the CRC check)."""
    if len(batch) < rb.HEADER_SIZE:
        return batch
    buf = bytearray(batch)
    struct.pack_into(">i", buf, rb.LENGTH, len(buf) - rb.LOG_OVERHEAD)
    struct.pack_into(">I", buf, rb.CRC, rb.batch_crc(bytes(buf)))
    return bytes(buf)


def test_read_marker_on_control_batches_of_any_records() -> None:
    """Control batches with any records (any count, keys, values, codec), as a follower or a
    crash rebuild may read them after the CRC check."""

    @FUZZ
    @given(recs=st.lists(st.tuples(nullable_bytes, nullable_bytes), min_size=1, max_size=3),
           codec=st.sampled_from(sorted(compression.NAMES)), count=st.one_of(st.none(), st.sampled_from(I32)))
    def prop(recs: list[tuple[bytes | None, bytes | None]], codec: int, count: int | None) -> None:
        batch = build_batch([Record(i, 0, k, v) for i, (k, v) in enumerate(recs)], producer_id=3, producer_epoch=0,
                            base_sequence=-1, attributes=CONTROL_ATTRIBUTES | codec, codec=codec)
        if count is not None:
            buf = bytearray(batch)
            struct.pack_into(">i", buf, rb.RECORDS_COUNT, count)
            batch = _refit(bytes(buf))
        _marker_or_invalid(batch)

    prop()


def test_read_marker_on_mutated_marker_batches() -> None:
    valid = [build_marker_batch(7, 1, 3, commit=c, timestamp=1000) for c in (True, False)]

    @FUZZ
    @given(data=st.sampled_from(valid).flatmap(mutated), refit=st.booleans())
    def prop(data: bytes, refit: bool) -> None:
        _marker_or_invalid(_refit(data) if refit else data)

    prop()
