"""Which ``__consumer_offsets`` partition owns a group: Kafka's
``Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions``."""

from __future__ import annotations


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
    return kafka_abs(java_string_hashcode(group_id)) % partitions
