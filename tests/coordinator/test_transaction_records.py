"""``__transaction_state`` records byte for byte as Kafka's generated TransactionLogKey and
TransactionLogValue write them (the expected bytes are built by hand from the schemas), and the
placement of transactional ids (Java's String.hashCode)."""

from __future__ import annotations

import struct

import pytest

from gregor.coordinator.transaction.metadata import TxnMetadata
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
    partition_for,
)


def i8(v: int) -> bytes:
    return struct.pack(">b", v)


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def test_topic_name_and_state_ids_are_kafkas():
    assert TRANSACTION_STATE_TOPIC == "__transaction_state"
    assert [(s.value, s.kafka_name) for s in TxnState] == [
        (0, "Empty"), (1, "Ongoing"), (2, "PrepareCommit"), (3, "PrepareAbort"), (4, "CompleteCommit"),
        (5, "CompleteAbort"), (6, "Dead"), (7, "PrepareEpochFence")]
    assert TxnState.from_kafka_name("PrepareAbort") is TxnState.PREPARE_ABORT
    assert TxnState.from_kafka_name("prepareabort") is None


def test_key_is_type_zero_and_an_int16_string():
    key = TransactionLogKey("tx-é")
    expected = i16(0) + i16(5) + "tx-é".encode()
    assert encode_key(key) == expected
    assert decode_key(expected) == key


def test_value_v0_bytes():
    v = TransactionLogValue(producer_id=4242, producer_epoch=3, transaction_timeout_ms=60_000,
                            state=TxnState.ONGOING, partitions=(("a", (0, 2)), ("bb", (1,))),
                            last_update_timestamp_ms=1_700_000_000_123, start_timestamp_ms=1_700_000_000_000,
                            version=0)
    expected = (i16(0) + i64(4242) + i16(3) + i32(60_000) + i8(1)
                + i32(2) + i16(1) + b"a" + i32(2) + i32(0) + i32(2) + i16(2) + b"bb" + i32(1) + i32(1)
                + i64(1_700_000_000_123) + i64(1_700_000_000_000))
    assert encode_value(v) == expected
    assert decode_value(None, expected) == v


def test_value_v0_empty_state_has_null_partitions():
    v = TransactionLogValue(7, 0, 1000, TxnState.EMPTY, None, 5, -1, version=0)
    expected = i16(0) + i64(7) + i16(0) + i32(1000) + i8(0) + i32(-1) + i64(5) + i64(-1)
    assert encode_value(v) == expected
    assert decode_value(None, expected) == v


def test_value_v1_bytes_without_tags():
    v = TransactionLogValue(9, 1, 30_000, TxnState.COMPLETE_COMMIT, (), 20, 10, version=1)
    expected = (i16(1) + i64(9) + i16(1) + i32(30_000) + i8(4)
                + b"\x01"  # compact array of 0 entries
                + i64(20) + i64(10) + b"\x00")  # no tagged fields
    assert encode_value(v) == expected
    assert decode_value(None, expected) == v


def test_value_v1_bytes_with_partitions_and_every_tag():
    v = TransactionLogValue(9, 32767, 30_000, TxnState.PREPARE_COMMIT, (("t", (0, 1)),), 20, 10,
                            previous_producer_id=8, next_producer_id=300, client_transaction_version=2, version=1)
    expected = (i16(1) + i64(9) + i16(32767) + i32(30_000) + i8(2)
                + b"\x02"  # compact array: 1 entry
                + b"\x02t"  # compact string "t"
                + b"\x03" + i32(0) + i32(1)  # compact int32 array of 2
                + b"\x00"  # the entry's tagged fields
                + i64(20) + i64(10)
                + b"\x03"  # 3 tagged fields, in tag order: (tag, size, data)
                + b"\x00\x08" + i64(8)
                + b"\x01\x08" + i64(300)
                + b"\x02\x02" + i16(2))
    assert encode_value(v) == expected
    assert decode_value(None, expected) == v


def test_value_v1_empty_state_and_unknown_tags():
    v = TransactionLogValue(1, 0, 100, TxnState.EMPTY, None, 5, -1, version=1)
    base = i16(1) + i64(1) + i16(0) + i32(100) + i8(0) + b"\x00" + i64(5) + i64(-1)
    assert encode_value(v) == base + b"\x00"
    # a newer Kafka's tag is skipped
    assert decode_value(None, base + b"\x01\x09\x02\xab\xcd") == v


def test_tombstone():
    assert encode_value(None) is None
    assert decode_value(TransactionLogKey("x"), None) is None


@pytest.mark.parametrize("data", [
    b"",
    i16(1),  # not a transaction log key type
    i16(0) + i16(5) + b"abc",  # truncated
    i16(0) + i16(2) + b"\xff\xfe",  # not UTF-8
    i16(0) + i16(1) + b"ab",  # trailing bytes
])
def test_bad_keys(data):
    with pytest.raises(RecordFormatError):
        decode_key(data)


@pytest.mark.parametrize("data", [
    i16(2) + i64(1),  # unknown version
    i16(0) + i64(1) + i16(0) + i32(1) + i8(9) + i32(-1) + i64(0) + i64(0),  # unknown state
    i16(0) + i64(1) + i16(0) + i32(1) + i8(1) + i32(1000) + i64(0) + i64(0),  # array longer than the record
    i16(0) + i64(1) + i16(0) + i32(1) + i8(0) + i32(-1) + i64(0),  # truncated
    i16(0) + i64(1) + i16(0) + i32(1) + i8(0) + i32(-1) + i64(0) + i64(0) + b"x",  # trailing
])
def test_bad_values(data):
    with pytest.raises(RecordFormatError):
        decode_value(None, data)


def test_metadata_round_trip_groups_partitions_by_topic_sorted():
    m = TxnMetadata("tx", 5, 2, 1000, TxnState.ONGOING, frozenset({("b", 1), ("a", 3), ("a", 0)}), 10, 20,
                    previous_producer_id=5, client_version=2)
    v = m.to_value(1)
    assert v.partitions == (("a", (0, 3)), ("b", (1,)))
    assert TxnMetadata.from_value("tx", decode_value(None, encode_value(v))) == m


# Java: "hello".hashCode() == 99162322; "polygenelubricants".hashCode() == Integer.MIN_VALUE, which
# Kafka's Utils.abs maps to 0; "Aa" and "BB" collide (2112); a character outside the BMP counts as
# its two UTF-16 code units: "😀" is \ud83d\ude00, 55357 * 31 + 56832 = 1772899.
@pytest.mark.parametrize("tid, partitions, expected", [
    ("hello", 50, 99162322 % 50),
    ("polygenelubricants", 50, 0),
    ("Aa", 50, 2112 % 50),
    ("BB", 50, 2112 % 50),
    ("", 50, 0),
    ("😀", 50, 1772899 % 50),
    ("my-transactional-id", 1, 0),
])
def test_partition_for(tid, partitions, expected):
    assert partition_for(tid, partitions) == expected


def test_partition_for_negative_hash():
    # Java: "abcdefghij".hashCode() == -634317659 and "my-txn-1".hashCode() == -1894316499 (the sum
    # overflows int32); Kafka takes the absolute value
    assert partition_for("abcdefghij", 50) == 634317659 % 50 == 9
    assert partition_for("my-txn-1", 50) == 1894316499 % 50 == 49
