"""The consumer group (KIP-848) records of __consumer_offsets, byte for byte as Kafka 4.x's
schemas define them: golden bytes written out field by field, round trips, tombstones, skipped
unknown tagged fields, and malformed input raising RecordFormatError and nothing else."""

import struct
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gregor.protocol.consumer_offsets import (
    ClassicMemberMetadata,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    RecordFormatError,
    TopicMetadata,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)

T1 = uuid.UUID("00010203-0405-0607-0809-0a0b0c0d0e0f")
T2 = uuid.UUID("f0e0d0c0-b0a0-9080-7060-504030201000")
T1_BYTES = bytes(range(16))  # a uuid is its 16 bytes, most significant first
T2_BYTES = bytes.fromhex("f0e0d0c0b0a090807060504030201000")

KEYS = [
    ConsumerGroupMetadataKey("grp"),
    ConsumerGroupPartitionMetadataKey("grp"),
    ConsumerGroupMemberMetadataKey("grp", "m1"),
    ConsumerGroupTargetAssignmentMetadataKey("grp"),
    ConsumerGroupTargetAssignmentMemberKey("grp", "m1"),
    ConsumerGroupCurrentMemberAssignmentKey("grp", "m1"),
    ConsumerGroupRegularExpressionKey("grp", "^t.*"),
]


# -- keys: int16 record type, then non-flexible strings (int16 length) ------------------------
@pytest.mark.parametrize(
    "key, golden",
    [
        (ConsumerGroupMetadataKey("grp"),
         b"\x00\x03"          # record type 3
         b"\x00\x03grp"),     # GroupId
        (ConsumerGroupPartitionMetadataKey("grp"),
         b"\x00\x04"          # record type 4
         b"\x00\x03grp"),     # GroupId
        (ConsumerGroupMemberMetadataKey("grp", "m1"),
         b"\x00\x05"          # record type 5
         b"\x00\x03grp"       # GroupId
         b"\x00\x02m1"),      # MemberId
        (ConsumerGroupTargetAssignmentMetadataKey("grp"),
         b"\x00\x06"          # record type 6
         b"\x00\x03grp"),     # GroupId
        (ConsumerGroupTargetAssignmentMemberKey("grp", "m1"),
         b"\x00\x07"          # record type 7
         b"\x00\x03grp"       # GroupId
         b"\x00\x02m1"),      # MemberId
        (ConsumerGroupCurrentMemberAssignmentKey("grp", "m1"),
         b"\x00\x08"          # record type 8
         b"\x00\x03grp"       # GroupId
         b"\x00\x02m1"),      # MemberId
        (ConsumerGroupRegularExpressionKey("grp", "^t.*"),
         b"\x00\x10"          # record type 16
         b"\x00\x03grp"       # GroupId
         b"\x00\x04^t.*"),    # RegularExpression
    ],
)
def test_key_golden(key, golden):
    assert encode_key(key) == golden
    assert decode_key(golden) == key


def test_key_utf8_lengths_count_bytes():
    key = ConsumerGroupMemberMetadataKey("grüppe", "m")
    assert encode_key(key) == b"\x00\x05" + b"\x00\x07gr\xc3\xbcppe" + b"\x00\x01m"
    assert decode_key(encode_key(key)) == key


# -- values: int16 version 0, then flexible (compact lengths are n+1 varints) -----------------
def test_metadata_value_golden():
    v = ConsumerGroupMetadataValue(epoch=7)
    golden = (b"\x00\x00"            # version 0
              b"\x00\x00\x00\x07"    # Epoch
              b"\x00")               # no tagged fields (MetadataHash 0 is its default)
    assert encode_value(v) == golden
    assert decode_value(ConsumerGroupMetadataKey("g"), golden) == v


def test_metadata_value_with_metadata_hash_golden():
    v = ConsumerGroupMetadataValue(epoch=7, metadata_hash=0x0102030405060708)
    golden = (b"\x00\x00"            # version 0
              b"\x00\x00\x00\x07"    # Epoch
              b"\x01"                # 1 tagged field
              b"\x00\x08"            # tag 0 (MetadataHash), 8 bytes
              b"\x01\x02\x03\x04\x05\x06\x07\x08")
    assert encode_value(v) == golden
    assert decode_value(ConsumerGroupMetadataKey("g"), golden) == v


def test_metadata_value_negative_hash_and_creation_time_golden():
    v = ConsumerGroupMetadataValue(epoch=1, metadata_hash=-2, creation_time_ms=1000)
    golden = (b"\x00\x00"                           # version 0
              b"\x00\x00\x00\x01"                   # Epoch
              b"\x02"                               # 2 tagged fields, ascending tags
              b"\x00\x08\xff\xff\xff\xff\xff\xff\xff\xfe"  # tag 0 MetadataHash -2
              b"\x01\x08\x00\x00\x00\x00\x00\x00\x03\xe8")  # tag 1 CreationTimeMs 1000
    assert encode_value(v) == golden
    assert decode_value(ConsumerGroupMetadataKey("g"), golden) == v


def test_partition_metadata_value_golden_as_kafka_4_0_writes_it():
    v = ConsumerGroupPartitionMetadataValue([TopicMetadata(T1, "orders", 3)])
    golden = (b"\x00\x00"            # version 0
              b"\x02"                # Topics: 1 element
              + T1_BYTES +           # TopicId
              b"\x07orders"          # TopicName
              b"\x00\x00\x00\x03"    # NumPartitions
              b"\x01"                # PartitionMetadata: 0 elements (Kafka 4.0 writes none)
              b"\x00"                # topic's tagged fields
              b"\x00")               # value's tagged fields
    assert encode_value(v) == golden
    assert decode_value(ConsumerGroupPartitionMetadataKey("g"), golden) == v


def test_partition_metadata_value_with_racks_golden():
    v = ConsumerGroupPartitionMetadataValue([TopicMetadata(T2, "t", 1, {0: ["r1", "r2"]})])
    golden = (b"\x00\x00"            # version 0
              b"\x02"                # Topics: 1 element
              + T2_BYTES +           # TopicId
              b"\x02t"               # TopicName
              b"\x00\x00\x00\x01"    # NumPartitions
              b"\x02"                # PartitionMetadata: 1 element
              b"\x00\x00\x00\x00"    #   Partition 0
              b"\x03\x03r1\x03r2"    #   Racks: 2 strings
              b"\x00"                #   its tagged fields
              b"\x00"                # topic's tagged fields
              b"\x00")               # value's tagged fields
    assert encode_value(v) == golden
    assert decode_value(ConsumerGroupPartitionMetadataKey("g"), golden) == v


def test_member_metadata_value_golden():
    v = ConsumerGroupMemberMetadataValue(
        instance_id=None, rack_id="rack-a", client_id="cli", client_host="/10.0.0.1",
        subscribed_topic_names=["a", "b"], subscribed_topic_regex=None, rebalance_timeout_ms=300000,
        server_assignor="uniform")
    golden = (b"\x00\x00"            # version 0
              b"\x00"                # InstanceId null
              b"\x07rack-a"          # RackId
              b"\x04cli"             # ClientId
              b"\x0a/10.0.0.1"       # ClientHost
              b"\x03\x02a\x02b"      # SubscribedTopicNames: 2 strings
              b"\x00"                # SubscribedTopicRegex null
              b"\x00\x04\x93\xe0"    # RebalanceTimeoutMs 300000
              b"\x08uniform"         # ServerAssignor
              b"\x00")               # no tagged fields (ClassicMemberMetadata null is its default)
    assert encode_value(v) == golden
    assert decode_value(ConsumerGroupMemberMetadataKey("g", "m"), golden) == v


def test_member_metadata_value_with_classic_member_metadata_golden():
    v = ConsumerGroupMemberMetadataValue(
        instance_id="i-1", rack_id=None, client_id="c", client_host="h", subscribed_topic_names=[],
        subscribed_topic_regex="^x", rebalance_timeout_ms=-1, server_assignor=None,
        classic_member_metadata=ClassicMemberMetadata(45000, [("range", b"\x00\x01")]))
    golden = (b"\x00\x00"            # version 0
              b"\x04i-1"             # InstanceId
              b"\x00"                # RackId null
              b"\x02c"               # ClientId
              b"\x02h"               # ClientHost
              b"\x01"                # SubscribedTopicNames: 0 strings
              b"\x03^x"              # SubscribedTopicRegex
              b"\xff\xff\xff\xff"    # RebalanceTimeoutMs -1
              b"\x00"                # ServerAssignor null
              b"\x01"                # 1 tagged field
              b"\x00\x11"            # tag 0 (ClassicMemberMetadata), 17 bytes:
              b"\x01"                #   present (a nullable struct's marker)
              b"\x00\x00\xaf\xc8"    #   SessionTimeoutMs 45000
              b"\x02"                #   SupportedProtocols: 1 element
              b"\x06range"           #     Name
              b"\x03\x00\x01"        #     Metadata: 2 bytes
              b"\x00"                #     its tagged fields
              b"\x00")               #   the struct's tagged fields
    assert encode_value(v) == golden
    assert decode_value(ConsumerGroupMemberMetadataKey("g", "m"), golden) == v


def test_target_assignment_metadata_value_golden():
    v = ConsumerGroupTargetAssignmentMetadataValue(assignment_epoch=5)
    golden = (b"\x00\x00"            # version 0
              b"\x00\x00\x00\x05"    # AssignmentEpoch
              b"\x00")               # no tagged fields
    assert encode_value(v) == golden
    assert decode_value(ConsumerGroupTargetAssignmentMetadataKey("g"), golden) == v
    v = ConsumerGroupTargetAssignmentMetadataValue(assignment_epoch=5, assignment_timestamp=1)
    golden = (b"\x00\x00"            # version 0
              b"\x00\x00\x00\x05"    # AssignmentEpoch
              b"\x01"                # 1 tagged field
              b"\x00\x08\x00\x00\x00\x00\x00\x00\x00\x01")  # tag 0 AssignmentTimestamp 1
    assert encode_value(v) == golden
    assert decode_value(ConsumerGroupTargetAssignmentMetadataKey("g"), golden) == v


def test_target_assignment_member_value_golden_keeps_order():
    v = ConsumerGroupTargetAssignmentMemberValue({T2: (2, 0), T1: ()})
    golden = (b"\x00\x00"            # version 0
              b"\x03"                # TopicPartitions: 2 elements, in the dict's order
              + T2_BYTES +           #   TopicId
              b"\x03"                #   Partitions: 2 int32
              b"\x00\x00\x00\x02\x00\x00\x00\x00"
              b"\x00"                #   its tagged fields
              + T1_BYTES +           #   TopicId
              b"\x01"                #   Partitions: none
              b"\x00"                #   its tagged fields
              b"\x00")               # value's tagged fields
    assert encode_value(v) == golden
    decoded = decode_value(ConsumerGroupTargetAssignmentMemberKey("g", "m"), golden)
    assert decoded == v
    assert isinstance(decoded, ConsumerGroupTargetAssignmentMemberValue)
    assert list(decoded.topic_partitions) == [T2, T1]


def test_current_member_assignment_value_golden():
    v = ConsumerGroupCurrentMemberAssignmentValue(
        member_epoch=10, previous_member_epoch=9, state=1, assigned_partitions={T1: (1,)},
        partitions_pending_revocation={T2: (3,)})
    golden = (b"\x00\x00"            # version 0
              b"\x00\x00\x00\x0a"    # MemberEpoch
              b"\x00\x00\x00\x09"    # PreviousMemberEpoch
              b"\x01"                # State: UNREVOKED_PARTITIONS
              b"\x02" + T1_BYTES +   # AssignedPartitions: 1 element, TopicId
              b"\x02\x00\x00\x00\x01"  # Partitions [1]
              b"\x00"                #   its tagged fields
              b"\x02" + T2_BYTES +   # PartitionsPendingRevocation: 1 element, TopicId
              b"\x02\x00\x00\x00\x03"  # Partitions [3]
              b"\x00"                #   its tagged fields
              b"\x00")               # value's tagged fields
    assert encode_value(v) == golden
    assert decode_value(ConsumerGroupCurrentMemberAssignmentKey("g", "m"), golden) == v


def test_current_member_assignment_value_unknown_state_and_empty():
    v = ConsumerGroupCurrentMemberAssignmentValue(member_epoch=-1, previous_member_epoch=-1, state=127)
    golden = b"\x00\x00" + b"\xff" * 8 + b"\x7f" + b"\x01\x01" + b"\x00"
    assert encode_value(v) == golden
    assert decode_value(ConsumerGroupCurrentMemberAssignmentKey("g", "m"), golden) == v


def test_regular_expression_value_golden():
    v = ConsumerGroupRegularExpressionValue(topics=["a", "b"], version=42, timestamp=1_700_000_000_000)
    golden = (b"\x00\x00"                            # version 0
              b"\x03\x02a\x02b"                      # Topics: 2 strings
              b"\x00\x00\x00\x00\x00\x00\x00\x2a"    # Version 42
              b"\x00\x00\x01\x8b\xcf\xe5\x68\x00"    # Timestamp
              b"\x00")                               # no tagged fields
    assert encode_value(v) == golden
    assert decode_value(ConsumerGroupRegularExpressionKey("g", "x"), golden) == v


# -- tombstones, unknown tagged fields, dispatch ----------------------------------------------
@pytest.mark.parametrize("key", KEYS, ids=lambda k: type(k).__name__)
def test_tombstones(key):
    assert encode_value(None) is None
    assert decode_value(key, None) is None
    assert decode_key(encode_key(key)) == key


def test_unknown_tagged_fields_are_skipped():
    # an unknown tag 5 after the MetadataHash
    data = b"\x00\x00" + b"\x00\x00\x00\x07" + b"\x02" + b"\x00\x08" + struct.pack(">q", 9) + b"\x05\x02\xab\xcd"
    assert decode_value(ConsumerGroupMetadataKey("g"), data) == ConsumerGroupMetadataValue(7, 9)
    # newer Kafka's AssignmentEpochs (tag 0 inside a TopicPartitions: a compact [int32]) and an
    # unknown tag at the value's end
    data = (b"\x00\x00" + b"\x00\x00\x00\x02" * 2 + b"\x00"
            + b"\x02" + T1_BYTES + b"\x02\x00\x00\x00\x04" + b"\x01\x00\x05\x02\x00\x00\x00\x02"
            + b"\x01" + b"\x01\x07\x00")
    assert decode_value(ConsumerGroupCurrentMemberAssignmentKey("g", "m"), data) == \
        ConsumerGroupCurrentMemberAssignmentValue(2, 2, 0, {T1: (4,)}, {}, {T1: (2,)}, {})
    # inside ClassicMemberMetadata, its protocols, and beside it
    classic = b"\x01" + b"\x00\x00\x00\x0a" + b"\x02\x02p\x01" + b"\x01\x09\x00" + b"\x01\x03\x01\xff"
    data = (b"\x00\x00" + b"\x00\x00\x02c\x02h\x01\x00" + b"\x00\x00\x00\x01" + b"\x00"
            + b"\x02" + b"\x00" + bytes([len(classic)]) + classic + b"\x04\x00")
    assert decode_value(ConsumerGroupMemberMetadataKey("g", "m"), data) == ConsumerGroupMemberMetadataValue(
        None, None, "c", "h", [], None, 1, None, ClassicMemberMetadata(10, [("p", b"")]))


def test_classic_member_metadata_null_marker():
    # tag 0 present with the null marker: Kafka reads a null struct
    data = b"\x00\x00" + b"\x00\x00\x02c\x02h\x01\x00" + b"\x00\x00\x00\x01" + b"\x00" + b"\x01\x00\x01\x00"
    value = decode_value(ConsumerGroupMemberMetadataKey("g", "m"), data)
    assert isinstance(value, ConsumerGroupMemberMetadataValue)
    assert value.classic_member_metadata is None


def test_classic_records_still_decode_beside_them():
    k = OffsetCommitKey("g", "t", 0)
    assert decode_key(encode_key(k)) == k
    assert decode_value(k, encode_value(OffsetCommitValue(1, "", 2))) == OffsetCommitValue(1, "", 2)
    g = GroupMetadataKey("g")
    v = GroupMetadataValue("consumer", 1, "range", "m")
    assert decode_value(g, encode_value(v)) == v


@pytest.mark.parametrize(
    "data",
    [
        b"\x00\x09\x00\x01g",            # ShareGroupPartitionMetadata (not read)
        b"\x00\x0d\x00\x01g",            # ShareGroupTargetAssignmentMember without its MemberId
        b"\x00\x11\x00\x01g",            # StreamsGroupMetadata
        b"\x7f\xff\x00\x01g",
        b"\x00\x03\xff\xff",             # a null GroupId
        b"\x00\x05\x00\x01g\xff\xff",    # a null MemberId
        b"\x00\x05\x00\x01g",            # no MemberId
        b"\x00\x10\x00\x01g\x00\x05ab",  # a truncated regular expression
        b"\x00\x03\x00\x02\xc3\x28",     # invalid UTF-8
        b"\x00",
        b"",
    ],
)
def test_bad_keys(data):
    with pytest.raises(RecordFormatError):
        decode_key(data)


@pytest.mark.parametrize(
    "key, data",
    [
        (ConsumerGroupMetadataKey("g"), b"\x00\x01\x00\x00\x00\x07\x00"),         # version 1
        (ConsumerGroupMetadataKey("g"), b"\xff\xff\x00\x00\x00\x07\x00"),         # version -1
        (ConsumerGroupMetadataKey("g"), b"\x00\x00\x00\x00\x00\x07"),             # no tagged fields
        (ConsumerGroupMetadataKey("g"), b"\x00\x00\x00\x00\x00\x07\x01\x00\x04\x00\x00\x00\x01"),  # hash of 4 bytes
        (ConsumerGroupMetadataKey("g"), b"\x00\x00\x00\x00\x00\x07\x01\x00\x09" + b"\x00" * 9),  # hash of 9 bytes
        (ConsumerGroupMetadataKey("g"), b"\x00\x00\x00\x00\x00\x07\x01\x05\x10\x00"),  # tag runs past the end
        (ConsumerGroupMetadataKey("g"), b"\x00\x00\x00\x00\x00\x07\xff\xff\xff\xff\xff\xff"),  # overlong varint
        (ConsumerGroupRegularExpressionKey("g", "x"), b"\x00\x00\x00" + b"\x00" * 17),  # null Topics
        (ConsumerGroupRegularExpressionKey("g", "x"), b"\x00\x00\x02\x00" + b"\x00" * 17),  # a null topic
        (ConsumerGroupRegularExpressionKey("g", "x"), b"\x00\x00\xff\xff\xff\xff\x0f"),  # 4G topics
        (ConsumerGroupMemberMetadataKey("g", "m"), b"\x00\x00\x00\x00\x00\x02h\x01\x00\x00\x00\x00\x01\x00\x00"),
        (ConsumerGroupMemberMetadataKey("g", "m"), b"\x00\x00\x00\x00\x02\xff\x02h\x01\x00" + b"\x00" * 6),
        (ConsumerGroupTargetAssignmentMemberKey("g", "m"),  # a topic twice: Kafka's replay rejects it too
         b"\x00\x00\x03" + T1_BYTES + b"\x01\x00" + T1_BYTES + b"\x01\x00\x00"),
        (ConsumerGroupCurrentMemberAssignmentKey("g", "m"), b"\x00\x00" + b"\x00" * 8),  # no State
        (ConsumerGroupPartitionMetadataKey("g"), b"\x00\x00\x02" + T1_BYTES[:10]),  # a truncated uuid
        (ConsumerGroupPartitionMetadataKey("g"), b"\x00\x00"),
        (ConsumerGroupPartitionMetadataKey("g"), b"\x00"),
        (ConsumerGroupPartitionMetadataKey("g"), b""),
    ],
)
def test_bad_values(key, data):
    with pytest.raises(RecordFormatError):
        decode_value(key, data)


def test_encode_value_refuses_other_versions():
    with pytest.raises(ValueError):
        encode_value(ConsumerGroupMetadataValue(1), version=1)
    assert encode_value(ConsumerGroupMetadataValue(1), version=0) == encode_value(ConsumerGroupMetadataValue(1))


def test_lag_report_commit_reader_skips_consumer_group_records():
    sources = pytest.importorskip("gregor.lagreport.sources")
    pairs = [(encode_key(k), encode_value(ConsumerGroupMetadataValue(3))) for k in KEYS[:1]]
    pairs += [(encode_key(k), None) for k in KEYS]
    pairs.append((encode_key(OffsetCommitKey("g", "t", 2)), encode_value(OffsetCommitValue(5, "m", 6))))
    cols = sources.decode_commits(iter(pairs))
    assert cols["group"] == ["g"] and cols["offset"] == [5]


# -- fuzz ---------------------------------------------------------------------------------------
int8 = st.integers(-(2**7), 2**7 - 1)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
text = st.text(max_size=12)
uuids = st.uuids()
partitions = st.lists(int32, max_size=5).map(tuple)
assignments = st.dictionaries(uuids, partitions, max_size=4)

def _epochs_for(assignment):
    """KIP-1251 assignment epochs for some of the topics of ``assignment``, aligned with them."""
    return st.fixed_dictionaries({}, optional={t: st.tuples(*[int32] * len(ps)) for t, ps in assignment.items()})


VALUES = {
    ConsumerGroupMetadataKey: st.builds(ConsumerGroupMetadataValue, int32, int64, int64),
    ConsumerGroupPartitionMetadataKey: st.builds(
        ConsumerGroupPartitionMetadataValue,
        st.lists(st.builds(TopicMetadata, uuids, text, int32,
                           st.dictionaries(int32, st.lists(text, max_size=3), max_size=3)), max_size=3)),
    ConsumerGroupMemberMetadataKey: st.builds(
        ConsumerGroupMemberMetadataValue, st.none() | text, st.none() | text, text, text,
        st.lists(text, max_size=4), st.none() | text, int32, st.none() | text,
        st.none() | st.builds(ClassicMemberMetadata, int32,
                              st.lists(st.tuples(text, st.binary(max_size=8)), max_size=3))),
    ConsumerGroupTargetAssignmentMetadataKey: st.builds(ConsumerGroupTargetAssignmentMetadataValue, int32, int64),
    ConsumerGroupTargetAssignmentMemberKey: st.builds(ConsumerGroupTargetAssignmentMemberValue, assignments),
    ConsumerGroupCurrentMemberAssignmentKey: st.tuples(int32, int32, int8, assignments, assignments).flatmap(
        lambda t: st.builds(lambda ea, ep: ConsumerGroupCurrentMemberAssignmentValue(*t, ea, ep),
                            _epochs_for(t[3]), _epochs_for(t[4]))),
    ConsumerGroupRegularExpressionKey: st.builds(
        ConsumerGroupRegularExpressionValue, st.lists(text, max_size=4), int64, int64),
}
KEY_STRATEGIES = [
    st.builds(ConsumerGroupMetadataKey, text),
    st.builds(ConsumerGroupPartitionMetadataKey, text),
    st.builds(ConsumerGroupMemberMetadataKey, text, text),
    st.builds(ConsumerGroupTargetAssignmentMetadataKey, text),
    st.builds(ConsumerGroupTargetAssignmentMemberKey, text, text),
    st.builds(ConsumerGroupCurrentMemberAssignmentKey, text, text),
    st.builds(ConsumerGroupRegularExpressionKey, text, text),
]
key_and_value = st.sampled_from(list(VALUES)).flatmap(
    lambda cls: st.tuples(st.builds(cls, *[text] * (len(cls.__slots__))), VALUES[cls]))

FUZZ = settings(max_examples=400, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(st.one_of(KEY_STRATEGIES))
def test_fuzz_key_round_trip(key):
    assert decode_key(encode_key(key)) == key


@FUZZ
@given(key_and_value)
def test_fuzz_value_round_trip(kv):
    key, value = kv
    assert decode_key(encode_key(key)) == key
    assert decode_value(key, encode_value(value)) == value


def _mutate(data: bytes, draw) -> bytes:
    kind = draw(st.sampled_from(["truncate", "flip", "insert", "delete", "set"]))
    if not data:
        return draw(st.binary(max_size=8))
    i = draw(st.integers(0, len(data) - 1))
    if kind == "truncate":
        return data[:i]
    if kind == "flip":
        return data[:i] + bytes([data[i] ^ draw(st.integers(1, 255))]) + data[i + 1:]
    if kind == "insert":
        return data[:i] + draw(st.binary(min_size=1, max_size=4)) + data[i:]
    if kind == "delete":
        return data[:i] + data[i + draw(st.integers(1, 4)):]
    return data[:i] + draw(st.sampled_from([b"\x00", b"\x01", b"\x7f", b"\x80", b"\xff"])) + data[i + 1:]


def _decodes_or_format_error(fn, *args):
    try:
        fn(*args)
    except RecordFormatError:
        pass


@FUZZ
@given(key_and_value, st.data())
def test_fuzz_mutated_values_decode_or_raise_record_format_error(kv, data):
    key, value = kv
    encoded = encode_value(value)
    assert encoded is not None
    for _ in range(3):
        encoded = _mutate(encoded, data.draw)
        _decodes_or_format_error(decode_value, key, encoded)


@FUZZ
@given(st.one_of(KEY_STRATEGIES), st.data())
def test_fuzz_mutated_keys_decode_or_raise_record_format_error(key, data):
    encoded = encode_key(key)
    for _ in range(3):
        encoded = _mutate(encoded, data.draw)
        _decodes_or_format_error(decode_key, encoded)


@FUZZ
@given(st.sampled_from(KEYS), st.binary(max_size=64))
def test_fuzz_random_bytes(key, raw):
    _decodes_or_format_error(decode_value, key, raw)
    _decodes_or_format_error(decode_value, key, b"\x00\x00" + raw)
    for record_type in (3, 4, 5, 6, 7, 8, 16):
        _decodes_or_format_error(decode_key, struct.pack(">h", record_type) + raw)


@FUZZ
@given(key_and_value)
def test_fuzz_every_truncation(kv):
    key, value = kv
    encoded = encode_value(value)
    assert encoded is not None
    for end in range(len(encoded)):
        with pytest.raises(RecordFormatError):
            decode_value(key, encoded[:end])


def test_assignment_epochs_are_written_where_kafka_4_3_writes_them():
    """KIP-1251: tag 0 of each TopicPartitions entry, a compact int32 array aligned with the
    partitions, in both arrays; read back as written; a record without them reads as none."""
    v = ConsumerGroupCurrentMemberAssignmentValue(7, 6, 1, {T1: (1, 4)}, {T1: (2,)}, {T1: (3, 7)}, {T1: (5,)})
    data = encode_value(v)
    assert data == (b"\x00\x00" + b"\x00\x00\x00\x07" + b"\x00\x00\x00\x06" + b"\x01"
                    + b"\x02" + T1_BYTES + b"\x03\x00\x00\x00\x01\x00\x00\x00\x04"
                    + b"\x01\x00\x09\x03\x00\x00\x00\x03\x00\x00\x00\x07"
                    + b"\x02" + T1_BYTES + b"\x02\x00\x00\x00\x02" + b"\x01\x00\x05\x02\x00\x00\x00\x05"
                    + b"\x00")
    assert decode_value(ConsumerGroupCurrentMemberAssignmentKey("g", "m"), data) == v
    old = ConsumerGroupCurrentMemberAssignmentValue(7, 6, 0, {T1: (1,)}, {})
    assert decode_value(ConsumerGroupCurrentMemberAssignmentKey("g", "m"), encode_value(old)) == old
    with pytest.raises(ValueError):
        encode_value(ConsumerGroupCurrentMemberAssignmentValue(7, 6, 0, {T1: (1, 2)}, {}, {T1: (3,)}, {}))
