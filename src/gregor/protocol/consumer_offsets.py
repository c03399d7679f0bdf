"""``__consumer_offsets``: the topic's name, which partition owns a group, and its record
formats, byte-compatible with Apache Kafka. A wire format: the group coordinator writes and
reads these records, and the lag report and the CLI read the same bytes and placement without
importing the coordinator.

**Placement** (``partition_for``): Kafka's ``Utils.abs(groupId.hashCode()) %
offsets.topic.num.partitions``, the hash being Java's ``String.hashCode`` over UTF-16 code units.

**Records.** Every record key starts with an int16: a version for the classic records (0-2), the
record type for the others (Kafka 4's CoordinatorRecordType; the same number was the key's version
before). Keys are never flexible (int16-length strings). Values start with an int16 version.
Keys:
- 0 or 1: OffsetCommitKey  (group string, topic string, partition int32)
- 2:      GroupMetadataKey (group string)
- 3:      ConsumerGroupMetadataKey (group)
- 4:      ConsumerGroupPartitionMetadataKey (group); Kafka 4.1+ only deletes it
- 5:      ConsumerGroupMemberMetadataKey (group, member id)
- 6:      ConsumerGroupTargetAssignmentMetadataKey (group)
- 7:      ConsumerGroupTargetAssignmentMemberKey (group, member id)
- 8:      ConsumerGroupCurrentMemberAssignmentKey (group, member id)
- 16:     ConsumerGroupRegularExpressionKey (group, regular expression)
Share and streams group records (types 9-15, 17-23) raise RecordFormatError like any unknown type.
Values (null = tombstone):
- OffsetCommitValue v0-v4: offset int64, leaderEpoch int32 (v3+), metadata string,
  commitTimestamp int64, expireTimestamp int64 (v1 only); v4 is flexible.
- GroupMetadataValue v0-v4: protocolType string, generation int32, protocol and leader nullable
  strings, currentStateTimestamp int64 (v2+), members [memberId, groupInstanceId (v3+), clientId,
  clientHost, rebalanceTimeout int32 (v1+), sessionTimeout int32, subscription bytes, assignment
  bytes]; v4 is flexible.
- The consumer group (KIP-848) values have one version, 0, and are flexible (compact strings and
  arrays, uuids as 16 bytes, tagged fields; unknown tags are skipped):
  - ConsumerGroupMetadataValue: epoch int32; tagged: 0 metadataHash int64 (Kafka 4.1, KIP-1101,
    written when not 0), 1 creationTimeMs int64 (newer Kafka, written when not -1).
  - ConsumerGroupPartitionMetadataValue: topics [topicId uuid, topicName string, numPartitions
    int32, partitionMetadata [partition int32, racks [string]]]. Kafka 4.0 writes it (with no
    racks); 4.1 replaced it by metadataHash and writes only its tombstone.
  - ConsumerGroupMemberMetadataValue: instanceId, rackId nullable strings, clientId, clientHost
    strings, subscribedTopicNames [string], subscribedTopicRegex nullable string,
    rebalanceTimeoutMs int32, serverAssignor nullable string; tagged: 0 classicMemberMetadata, a
    nullable struct (presence varint 1, then sessionTimeoutMs int32, supportedProtocols [name
    string, metadata bytes]).
  - ConsumerGroupTargetAssignmentMetadataValue: assignmentEpoch int32; tagged: 0
    assignmentTimestamp int64 (newer Kafka, KIP-1263, written when not 0).
  - ConsumerGroupTargetAssignmentMemberValue: topicPartitions [topicId uuid, partitions [int32]].
  - ConsumerGroupCurrentMemberAssignmentValue: memberEpoch, previousMemberEpoch int32, state
    int8, assignedPartitions and partitionsPendingRevocation [topicId uuid, partitions [int32]].
  - ConsumerGroupRegularExpressionValue: topics [string], version int64, timestamp int64.

Gregor writes what Kafka's own coordinator writes for these groups: key v1 and OffsetCommitValue
v3 (v1 when the commit carries an expire timestamp), GroupMetadataKey v2 and GroupMetadataValue v3,
version 0 of the consumer group values, so Kafka's tools (and Burrow, kafka-lag-exporter, ...)
decode them. It reads every version; a record it cannot read (truncated, malformed, of an unknown
type or version, a null where the schema has none, invalid UTF-8, a topic twice in an assignment,
which Kafka's replay rejects too) raises RecordFormatError.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from gregor.protocol.varint import read_uvarint, write_uvarint

OFFSETS_TOPIC = "__consumer_offsets"


# -- placement --------------------------------------------------------------------------------
def java_string_hashcode(s: str) -> int:
    """Java's String.hashCode: s[0]*31^(n-1) + ... over UTF-16 code units, int32 wrap-around."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def kafka_abs(n: int) -> int:
    """Kafka's Utils.abs: Integer.MIN_VALUE maps to 0 (Math.abs would keep it negative)."""
    return 0 if n == -(2**31) else abs(n)


def partition_for(group_id: str, partitions: int) -> int:
    """The ``__consumer_offsets`` partition that owns ``group_id``."""
    return kafka_abs(java_string_hashcode(group_id)) % partitions


# -- records ----------------------------------------------------------------------------------
OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
OFFSET_COMMIT_VALUE_WITH_EXPIRY_VERSION = 1
GROUP_METADATA_VALUE_VERSION = 3

# The consumer group (KIP-848) record types: the int16 that starts the key (Kafka 4's
# CoordinatorRecordType ids; Kafka 3.x wrote the same numbers as the keys' versions).
CONSUMER_GROUP_METADATA_TYPE = 3
CONSUMER_GROUP_PARTITION_METADATA_TYPE = 4
CONSUMER_GROUP_MEMBER_METADATA_TYPE = 5
CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_TYPE = 6
CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_TYPE = 7
CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_TYPE = 8
CONSUMER_GROUP_REGULAR_EXPRESSION_TYPE = 16
# Their values' only version (what Kafka writes and the only one it reads).
CONSUMER_GROUP_VALUE_VERSION = 0


class RecordFormatError(ValueError):
    """A key or value that is truncated, malformed or of an unknown version."""


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str


@dataclass(slots=True)
class OffsetCommitValue:
    offset: int
    metadata: str
    commit_timestamp: int
    leader_epoch: int = -1
    expire_timestamp: int = -1


@dataclass(slots=True)
class MemberMetadata:
    member_id: str
    client_id: str
    client_host: str
    session_timeout: int
    rebalance_timeout: int
    subscription: bytes
    assignment: bytes
    group_instance_id: str | None = None


@dataclass(slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = -1
    members: list[MemberMetadata] = field(default_factory=list)


# -- consumer group (KIP-848) records ---------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataValue:
    """The group epoch. ``metadata_hash`` (Kafka 4.1) hashes the subscribed topics' metadata;
    ``creation_time_ms`` is newer than 4.1. Each is a tagged field written only when it is not
    its default."""

    epoch: int
    metadata_hash: int = 0
    creation_time_ms: int = -1


@dataclass(frozen=True, slots=True)
class ConsumerGroupPartitionMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    """``partition_metadata`` maps a partition to its replicas' racks (Kafka writes it empty
    since 4.0 and has not read it since)."""

    topic_id: uuid.UUID
    topic_name: str
    num_partitions: int
    partition_metadata: dict[int, list[str]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ConsumerGroupPartitionMetadataValue:
    topics: list[TopicMetadata] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataKey:
    group: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """A member that joined with the classic protocol: its session timeout and its protocols,
    (name, metadata) in the order it sent them."""

    session_timeout_ms: int
    supported_protocols: list[tuple[str, bytes]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: list[str]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None
    classic_member_metadata: ClassicMemberMetadata | None = None


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadataValue:
    """``assignment_timestamp`` (newer than 4.1, KIP-1263) is a tagged field written when not 0."""

    assignment_epoch: int
    assignment_timestamp: int = 0


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMemberKey:
    group: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMemberValue:
    """Topic id -> partitions, written as an array in the dict's order."""

    topic_partitions: dict[uuid.UUID, tuple[int, ...]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentKey:
    group: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentValue:
    """``state`` is Kafka's MemberState byte (0 stable, 1 unrevoked partitions, 2 unreleased
    partitions, 127 unknown). The partitions are written in the dicts' order."""

    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned_partitions: dict[uuid.UUID, tuple[int, ...]] = field(default_factory=dict)
    partitions_pending_revocation: dict[uuid.UUID, tuple[int, ...]] = field(default_factory=dict)
    # KIP-1251 (Kafka 4.3): per topic, the epoch each partition was assigned at, aligned with the
    # partitions (tagged field 0 of each topic entry); a topic without them was written before
    assigned_epochs: dict[uuid.UUID, tuple[int, ...]] = field(default_factory=dict)
    pending_revocation_epochs: dict[uuid.UUID, tuple[int, ...]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ConsumerGroupRegularExpressionKey:
    group: str
    regular_expression: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupRegularExpressionValue:
    """The topics a subscribed regular expression resolved to, the metadata ``version`` it was
    resolved against and when (``timestamp``, ms)."""

    topics: list[str]
    version: int
    timestamp: int


ConsumerGroupKey = (ConsumerGroupMetadataKey | ConsumerGroupPartitionMetadataKey | ConsumerGroupMemberMetadataKey
                    | ConsumerGroupTargetAssignmentMetadataKey | ConsumerGroupTargetAssignmentMemberKey
                    | ConsumerGroupCurrentMemberAssignmentKey | ConsumerGroupRegularExpressionKey)
ConsumerGroupValue = (ConsumerGroupMetadataValue | ConsumerGroupPartitionMetadataValue
                      | ConsumerGroupMemberMetadataValue | ConsumerGroupTargetAssignmentMetadataValue
                      | ConsumerGroupTargetAssignmentMemberValue | ConsumerGroupCurrentMemberAssignmentValue
                      | ConsumerGroupRegularExpressionValue)
Key = OffsetCommitKey | GroupMetadataKey | ConsumerGroupKey
Value = OffsetCommitValue | GroupMetadataValue | ConsumerGroupValue


# -- writing ----------------------------------------------------------------------------------
class _Writer:
    def __init__(self, flexible: bool = False) -> None:
        self.out = bytearray()
        self.flexible = flexible

    def i8(self, v: int) -> None:
        self.out += struct.pack(">b", v)

    def i16(self, v: int) -> None:
        self.out += struct.pack(">h", v)

    def i32(self, v: int) -> None:
        self.out += struct.pack(">i", v)

    def i64(self, v: int) -> None:
        self.out += struct.pack(">q", v)

    def uvarint(self, n: int) -> None:
        write_uvarint(self.out, n)

    def uuid_(self, u: uuid.UUID) -> None:
        self.out += u.bytes

    def string(self, s: str | None) -> None:
        if s is None:
            if self.flexible:
                self.uvarint(0)
            else:
                self.i16(-1)
            return
        b = s.encode()
        if self.flexible:
            self.uvarint(len(b) + 1)
        else:
            self.i16(len(b))
        self.out += b

    def bytes_(self, b: bytes) -> None:
        if self.flexible:
            self.uvarint(len(b) + 1)
        else:
            self.i32(len(b))
        self.out += b

    def array_len(self, n: int) -> None:
        if self.flexible:
            self.uvarint(n + 1)
        else:
            self.i32(n)

    def tags(self) -> None:
        if self.flexible:
            self.uvarint(0)

    def tagged_fields(self, fields: list[tuple[int, bytes]]) -> None:
        """The tagged-field section: count, then (tag, size, bytes) in ascending tag order."""
        self.uvarint(len(fields))
        for tag, data in fields:
            self.uvarint(tag)
            self.uvarint(len(data))
            self.out += data


def encode_key(key: Key) -> bytes:
    if isinstance(key, OffsetCommitKey):
        g, t = key.group.encode(), key.topic.encode()
        return b"".join((_H.pack(OFFSET_COMMIT_KEY_VERSION), _H.pack(len(g)), g, _H.pack(len(t)), t,
                         _I.pack(key.partition)))
    if isinstance(key, GroupMetadataKey):
        g = key.group.encode()
        return _H.pack(GROUP_METADATA_KEY_VERSION) + _H.pack(len(g)) + g
    record_type = _CONSUMER_GROUP_KEY_TYPES.get(type(key))
    if record_type is None:
        extra = EXTRA_KEY_TYPES.get(type(key))
        if extra is None:
            raise TypeError(f"not a __consumer_offsets key: {key!r}")
        w = _Writer()
        w.i16(extra[0])
        extra[1](w, key)
        return bytes(w.out)
    w = _Writer()
    w.i16(record_type)
    w.string(key.group)
    if isinstance(key, ConsumerGroupRegularExpressionKey):
        w.string(key.regular_expression)
    elif isinstance(key, (ConsumerGroupMemberMetadataKey, ConsumerGroupTargetAssignmentMemberKey,
                          ConsumerGroupCurrentMemberAssignmentKey)):
        w.string(key.member_id)
    return bytes(w.out)


_H = struct.Struct(">h")
_I = struct.Struct(">i")
_OFFSET_V3_HEAD = struct.Struct(">hqih")


def encode_value(value: Value | None, version: int | None = None) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, OffsetCommitValue):
        if version is None:
            version = (OFFSET_COMMIT_VALUE_WITH_EXPIRY_VERSION if value.expire_timestamp >= 0
                       else OFFSET_COMMIT_VALUE_VERSION)
        if version == OFFSET_COMMIT_VALUE_VERSION:  # the common case, packed in one go
            meta = value.metadata.encode()
            return (_OFFSET_V3_HEAD.pack(3, value.offset, value.leader_epoch, len(meta)) + meta
                    + struct.pack(">q", value.commit_timestamp))
        w = _Writer(flexible=version >= 4)
        w.i16(version)
        w.i64(value.offset)
        if version >= 3:
            w.i32(value.leader_epoch)
        w.string(value.metadata)
        w.i64(value.commit_timestamp)
        if version == 1:
            w.i64(value.expire_timestamp)
        w.tags()
        return bytes(w.out)
    if isinstance(value, GroupMetadataValue):
        return _encode_group_metadata(value, GROUP_METADATA_VALUE_VERSION if version is None else version)
    encoder = _CONSUMER_GROUP_ENCODERS.get(type(value)) or EXTRA_VALUE_ENCODERS.get(type(value))
    if encoder is None:
        raise TypeError(f"not a __consumer_offsets value: {value!r}")
    if version not in (None, CONSUMER_GROUP_VALUE_VERSION):
        raise ValueError(f"{type(value).__name__} has only version {CONSUMER_GROUP_VALUE_VERSION}")
    w = _Writer(flexible=True)
    w.i16(CONSUMER_GROUP_VALUE_VERSION)
    encoder(w, value)
    return bytes(w.out)


def _encode_group_metadata(value: GroupMetadataValue, version: int) -> bytes:
    w = _Writer(flexible=version >= 4)
    w.i16(version)
    w.string(value.protocol_type)
    w.i32(value.generation)
    w.string(value.protocol)
    w.string(value.leader)
    if version >= 2:
        w.i64(value.current_state_timestamp)
    w.array_len(len(value.members))
    for m in value.members:
        w.string(m.member_id)
        if version >= 3:
            w.string(m.group_instance_id)
        w.string(m.client_id)
        w.string(m.client_host)
        if version >= 1:
            w.i32(m.rebalance_timeout)
        w.i32(m.session_timeout)
        w.bytes_(m.subscription)
        w.bytes_(m.assignment)
        w.tags()
    w.tags()
    return bytes(w.out)


def _i64_bytes(v: int) -> bytes:
    return struct.pack(">q", v)


def _write_strings(w: _Writer, items: list[str]) -> None:
    w.array_len(len(items))
    for s in items:
        w.string(s)


def _write_topic_partitions(w: _Writer, assignment: dict[uuid.UUID, tuple[int, ...]],
                            epochs: dict[uuid.UUID, tuple[int, ...]] | None = None) -> None:
    w.array_len(len(assignment))
    for topic_id, partitions in assignment.items():
        w.uuid_(topic_id)
        w.array_len(len(partitions))
        for p in partitions:
            w.i32(p)
        es = (epochs or {}).get(topic_id)
        if es is None:
            w.tags()
            continue
        if len(es) != len(partitions):
            raise ValueError(f"topic {topic_id}: {len(es)} assignment epochs for {len(partitions)} partitions")
        f = _Writer(flexible=True)
        f.array_len(len(es))
        for e in es:
            f.i32(e)
        w.tagged_fields([(0, bytes(f.out))])


def _enc_metadata(w: _Writer, v: ConsumerGroupMetadataValue) -> None:
    w.i32(v.epoch)
    tagged = []
    if v.metadata_hash != 0:
        tagged.append((0, _i64_bytes(v.metadata_hash)))
    if v.creation_time_ms != -1:
        tagged.append((1, _i64_bytes(v.creation_time_ms)))
    w.tagged_fields(tagged)


def _enc_partition_metadata(w: _Writer, v: ConsumerGroupPartitionMetadataValue) -> None:
    w.array_len(len(v.topics))
    for t in v.topics:
        w.uuid_(t.topic_id)
        w.string(t.topic_name)
        w.i32(t.num_partitions)
        w.array_len(len(t.partition_metadata))
        for partition, racks in t.partition_metadata.items():
            w.i32(partition)
            _write_strings(w, racks)
            w.tags()
        w.tags()
    w.tags()


def _enc_member_metadata(w: _Writer, v: ConsumerGroupMemberMetadataValue) -> None:
    w.string(v.instance_id)
    w.string(v.rack_id)
    w.string(v.client_id)
    w.string(v.client_host)
    _write_strings(w, v.subscribed_topic_names)
    w.string(v.subscribed_topic_regex)
    w.i32(v.rebalance_timeout_ms)
    w.string(v.server_assignor)
    c = v.classic_member_metadata
    if c is None:  # its default: not written
        w.tags()
        return
    # A nullable struct in a tagged field: a varint 1 (present), then the struct.
    s = _Writer(flexible=True)
    s.uvarint(1)
    s.i32(c.session_timeout_ms)
    s.array_len(len(c.supported_protocols))
    for name, metadata in c.supported_protocols:
        s.string(name)
        s.bytes_(metadata)
        s.tags()
    s.tags()
    w.tagged_fields([(0, bytes(s.out))])


def _enc_target_metadata(w: _Writer, v: ConsumerGroupTargetAssignmentMetadataValue) -> None:
    w.i32(v.assignment_epoch)
    w.tagged_fields([(0, _i64_bytes(v.assignment_timestamp))] if v.assignment_timestamp != 0 else [])


def _enc_target_member(w: _Writer, v: ConsumerGroupTargetAssignmentMemberValue) -> None:
    _write_topic_partitions(w, v.topic_partitions)
    w.tags()


def _enc_current_assignment(w: _Writer, v: ConsumerGroupCurrentMemberAssignmentValue) -> None:
    w.i32(v.member_epoch)
    w.i32(v.previous_member_epoch)
    w.i8(v.state)
    _write_topic_partitions(w, v.assigned_partitions, v.assigned_epochs)
    _write_topic_partitions(w, v.partitions_pending_revocation, v.pending_revocation_epochs)
    w.tags()


def _enc_regular_expression(w: _Writer, v: ConsumerGroupRegularExpressionValue) -> None:
    _write_strings(w, v.topics)
    w.i64(v.version)
    w.i64(v.timestamp)
    w.tags()


# Record types defined beside this module (protocol/share_group_records.py registers the share
# groups' ones): key class -> (record type, writer of the key's fields after the type);
# record type -> key reader; value class -> writer; key class -> value reader.
EXTRA_KEY_TYPES: dict[type, tuple[int, Callable[[_Writer, Any], None]]] = {}
EXTRA_VALUE_ENCODERS: dict[type, Callable[[_Writer, Any], None]] = {}
EXTRA_KEY_DECODERS: dict[int, Callable[[_Reader], Any]] = {}
EXTRA_VALUE_DECODERS: dict[type, Callable[[_Reader], Any]] = {}

_CONSUMER_GROUP_KEY_TYPES: dict[type, int] = {
    ConsumerGroupMetadataKey: CONSUMER_GROUP_METADATA_TYPE,
    ConsumerGroupPartitionMetadataKey: CONSUMER_GROUP_PARTITION_METADATA_TYPE,
    ConsumerGroupMemberMetadataKey: CONSUMER_GROUP_MEMBER_METADATA_TYPE,
    ConsumerGroupTargetAssignmentMetadataKey: CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_TYPE,
    ConsumerGroupTargetAssignmentMemberKey: CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_TYPE,
    ConsumerGroupCurrentMemberAssignmentKey: CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_TYPE,
    ConsumerGroupRegularExpressionKey: CONSUMER_GROUP_REGULAR_EXPRESSION_TYPE,
}
_CONSUMER_GROUP_ENCODERS: dict[type, Callable[[_Writer, Any], None]] = {
    ConsumerGroupMetadataValue: _enc_metadata,
    ConsumerGroupPartitionMetadataValue: _enc_partition_metadata,
    ConsumerGroupMemberMetadataValue: _enc_member_metadata,
    ConsumerGroupTargetAssignmentMetadataValue: _enc_target_metadata,
    ConsumerGroupTargetAssignmentMemberValue: _enc_target_member,
    ConsumerGroupCurrentMemberAssignmentValue: _enc_current_assignment,
    ConsumerGroupRegularExpressionValue: _enc_regular_expression,
}


# -- reading ----------------------------------------------------------------------------------
class _Reader:
    def __init__(self, data: bytes, flexible: bool = False, pos: int = 0) -> None:
        self.data = data
        self.pos = pos
        self.flexible = flexible

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise RecordFormatError("record truncated")
        b = self.data[self.pos : self.pos + n]
        self.pos += n
        return b

    def remaining(self) -> int:
        return len(self.data) - self.pos

    def i8(self) -> int:
        return int(struct.unpack(">b", self._take(1))[0])

    def i16(self) -> int:
        return int(struct.unpack(">h", self._take(2))[0])

    def i32(self) -> int:
        return int(struct.unpack(">i", self._take(4))[0])

    def i64(self) -> int:
        return int(struct.unpack(">q", self._take(8))[0])

    def uvarint(self) -> int:
        value, self.pos = read_uvarint(self.data, self.pos, len(self.data), RecordFormatError)
        return value

    def uuid_(self) -> uuid.UUID:
        return uuid.UUID(bytes=bytes(self._take(16)))

    def string(self) -> str | None:
        n = self.uvarint() - 1 if self.flexible else self.i16()
        if n < 0:
            return None
        try:
            return self._take(n).decode("utf-8")
        except UnicodeDecodeError as e:
            raise RecordFormatError(f"string is not UTF-8: {e}") from None

    def required_string(self, name: str) -> str:
        s = self.string()
        if s is None:
            raise RecordFormatError(f"non-nullable {name} is null")
        return s

    def bytes_(self) -> bytes:
        n = self.uvarint() - 1 if self.flexible else self.i32()
        return b"" if n < 0 else self._take(n)

    def required_bytes(self, name: str) -> bytes:
        n = self.uvarint() - 1 if self.flexible else self.i32()
        if n < 0:
            raise RecordFormatError(f"non-nullable {name} is null")
        return self._take(n)

    def array_len(self) -> int:
        return self.uvarint() - 1 if self.flexible else self.i32()

    def required_array_len(self, name: str) -> int:
        n = self.array_len()
        if n < 0:
            raise RecordFormatError(f"non-nullable {name} is null")
        if n > self.remaining():  # every element takes at least a byte
            raise RecordFormatError(f"{name} has {n} elements, more than the record's bytes")
        return n

    def skip_tags(self) -> None:
        if self.flexible:
            for _ in range(self.uvarint()):
                self.uvarint()
                self._take(self.uvarint())

    def tagged_fields(self) -> Iterator[tuple[int, _Reader]]:
        """The tagged-field section: each field's tag and a reader over its bytes alone."""
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            yield tag, _Reader(self._take(self.uvarint()), flexible=True)

    def end_of_field(self, name: str) -> None:
        """A known tagged field's bytes must be exactly its value."""
        if self.pos != len(self.data):
            raise RecordFormatError(f"tagged field {name} has {len(self.data) - self.pos} bytes too many")


def decode_key(data: bytes) -> Key:
    r = _Reader(data)
    version = r.i16()
    if version in (0, 1):
        return OffsetCommitKey(r.string() or "", r.string() or "", r.i32())
    if version == 2:
        return GroupMetadataKey(r.string() or "")
    if version == CONSUMER_GROUP_METADATA_TYPE:
        return ConsumerGroupMetadataKey(r.required_string("group id"))
    if version == CONSUMER_GROUP_PARTITION_METADATA_TYPE:
        return ConsumerGroupPartitionMetadataKey(r.required_string("group id"))
    if version == CONSUMER_GROUP_MEMBER_METADATA_TYPE:
        return ConsumerGroupMemberMetadataKey(r.required_string("group id"), r.required_string("member id"))
    if version == CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_TYPE:
        return ConsumerGroupTargetAssignmentMetadataKey(r.required_string("group id"))
    if version == CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_TYPE:
        return ConsumerGroupTargetAssignmentMemberKey(r.required_string("group id"), r.required_string("member id"))
    if version == CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_TYPE:
        return ConsumerGroupCurrentMemberAssignmentKey(r.required_string("group id"),
                                                       r.required_string("member id"))
    if version == CONSUMER_GROUP_REGULAR_EXPRESSION_TYPE:
        return ConsumerGroupRegularExpressionKey(r.required_string("group id"),
                                                 r.required_string("regular expression"))
    extra_key = EXTRA_KEY_DECODERS.get(version)
    if extra_key is not None:
        return extra_key(r)
    raise RecordFormatError(f"unknown __consumer_offsets key version {version}")


def decode_value(key: Key, data: bytes | None) -> Value | None:
    if data is None:
        return None
    r = _Reader(data)
    version = r.i16()
    if isinstance(key, OffsetCommitKey):
        r.flexible = version >= 4
        if not 0 <= version <= 4:
            raise RecordFormatError(f"unknown OffsetCommitValue version {version}")
        offset = r.i64()
        leader_epoch = r.i32() if version >= 3 else -1
        metadata = r.string() or ""
        commit_ts = r.i64()
        expire_ts = r.i64() if version == 1 else -1
        r.skip_tags()
        return OffsetCommitValue(offset, metadata, commit_ts, leader_epoch, expire_ts)
    if isinstance(key, GroupMetadataKey):
        return _decode_group_metadata(r, version)
    decoder = _CONSUMER_GROUP_DECODERS.get(type(key)) or EXTRA_VALUE_DECODERS.get(type(key))
    if decoder is None:
        raise TypeError(f"not a __consumer_offsets key: {key!r}")
    if version != CONSUMER_GROUP_VALUE_VERSION:
        raise RecordFormatError(f"unknown {type(key).__name__[:-3]}Value version {version}")
    r.flexible = True
    return decoder(r)


def _decode_group_metadata(r: _Reader, version: int) -> GroupMetadataValue:
    r.flexible = version >= 4
    if not 0 <= version <= 4:
        raise RecordFormatError(f"unknown GroupMetadataValue version {version}")
    protocol_type = r.string() or ""
    generation = r.i32()
    protocol = r.string()
    leader = r.string()
    state_ts = r.i64() if version >= 2 else -1
    members = []
    for _ in range(r.array_len()):
        member_id = r.string() or ""
        instance = r.string() if version >= 3 else None
        client_id = r.string() or ""
        client_host = r.string() or ""
        rebalance_timeout = r.i32() if version >= 1 else -1
        session_timeout = r.i32()
        subscription = r.bytes_()
        assignment = r.bytes_()
        r.skip_tags()
        if rebalance_timeout < 0:
            rebalance_timeout = session_timeout
        members.append(MemberMetadata(member_id, client_id, client_host, session_timeout, rebalance_timeout,
                                      subscription, assignment, instance))
    r.skip_tags()
    return GroupMetadataValue(protocol_type, generation, protocol, leader, state_ts, members)


def _read_strings(r: _Reader, name: str) -> list[str]:
    return [r.required_string(name) for _ in range(r.required_array_len(name))]


def _read_i64_field(r: _Reader, name: str) -> int:
    v = r.i64()
    r.end_of_field(name)
    return v


def _read_topic_partitions(r: _Reader, name: str, epochs: dict[uuid.UUID, tuple[int, ...]] | None = None
                           ) -> dict[uuid.UUID, tuple[int, ...]]:
    """The topics and partitions; with ``epochs``, each topic's assignment epochs (KIP-1251's
    tagged field 0) go there, as written (nullable: a null or absent field is no entry)."""
    out: dict[uuid.UUID, tuple[int, ...]] = {}
    for _ in range(r.required_array_len(name)):
        topic_id = r.uuid_()
        partitions = tuple(r.i32() for _ in range(r.required_array_len("partitions")))
        found: tuple[int, ...] | None = None
        if epochs is None:
            r.skip_tags()
        for tag, f in (r.tagged_fields() if epochs is not None else ()):
            if tag == 0:
                n = f.array_len()
                if n >= 0:
                    if n * 4 > f.remaining():
                        raise RecordFormatError(f"assignment epochs of {name} have {n} elements, more than their bytes")
                    found = tuple(f.i32() for _ in range(n))
                f.end_of_field("assignmentEpochs")
        if topic_id in out:  # Kafka's replay (Collectors.toMap) fails on it too
            raise RecordFormatError(f"topic {topic_id} appears twice in {name}")
        out[topic_id] = partitions
        if epochs is not None and found is not None:
            epochs[topic_id] = found
    return out


def _dec_metadata(r: _Reader) -> ConsumerGroupMetadataValue:
    epoch = r.i32()
    metadata_hash, creation_time_ms = 0, -1
    for tag, f in r.tagged_fields():
        if tag == 0:
            metadata_hash = _read_i64_field(f, "metadataHash")
        elif tag == 1:
            creation_time_ms = _read_i64_field(f, "creationTimeMs")
    return ConsumerGroupMetadataValue(epoch, metadata_hash, creation_time_ms)


def _dec_partition_metadata(r: _Reader) -> ConsumerGroupPartitionMetadataValue:
    topics = []
    for _ in range(r.required_array_len("topics")):
        topic_id = r.uuid_()
        name = r.required_string("topic name")
        num_partitions = r.i32()
        racks: dict[int, list[str]] = {}
        for _ in range(r.required_array_len("partition metadata")):
            partition = r.i32()
            racks[partition] = _read_strings(r, "racks")  # unused by Kafka since 4.0: the last one wins
            r.skip_tags()
        r.skip_tags()
        topics.append(TopicMetadata(topic_id, name, num_partitions, racks))
    r.skip_tags()
    return ConsumerGroupPartitionMetadataValue(topics)


def _dec_classic_member_metadata(r: _Reader) -> ClassicMemberMetadata | None:
    if r.uvarint() == 0:  # a null struct
        r.end_of_field("classicMemberMetadata")
        return None
    session_timeout_ms = r.i32()
    protocols = []
    for _ in range(r.required_array_len("supported protocols")):
        name = r.required_string("protocol name")
        metadata = r.required_bytes("protocol metadata")
        r.skip_tags()
        protocols.append((name, metadata))
    r.skip_tags()
    r.end_of_field("classicMemberMetadata")
    return ClassicMemberMetadata(session_timeout_ms, protocols)


def _dec_member_metadata(r: _Reader) -> ConsumerGroupMemberMetadataValue:
    instance_id = r.string()
    rack_id = r.string()
    client_id = r.required_string("client id")
    client_host = r.required_string("client host")
    topic_names = _read_strings(r, "subscribed topic names")
    topic_regex = r.string()
    rebalance_timeout_ms = r.i32()
    server_assignor = r.string()
    classic = None
    for tag, f in r.tagged_fields():
        if tag == 0:
            classic = _dec_classic_member_metadata(f)
    return ConsumerGroupMemberMetadataValue(instance_id, rack_id, client_id, client_host, topic_names, topic_regex,
                                            rebalance_timeout_ms, server_assignor, classic)


def _dec_target_metadata(r: _Reader) -> ConsumerGroupTargetAssignmentMetadataValue:
    epoch = r.i32()
    timestamp = 0
    for tag, f in r.tagged_fields():
        if tag == 0:
            timestamp = _read_i64_field(f, "assignmentTimestamp")
    return ConsumerGroupTargetAssignmentMetadataValue(epoch, timestamp)


def _dec_target_member(r: _Reader) -> ConsumerGroupTargetAssignmentMemberValue:
    assignment = _read_topic_partitions(r, "topic partitions")
    r.skip_tags()
    return ConsumerGroupTargetAssignmentMemberValue(assignment)


def _dec_current_assignment(r: _Reader) -> ConsumerGroupCurrentMemberAssignmentValue:
    member_epoch = r.i32()
    previous_member_epoch = r.i32()
    state = r.i8()
    assigned_epochs: dict[uuid.UUID, tuple[int, ...]] = {}
    pending_epochs: dict[uuid.UUID, tuple[int, ...]] = {}
    assigned = _read_topic_partitions(r, "assigned partitions", assigned_epochs)
    pending = _read_topic_partitions(r, "partitions pending revocation", pending_epochs)
    r.skip_tags()
    return ConsumerGroupCurrentMemberAssignmentValue(member_epoch, previous_member_epoch, state, assigned, pending,
                                                     assigned_epochs, pending_epochs)


def _dec_regular_expression(r: _Reader) -> ConsumerGroupRegularExpressionValue:
    topics = _read_strings(r, "topics")
    version = r.i64()
    timestamp = r.i64()
    r.skip_tags()
    return ConsumerGroupRegularExpressionValue(topics, version, timestamp)


_CONSUMER_GROUP_DECODERS: dict[type, Callable[[_Reader], ConsumerGroupValue]] = {
    ConsumerGroupMetadataKey: _dec_metadata,
    ConsumerGroupPartitionMetadataKey: _dec_partition_metadata,
    ConsumerGroupMemberMetadataKey: _dec_member_metadata,
    ConsumerGroupTargetAssignmentMetadataKey: _dec_target_metadata,
    ConsumerGroupTargetAssignmentMemberKey: _dec_target_member,
    ConsumerGroupCurrentMemberAssignmentKey: _dec_current_assignment,
    ConsumerGroupRegularExpressionKey: _dec_regular_expression,
}


# the share groups' record types register themselves here (imported last: they use the writer and reader)
from gregor.protocol import share_group_records as _share_group_records  # noqa: E402,F401
