"""The consumer protocol's member metadata and assignment bytes (ConsumerProtocolSubscription and
ConsumerProtocolAssignment v0) as a Kafka consumer sends them."""

from __future__ import annotations

import struct


def _string(s: str) -> bytes:
    raw = s.encode()
    return struct.pack(">h", len(raw)) + raw


def subscription(*topics: str) -> bytes:
    return struct.pack(">hi", 0, len(topics)) + b"".join(_string(t) for t in topics) + struct.pack(">i", -1)


def assignment(partitions: dict[str, list[int]]) -> bytes:
    out = struct.pack(">hi", 0, len(partitions))
    for topic, parts in partitions.items():
        out += _string(topic) + struct.pack(f">i{len(parts)}i", len(parts), *parts)
    return out + struct.pack(">i", -1)
