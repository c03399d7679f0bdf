"""The consumer protocol's member metadata and assignment (ConsumerProtocolSubscription /
ConsumerProtocolAssignment, non-flexible versions 0-3): version, topics, user data."""

from __future__ import annotations

import struct
from dataclasses import dataclass


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


@dataclass(frozen=True)
class Subscription:
    """A ConsumerProtocolSubscription (versions 0-3; later versions read as 3)."""

    version: int
    topics: list[str]
    owned: list[tuple[str, list[int]]]
    generation_id: int = -1
    rack_id: str | None = None


class MalformedSubscription(ValueError):
    pass


def decode_subscription(data: bytes) -> Subscription:
    """A ConsumerProtocolSubscription as JoinGroup carries it; MalformedSubscription if it is not one."""
    try:
        pos = 0

        def i16() -> int:
            nonlocal pos
            (v,) = struct.unpack_from(">h", data, pos)
            pos += 2
            return int(v)

        def i32() -> int:
            nonlocal pos
            (v,) = struct.unpack_from(">i", data, pos)
            pos += 4
            return int(v)

        def string() -> str | None:
            nonlocal pos
            n = i16()
            if n < 0:
                return None
            if pos + n > len(data):
                raise MalformedSubscription("string beyond the end")
            v = data[pos:pos + n].decode()
            pos += n
            return v

        version = i16()
        if version < 0:
            raise MalformedSubscription(f"version {version}")
        topics = [string() or "" for _ in range(max(i32(), 0))]
        n = i32()  # user data
        pos += max(n, 0)
        owned: list[tuple[str, list[int]]] = []
        generation, rack = -1, None
        if version >= 1:
            for _ in range(max(i32(), 0)):
                topic = string() or ""
                owned.append((topic, [i32() for _ in range(max(i32(), 0))]))
        if version >= 2:
            generation = i32()
        if version >= 3:
            rack = string()
        if pos > len(data):
            raise MalformedSubscription("user data beyond the end")
        return Subscription(version, topics, owned, generation, rack)
    except (struct.error, UnicodeDecodeError) as e:
        raise MalformedSubscription(str(e)) from e
