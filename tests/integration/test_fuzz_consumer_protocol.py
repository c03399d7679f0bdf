"""Live fuzz of the consumer group protocol's APIs: ConsumerGroupHeartbeat (68) v0-1,
ConsumerGroupDescribe (69) v0-1 and OffsetFetch (9) v8-9, sent to a real broker.

Two kinds of frames, each followed on the same connection by an ApiVersions probe:

- generated requests: well-typed bodies with hostile values (epochs at the int32 edges, empty and
  100,000-character strings, thousands of subscribed topics or described groups, invalid regular
  expressions, unknown assignors, negative partitions, random and real topic ids, member ids
  learned from earlier answers), and some with a null where the schema does not allow one;
- mutated frames: one of those requests with bits flipped, bytes overwritten, inserted or removed,
  the body truncated, a compact length rewritten as a varint near 2^31 or 2^32, unknown tagged
  fields, another version or API key in the header, or a size prefix that lies.

Every frame must get a well-formed response carrying known Kafka error codes (a generated,
well-typed request: always) or close its connection (a null where none is allowed: always); the
probe must be answered whenever the connection stays open; nothing may take longer than
``REPLY_TIMEOUT_S``. Afterwards the broker is alive, its log has no traceback and no ERROR line, and a
librdkafka consumer with ``group.protocol=consumer`` joins a group and reads what was produced.

A request whose strings are not UTF-8 counts as malformed here (Gregor closes the connection;
Kafka's Java decoding would put U+FFFD in their place).

The test sends ``GREGOR_FUZZ_CP_FRAMES`` frames (default 300, a few seconds) from seed
``GREGOR_FUZZ_CP_SEED`` (default fixed); a campaign by hand (about 90 frames/s on 2 busy cores):

    GREGOR_FUZZ_CP_FRAMES=50000 GREGOR_FUZZ_CP_SEED=7 .venv/bin/pytest -q -s --timeout 3600 \\
        tests/integration/test_fuzz_consumer_protocol.py -k apis

What it found: ConsumerGroupHeartbeat with a group id, member id or regex over 32767 bytes (more
than a __consumer_offsets record key holds) reloaded the whole __consumer_offsets partition. Now the
request walk refuses every string over 32767 bytes, as Kafka's readers do, and the connection is
closed (tests/apis/test_consumer_group_heartbeat_input.py, tests/protocol/test_request_check.py).
"""

from __future__ import annotations

import collections
import os
import random
import socket
import struct
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from gregor.protocol import codec
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.client_frames import decode_response_frame, request_frame
from gregor.protocol.errors import ErrorCode
from tests.support.broker_process import BrokerProcess

FRAMES = int(os.environ.get("GREGOR_FUZZ_CP_FRAMES", "300"))
SEED = int(os.environ.get("GREGOR_FUZZ_CP_SEED", "20261123"))
REPLY_TIMEOUT_S = 15.0
TOPIC = "fz-topic"
PARTITIONS = 3
GROUPS = [f"fz-{i}" for i in range(6)]
KNOWN_ERRORS = {int(e) for e in ErrorCode}
HB, DESCRIBE, OFFSET_FETCH = ApiKey.CONSUMER_GROUP_HEARTBEAT, ApiKey.CONSUMER_GROUP_DESCRIBE, ApiKey.OFFSET_FETCH
VERSIONS = {HB: (0, 1), DESCRIBE: (0, 1), OFFSET_FETCH: (8, 9)}
OVERRIDES = {
    "group.consumer.min.heartbeat.interval.ms": "250", "group.consumer.heartbeat.interval.ms": "500",
    "group.consumer.min.session.timeout.ms": "3000", "group.consumer.session.timeout.ms": "6000",
    "group.initial.rebalance.delay.ms": "0",
}


# ---- a hand encoder for flexible versions: it writes what the schema forbids too ----------------

class Body:
    """Bytes of a flexible-version body. ``lengths`` records where each compact length (of an
    array, a string or a bytes field) starts and how many bytes it takes, for the mutator."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.lengths: list[tuple[int, int]] = []
        self.malformed = False  # a null where the schema has no null, or bytes that are not UTF-8

    def uvarint(self, n: int) -> None:
        while True:
            b = n & 0x7F
            n >>= 7
            if n:
                self.buf.append(b | 0x80)
            else:
                self.buf.append(b)
                return

    def _length(self, n: int) -> None:  # compact: length + 1, 0 for null
        at = len(self.buf)
        self.uvarint(n)
        self.lengths.append((at, len(self.buf) - at))

    def i8(self, v: int) -> None:
        self.buf += struct.pack(">b", v)

    def i32(self, v: int) -> None:
        self.buf += struct.pack(">i", v)

    def uuid(self, v: bytes) -> None:
        self.buf += v

    def string(self, s: str | bytes | None, nullable: bool) -> None:
        if s is None:
            self.malformed |= not nullable
            self._length(0)
            return
        raw = s.encode() if isinstance(s, str) else s
        self.malformed |= len(raw) > 32767  # Kafka's readers refuse a longer string, and so does Gregor
        if isinstance(s, bytes):
            try:
                s.decode()
            except UnicodeDecodeError:
                self.malformed = True
        self._length(len(raw) + 1)
        self.buf += raw

    def array(self, items: list[Any] | None, nullable: bool, write: Callable[[Any], None]) -> None:
        if items is None:
            self.malformed |= not nullable
            self._length(0)
            return
        self._length(len(items) + 1)
        for it in items:
            write(it)

    def tags(self) -> None:
        self.buf.append(0)


def header(api_key: int, version: int, corr: int, client_id: str = "fuzz") -> bytes:
    cid = client_id.encode()
    return struct.pack(">hhih", api_key, version, corr, len(cid)) + cid + b"\x00"


@dataclass
class Request:
    api_key: int
    version: int
    body: Body
    fields: dict[str, Any]  # what was sent, to check the answer against
    frame: bytes = b""
    header_len: int = 0
    expect: str = "response"  # "response" | "close" | "either"

    def build(self, corr: int) -> Request:
        head = header(self.api_key, self.version, corr)
        payload = head + bytes(self.body.buf)
        self.frame = struct.pack(">i", len(payload)) + payload
        self.header_len = len(head)
        if self.body.malformed:
            self.expect = "close"
        return self


# ---- hostile values ---------------------------------------------------------------------------

INT32_EDGES = [0, 1, 2, 3, -1, -2, -3, 2**31 - 1, -(2**31), 2**31 - 2, 65535, 65536, -65536, 1000, 45000]
UNICODE = "grüppe-☃-\u00e9\u4e2d"


@dataclass
class State:
    """What the fuzzer learned from the broker: members it could heartbeat as, a real topic id."""

    topic_id: bytes
    members: dict[tuple[str, str], int] = field(default_factory=dict)  # (group, member id) -> epoch
    static: dict[tuple[str, str], str] = field(default_factory=dict)  # (group, member id) -> instance id


def i32(rng: random.Random) -> int:
    r = rng.random()
    if r < 0.5:
        return rng.choice(INT32_EDGES)
    if r < 0.8:
        return rng.randint(-5, 50)
    return rng.randint(-(2**31), 2**31 - 1)


def text(rng: random.Random, nullable: bool = False, null_rate: float = 0.15) -> str | bytes | None:
    """A string, sometimes null (also where null is not allowed: ``nullable`` only sets the rate)."""
    if rng.random() < (null_rate if nullable else 0.01):
        return None
    r = rng.random()
    if r < 0.3:
        return rng.choice(GROUPS)
    if r < 0.4:
        return ""
    if r < 0.5:
        return UNICODE
    if r < 0.55:
        return "x" * rng.choice([249, 255, 256, 32767, 32768, 100_000])
    if r < 0.6:
        return rng.choice(["\x00", " ", "..", "__consumer_offsets", "fz topic", "a/b", "\t\n"])
    if r < 0.62:
        return bytes([0xFF, 0xFE, 0x80]) + b"not utf-8"
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789-_.") for _ in range(rng.randint(1, 30)))


def member_id(rng: random.Random) -> str | bytes | None:
    r = rng.random()
    if r < 0.5:
        return uuid.UUID(int=rng.getrandbits(128)).hex[:22]
    return text(rng, nullable=False)


def topic_names(rng: random.Random) -> list[Any] | None:
    r = rng.random()
    if r < 0.15:
        return None
    if r < 0.25:
        return []
    if r < 0.6:
        return [TOPIC]
    if r < 0.7:
        n = rng.choice([1000, 3000, 5000])
        return [f"fz-many-{i}" for i in range(n)] + [TOPIC]
    if r < 0.75:
        return [TOPIC, None]  # a null inside a non-nullable array of strings
    return [text(rng) for _ in range(rng.randint(1, 5))]


REGEXES = ["fz-.*", "fz-topic", ".*", "", "(", "[", "a{2,1}", "(?P<n>a)(?P<n>b)", "\\C", "a**", "(?<x>y)",
           "x{1001}", "(((((((((((a)))))))))))" * 50, "\\p{Greek}+", "[[:alpha:]]", "\u00e9+", "\\", "(?i)FZ-.*",
           "a" * 10_000, "\\Q(\\E", "(?=x)", "\\1"]


def regex(rng: random.Random) -> str | bytes | None:
    return None if rng.random() < 0.5 else (rng.choice(REGEXES) if rng.random() < 0.8 else text(rng))


ASSIGNORS = [None, None, None, "uniform", "range", "", "nope", "Uniform", "x" * 1000]


def heartbeat(rng: random.Random, version: int, st: State) -> Request:
    b = Body()
    known = list(st.members)
    mode = rng.random()
    if known and mode < 0.45:  # as a member the broker knows, with the right epoch or a near one
        group, mid = rng.choice(known)
        epoch = st.members[(group, mid)]
        epoch = rng.choice([epoch, epoch, epoch, epoch - 1, epoch + 1, 0, -1, -2, i32(rng)])
        instance = st.static.get((group, mid))
    elif mode < 0.8:  # a join
        group, mid = rng.choice(GROUPS), (member_id(rng) if version >= 1 or rng.random() < 0.3 else "")
        epoch, instance = 0, None
        if rng.random() < 0.3:
            instance = f"inst-{rng.randint(0, 3)}"
    else:
        group, mid, epoch, instance = text(rng), member_id(rng), i32(rng), text(rng, nullable=True, null_rate=0.6)
    if rng.random() < 0.05:
        group = text(rng)
    b.string(group, nullable=False)
    b.string(mid, nullable=False)
    b.i32(epoch)
    b.string(instance, nullable=True)
    b.string(None if rng.random() < 0.7 else text(rng, nullable=True), nullable=True)  # rack
    b.i32(rng.choice([-1, 30000, 45000, 0, i32(rng)]) if epoch == 0 else rng.choice([-1, -1, i32(rng)]))
    names = topic_names(rng) if epoch == 0 or rng.random() < 0.3 else None
    b.array(names, nullable=True, write=lambda s: b.string(s, nullable=False))
    if version >= 1:
        b.string(regex(rng), nullable=True)
    valid_assignor = mode < 0.8 and rng.random() < 0.85
    b.string(rng.choice([None, None, "uniform", "range"] if valid_assignor else ASSIGNORS), nullable=True)
    r = rng.random()
    if epoch == 0 and r < 0.7:
        owned: list[Any] | None = []
    elif r < 0.4:
        owned = None
    else:
        owned = [(rng.choice([st.topic_id, st.topic_id, bytes(16), uuid.UUID(int=rng.getrandbits(128)).bytes]),
                  None if rng.random() < 0.03 else
                  [rng.choice([0, 1, 2, 3, -1, 2**31 - 1, i32(rng)]) for _ in range(rng.choice([0, 1, 2, 3, 500]))])
                 for _ in range(rng.choice([0, 1, 1, 2, 50]))]

    def write_owned(tp: tuple[bytes, list[int] | None]) -> None:
        b.uuid(tp[0])
        b.array(tp[1], nullable=False, write=b.i32)
        b.tags()

    b.array(owned, nullable=True, write=write_owned)
    b.tags()
    return Request(HB, version, b, {"group_id": group, "member_id": mid, "member_epoch": epoch,
                                    "instance_id": instance})


def describe(rng: random.Random, version: int, st: State) -> Request:
    b = Body()
    r = rng.random()
    if r < 0.03:
        groups: list[Any] | None = None
    elif r < 0.1:
        groups = []
    elif r < 0.15:
        groups = [f"fz-absent-{i}" for i in range(rng.choice([1000, 5000]))] + GROUPS
    else:
        groups = [rng.choice(GROUPS) if rng.random() < 0.6 else text(rng) for _ in range(rng.randint(1, 6))]
    b.array(groups, nullable=False, write=lambda s: b.string(s, nullable=False))
    b.i8(rng.choice([0, 1, 1, 2, -1]))  # any non-zero byte is true
    b.tags()
    return Request(DESCRIBE, version, b, {"group_ids": groups})


def offset_fetch(rng: random.Random, version: int, st: State) -> Request:
    b = Body()
    known = list(st.members)
    n = rng.choice([0, 1, 1, 1, 2, 3, 300]) if rng.random() > 0.02 else -1
    groups: list[Any] | None = None if n < 0 else []
    for _ in range(max(n, 0)):
        assert groups is not None
        if version >= 9 and known and rng.random() < 0.4:
            g, mid = rng.choice(known)
            epoch = rng.choice([st.members[(g, mid)], st.members[(g, mid)] + 1, -1, 0, i32(rng)])
        else:
            g, mid, epoch = (rng.choice(GROUPS) if rng.random() < 0.7 else text(rng)), None, -1
            if rng.random() < 0.3:
                mid, epoch = member_id(rng), i32(rng)
        r = rng.random()
        if r < 0.4:
            topics: list[Any] | None = None
        elif r < 0.5:
            topics = []
        else:
            topics = [(rng.choice([TOPIC, TOPIC, "fz-unknown", text(rng)]),
                       [rng.choice([0, 1, 2, 3, -1, i32(rng)]) for _ in range(rng.choice([0, 1, 3, 200]))])
                      for _ in range(rng.choice([1, 1, 2, 100]))]
        groups.append((g, mid, epoch, topics))

    def write_topic(t: tuple[Any, list[int]]) -> None:
        b.string(t[0], nullable=False)
        b.array(t[1], nullable=False, write=b.i32)
        b.tags()

    def write_group(g: tuple[Any, Any, int, list[Any] | None]) -> None:
        b.string(g[0], nullable=False)
        if version >= 9:
            b.string(g[1], nullable=True)
            b.i32(g[2])
        b.array(g[3], nullable=True, write=write_topic)
        b.tags()

    b.array(groups, nullable=False, write=write_group)
    b.i8(rng.choice([0, 1]))
    b.tags()
    return Request(OFFSET_FETCH, version, b, {"groups": groups})


GENERATORS = {HB: heartbeat, DESCRIBE: describe, OFFSET_FETCH: offset_fetch}


def generate(rng: random.Random, st: State) -> Request:
    api = rng.choices([HB, DESCRIBE, OFFSET_FETCH], weights=[6, 2, 2])[0]
    return GENERATORS[api](rng, rng.choice(VERSIONS[api]), st)


# ---- mutations of a built frame ----------------------------------------------------------------

BIG_VARINTS = [2**31 - 1, 2**31, 2**31 + 1, 2**31 - 2, 2**32 - 1, 2**32, 2**35, 2**63, 2**64 - 1]


def uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if not n:
            out.append(b)
            return bytes(out)
        out.append(b | 0x80)


def mutate(rng: random.Random, req: Request) -> tuple[bytes, str, bool]:
    """A damaged copy of ``req.frame``: (frame, what was done, whether the size prefix lies short,
    so that the rest of the stream is out of step and the probe cannot be expected)."""
    payload = bytearray(req.frame[4:])
    h = req.header_len
    body_at = h  # body offset inside payload
    kind = rng.choice(["flip", "flip", "byte", "length", "length", "length", "truncate", "insert", "delete",
                       "tags", "version", "size", "splice"])
    short = False
    if kind == "flip" and len(payload) > body_at:
        for _ in range(rng.choice([1, 1, 2, 8])):
            i = rng.randrange(body_at, len(payload))
            payload[i] ^= 1 << rng.randrange(8)
    elif kind == "byte" and len(payload) > body_at:
        payload[rng.randrange(body_at, len(payload))] = rng.choice([0x00, 0xFF, 0x7F, 0x80, 0x01, rng.randrange(256)])
    elif kind == "length" and req.body.lengths:
        at, width = rng.choice(req.body.lengths)
        at += body_at
        value = rng.choice(BIG_VARINTS + [0, 1, 2, rng.randrange(1 << 14)])
        enc = uvarint(value)
        if rng.random() < 0.2:  # an over-long encoding of a small value
            enc = bytes([0x81, 0x80, 0x80, 0x80, 0x80, 0x00])
        payload[at : at + width] = enc
    elif kind == "truncate":
        payload = payload[: rng.randrange(0, len(payload))]
    elif kind == "insert":
        i = rng.randrange(body_at, len(payload) + 1)
        payload[i:i] = bytes(rng.randrange(256) for _ in range(rng.choice([1, 2, 4, 5, 16])))
    elif kind == "delete" and len(payload) > body_at:
        i = rng.randrange(body_at, len(payload))
        del payload[i : i + rng.choice([1, 2, 4, 16])]
    elif kind == "tags":  # the body's last byte is its empty tagged-field section: fill it
        count = rng.choice([1, 2, 2**31, 2**32 - 1])
        tags = uvarint(count)
        for _ in range(min(count, 3)):
            tag = rng.choice([0, 1, 5, 2**31, 2**32 - 1])
            size = rng.choice([0, 1, 4, 2**31, 2**32 - 1])
            tags += uvarint(tag) + uvarint(size) + bytes(min(size, 4))
        payload = payload[:-1] + tags
    elif kind == "version":
        api = rng.choice([req.api_key, req.api_key, HB, DESCRIBE, OFFSET_FETCH, 99, -1])
        payload[0:4] = struct.pack(">hh", api, rng.choice([-1, 0, 1, 2, 5, 7, 8, 9, 10, 32767]))
    elif kind == "size":
        real = len(payload)
        declared = rng.choice([0, 1, 4, 7, real - 1, real - 5, real + 1, real + 7, -1, -(2**31), 2**31 - 1,
                               200 * 1024 * 1024])
        if 0 <= declared < real:
            short = True
            return struct.pack(">i", declared) + bytes(payload), kind, short
        if real < declared <= real + 7:  # fill up to what it claims (trailing bytes after the body)
            return struct.pack(">i", declared) + bytes(payload) + bytes(declared - real), kind, short
        return struct.pack(">i", declared) + bytes(payload), kind, short
    elif kind == "splice":
        other = payload[body_at:]
        cut = rng.randrange(body_at, len(payload) + 1)
        payload = payload[:cut] + other[rng.randrange(0, len(other) + 1):]
    return struct.pack(">i", len(payload)) + bytes(payload), kind, short


# ---- talking to the broker ---------------------------------------------------------------------

PROBE_CORR = 2**31 - 7


def probe_frame() -> bytes:
    return request_frame(ApiKey.API_VERSIONS, 3, PROBE_CORR, {"client_software_name": "fuzz",
                                                              "client_software_version": "1"}, "fuzz")


class Closed(Exception):
    pass


class Conn:
    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=REPLY_TIMEOUT_S)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def send(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except TimeoutError:
            raise AssertionError(f"the broker read nothing for {REPLY_TIMEOUT_S} s") from None
        except OSError:  # broken pipe, reset: closed by the broker
            raise Closed from None

    def shutdown_write(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError:  # closed by the broker already
            raise Closed from None

    def recv_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            try:
                chunk = self.sock.recv(min(n - len(buf), 1 << 20))
            except ConnectionResetError:
                raise Closed from None
            except TimeoutError:
                raise AssertionError(f"no answer and no close in {REPLY_TIMEOUT_S} s") from None
            if not chunk:
                raise Closed
            buf += chunk
        return bytes(buf)

    def recv_frame(self) -> bytes:
        (size,) = struct.unpack(">i", self.recv_exact(4))
        assert 0 <= size < 1 << 30, f"response size {size}"
        return self.recv_exact(size)

    def close(self) -> None:
        self.sock.close()


@dataclass
class Stats:
    frames: int = 0
    answered: int = 0
    closed: int = 0
    errors: collections.Counter[str] = field(default_factory=collections.Counter)
    kinds: collections.Counter[str] = field(default_factory=collections.Counter)
    failures: list[str] = field(default_factory=list)

    def fail(self, msg: str, frame: bytes) -> None:
        if len(self.failures) < 20:
            self.failures.append(f"{msg}\n    frame: {frame[:400].hex()}{'...' if len(frame) > 400 else ''}")


def check_response(req: Request, resp: Any, st: State, stats: Stats) -> str | None:
    """Why ``resp`` is not an acceptable answer to ``req`` (None: it is); learns members."""
    def known(code: int, where: str) -> str | None:
        stats.errors[f"{ApiKey(req.api_key).name} {ErrorCode(code).name if code in KNOWN_ERRORS else code}"] += 1
        return None if code in KNOWN_ERRORS else f"unknown error code {code} in {where}"

    f = req.fields
    if req.api_key == HB:
        bad = known(resp.error_code, "the response")
        if bad:
            return bad
        if resp.error_code == ErrorCode.none:
            if f["member_epoch"] in (-1, -2):
                st.members.pop((f["group_id"], f["member_id"]), None)
                return None
            if not resp.member_id or resp.member_epoch < 1 or resp.heartbeat_interval.total_seconds() <= 0:
                return f"success without a member id, epoch or interval: {resp}"
            if req.version >= 1 and resp.member_id != f["member_id"]:
                return f"v1 answered member id {resp.member_id!r} for {f['member_id']!r}"
            key = (f["group_id"], resp.member_id)
            if len(st.members) < 200 or key in st.members:
                st.members[key] = resp.member_epoch
                if f["instance_id"] is not None:
                    st.static[key] = f["instance_id"]
        elif resp.error_code in (ErrorCode.unknown_member_id, ErrorCode.fenced_member_epoch):
            st.members.pop((f["group_id"], f["member_id"]), None)
        return None
    if req.api_key == DESCRIBE:
        asked = f["group_ids"]
        if len(resp.groups) != len(asked):
            return f"{len(resp.groups)} groups answered for {len(asked)} asked"
        for g, want in zip(resp.groups, asked, strict=True):
            bad = known(g.error_code, f"group {g.group_id!r}")
            if bad:
                return bad
            if g.group_id != want:
                return f"group {g.group_id!r} answered for {want!r}"
        return None
    asked_groups = f["groups"]
    if len(resp.groups) != len(asked_groups):
        return f"{len(resp.groups)} groups answered for {len(asked_groups)} asked"
    for g, want in zip(resp.groups, asked_groups, strict=True):
        bad = known(g.error_code, f"group {g.group_id!r}")
        if bad:
            return bad
        if g.group_id != want[0]:
            return f"group {g.group_id!r} answered for {want[0]!r}"
        for t in g.topics:
            for p in t.partitions:
                bad = known(p.error_code, f"{t.name}-{p.partition_index}")
                if bad:
                    return bad
    return None


def exchange(conn: Conn, frame: bytes, req: Request | None, st: State, stats: Stats, short: bool) -> bool:
    """Send ``frame`` and a probe; check what comes back. Returns whether ``conn`` is still usable."""
    stats.frames += 1
    prefix = frame[4:8]
    try:
        if short:  # the stream is out of step after this: no probe, write side closed
            conn.send(frame)
            conn.shutdown_write()
            while True:
                conn.recv_frame()
        conn.send(frame + probe_frame())
        first = conn.recv_frame()
        corr = struct.unpack_from(">i", first)[0]
        if corr != PROBE_CORR:
            stats.answered += 1
            if req is not None:
                if req.expect == "close":
                    stats.fail("answered a malformed request (a null where none is allowed, a string over 32767 "
                               "bytes or not UTF-8)", frame)
                api, ver = struct.unpack(">hh", prefix)
                if (api, ver) == (req.api_key, req.version):
                    _, resp = decode_response_frame(api, ver, first)
                    why = check_response(req, resp, st, stats)
                    if why:
                        stats.fail(why, frame)
            probe = conn.recv_frame()
            corr = struct.unpack_from(">i", probe)[0]
            if corr != PROBE_CORR:
                stats.fail(f"a second answer (correlation id {corr}) before the probe's", frame)
                return False
        else:
            if req is not None and req.expect == "response":
                stats.fail("the probe was answered but the request was not", frame)
        return True
    except Closed:
        stats.closed += 1
        if req is not None and req.expect == "response":
            stats.fail("connection closed on a well-formed request", frame)
        return False
    except AssertionError as e:
        stats.fail(str(e), frame)
        return False


def topic_id_of(bootstrap: str, topic: str) -> bytes:
    from gregor.admin.wire_client import WireClient

    w = WireClient(bootstrap)
    try:
        md = w.call(ApiKey.METADATA, 12, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
    finally:
        w.close()
    return md.topics[0].topic_id.bytes


def campaign(bootstrap: str, frames: int, seed: int, log: Callable[[str], None] = lambda _m: None) -> Stats:
    rng = random.Random(seed)
    st = State(topic_id_of(bootstrap, TOPIC))
    stats = Stats()
    conn = Conn(bootstrap)
    corr = 0
    started = time.monotonic()
    while stats.frames < frames:
        corr = corr % 1_000_000 + 1
        req = generate(rng, st).build(corr)
        if rng.random() < 0.4:
            stats.kinds["generated"] += 1
            ok = exchange(conn, req.frame, req, st, stats, short=False)
        else:
            data, kind, short = mutate(rng, req)
            stats.kinds[kind] += 1
            ok = exchange(conn, data, None, st, stats, short)
        if not ok:
            conn.close()
            conn = Conn(bootstrap)
        if stats.frames % 5000 == 0:
            log(f"{stats.frames} frames, {stats.frames / (time.monotonic() - started):.0f}/s, "
                f"{len(stats.failures)} failures")
    conn.close()
    return stats


def broker_log_problems(text: str) -> list[str]:
    """The broker log's ERROR and CRITICAL records and tracebacks, each with the 30 lines after it."""
    lines = text.splitlines()
    return ["\n".join(lines[i : i + 30]) for i, line in enumerate(lines)
            if "Traceback" in line or "] ERROR " in line or "] CRITICAL " in line or "unexpected error" in line]


# ---- the tests ---------------------------------------------------------------------------------

@pytest.fixture
def broker(tmp_path):
    b = BrokerProcess(tmp_path / "data", OVERRIDES).start()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS)])[TOPIC].result(10)
    yield b
    if b.alive():
        b.kill()


def test_hand_encoder_matches_the_schema_encoder() -> None:
    """The generator's encoder writes what Gregor's own (schema-driven) encoder writes."""
    tid = uuid.UUID(int=7)
    b = Body()
    b.string("g", nullable=False)
    b.string("m", nullable=False)
    b.i32(3)
    b.string(None, nullable=True)
    b.string(None, nullable=True)
    b.i32(45000)
    b.array([TOPIC], nullable=True, write=lambda s: b.string(s, nullable=False))
    b.string("fz-.*", nullable=True)
    b.string(None, nullable=True)

    def tp(_: Any) -> None:
        b.uuid(tid.bytes)
        b.array([0, 2], nullable=False, write=b.i32)
        b.tags()

    b.array([1], nullable=True, write=tp)
    b.tags()
    body = {"group_id": "g", "member_id": "m", "member_epoch": 3, "instance_id": None, "rack_id": None,
            "rebalance_timeout": 45000, "subscribed_topic_names": [TOPIC], "subscribed_topic_regex": "fz-.*",
            "server_assignor": None, "topic_partitions": [{"topic_id": tid, "partitions": [0, 2]}]}
    assert Request(HB, 1, b, {}).build(5).frame == request_frame(HB, 1, 5, body, "fuzz")
    cls = codec.request_schema(HB, 1)
    assert [f for f in cls.__dataclass_fields__][-1] == "topic_partitions"


def test_fuzz_consumer_protocol_apis(broker) -> None:
    stats = campaign(broker.bootstrap, FRAMES, SEED, log=print)
    print(f"\n{stats.frames} frames: {stats.answered} answered, {stats.closed} connections closed; "
          f"mutations {dict(stats.kinds)}")
    for k, v in sorted(stats.errors.items(), key=lambda i: -i[1])[:30]:
        print(f"  {v:7d}  {k}")
    assert broker.alive(), broker.output()[-5000:]
    assert not stats.failures, "\n".join(stats.failures)
    problems = broker_log_problems(broker.output())
    assert not problems, "\n".join(problems[:20])
    assert stats.answered > FRAMES // 10

    # the broker still serves the consumer group protocol: a librdkafka member joins and reads
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(20):
        p.produce(TOPIC, value=b"after-%d" % i, partition=i % PARTITIONS)
    assert p.flush(10) == 0
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "fz-after", "group.protocol": "consumer",
                  "auto.offset.reset": "earliest"})
    try:
        c.subscribe([TOPIC])
        got: set[bytes] = set()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(got) < 20:
            m = c.poll(0.5)
            if m is not None and m.error() is None and m.value().startswith(b"after-"):
                got.add(m.value())
        assert len(got) == 20, f"read {len(got)} of 20 after the campaign"
    finally:
        c.close()
    problems = broker_log_problems(broker.output())
    assert not problems, "\n".join(problems[:20])
