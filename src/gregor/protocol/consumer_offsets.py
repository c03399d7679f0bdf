"""``__consumer_offsets``: the topic's name, which partition owns a group, and its record
formats, byte-compatible with Apache Kafka. A wire format: the group coordinator writes and
reads these records, and the lag report and the CLI read the same bytes and placement without
importing the coordinator.

**Placement** (``partition_for``): Kafka's ``Utils.abs(groupId.hashCode()) %
offsets.topic.num.partitions``, the hash being Java's ``String.hashCode`` over UTF-16 code units.

**Records.** Every record key and value starts with an int16 version. Keys:
- version 0 or 1: OffsetCommitKey  (group string, topic string, partition int32)
- version 2:      GroupMetadataKey (group string)
Values (null = tombstone):
- OffsetCommitValue v0-v4: offset int64, leaderEpoch int32 (v3+), metadata string,
  commitTimestamp int64, expireTimestamp int64 (v1 only); v4 is flexible.
- GroupMetadataValue v0-v4: protocolType string, generation int32, protocol and leader nullable
  strings, currentStateTimestamp int64 (v2+), members [memberId, groupInstanceId (v3+), clientId,
  clientHost, rebalanceTimeout int32 (v1+), sessionTimeout int32, subscription bytes, assignment
  bytes]; v4 is flexible.

Gregor writes what Kafka's own coordinator writes for these groups: key v1 and OffsetCommitValue
v3 (v1 when the commit carries an expire timestamp), GroupMetadataKey v2 and GroupMetadataValue v3,
so Kafka's tools (and Burrow, kafka-lag-exporter, ...) decode them. It reads every version; a
record it cannot read raises RecordFormatError.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

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


Key = OffsetCommitKey | GroupMetadataKey
Value = OffsetCommitValue | GroupMetadataValue


# -- writing ----------------------------------------------------------------------------------
class _Writer:
    def __init__(self, flexible: bool = False) -> None:
        self.out = bytearray()
        self.flexible = flexible

    def i16(self, v: int) -> None:
        self.out += struct.pack(">h", v)

    def i32(self, v: int) -> None:
        self.out += struct.pack(">i", v)

    def i64(self, v: int) -> None:
        self.out += struct.pack(">q", v)

    def uvarint(self, n: int) -> None:
        write_uvarint(self.out, n)

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


def encode_key(key: Key) -> bytes:
    if isinstance(key, OffsetCommitKey):
        g, t = key.group.encode(), key.topic.encode()
        return b"".join((_H.pack(OFFSET_COMMIT_KEY_VERSION), _H.pack(len(g)), g, _H.pack(len(t)), t,
                         _I.pack(key.partition)))
    g = key.group.encode()
    return _H.pack(GROUP_METADATA_KEY_VERSION) + _H.pack(len(g)) + g


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
    version = GROUP_METADATA_VALUE_VERSION if version is None else version
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


# -- reading ----------------------------------------------------------------------------------
class _Reader:
    def __init__(self, data: bytes, flexible: bool = False, pos: int = 0) -> None:
        self.data = data
        self.pos = pos
        self.flexible = flexible

    def _take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise RecordFormatError("record truncated")
        b = self.data[self.pos : self.pos + n]
        self.pos += n
        return b

    def i16(self) -> int:
        return int(struct.unpack(">h", self._take(2))[0])

    def i32(self) -> int:
        return int(struct.unpack(">i", self._take(4))[0])

    def i64(self) -> int:
        return int(struct.unpack(">q", self._take(8))[0])

    def uvarint(self) -> int:
        value, self.pos = read_uvarint(self.data, self.pos, len(self.data), RecordFormatError)
        return value

    def string(self) -> str | None:
        n = self.uvarint() - 1 if self.flexible else self.i16()
        if n < 0:
            return None
        return self._take(n).decode("utf-8")

    def bytes_(self) -> bytes:
        n = self.uvarint() - 1 if self.flexible else self.i32()
        return b"" if n < 0 else self._take(n)

    def array_len(self) -> int:
        return self.uvarint() - 1 if self.flexible else self.i32()

    def skip_tags(self) -> None:
        if self.flexible:
            for _ in range(self.uvarint()):
                self.uvarint()
                self._take(self.uvarint())


def decode_key(data: bytes) -> Key:
    r = _Reader(data)
    version = r.i16()
    if version in (0, 1):
        return OffsetCommitKey(r.string() or "", r.string() or "", r.i32())
    if version == 2:
        return GroupMetadataKey(r.string() or "")
    raise RecordFormatError(f"unknown __consumer_offsets key version {version}")


def decode_value(key: Key, data: bytes | None) -> Value | None:
    if data is None:
        return None
    r = _Reader(data)
    version = r.i16()
    r.flexible = version >= 4
    if isinstance(key, OffsetCommitKey):
        if not 0 <= version <= 4:
            raise RecordFormatError(f"unknown OffsetCommitValue version {version}")
        offset = r.i64()
        leader_epoch = r.i32() if version >= 3 else -1
        metadata = r.string() or ""
        commit_ts = r.i64()
        expire_ts = r.i64() if version == 1 else -1
        r.skip_tags()
        return OffsetCommitValue(offset, metadata, commit_ts, leader_epoch, expire_ts)
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
