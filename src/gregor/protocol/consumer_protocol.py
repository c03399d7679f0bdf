"""The consumer protocol's member metadata and assignment (ConsumerProtocolSubscription /
ConsumerProtocolAssignment, non-flexible versions 0-3): version, topics, user data."""

from __future__ import annotations

import struct


def decode_assignment(data: bytes) -> list[tuple[str, list[int]]]:
    """[(topic, [partitions])] of a member's assignment; [] when it is not consumer protocol."""
    try:
        pos = 2
        (n,) = struct.unpack_from(">i", data, pos)
        pos += 4
        out = []
        for _ in range(max(n, 0)):
            (ln,) = struct.unpack_from(">h", data, pos)
            pos += 2
            topic = data[pos : pos + ln].decode()
            pos += ln
            (m,) = struct.unpack_from(">i", data, pos)
            pos += 4
            parts = list(struct.unpack_from(f">{max(m, 0)}i", data, pos))
            pos += 4 * max(m, 0)
            out.append((topic, parts))
        return out
    except (struct.error, UnicodeDecodeError):
        return []


def encode_assignment(topics: list[tuple[str, list[int]]]) -> bytes:
    """A ConsumerProtocolAssignment v0 (no user data): what a classic group's leader sends, built
    for a consumer-protocol member so that readers of assignments see both kinds alike."""
    out = [struct.pack(">hi", 0, len(topics))]
    for topic, parts in topics:
        name = topic.encode()
        out.append(struct.pack(f">h{len(name)}si{len(parts)}i", len(name), name, len(parts), *parts))
    out.append(struct.pack(">i", -1))
    return b"".join(out)
