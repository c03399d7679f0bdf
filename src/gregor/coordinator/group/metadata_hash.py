"""The metadata hash of a consumer group's subscribed topics (Kafka 4.1, KIP-1101).

A consumer-protocol group's target assignment depends on its subscribed topics: their ids,
partition counts and the racks of each partition's replicas. Kafka 4.1 keeps one 64-bit hash of
all of it in the group's ConsumerGroupMetadata record (tagged field MetadataHash) instead of the
per-topic ConsumerGroupPartitionMetadata record of 4.0; a heartbeat that finds another hash bumps
the group epoch (a new target assignment). The bytes hashed are Kafka's, so that a group moved
between Gregor and Kafka keeps its hash:

- a topic: XXH3-64 (seed 0) over a magic byte 0, the topic id (most then least significant
  64 bits), the name, the partition count, then for each partition its index and the racks of
  its replicas, sorted (duplicates kept: a rack holding two replicas counts twice); integers
  little-endian, strings as UTF-16 code units with their length after them (hash4j's stream
  layout, which Kafka's ``Utils.computeTopicHash`` feeds); a rack is preceded by its length too;
- the group: XXH3-64 over the topic hashes (64-bit little-endian) in the order of the topic
  names; 0 for no topic. Only topics that exist count.

Hashes are signed 64-bit integers, as Java's ``long``.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterable, Mapping, Sequence

import xxhash

MAGIC = 0


def _signed(u: int) -> int:
    return u - (1 << 64) if u >= 1 << 63 else u


def _java_order(s: str) -> bytes:
    """A key that sorts strings as Java's String.compareTo (UTF-16 code units)."""
    return s.encode("utf-16-be")


def _string(s: str) -> bytes:
    b = s.encode("utf-16-le")
    return b + struct.pack("<i", len(b) // 2)


def topic_hash(topic_id: uuid.UUID, name: str, racks: Sequence[Iterable[str]]) -> int:
    """The hash of a topic with ``len(racks)`` partitions; ``racks[i]``: the racks of partition
    i's replicas (brokers without a rack contribute nothing)."""
    msb, lsb = struct.unpack(">qq", topic_id.bytes)
    out = bytearray(b"\x00")
    out += struct.pack("<qq", msb, lsb)
    out += _string(name)
    out += struct.pack("<i", len(racks))
    for i, rs in enumerate(racks):
        out += struct.pack("<i", i)
        for r in sorted(rs, key=_java_order):
            out += struct.pack("<i", len(r.encode("utf-16-le")) // 2)
            out += _string(r)
    return _signed(xxhash.xxh3_64_intdigest(bytes(out)))


def group_hash(topic_hashes: Mapping[str, int]) -> int:
    """The hash of a group's subscribed topics (name -> topic hash, existing topics only)."""
    if not topic_hashes:
        return 0
    data = b"".join(struct.pack("<q", topic_hashes[n]) for n in sorted(topic_hashes, key=_java_order))
    return _signed(xxhash.xxh3_64_intdigest(data))
