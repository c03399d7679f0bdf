"""__consumer_offsets formats, byte for byte as Kafka's schemas define them."""

import struct

import pytest

from gregor.protocol.consumer_offsets import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    RecordFormatError,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)


def s16(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def test_offset_commit_key_v1_golden():
    key = OffsetCommitKey("grp", "orders", 7)
    assert encode_key(key) == struct.pack(">h", 1) + s16("grp") + s16("orders") + struct.pack(">i", 7)
    assert decode_key(encode_key(key)) == key
    # version 0 keys (older brokers) have the same layout
    assert decode_key(struct.pack(">h", 0) + s16("grp") + s16("orders") + struct.pack(">i", 7)) == key


def test_offset_commit_value_v3_golden():
    v = OffsetCommitValue(offset=42, metadata="meta", commit_timestamp=1000, leader_epoch=3)
    assert encode_value(v) == struct.pack(">hqi", 3, 42, 3) + s16("meta") + struct.pack(">q", 1000)
    assert decode_value(OffsetCommitKey("g", "t", 0), encode_value(v)) == v


def test_offset_commit_value_v1_with_expire_timestamp():
    v = OffsetCommitValue(offset=1, metadata="", commit_timestamp=10, expire_timestamp=20)
    assert encode_value(v) == struct.pack(">hq", 1, 1) + s16("") + struct.pack(">qq", 10, 20)
    assert decode_value(OffsetCommitKey("g", "t", 0), encode_value(v)) == v


def test_offset_commit_value_v0_and_flexible_v4_decode():
    k = OffsetCommitKey("g", "t", 0)
    v0 = struct.pack(">hq", 0, 9) + s16("x") + struct.pack(">q", 5)
    assert decode_value(k, v0) == OffsetCommitValue(9, "x", 5)
    # v4: flexible: compact string (length+1 as uvarint) and an empty tagged-field section
    v4 = struct.pack(">hqi", 4, 9, 2) + bytes([2]) + b"x" + struct.pack(">q", 5) + b"\x00"
    assert decode_value(k, v4) == OffsetCommitValue(9, "x", 5, leader_epoch=2)


def test_group_metadata_v3_golden():
    m = MemberMetadata("m1", "client", "/127.0.0.1", session_timeout=10000, rebalance_timeout=30000,
                       subscription=b"sub", assignment=b"asg", group_instance_id=None)
    v = GroupMetadataValue("consumer", 5, "range", "m1", 1234, [m])
    expected = (struct.pack(">h", 3) + s16("consumer") + struct.pack(">i", 5) + s16("range") + s16("m1")
                + struct.pack(">q", 1234) + struct.pack(">i", 1)
                + s16("m1") + struct.pack(">h", -1) + s16("client") + s16("/127.0.0.1")
                + struct.pack(">ii", 30000, 10000) + struct.pack(">i", 3) + b"sub" + struct.pack(">i", 3) + b"asg")
    assert encode_value(v) == expected
    assert encode_key(GroupMetadataKey("grp")) == struct.pack(">h", 2) + s16("grp")
    assert decode_value(GroupMetadataKey("grp"), expected) == v


def test_empty_group_metadata_and_tombstones():
    v = GroupMetadataValue("consumer", 2, None, None, 5, [])
    raw = encode_value(v)
    assert decode_value(GroupMetadataKey("g"), raw) == v
    assert encode_value(None) is None and decode_value(GroupMetadataKey("g"), None) is None


def test_group_metadata_v0_without_rebalance_timeout():
    raw = (struct.pack(">h", 0) + s16("consumer") + struct.pack(">i", 1) + s16("range") + s16("m")
           + struct.pack(">i", 1) + s16("m") + s16("c") + s16("/h") + struct.pack(">i", 6000)
           + struct.pack(">i", 0) + struct.pack(">i", 0))
    v = decode_value(GroupMetadataKey("g"), raw)
    assert v.members[0].session_timeout == 6000 and v.members[0].rebalance_timeout == 6000


def test_unknown_versions_and_truncation():
    with pytest.raises(RecordFormatError):
        decode_key(struct.pack(">h", 9) + s16("x"))
    with pytest.raises(RecordFormatError):
        decode_value(OffsetCommitKey("g", "t", 0), struct.pack(">h", 3) + b"\x00")
