"""Fuzz the broker's decoders: in-process (frames, request headers, request bodies of every API key
and version the broker serves, record batches) and against a live broker with real clients alongside.

    python bench/fuzz.py                                # both modes: 1,000,000 inputs, 200,000 frames
    python bench/fuzz.py --mode inprocess --inputs 1000000 --seed 1
    python bench/fuzz.py --mode live --live-frames 200000
    python bench/fuzz.py --reproduce /tmp/gregor-fuzz-crashes/request-....bin
    python bench/fuzz.py --capture-seeds                # re-record bench/fuzz-seeds/ from real clients

Engine: a mutation fuzzer with coverage guidance of our own (no atheris; nothing to build). An input
joins the corpus when it reaches something no earlier input reached:
- Python line-to-line edges inside ``gregor/protocol/*`` and code generated there with exec
  (``sys.settrace``, switched on only around the decoder call: the frame decoder, the request
  header, the bounded request walk in front of kio, the record-batch and records code);
- for kio's native decoder, which Python tracing cannot see, the decoded shape: per (API key,
  version, field path) whether the field came out null, its array length bucket (0, 1, 2-3, 4-15,
  16+), the boolean value; and per (API key, version) each distinct refusal (error type and message
  with its numbers removed, e.g. "PRODUCE vN: records runs past the end of the request").

Seeds: a valid request for every served (API key, version) in three shapes (defaults, rich: two
elements per array, every nullable set; lean: one element, nullables null), encoded with kio's
entity_writer; transactional requests with coherent ids in every served version (``txn_request_seeds``);
record batches of every codec, transactional batches and markers; ``__transaction_state`` keys and
values of every version and state; and real-client requests recorded by a tiny TCP proxy
from confluent-kafka, kafka-python and aiokafka (``bench/fuzz-seeds/*.frames``: size-prefixed
frames as sent on the wire, re-recorded when missing).

Mutations: bit flips, random / interesting bytes, int16 and int32 overwritten with interesting values
(0xFFFFFFFF, 2^31, 2^31-1, -1, 0x10000 ...), unsigned varints written over or inserted (2^31,
0xFFFFFFFF, 2^35, 2^64-1, over-long encodings), byte insertion and deletion, duplicated ranges,
splicing with another corpus entry, truncation, extension; a request's version retagged to another
served version of its API; a record batch's records mutated inside its compression and re-framed
with a correct length and CRC (so the fuzz reaches the records, not only the CRC check).

A failure is
- an exception other than the documented "malformed input" ones: ``codec.RequestDecodeError``,
  ``framing.FrameError``, ``record_batch.InvalidBatch`` (and its ``RecordTooLarge``),
  ``compression.UnsupportedCodec``, ``cramjam.DecompressionError`` (what the codecs raise on corrupt
  data), ``key_check.InflatedTooLarge``;
- a decoded request that violates its schema (a non-nullable field decoded as null, a value of the
  wrong type, an integer outside its Kafka type's range), walked against the kio dataclass's hints;
- the frame decoder disagreeing with a plain reference split of the same bytes (fed in random chunks);
- ``records.decode_records`` and ``records.iter_key_values`` disagreeing on a batch both accept, or
  ``key_check.keyless_records`` (the produce path's key check for compacted topics, bounded to 1 MiB
  inflated here) naming other keyless records than ``decode_records``;
- ``control_records.read_marker`` raising anything but InvalidBatch on a control batch, or
  disagreeing with ``parse_marker_record`` over ``decode_records``;
- ``__transaction_state`` records (target ``txnlog``: a key or a value, mutated): ``decode_key`` /
  ``decode_value`` raising anything but ``RecordFormatError``, or a decoded value that decodes to
  another value once encoded again;
- the decoding process dying (kio's native code can abort the process): decoding runs in a forked
  worker that writes each input to shared memory before decoding it; when the worker dies, the input,
  the signal and the worker's last stderr line are recorded and a new worker goes on;
- an input that takes more than 5 s, or a worker that makes no progress for 60 s.
Failures are grouped into distinct failures by (exception type, innermost gregor/kio frame) -- a
hard crash by (signal, its stderr message), a schema violation by its kind -- and one reproducer
each (the smallest input seen) is saved under ``--crashes``: ``<name>.bin`` (a request is saved as the
size-prefixed frame a client would send) and ``<name>.txt`` (what happened, where).

Live mode starts ``python -m gregor serve`` on 127.0.0.1 and sends mutated frames over many
connections (a malformed frame is expected to close its connection: the fuzzer reconnects), each
frame followed by a well-formed ApiVersions on the same connection. Meanwhile a confluent-kafka
producer and consumer round-trip records (each produced record must come back, in order, intact) and
a probe connection asks for ApiVersions and Metadata every second. Failures: the broker exits; the
round trip fails or makes no progress for 30 s; the probe gets no answer for 30 s; a traceback or
"unexpected error" in the broker's log. Transactions: a fifth of the frames start from a
transactional request (InitProducerId with a transactional id, AddPartitionsToTxn incl. v4's
verify_only, AddOffsetsToTxn, EndTxn, WriteTxnMarkers, TxnOffsetCommit, DescribeTransactions,
ListTransactions, DescribeProducers, Produce with transactional batches, valid and mangled, Fetch
read_committed) carrying a producer id and epoch the broker really gave, on a topic of their own;
and a confluent-kafka transactional producer (every third transaction aborted) with a
read_committed consumer runs the whole time: it must read exactly the committed records, in order.
Printed: frames sent, distinct failures, the broker's peak RSS
(VmHWM), frames/s. At the end (after the peak RSS of the fuzzing is taken; --no-bomb skips it) one
~13 KB Produce to a compacted topic carries a zstd batch that inflates to 400 MB: a failure when
the broker's peak RSS grows by more than 128 MiB.

Exit code 1 when any failure was found. Everything runs on 127.0.0.1, bounded by --inputs,
--live-frames and --seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import dataclasses
import datetime
import functools
import hashlib
import importlib
import io
import mmap
import multiprocessing
import os
import random
import re
import resource
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import types
import typing
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import cramjam
from kio.serial import entity_writer

from gregor.apis import REGISTRY
from gregor.protocol import codec, compression, control_records, records, transaction_log
from gregor.protocol import record_batch as rb
from gregor.protocol.encoder import encode
from gregor.protocol.errors import ErrorCode
from gregor.protocol.framing import FrameDecoder, FrameError
from gregor.protocol.varint import uvarint_bytes

ROOT = Path(__file__).resolve().parent.parent
SEED_DIR = ROOT / "bench" / "fuzz-seeds"
CLIENTS = ("confluent_kafka", "kafka_python", "aiokafka")
MAX_FRAME = 104857600  # socket.request.max.bytes default
MAX_INPUT = 64 * 1024
MAX_BATCH = 1 << 20
SLOW_INPUT_S = 5.0
HANG_S = 60.0

EXPECTED: tuple[type[BaseException], ...] = (
    codec.RequestDecodeError,
    FrameError,
    rb.InvalidBatch,
    compression.UnsupportedCodec,
    cramjam.DecompressionError,
)

key_check: Any = None  # the compacted-topic key check of the produce path (issue 10), if the tree has it
with contextlib.suppress(ImportError):
    key_check = importlib.import_module("gregor.protocol.key_check")
    EXPECTED += (key_check.InflatedTooLarge,)

TARGETS = ("request", "stream", "batch", "txnlog")
# the transactional APIs (KIP-98, KIP-447, KIP-664, KIP-890): their seeds carry coherent ids (the
# live fuzzer's: a real producer id and epoch, an existing topic and group)
TXN_APIS = (22, 24, 25, 26, 27, 28, 61, 65, 66)
_NONE = type(None)
_UNION = (typing.Union, types.UnionType)


# =============================================================================================
# Oracles: the decoders as the broker calls them, plus the checks on what they return


class SchemaViolation(Exception):
    def __init__(self, kind: str, where: str) -> None:
        super().__init__(f"{kind}: {where}")
        self.kind = kind
        self.where = where


class OracleMismatch(Exception):
    """Two decoders (or a decoder and a reference) disagree about the same bytes."""


def _bucket(n: int) -> int:
    return 0 if n == 0 else 1 if n == 1 else 2 if n < 4 else 3 if n < 16 else 4


Checker = Callable[[Any, str, set[Any]], None]


@functools.cache
def _checker(tp: Any) -> Checker:
    """A function that checks a decoded value against its type hint, raising SchemaViolation,
    and adds shape features (null, array length bucket, bool value) to the set it is given."""
    origin = typing.get_origin(tp)
    if origin in _UNION:
        args = typing.get_args(tp)
        inner = [a for a in args if a is not _NONE]
        nullable = len(inner) < len(args)
        inner_check = _checker(inner[0]) if len(inner) == 1 else None

        def check_union(v: Any, path: str, feats: set[Any]) -> None:
            if v is None:
                if not nullable:
                    raise SchemaViolation("null in a non-nullable field", path)
                feats.add((path, "null"))
                return
            if inner_check is not None:
                inner_check(v, path, feats)

        return check_union
    if origin is tuple:
        elem = _checker(typing.get_args(tp)[0])

        def check_tuple(v: Any, path: str, feats: set[Any]) -> None:
            if v is None:
                raise SchemaViolation("null in a non-nullable array", path)
            if not isinstance(v, tuple):
                raise SchemaViolation(f"array decoded as {type(v).__name__}", path)
            feats.add((path, "len", _bucket(len(v))))
            for x in v:
                elem(x, path + "[]", feats)

        return check_tuple
    if dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        fields = [(f.name, _checker(hints[f.name])) for f in dataclasses.fields(tp)]
        cls: Any = tp

        def check_entity(v: Any, path: str, feats: set[Any]) -> None:
            if v is None:
                raise SchemaViolation("null in a non-nullable struct", path)
            if not isinstance(v, cls):
                raise SchemaViolation(f"struct decoded as {type(v).__name__}", path)
            for name, check in fields:
                check(getattr(v, name), f"{path}.{name}", feats)

        return check_entity
    if tp is bool:

        def check_bool(v: Any, path: str, feats: set[Any]) -> None:
            if not isinstance(v, bool):
                raise SchemaViolation("null in a non-nullable field" if v is None else "bool not a bool", path)
            feats.add((path, v))

        return check_bool
    if isinstance(tp, type) and issubclass(tp, int):
        lo = getattr(tp, "__low__", None)
        hi = getattr(tp, "__high__", None)

        def check_int(v: Any, path: str, feats: set[Any]) -> None:
            if v is None:
                raise SchemaViolation("null in a non-nullable field", path)
            if not isinstance(v, int) or isinstance(v, bool):
                raise SchemaViolation(f"integer decoded as {type(v).__name__}", path)
            if (lo is not None and v < lo) or (hi is not None and v > hi):
                raise SchemaViolation("integer outside its type's range", path)

        return check_int
    for base in (str, bytes, uuid.UUID, datetime.timedelta, datetime.datetime):
        if isinstance(tp, type) and issubclass(tp, base):
            want = (bytes, bytearray, memoryview) if base is bytes else base

            def check_plain(v: Any, path: str, feats: set[Any], want: Any = want) -> None:
                if v is None:
                    raise SchemaViolation("null in a non-nullable field", path)
                if not isinstance(v, want):
                    raise SchemaViolation(f"{want} decoded as {type(v).__name__}", path)

            return check_plain

    def check_any(v: Any, path: str, feats: set[Any]) -> None:
        return None

    return check_any


def check_request_object(obj: Any, cls: Any, feats: set[Any]) -> None:
    _checker(cls)(obj, cls.__name__, feats)


def served_versions() -> list[tuple[int, int]]:
    return [(k, v) for k in sorted(REGISTRY) for v in range(REGISTRY[k].min_version, REGISTRY[k].max_version + 1)]


_DIGITS = re.compile(r"-?\d+")


def run_request(frame: bytes, feats: set[Any]) -> None:
    """What the broker's connection does with one frame up to the handler (server/dispatcher.py)."""
    api_key, version, _corr = codec.parse_header_prefix(frame)
    reg = REGISTRY.get(api_key)
    if reg is None or not reg.min_version <= version <= reg.max_version:
        feats.add(("unserved", reg is None))
        return  # answered with UNSUPPORTED_VERSION or closed, no decoding
    cls = codec.request_schema(api_key, version)
    feats.add((api_key, version))
    try:
        header = codec.parse_header(frame, codec.is_flexible(api_key, version))
        obj = codec.decode_request(api_key, version, frame, header.body_offset)
    except EXPECTED as e:
        # which check refused it (field names, no numbers): coverage of decoding that tracing
        # cannot see
        feats.add((api_key, version, type(e).__name__, _DIGITS.sub("N", str(e))[:120]))
        raise
    shape: set[Any] = set()
    check_request_object(obj, cls, shape)
    for f in shape:
        feats.add((api_key, version, f))


def reference_split(data: bytes, max_frame: int) -> tuple[list[bytes], bool]:
    frames: list[bytes] = []
    pos = 0
    while len(data) - pos >= 4:
        (size,) = struct.unpack_from(">i", data, pos)
        if size < 0 or size > max_frame:
            return frames, True
        if len(data) - pos - 4 < size:
            break
        frames.append(data[pos + 4 : pos + 4 + size])
        pos += 4 + size
    return frames, False


def run_stream(data: bytes, feats: set[Any], cuts: list[int], max_frame: int) -> None:
    """Feed ``data`` to a FrameDecoder in chunks; compare with the reference split; decode every
    frame as a request."""
    dec = FrameDecoder(max_frame)
    got: list[bytes] = []
    err = False
    prev = 0
    try:
        for c in [*cuts, len(data)]:
            got += dec.feed(data[prev:c])
            prev = c
    except FrameError:
        err = True
    ref, ref_err = reference_split(data, max_frame)
    feats.add(("stream", err, _bucket(len(got))))
    if err != ref_err:
        raise OracleMismatch(f"FrameDecoder error={err}, reference error={ref_err}")
    if got != ref[: len(got)] or (not err and len(got) != len(ref)):
        raise OracleMismatch(f"FrameDecoder returned {len(got)} frames, reference {len(ref)}")
    for f in got[:4]:
        with contextlib.suppress(*EXPECTED):
            run_request(f, feats)


def run_batch(data: bytes, feats: set[Any]) -> None:
    """The record-batch layer as the broker uses it: produce validation, then what the cleaner,
    the coordinator's loader and compacted-topic key checks do with stored batches."""
    try:
        hs = rb.validate_batches(data, MAX_BATCH)
        feats.add(("valid", len(hs) > 1))
    except EXPECTED as e:
        feats.add(("validate", type(e).__name__))
    for h in records.iter_batches(data):
        feats.add(("codec", h.compression, h.is_control, _bucket(h.records_count)))
        try:
            recs: list[records.Record] | None = records.decode_records(data, h)
        except EXPECTED as e:
            feats.add(("decode", type(e).__name__))
            recs = None
        try:
            kv: list[tuple[bytes | None, bytes | None]] | None = records.iter_key_values(data, h)
        except EXPECTED as e:
            feats.add(("kv", type(e).__name__))
            kv = None
        if recs is not None and kv is not None and [(r.key, r.value) for r in recs] != kv:
            raise OracleMismatch("decode_records and iter_key_values disagree on a batch both accept")
        if h.is_control:
            # a marker as the log reads it back (crash rebuild, a follower's copy, the coordinator
            # loader): a marker, None, or InvalidBatch
            try:
                marker = control_records.read_marker(data, h)
                feats.add(("marker", None if marker is None else marker.commit))
            except EXPECTED as e:
                feats.add(("marker", type(e).__name__, _DIGITS.sub("N", str(e))[:60]))
                marker = None
            if marker is not None and recs and control_records.parse_marker_record(recs[0].key,
                                                                                   recs[0].value) != marker:
                raise OracleMismatch("read_marker and parse_marker_record over decode_records disagree")
        if key_check is not None:
            try:
                keyless: list[int] | None = key_check.keyless_records(data, h, 1 << 20)
            except EXPECTED as e:
                feats.add(("keys", type(e).__name__))
                keyless = None
            if recs is not None and keyless is not None and keyless != [
                    i for i, r in enumerate(recs) if r.key is None]:
                raise OracleMismatch("key_check.keyless_records and decode_records disagree on the keyless records")


def run_txnlog(data: bytes, feats: set[Any]) -> None:
    """A ``__transaction_state`` record as a transaction coordinator shard's loader reads it: the
    first byte says key (even) or value (odd), the rest is the record. Only RecordFormatError
    may come out; a value that decodes encodes again and decodes to itself."""
    if not data:
        return
    is_value, rec = data[0] & 1, data[1:]
    try:
        if not is_value:
            key = transaction_log.decode_key(rec)
            feats.add(("key", _bucket(len(key.transactional_id))))
            if transaction_log.encode_key(key) != rec:
                raise OracleMismatch("a transaction log key decodes from bytes it does not encode to")
            return
        value = transaction_log.decode_value(None, rec)
    except transaction_log.RecordFormatError as e:
        feats.add(("txnlog", is_value, _DIGITS.sub("N", str(e))[:80]))
        return
    assert value is not None
    parts = value.partitions
    feats.add(("value", value.version, int(value.state), None if parts is None else _bucket(len(parts)),
               value.previous_producer_id != -1, value.next_producer_id != -1, value.client_transaction_version))
    try:
        again = transaction_log.encode_value(value)
    except ValueError:
        return  # a v0 topic name over 32767 bytes: readable, not writable again in v0
    if transaction_log.decode_value(None, again) != value:
        raise OracleMismatch("a transaction log value decodes to another value once encoded again")


# ---------------------------------------------------------------------------------------------
# Python line coverage of gregor/protocol (settrace), on only around a decoder call

_PROTO_DIR = str(Path(codec.__file__).resolve().parent) + os.sep


class Coverage:
    def __init__(self) -> None:
        self.edges: set[tuple[int, int, int]] = set()
        self._new = 0
        self._last: dict[int, int] = {}

    def _local(self, frame: types.FrameType, event: str, arg: Any) -> Any:
        if event == "line":
            code = id(frame.f_code)
            edge = (code, self._last.get(code, -1), frame.f_lineno)
            self._last[code] = frame.f_lineno
            if edge not in self.edges:
                self.edges.add(edge)
                self._new += 1
        return self._local

    def _global(self, frame: types.FrameType, event: str, arg: Any) -> Any:
        name = frame.f_code.co_filename
        if name.startswith(_PROTO_DIR) or name == "<string>":  # <string>: checkers generated by exec
            self._last[id(frame.f_code)] = -1
            return self._local
        return None

    def run(self, fn: Callable[[], None]) -> int:
        """Run ``fn`` traced; returns how many new edges it reached."""
        self._new = 0
        sys.settrace(self._global)
        try:
            fn()
        finally:
            sys.settrace(None)
        return self._new


# =============================================================================================
# Seeds


@functools.cache
def _kio_writer(cls: Any) -> Callable[..., Any]:
    return entity_writer(cls)


def kio_bytes(obj: Any) -> bytes:
    """A kio entity as kio's own writer encodes it (seeds do not go through Gregor's encoder)."""
    buf = io.BytesIO()
    _kio_writer(type(obj))(buf, obj)
    return buf.getvalue()


def request_header(api_key: int, version: int, corr: int, client_id: str | None = "fuzz") -> bytes:
    cid = b"" if client_id is None else client_id.encode()
    h = struct.pack(">hhih", api_key, version, corr, -1 if client_id is None else len(cid)) + cid
    if codec.is_flexible(api_key, version):
        h += b"\x00"
    return h


def _seed_batch(rng: random.Random, codec_id: int = 0) -> bytes:
    recs = [
        records.Record(i, 1_700_000_000_000 + i, f"k{i}".encode() if i % 3 else None, b"v" * (i * 7),
                       [("h", b"x")] if i % 2 else [])
        for i in range(rng.choice([1, 2, 5]))
    ]
    return records.build_batch(recs, codec=codec_id)


def _gen(tp: Any, variant: int, rng: random.Random, kafka_type: str | None) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in _UNION:
        inner = [a for a in args if a is not _NONE]
        if variant == 2:
            return None
        return _gen(inner[0], variant, rng, kafka_type)
    if origin is tuple:
        return tuple(_gen(args[0], variant, rng, kafka_type) for _ in range(2 if variant == 1 else 1))
    if dataclasses.is_dataclass(tp):
        return _instance(tp, variant, rng)
    if tp is bool:
        return variant != 2
    if isinstance(tp, type):
        if issubclass(tp, int):
            lo = getattr(tp, "__low__", -(2**31))
            hi = getattr(tp, "__high__", 2**31 - 1)
            return min(max(rng.choice([0, 1, 2, 3, 100, 1000]), lo), hi)
        if issubclass(tp, bytes):
            if kafka_type == "records" or tp.__name__ == "Records":
                return _seed_batch(rng, rng.choice([0, 0, 1, 2, 3, 4]))
            return b"seed-bytes"
        if issubclass(tp, str):
            return "" if variant == 2 else f"fuzz-seed-{rng.randrange(4)}"
        if issubclass(tp, uuid.UUID):
            return uuid.UUID(int=rng.getrandbits(128))
        if issubclass(tp, datetime.timedelta):
            return datetime.timedelta(milliseconds=1000)
        if issubclass(tp, datetime.datetime):
            return datetime.datetime.fromtimestamp(1_700_000_000, datetime.UTC)
    raise TypeError(f"no seed value for {tp!r}")


def _zero(tp: Any) -> Any:
    """The value of a field without a schema default in a defaults-only seed: null when nullable."""
    if typing.get_origin(tp) is tuple:
        return ()
    if typing.get_origin(tp) in _UNION:
        return None
    if isinstance(tp, type):
        for kind, zero in ((bool, False), (ErrorCode, ErrorCode.none), (datetime.timedelta, datetime.timedelta(0)),
                           (int, 0), (str, ""), (bytes, b""), (uuid.UUID, uuid.UUID(int=0))):
            if issubclass(tp, kind):
                return zero
    raise TypeError(f"no default value for {tp!r}")


def _instance(cls: Any, variant: int, rng: random.Random) -> Any:
    if variant == 0:  # the schema's defaults
        hints = typing.get_type_hints(cls)
        return cls(**{f.name: _zero(hints[f.name]) for f in dataclasses.fields(cls)
                      if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING})
    hints = typing.get_type_hints(cls)
    kwargs = {f.name: _gen(hints[f.name], variant, rng, f.metadata.get("kafka_type"))
              for f in dataclasses.fields(cls)}
    return cls(**kwargs)


def request_seeds(seed: int = 0) -> list[bytes]:
    """A valid request for every served (API key, version), in three shapes."""
    rng = random.Random(seed)
    out: list[bytes] = []
    for key, version in served_versions():
        cls = codec.request_schema(key, version)
        for variant in (0, 1, 2):
            try:
                body = kio_bytes(_instance(cls, variant, rng))
            except Exception as e:  # noqa: BLE001 - a shape kio refuses to encode is skipped
                if variant == 0:
                    raise RuntimeError(f"cannot build a seed for {key} v{version}: {e}") from e
                continue
            out.append(request_header(key, version, 1000 + len(out)) + body)
    return out


def txn_batch(producer_id: int, producer_epoch: int, base_sequence: int, n: int = 3, codec_id: int = 0,
              tag: str = "t") -> bytes:
    """A transactional data batch of ``n`` records."""
    return records.build_batch([records.Record(i, 1_700_000_000_000 + i, f"{tag}{i}".encode(), b"txn" * (i + 1))
                                for i in range(n)], codec=codec_id, producer_id=producer_id,
                               producer_epoch=producer_epoch, base_sequence=base_sequence,
                               attributes=rb.TRANSACTIONAL_BIT)


def marker_batches(producer_id: int, producer_epoch: int) -> list[bytes]:
    """Commit and abort markers, and a control batch of another type (Kafka reserves them)."""
    return [control_records.build_marker_batch(producer_id, producer_epoch, 0, commit=True, timestamp=1),
            control_records.build_marker_batch(producer_id, producer_epoch, 5, commit=False, timestamp=2),
            records.build_batch([(struct.pack(">hh", 0, 5), b"")], producer_id=producer_id,
                                producer_epoch=producer_epoch, base_sequence=-1,
                                attributes=control_records.CONTROL_ATTRIBUTES)]


def batch_seeds(seed: int = 0) -> list[bytes]:
    rng = random.Random(seed)
    out = []
    for c in compression.NAMES:
        out.append(_seed_batch(rng, c))
        out.append(_seed_batch(rng, c) + _seed_batch(rng, c))
    out.append(records.build_batch([(b"k", b"v")], producer_id=7, producer_epoch=1, base_sequence=0,
                                   attributes=rb.TRANSACTIONAL_BIT))
    out += [txn_batch(7, 1, 1, 5, c) for c in compression.NAMES]
    out += marker_batches(7, 1)
    out.append(txn_batch(7, 1, 6) + control_records.build_marker_batch(7, 1, 0, commit=False, timestamp=3))
    return out


def txnlog_seeds() -> list[bytes]:
    """``__transaction_state`` keys (0 + key) and values (1 + value) of every version and state."""
    out = [b"\x00" + transaction_log.encode_key(transaction_log.TransactionLogKey(t)) for t in ("", "tx", "é" * 9)]
    state = transaction_log.TxnState
    for version in transaction_log.VALUE_VERSIONS:
        for st in state:
            parts = None if st == state.EMPTY else (("a", (0, 1)), ("topic-b", (7,))) if st < 4 else ()
            tags = {"previous_producer_id": 3, "next_producer_id": 9, "client_transaction_version": 2} if (
                version and st in (state.PREPARE_COMMIT, state.COMPLETE_ABORT)) else {}
            v = transaction_log.TransactionLogValue(1000 + st, st, 60000, st, parts, 1_700_000_000_000,
                                                    1_699_999_999_000, version=version, **tags)
            out.append(b"\x01" + (transaction_log.encode_value(v) or b""))
    return out


def txn_request_bodies(producer_id: int = 7, producer_epoch: int = 0, tid: str = "fuzz-txn",
                       topic: str = "fuzz-txn-topic", group: str = "fuzz-txn-group",
                       base_sequence: int = 0, topic_id: uuid.UUID | None = None) -> list[tuple[int, dict[str, Any]]]:
    """(API key, request dict) of the transactional APIs with coherent ids, and Produce with
    transactional batches (valid, and mangled: a client's control batch, no producer id, a
    transactional batch beside a plain one) and Fetch read_committed. The dicts name every
    version's fields (``encode`` ignores those a version lacks)."""
    ids = {"transactional_id": tid, "producer_id": producer_id, "producer_epoch": producer_epoch}
    topics = [{"name": topic, "partitions": [0]}]
    old = {"v3_and_below_transactional_id": tid, "v3_and_below_producer_id": producer_id,
           "v3_and_below_producer_epoch": producer_epoch, "v3_and_below_topics": topics}
    batch = txn_batch(producer_id, producer_epoch, base_sequence)
    produce_batches = [batch, txn_batch(producer_id, producer_epoch, base_sequence, 4, compression.ZSTD),
                       *marker_batches(producer_id, producer_epoch)[:1],
                       records.build_batch([(b"k", b"v")], producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                           attributes=rb.TRANSACTIONAL_BIT),
                       batch + records.build_batch([(b"k", b"v")])]
    out: list[tuple[int, dict[str, Any]]] = [
        (22, {"transactional_id": tid, "transaction_timeout": 60000, "producer_id": -1, "producer_epoch": -1}),
        (22, {**ids, "transaction_timeout": 60000}),  # KIP-360: the current id and epoch
        (24, {**old, "transactions": [{**ids, "verify_only": False, "topics": topics}]}),
        (24, {**old, "transactions": [{**ids, "verify_only": True, "topics": topics},
                                      {**ids, "transactional_id": tid + "-2", "verify_only": False,
                                       "topics": topics}]}),
        (25, {**ids, "group_id": group}),
        (26, {**ids, "committed": True}),
        (26, {**ids, "committed": False}),
        (27, {"markers": [{"producer_id": producer_id, "producer_epoch": producer_epoch, "transaction_result": True,
                           "topics": [{"name": topic, "partition_indexes": [0]}], "coordinator_epoch": 0}]}),
        (28, {**ids, "group_id": group, "generation_id": -1, "member_id": "", "group_instance_id": None,
              "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                         "committed_leader_epoch": -1,
                                                         "committed_metadata": "m"}]}]}),
        (61, {"topics": [{"name": topic, "partition_indexes": [0, 1]}]}),
        (65, {"transactional_ids": [tid, tid + "-2", "nope"]}),
        (66, {"state_filters": [], "producer_id_filters": [], "duration_filter": -1}),
        (66, {"state_filters": ["Ongoing", "Bogus"], "producer_id_filters": [producer_id], "duration_filter": 0,
              "transactional_id_pattern": "fuzz.*"}),
        (1, {"replica_id": -1, "max_wait": 50, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 1,
             "topics": [{"topic": topic, "topic_id": topic_id or uuid.UUID(int=0), "partitions": [{
                 "partition": 0, "fetch_offset": 0,
                                                         "partition_max_bytes": 1 << 20, "current_leader_epoch": -1,
                                                         "last_fetched_epoch": -1, "log_start_offset": -1}]}]}),
    ]
    for b in produce_batches:
        out.append((0, {"transactional_id": tid, "acks": -1, "timeout": 5000,
                        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": b}]}]}))
    return out


def txn_request_seeds(producer_id: int = 7, producer_epoch: int = 0, tid: str = "fuzz-txn",
                      topic: str = "fuzz-txn-topic", group: str = "fuzz-txn-group",
                      topic_id: uuid.UUID | None = None) -> list[bytes]:
    """The transactional requests of ``txn_request_bodies`` in every served version."""
    out: list[bytes] = []
    versions: dict[int, list[int]] = {}
    for k, v in served_versions():
        versions.setdefault(k, []).append(v)
    for key, body in txn_request_bodies(producer_id, producer_epoch, tid, topic, group, topic_id=topic_id):
        for version in versions.get(key, []):
            if key == 0 and version < 3:
                continue  # transactional batches need RecordBatch v2 (Produce v3+)
            with contextlib.suppress(Exception):  # a field this version cannot hold
                out.append(request_header(key, version, 3000 + len(out))
                           + encode(codec.request_schema(key, version), body))
    return out


def load_client_seeds() -> dict[str, list[bytes]]:
    out: dict[str, list[bytes]] = {}
    for name in CLIENTS:
        path = SEED_DIR / f"{name}.frames"
        if path.exists():
            out[name] = FrameDecoder(MAX_FRAME).feed(path.read_bytes())
    return out


def all_seeds(seed: int = 0) -> dict[str, list[bytes]]:
    client = [f for frames in load_client_seeds().values() for f in frames]
    reqs = request_seeds(seed) + client
    streams = [b"".join(struct.pack(">i", len(f)) + f for f in reqs[i : i + 3]) for i in range(0, len(reqs), 3)]
    return {"request": reqs + txn_request_seeds(), "stream": streams, "batch": batch_seeds(seed),
            "txnlog": txnlog_seeds()}


# =============================================================================================
# Mutations

I32 = [0, 1, -1, 2**31 - 1, -(2**31), 0xFFFF, 0x10000, 2**31 - 2, 0x40000000, 0x3FFFFFFF, 0x01000000, 0x7FFF, -2]
I16 = [0, 1, -1, 0x7FFF, -0x8000, 0xFF, 0x100, -2]
BYTES = [0, 1, 2, 0x7F, 0x80, 0xFF, 0xFE, 0x0F, 0x3F]
VARINTS = [uvarint_bytes(v) for v in (0, 1, 2, 127, 128, 2**31 - 1, 2**31, 2**31 + 1, 2**32 - 1, 2**32, 2**35,
                                      2**63, 2**64 - 1, 0x10000, 0x100000)] + [b"\x80" * 9 + b"\x01", b"\xff" * 10,
                                                                               b"\x80\x00"]


class Mutator:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.versions: dict[int, list[int]] = {}
        for k, v in served_versions():
            self.versions.setdefault(k, []).append(v)

    def header_len(self, frame: bytes) -> int:
        """Where a request's body starts (assuming no header tagged fields), or 4 when unknown:
        most mutations go to the body, where the schema-driven decoding is."""
        if len(frame) < 10:
            return 4
        key, version = struct.unpack_from(">hh", frame, 0)
        (n,) = struct.unpack_from(">h", frame, 8)
        flexible = version in self.versions.get(key, ()) and codec.is_flexible(key, version)
        return min(10 + max(n, 0) + flexible, len(frame))

    def _pos(self, buf: bytearray, protect: int) -> int:
        lo = protect if len(buf) > protect and self.rng.random() < 0.9 else 0
        return self.rng.randrange(lo, len(buf)) if len(buf) > lo else 0

    def mutate(self, data: bytes, other: Callable[[], bytes], protect: int = 0) -> bytes:
        rng = self.rng
        buf = bytearray(data)
        for _ in range(1 + min(int(rng.expovariate(0.8)), 7)):
            op = rng.randrange(15)
            if not buf and op < 12:
                buf += rng.randbytes(rng.randrange(1, 9))
                continue
            p = self._pos(buf, protect)
            if op == 0:
                buf[p] ^= 1 << rng.randrange(8)
            elif op == 1:
                buf[p] = rng.randrange(256)
            elif op == 2:
                buf[p] = rng.choice(BYTES)
            elif op == 3:
                buf[p : p + 2] = struct.pack(">h", rng.choice(I16))
            elif op in (4, 5):
                buf[p : p + 4] = struct.pack(">i", rng.choice(I32))
            elif op == 6:
                v = rng.choice(VARINTS)
                buf[p : p + rng.randrange(1, 6)] = v
            elif op == 7:
                buf[p:p] = rng.choice(VARINTS)
            elif op == 8:
                buf[p:p] = rng.randbytes(rng.randrange(1, 17))
            elif op == 9:
                del buf[p : p + rng.randrange(1, 17)]
            elif op == 10:
                n = rng.randrange(1, 33)
                buf[p:p] = buf[p : p + n] * rng.randrange(1, 4)
            elif op == 11:
                del buf[p:]
            elif op == 12:
                o = other()
                q = rng.randrange(len(o) + 1)
                buf[p:] = o[q:]
            elif op == 13:
                buf += rng.choice([bytes(rng.randrange(1, 64)), rng.randbytes(rng.randrange(1, 64))])
            else:
                # retag the request's version (another served version of the same API: the body is
                # then read with the wrong schema), or the API key
                if len(buf) >= 4:
                    key = struct.unpack_from(">h", buf, 0)[0]
                    if rng.random() < 0.8 and key in self.versions:
                        struct.pack_into(">h", buf, 2, rng.choice(self.versions[key]))
                    else:
                        struct.pack_into(">h", buf, 0, rng.choice(list(self.versions)))
        return bytes(buf[:MAX_INPUT])

    def mutate_batch(self, data: bytes, other: Callable[[], bytes]) -> bytes:
        rng = self.rng
        if rng.random() < 0.5 and len(data) >= rb.HEADER_SIZE:
            # inside the compression: mutate the records, re-compress, re-frame with length and CRC
            try:
                h = rb.read_header(data, 0)
                body = compression.decompress(h.compression, data[rb.HEADER_SIZE : h.size])
            except Exception:  # noqa: BLE001 - not a batch we can open: mutate as bytes
                return self._fixup(self.mutate(data, other))
            inner = self.mutate(body, lambda: body)
            try:
                payload = compression.compress(h.compression, inner)
            except Exception:  # noqa: BLE001
                return self._fixup(self.mutate(data, other))
            head = bytearray(data[: rb.HEADER_SIZE])
            if rng.random() < 0.3:
                struct.pack_into(">i", head, rb.RECORDS_COUNT, rng.choice(I32))
            return self._fixup(bytes(head) + payload, force=True)
        out = self.mutate(data, other)
        return self._fixup(out) if rng.random() < 0.7 else out

    def _fixup(self, data: bytes, force: bool = False) -> bytes:
        """Make the first batch's length and CRC right again, so the fuzz gets past them."""
        if len(data) < rb.HEADER_SIZE or data[rb.MAGIC] != rb.MAGIC_V2:
            return data
        buf = bytearray(data)
        if force or self.rng.random() < 0.5:
            struct.pack_into(">i", buf, rb.LENGTH, len(buf) - rb.LOG_OVERHEAD)
        (length,) = struct.unpack_from(">i", buf, rb.LENGTH)
        end = min(len(buf), rb.LOG_OVERHEAD + max(length, 0))
        struct.pack_into(">I", buf, rb.CRC, rb.batch_crc(buf[:end]))
        return bytes(buf)


# =============================================================================================
# The in-process engine (runs inside the worker process)

_SHM_HEAD = struct.Struct(">QBI")  # inputs done, target index, input length
_SHM_SIZE = _SHM_HEAD.size + MAX_INPUT * 2


def failure_key(e: BaseException) -> tuple[str, str]:
    """(exception type, innermost gregor or kio frame)."""
    if isinstance(e, SchemaViolation):
        return "SchemaViolation", e.kind
    where = "?"
    for fs in traceback.extract_tb(e.__traceback__):
        if "/gregor/" in fs.filename or "/kio/" in fs.filename:
            f = fs.filename
            f = f[f.rindex("/gregor/") + 1 :] if "/gregor/" in f else f[f.rindex("/kio/") + 1 :]
            where = f"{f}:{fs.lineno} in {fs.name}"
    t = type(e)
    return (t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"), where


def describe_input(target: str, data: bytes) -> str:
    if target == "request" and len(data) >= 4:
        key, version = struct.unpack_from(">hh", data, 0)
        return f"api_key {key} v{version}"
    return target


class Engine:
    """Generates and runs inputs; grows its corpus from coverage and decoded shapes."""

    def __init__(self, seed: int, corpus: dict[str, list[bytes]], shm: mmap.mmap | None = None,
                 max_corpus: int = 30_000) -> None:
        self.rng = random.Random(seed)
        self.mut = Mutator(self.rng)
        self.corpus = {t: list(corpus[t]) for t in TARGETS}
        self.features: set[Any] = set()
        self.cov = Coverage()
        self.shm = shm
        self.done = 0
        self.max_corpus = max_corpus
        self.new_entries: list[tuple[str, bytes]] = []
        self.served = set(served_versions())
        self.per_api: collections.Counter[tuple[int, int]] = collections.Counter()

    def _other(self, target: str) -> Callable[[], bytes]:
        return lambda: self.rng.choice(self.corpus[target])

    def generate(self) -> tuple[str, bytes, list[int], int]:
        rng = self.rng
        r = rng.random()
        target = "request" if r < 0.6 else "stream" if r < 0.72 else "batch" if r < 0.92 else "txnlog"
        base = rng.choice(self.corpus[target])
        cuts: list[int] = []
        max_frame = MAX_FRAME
        if target == "request":
            data = self.mut.mutate(base, self._other(target), protect=self.mut.header_len(base))
        elif target == "batch":
            data = self.mut.mutate_batch(base, self._other(target))
        elif target == "txnlog":
            data = base[:1] + self.mut.mutate(base[1:], lambda: self.rng.choice(self.corpus[target])[1:])
        else:
            data = self.mut.mutate(base, self._other(target))
            cuts = sorted(rng.randrange(len(data) + 1) for _ in range(rng.randrange(4)))
            max_frame = rng.choice([MAX_FRAME, MAX_FRAME, 64, 1000])
        return target, data, cuts, max_frame

    def run_one(self, target: str, data: bytes, cuts: list[int] | None = None, max_frame: int = MAX_FRAME,
                ) -> tuple[tuple[str, str], str] | None:
        """Run one input; returns (failure key, detail) or None."""
        if self.shm is not None:
            n = len(data)
            self.shm[: _SHM_HEAD.size] = _SHM_HEAD.pack(self.done, TARGETS.index(target), n)
            self.shm[_SHM_HEAD.size : _SHM_HEAD.size + n] = data
        self.done += 1
        feats: set[Any] = set()
        result = None
        if target == "request" and len(data) >= 4:
            kv = struct.unpack_from(">hh", data, 0)
            if kv in self.served:
                self.per_api[kv] += 1

        def call() -> None:
            if target == "request":
                run_request(data, feats)
            elif target == "stream":
                run_stream(data, feats, cuts or [], max_frame)
            elif target == "txnlog":
                run_txnlog(data, feats)
            else:
                run_batch(data, feats)

        started = time.perf_counter()
        new_edges = 0
        try:
            new_edges = self.cov.run(call)
        except EXPECTED:
            pass
        except SchemaViolation as e:
            result = failure_key(e), f"{describe_input(target, data)}: {e}"
        except Exception as e:  # noqa: BLE001 - that is what we are looking for
            result = failure_key(e), f"{describe_input(target, data)}: {type(e).__name__}: {e}\n" + "".join(
                traceback.format_exception(e)[-6:])
        elapsed = time.perf_counter() - started
        if elapsed > SLOW_INPUT_S and result is None:
            result = ("SlowInput", target), f"{describe_input(target, data)} took {elapsed:.1f} s"
        tagged = {(target, f) for f in feats}
        fresh = tagged - self.features
        if (fresh or new_edges) and result is None:
            self.features |= fresh
            corpus = self.corpus[target]
            if len(corpus) < self.max_corpus:
                corpus.append(data)
            else:
                corpus[self.rng.randrange(len(corpus))] = data
            self.new_entries.append((target, data))
        return result

    def step(self) -> tuple[tuple[str, str], str, str, bytes] | None:
        target, data, cuts, max_frame = self.generate()
        r = self.run_one(target, data, cuts, max_frame)
        if r is None:
            return None
        if target == "stream" and cuts:
            pass
        return r[0], r[1], target, data


def _worker_main(conn: Any, shm: mmap.mmap, seed: int, corpus: dict[str, list[bytes]], budget: int,
                 deadline: float, stderr_path: str) -> None:
    fd = os.open(stderr_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd, 2)
    os.close(fd)
    os.environ["RUST_BACKTRACE"] = "0"  # the abort message alone names the failure
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    eng = Engine(seed, corpus, shm)
    failures: list[tuple[tuple[str, str], str, str, bytes]] = []
    last_report = time.monotonic()
    reported = 0
    while eng.done < budget and time.monotonic() < deadline:
        r = eng.step()
        if r is not None:
            failures.append(r)
        if eng.done % 256 == 0:
            now = time.monotonic()
            if now - last_report > 0.5 or len(failures) > 50:
                conn.send(("progress", eng.done - reported, eng.new_entries, failures, len(eng.features),
                           eng.per_api))
                eng.per_api = collections.Counter()
                reported = eng.done
                eng.new_entries = []
                failures = []
                last_report = now
    conn.send(("progress", eng.done - reported, eng.new_entries, failures, len(eng.features), eng.per_api))
    conn.send(("done",))
    conn.close()


@dataclasses.dataclass
class Failure:
    key: tuple[str, str]
    target: str
    detail: str
    data: bytes
    count: int = 0
    inputs: set[str] = dataclasses.field(default_factory=set)


@dataclasses.dataclass
class InprocessResult:
    inputs: int = 0
    seconds: float = 0.0
    crashes: int = 0
    hangs: int = 0
    restarts: int = 0
    corpus: dict[str, int] = dataclasses.field(default_factory=dict)
    features: int = 0
    failures: dict[tuple[str, str], Failure] = dataclasses.field(default_factory=dict)
    stopped_early: str = ""
    per_api: collections.Counter[tuple[int, int]] = dataclasses.field(default_factory=collections.Counter)

    def add(self, key: tuple[str, str], target: str, detail: str, data: bytes) -> None:
        f = self.failures.get(key)
        if f is None:
            f = self.failures[key] = Failure(key, target, detail, data)
        f.count += 1
        if len(f.inputs) < 12:
            f.inputs.add(describe_input(target, data))
        if len(data) < len(f.data):
            f.data, f.detail, f.target = data, detail, target


def _crash_key(stderr_text: str, exitcode: int | None) -> tuple[str, str]:
    sig = f"signal {signal.Signals(-exitcode).name}" if exitcode is not None and exitcode < 0 else f"exit {exitcode}"
    lines = [ln.strip() for ln in stderr_text.splitlines() if ln.strip()]
    lines = [ln for ln in lines if not re.match(r"(note:|stack backtrace|\d+:|at )", ln)] or lines
    msg = re.sub(r"\d+", "N", lines[0])[:160] if lines else "(no message)"
    return f"ProcessDied ({sig})", msg


def run_inprocess(inputs: int, seed: int = 1, seconds: float = 3600.0, workers: int = 1,
                  max_restarts: int = 2000, progress: bool = True) -> InprocessResult:
    """Run ``inputs`` inputs in forked worker processes; a dead worker is replaced."""
    ctx = multiprocessing.get_context("fork")
    corpus = all_seeds(seed)
    res = InprocessResult()
    started = time.monotonic()
    deadline = started + seconds
    tmp = tempfile.mkdtemp(prefix="gregor-fuzz-")
    per_worker = [inputs // workers + (1 if i < inputs % workers else 0) for i in range(workers)]
    done = [0] * workers
    slots: list[dict[str, Any]] = []

    def spawn(i: int) -> None:
        shm = slots[i]["shm"] if i < len(slots) else mmap.mmap(-1, _SHM_SIZE)
        parent, child = ctx.Pipe()
        wseed = seed * 1_000_003 + i * 7919 + res.restarts
        stderr_path = os.path.join(tmp, f"worker{i}.stderr")
        p = ctx.Process(target=_worker_main, args=(child, shm, wseed, corpus, per_worker[i] - done[i], deadline,
                                                   stderr_path), daemon=True)
        p.start()
        child.close()
        slot = {"proc": p, "conn": parent, "shm": shm, "stderr": stderr_path, "last": time.monotonic(),
                "running": True, "base": 0}
        if i < len(slots):
            slots[i] = slot
        else:
            slots.append(slot)

    for i in range(workers):
        spawn(i)
    last_print = time.monotonic()
    while any(s["running"] for s in slots):
        for i, s in enumerate(slots):
            if not s["running"]:
                continue
            conn = s["conn"]
            msg = None
            died = False
            try:
                if conn.poll(0.2):
                    msg = conn.recv()
            except (EOFError, OSError):
                died = True
            if msg is not None:
                s["last"] = time.monotonic()
                if msg[0] == "progress":
                    _, n, new_entries, fails, nfeat, per_api = msg
                    res.per_api.update(per_api)
                    done[i] += n
                    s["base"] += n
                    res.features = max(res.features, nfeat)
                    for target, data in new_entries:
                        lst = corpus[target]
                        if len(lst) < 30_000:
                            lst.append(data)
                    for key, detail, target, data in fails:
                        res.add(key, target, detail, data)
                else:
                    s["running"] = False
                    s["proc"].join(5)
                continue
            hung = time.monotonic() - s["last"] > HANG_S
            if not died and s["proc"].is_alive() and not hung:
                continue
            # the worker died (or hangs): the input it was on is in shared memory
            if hung and s["proc"].is_alive():
                os.kill(s["proc"].pid, signal.SIGKILL)
            s["proc"].join(5)
            shm = s["shm"]
            wdone, tix, n = _SHM_HEAD.unpack_from(shm, 0)
            data = bytes(shm[_SHM_HEAD.size : _SHM_HEAD.size + n])
            target = TARGETS[tix]
            done[i] += wdone + 1 - s["base"]
            stderr_text = Path(s["stderr"]).read_text(errors="replace") if os.path.exists(s["stderr"]) else ""
            if hung:
                res.hangs += 1
                key = ("Hang", f"no progress for {HANG_S:.0f} s")
                detail = f"{describe_input(target, data)}: worker made no progress for {HANG_S:.0f} s"
            else:
                res.crashes += 1
                key = _crash_key(stderr_text, s["proc"].exitcode)
                detail = f"{describe_input(target, data)}: worker died ({s['proc'].exitcode}):\n{stderr_text[-2000:]}"
            res.add(key, target, detail, data)
            s["conn"].close()
            if done[i] >= per_worker[i] or time.monotonic() >= deadline:
                s["running"] = False
                continue
            if res.restarts >= max_restarts:
                s["running"] = False
                res.stopped_early = f"stopped after {max_restarts} worker restarts"
                continue
            res.restarts += 1
            spawn(i)
        if progress and time.monotonic() - last_print > 10:
            last_print = time.monotonic()
            rate = sum(done) / max(last_print - started, 1e-9)
            print(f"  {sum(done):>9,} inputs  {rate:,.0f}/s  corpus {sum(len(v) for v in corpus.values()):,}  "
                  f"distinct failures {len(res.failures)}  crashes {res.crashes}", flush=True)
    res.inputs = sum(done)
    res.seconds = time.monotonic() - started
    res.corpus = {t: len(v) for t, v in corpus.items()}
    if res.inputs < inputs and not res.stopped_early:
        res.stopped_early = f"--seconds cap reached after {res.inputs:,} inputs"
    shutil.rmtree(tmp, ignore_errors=True)
    return res


def _slug(key: tuple[str, str]) -> str:
    s = re.sub(r"[^A-Za-z0-9]+", "-", f"{key[0]}-{key[1]}").strip("-")[:90]
    return f"{s}-{hashlib.sha1(repr(key).encode()).hexdigest()[:8]}"


def save_failures(failures: Iterable[Failure], crashes_dir: Path, prefix: str = "") -> list[Path]:
    crashes_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for f in failures:
        name = f"{prefix}{f.target}-{_slug(f.key)}"
        data = struct.pack(">i", len(f.data)) + f.data if f.target == "request" else f.data
        (crashes_dir / f"{name}.bin").write_bytes(data)
        (crashes_dir / f"{name}.txt").write_text(
            f"failure: {f.key[0]} at {f.key[1]}\ntarget: {f.target}\nseen: {f.count} times, inputs: "
            f"{', '.join(sorted(f.inputs))}\nreproducer ({len(data)} bytes, hex): {data.hex()}\n"
            f"reproduce: python bench/fuzz.py --reproduce {crashes_dir / (name + '.bin')}\n\n{f.detail}\n")
        paths.append(crashes_dir / f"{name}.bin")
    return paths


def reproduce(path: Path) -> int:
    target = next((t for t in TARGETS if path.name.startswith(t) or path.name.startswith("live-" + t)), "request")
    data = path.read_bytes()
    if target == "request":
        data = data[4:]
    print(f"{path}: {target}, {len(data)} bytes")
    feats: set[Any] = set()
    try:
        if target == "request":
            run_request(data, feats)
        elif target == "stream":
            run_stream(data, feats, [], MAX_FRAME)
        elif target == "txnlog":
            run_txnlog(data, feats)
        else:
            run_batch(data, feats)
    except EXPECTED as e:
        print(f"rejected as malformed (expected): {type(e).__name__}: {e}")
        return 0
    print("accepted: no failure")
    return 0


# =============================================================================================
# Live broker


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LiveBroker:
    def __init__(self, data_dir: Path, port: int, overrides: dict[str, str] | None = None) -> None:
        self.port = port
        self.data_dir = data_dir
        self.log_path = data_dir.parent / "broker.log"
        self.overrides = {"listeners": f"PLAINTEXT://127.0.0.1:{port}", "log.dirs": str(data_dir)}
        self.overrides.update(overrides or {})
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30) -> LiveBroker:
        cmd = [sys.executable, "-m", "gregor", "serve"]
        for k, v in self.overrides.items():
            cmd += ["--override", f"{k}={v}"]
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - open for the process lifetime
        env = dict(os.environ, PYTHONUNBUFFERED="1", RUST_BACKTRACE="0")
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=self._log, env=env, cwd=ROOT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{self.output()[-3000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("broker did not start")

    def output(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def memory(self) -> tuple[int, int]:
        """(VmHWM, VmRSS) in KiB."""
        assert self.proc is not None
        hwm = rss = 0
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        hwm = int(line.split()[1])
                    elif line.startswith("VmRSS:"):
                        rss = int(line.split()[1])
        except OSError:
            pass
        return hwm, rss

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()
        return self.proc.returncode


def log_failures(text: str) -> dict[str, tuple[int, str]]:
    """Tracebacks and 'unexpected error' lines in a broker log, grouped by (exception line,
    innermost gregor frame)."""
    out: dict[str, tuple[int, str]] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("Traceback"):
            j = i + 1
            where = "?"
            while j < len(lines) and (lines[j].startswith(" ") or lines[j].startswith("Traceback")
                                      or lines[j].startswith("During handling") or not lines[j].strip()):
                m = re.match(r'\s+File "([^"]+)", line (\d+), in (\S+)', lines[j])
                if m and "/gregor/" in m.group(1):
                    where = f"{m.group(1)[m.group(1).rindex('/gregor/') + 1 :]}:{m.group(2)} in {m.group(3)}"
                j += 1
            exc = lines[j] if j < len(lines) else "?"
            key = f"{exc.split(':')[0]} at {where}"
            n, ex = out.get(key, (0, ""))
            out[key] = (n + 1, ex or "\n".join(lines[max(i - 1, 0) : j + 1])[-3000:])
            i = j + 1
            continue
        if "unexpected error" in line.lower() and not (i + 1 < len(lines) and lines[i + 1].startswith("Traceback")):
            key = "unexpected error: " + re.sub(r"\d+", "N", line.split("unexpected error", 1)[1])[:100]
            n, ex = out.get(key, (0, ""))
            out[key] = (n + 1, ex or line)
        i += 1
    return out


class LogTail:
    """The broker log's new complete records since the last call."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.pos = 0
        self.rest = ""

    def poll(self, final: bool = False) -> str:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.pos)
                data = f.read()
        except OSError:
            return ""
        self.pos += len(data)
        text = self.rest + data.decode(errors="replace")
        cut = len(text) if final else text.rfind("\n[") + 1
        self.rest = text[cut:]
        return text[:cut]


PROBE_CORR = 0x7A5A5A5A
# requests a broker may hold for a while before answering, by design: Fetch (max wait), JoinGroup
# (rebalance timeout), SyncGroup (waits for the leader's assignment)
WAITING_APIS = {1, 11, 14}


def api_versions_frame(corr: int) -> bytes:
    payload = request_header(18, 0, corr, "fuzz-probe")
    return struct.pack(">i", len(payload)) + payload


def metadata_frame(corr: int, topic: str) -> bytes:
    body = encode(codec.request_schema(3, 1), {"topics": [{"name": topic}]})
    payload = request_header(3, 1, corr, "fuzz-probe") + body
    return struct.pack(">i", len(payload)) + payload


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    return await reader.readexactly(size)


@dataclasses.dataclass
class LiveStats:
    frames: int = 0
    connections: int = 0
    closed_by_broker: int = 0
    answered: int = 0
    probe_timeouts: int = 0  # the in-line ApiVersions after a frame got no answer within 3 s
    timeouts: collections.Counter[tuple[str, int]] = dataclasses.field(default_factory=collections.Counter)
    timeout_examples: dict[tuple[str, int], bytes] = dataclasses.field(default_factory=dict)
    refused: int = 0
    probe_max_s: float = 0.0
    rt_produced: int = 0
    rt_consumed: int = 0
    peak_hwm_kib: int = 0
    elapsed: float = 0.0
    log_path: str = ""
    bomb: tuple[int, int, int] | None = None  # frame bytes, VmHWM KiB before, after
    txn: tuple[int, int, int, int] = (0, 0, 0, 0)  # transactions, committed records, aborted, read back
    failures: dict[str, str] = dataclasses.field(default_factory=dict)


def frame_that_kills(frames: list[bytes]) -> bytes | None:
    """The first size-prefixed frame whose decoding (as the broker does it) ends a forked process."""
    for f in frames:
        pid = os.fork()
        if pid == 0:  # child: decode and leave without running any cleanup of the parent's
            try:
                for payload in FrameDecoder(MAX_FRAME).feed(f):
                    with contextlib.suppress(Exception):
                        run_request(payload, set())
            finally:
                os._exit(0)
        _, status = os.waitpid(pid, 0)
        if status != 0:
            return f
    return None


class LiveFuzzer:
    def __init__(self, port: int, frames: int, seed: int, connections: int, deadline: float,
                 stats: LiveStats, txn_corpus: list[bytes] | None = None) -> None:
        self.port = port
        self.budget = frames
        self.rng = random.Random(seed)
        self.mut = Mutator(self.rng)
        seeds = all_seeds(seed)
        self.corpus = seeds["request"]
        # the transactional requests with the live broker's ids (a real producer id and epoch, an
        # existing topic): a fifth of the frames start from one of them
        self.txn_corpus = txn_corpus or []
        self.connections = connections
        self.deadline = deadline
        self.stats = stats
        self.stop = False
        # the last frames sent on each recent connection, by its local port (the broker logs the
        # peer's address): the reproducer of a traceback in the broker's log
        self.history: collections.OrderedDict[int, collections.deque[bytes]] = collections.OrderedDict()

    def next_frame(self) -> tuple[bytes, str]:
        """A mutated frame, and how its size prefix was made (honest, lying, several frames)."""
        rng = self.rng
        base = rng.choice(self.txn_corpus if self.txn_corpus and rng.random() < 0.2 else self.corpus)
        if rng.random() < 0.05:
            payload = base  # unmutated: valid requests keep the broker's state moving
        else:
            payload = self.mut.mutate(base, lambda: rng.choice(self.corpus), protect=self.mut.header_len(base))
        if len(payload) >= 8 and struct.unpack_from(">i", payload, 4)[0] == PROBE_CORR:
            payload = payload[:4] + b"\0\0\0\0" + payload[8:]
        r = rng.random()
        if r < 0.9:
            return struct.pack(">i", len(payload)) + payload, "honest"
        if r < 0.95:  # a size prefix that lies
            return struct.pack(">i", rng.choice([len(payload) + rng.randrange(1, 64), -1, 2**31 - 1, 0,
                                                 max(len(payload) - rng.randrange(1, 8), 0)])) + payload, "lying"
        # several frames in one write
        more = b"".join(struct.pack(">i", len(p)) + p
                        for p in (self.mut.mutate(rng.choice(self.corpus), lambda: base, protect=4) for _ in range(3)))
        return struct.pack(">i", len(payload)) + payload + more, "several"

    async def _conn_loop(self) -> None:
        while not self.stop and self.stats.frames < self.budget and time.monotonic() < self.deadline:
            try:
                reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", self.port), 10)
            except (OSError, TimeoutError):
                self.stats.refused += 1
                await asyncio.sleep(0.1)
                continue
            self.stats.connections += 1
            sent: collections.deque[bytes] = collections.deque(maxlen=4)
            with contextlib.suppress(Exception):
                self.history[writer.get_extra_info("sockname")[1]] = sent
                if len(self.history) > 4096:
                    self.history.popitem(last=False)
            try:
                while not self.stop and self.stats.frames < self.budget and time.monotonic() < self.deadline:
                    f, kind = self.next_frame()
                    sent.append(f)
                    self.stats.frames += 1
                    writer.write(f + api_versions_frame(PROBE_CORR))
                    await writer.drain()
                    try:
                        await asyncio.wait_for(self._until_probe(reader), 3)
                        self.stats.answered += 1
                    except TimeoutError:
                        self.stats.probe_timeouts += 1
                        key = (kind, struct.unpack_from(">h", f, 4)[0] if len(f) >= 6 else -1)
                        self.stats.timeouts[key] += 1
                        if self.stats.timeouts[key] == 1 and kind == "honest" and key[1] not in WAITING_APIS:
                            self.stats.timeout_examples[key] = f
                        break
            except (asyncio.IncompleteReadError, ConnectionError, OSError):
                self.stats.closed_by_broker += 1
            finally:
                writer.close()
                with contextlib.suppress(Exception):
                    await writer.wait_closed()

    async def _until_probe(self, reader: asyncio.StreamReader) -> None:
        while True:
            frame = await _read_frame(reader)
            if len(frame) >= 4 and struct.unpack_from(">i", frame, 0)[0] == PROBE_CORR:
                return

    async def _probe_loop(self, topic: str) -> None:
        """A well-behaved client on its own connection: must be answered the whole time."""
        corr = 1
        reader = writer = None
        while not self.stop:
            t0 = time.monotonic()
            try:
                if writer is None:
                    reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", self.port), 30)
                assert reader is not None and writer is not None
                corr += 2
                writer.write(api_versions_frame(corr) + metadata_frame(corr + 1, topic))
                await writer.drain()
                got: set[int] = set()
                while len(got) < 2:
                    frame = await asyncio.wait_for(_read_frame(reader), 30 - (time.monotonic() - t0))
                    got.add(struct.unpack_from(">i", frame, 0)[0])
                if got != {corr, corr + 1}:
                    self.stats.failures.setdefault("probe: wrong correlation ids", repr(got))
            except (TimeoutError, OSError, asyncio.IncompleteReadError, ValueError) as e:
                self.stats.failures.setdefault("probe: a well-formed request on a separate connection got no "
                                               "answer within 30 s", f"{type(e).__name__}: {e}")
                if writer is not None:
                    writer.close()
                writer = None
            self.stats.probe_max_s = max(self.stats.probe_max_s, time.monotonic() - t0)
            await asyncio.sleep(1)
        if writer is not None:
            writer.close()

    async def run(self, probe_topic: str) -> None:
        probe = asyncio.create_task(self._probe_loop(probe_topic))
        await asyncio.gather(*(self._conn_loop() for _ in range(self.connections)))
        self.stop = True
        await probe


class RoundTrip:
    """A confluent-kafka producer and consumer that run the whole time; every record must come back
    in order and intact."""

    def __init__(self, bootstrap: str, topic: str, stats: LiveStats) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.stats = stats
        self.stop = threading.Event()
        self.errors: list[str] = []
        self.last_progress = time.monotonic()

    @staticmethod
    def value(i: int) -> bytes:
        return f"{i}:".encode() + hashlib.sha256(str(i).encode()).hexdigest().encode() * (1 + i % 5)

    def produce_loop(self) -> None:
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "linger.ms": 5,
                      "enable.idempotence": True, "message.timeout.ms": 120_000})

        def delivered(err: Any, msg: Any) -> None:
            if err is not None:
                self.errors.append(f"delivery failed: {err}")

        i = 0
        while not self.stop.is_set():
            p.produce(self.topic, key=str(i).encode(), value=self.value(i), callback=delivered)
            i += 1
            self.stats.rt_produced = i
            p.poll(0)
            time.sleep(0.005)
        left = p.flush(60)
        if left:
            self.errors.append(f"{left} records not delivered at the end")

    def consume_loop(self) -> None:
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"{self.topic}-g",
                      "enable.auto.commit": False, "auto.offset.reset": "earliest", "check.crcs": True})
        c.assign([TopicPartition(self.topic, 0, 0)])
        expect = 0
        try:
            while True:
                if self.stop.is_set() and expect >= self.stats.rt_produced and self.done_producing.is_set():
                    break
                if self.stop.is_set() and time.monotonic() - self.last_progress > 30:
                    break
                m = c.poll(0.5)
                if m is None:
                    continue
                if m.error():
                    self.errors.append(f"consumer error: {m.error()}")
                    continue
                if m.key() != str(expect).encode() or m.value() != self.value(expect):
                    self.errors.append(f"record {expect}: got key {m.key()!r} at offset {m.offset()}")
                    expect = int(m.key() or b"0") + 1
                    continue
                expect += 1
                self.stats.rt_consumed = expect
                self.last_progress = time.monotonic()
        finally:
            c.close()

    def start(self) -> None:
        self.done_producing = threading.Event()

        def prod() -> None:
            try:
                self.produce_loop()
            finally:
                self.done_producing.set()

        self.threads = [threading.Thread(target=prod, daemon=True),
                        threading.Thread(target=self.consume_loop, daemon=True)]
        for t in self.threads:
            t.start()

    def stalled(self) -> bool:
        return self.stats.rt_produced > self.stats.rt_consumed + 0 and time.monotonic() - self.last_progress > 30

    def finish(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(120)


class TxnRoundTrip:
    """A confluent-kafka transactional producer (transactions of 1-20 records, every third
    aborted) and a read_committed consumer, the whole time: the consumer must get exactly the
    committed records, in order, and none of the aborted ones."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.stop = threading.Event()
        self.done_producing = threading.Event()
        self.errors: list[str] = []
        self.committed: list[int] = []  # record numbers of committed transactions, in order
        self.inflight: list[int] = []  # the records of the transaction being committed
        self.aborted = 0
        self.transactions = 0
        self.consumed = 0
        self.last_progress = self.last_transaction = time.monotonic()

    def produce_loop(self) -> None:
        from confluent_kafka import KafkaException, Producer

        p = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": f"{self.topic}-eos",
                      "acks": "all", "linger.ms": 2, "transaction.timeout.ms": 60_000, "log_level": 3})
        rng = random.Random(7)
        i = 0
        try:
            p.init_transactions(60)
            while not self.stop.is_set():
                n = rng.randint(1, 20)
                nums = list(range(i, i + n))
                i += n
                p.begin_transaction()
                for k in nums:
                    p.produce(self.topic, key=str(k).encode(), value=RoundTrip.value(k))
                p.poll(0)
                commit = self.transactions % 3 != 2
                try:
                    if commit:
                        self.inflight = nums  # the consumer may see them before commit_transaction returns
                        p.commit_transaction(60)
                        self.committed += nums
                        self.inflight = []
                    else:
                        # flushed first: the records are in the log (read_committed must skip them),
                        # and librdkafka sends EndTxn(ABORT) only once AddPartitionsToTxn was answered
                        # (without it, an abort right after a commit races that commit's markers and
                        # librdkafka takes the coordinator's INVALID_TXN_STATE as fatal)
                        p.flush(60)
                        p.abort_transaction(60)
                        self.aborted += n
                except KafkaException as e:
                    self.inflight = []
                    err = e.args[0]
                    if err.txn_requires_abort():
                        try:
                            p.abort_transaction(60)
                        except KafkaException as e2:
                            raise RuntimeError(f"{'commit' if commit else 'abort'} failed ({err}), then the abort "
                                               f"failed ({e2.args[0]})") from None
                        self.aborted += n
                    elif err.retriable():
                        continue
                    else:
                        raise
                self.transactions += 1
                self.last_transaction = time.monotonic()
                time.sleep(0.01)
        except Exception as e:  # noqa: BLE001 - reported as a failure
            self.errors.append(f"transactional producer: {type(e).__name__}: {e}")
        finally:
            self.done_producing.set()

    def consume_loop(self) -> None:
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"{self.topic}-g", "log_level": 3,
                      "enable.auto.commit": False, "isolation.level": "read_committed", "check.crcs": True})
        c.assign([TopicPartition(self.topic, 0, 0)])
        try:
            while True:
                done = self.done_producing.is_set()
                if done and self.consumed >= len(self.committed):
                    break
                if (self.stop.is_set() or done) and time.monotonic() - self.last_progress > 30:
                    break
                m = c.poll(0.5)
                if m is None:
                    continue
                if m.error():
                    self.errors.append(f"read_committed consumer error: {m.error()}")
                    continue
                got = int(m.key() or b"-1")
                wait_until = time.monotonic() + 60
                while got in self.inflight and got not in self.committed and time.monotonic() < wait_until:
                    time.sleep(0.005)  # its commit_transaction has not returned yet
                want = self.committed[self.consumed] if self.consumed < len(self.committed) else None
                if got != want or m.value() != RoundTrip.value(got):
                    self.errors.append(f"read_committed: record {got} at offset {m.offset()} where committed "
                                       f"record {want} was expected (an aborted or misplaced record)")
                    if got in self.committed:
                        self.consumed = self.committed.index(got) + 1
                    continue
                self.consumed += 1
                self.last_progress = time.monotonic()
        finally:
            c.close()

    def start(self) -> None:
        self.threads = [threading.Thread(target=self.produce_loop, daemon=True),
                        threading.Thread(target=self.consume_loop, daemon=True)]
        for t in self.threads:
            t.start()

    def stalled(self) -> bool:
        return (self.consumed < len(self.committed) and time.monotonic() - self.last_progress > 30) or (
            not self.done_producing.is_set() and time.monotonic() - self.last_transaction > 60)

    def finish(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(120)


def live_topic_id(bootstrap: str, topic: str) -> uuid.UUID | None:
    from gregor.admin.wire_client import WireClient

    wc = WireClient(bootstrap, client_id="fuzz-txn-ids")
    try:
        r = wc.call(3, 12, {"topics": [{"name": topic}]})
    finally:
        wc.close()
    return next((t.topic_id for t in r.topics if t.name == topic), None)


def live_txn_ids(bootstrap: str, tid: str, timeout: float = 30) -> tuple[int, int]:
    """A producer id and epoch for ``tid`` from the live broker (InitProducerId, retried while the
    coordinator loads)."""
    from gregor.admin.wire_client import WireClient

    deadline = time.monotonic() + timeout
    while True:
        wc = WireClient(bootstrap, client_id="fuzz-txn-ids")
        try:
            # the first lookup of a transaction coordinator creates __transaction_state
            wc.call(10, 3, {"key": tid, "key_type": 1})
            r = wc.call(22, 4, {"transactional_id": tid, "transaction_timeout": 60000, "producer_id": -1,
                                "producer_epoch": -1})
        finally:
            wc.close()
        if r.error_code == ErrorCode.none:
            return int(r.producer_id), int(r.producer_epoch)
        if time.monotonic() > deadline:
            raise RuntimeError(f"InitProducerId({tid}) answered {r.error_code!r}")
        time.sleep(0.5)


BOMB_BYTES = 400 << 20
BOMB_LIMIT_KIB = 128 << 10


def decompression_bomb(broker: LiveBroker, stats: LiveStats, crashes_dir: Path) -> None:
    """One Produce to a compacted topic (the broker decompresses it to check the keys) whose zstd
    batch of ~13 KB holds a 400 MB value. Kafka reads such records as a stream; holding them whole
    costs the broker memory a client chose. Failure: the broker's peak RSS grows by more than
    128 MiB."""
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = "fuzz-bomb"
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{broker.port}"})
    admin.create_topics([NewTopic(topic, 1, 1, config={"cleanup.policy": "compact"})])[topic].result(30)
    batch = records.build_batch([records.Record(0, 0, b"k", bytes(BOMB_BYTES))], codec=compression.ZSTD)
    body = encode(codec.request_schema(0, 7), {
        "acks": -1, "timeout": 30000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
    payload = request_header(0, 7, 77, "fuzz-bomb") + body
    frame = struct.pack(">i", len(payload)) + payload
    before, _ = broker.memory()
    try:
        with socket.create_connection(("127.0.0.1", broker.port), timeout=60) as s:
            s.sendall(frame)
            s.recv(4)
    except OSError:
        pass
    after, _ = broker.memory()
    stats.bomb = (len(frame), before, after)
    if after - before > BOMB_LIMIT_KIB:
        crashes_dir.mkdir(parents=True, exist_ok=True)
        path = crashes_dir / "live-decompression-bomb-produce.bin"
        path.write_bytes(frame)
        stats.failures["memory: a decompression bomb"] = (
            f"a {len(frame):,}-byte Produce v7 to a compacted topic (zstd batch, one {BOMB_BYTES >> 20} MiB value) "
            f"raised the broker's peak RSS from {before >> 10} to {after >> 10} MiB (the frame: {path}; the "
            f"topic needs cleanup.policy=compact)")


def create_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)


def run_live(frames: int, seed: int, seconds: float, connections: int, crashes_dir: Path,
             workdir: Path | None = None, bomb: bool = True) -> LiveStats:
    stats = LiveStats()
    tmp = Path(workdir or tempfile.mkdtemp(prefix="gregor-fuzz-live-"))
    port = free_port()
    broker = LiveBroker(tmp / "data", port).start()
    bootstrap = f"127.0.0.1:{port}"
    topic = f"fuzz-rt-{random.Random(seed).getrandbits(48):012x}"
    create_topic(bootstrap, topic)
    # the transactional APIs: frames with a real producer id and epoch on a topic of their own, and
    # a transactional round trip on another
    txn_topic, eos_topic = f"{topic}-txn", f"{topic}-eos"
    create_topic(bootstrap, txn_topic)
    create_topic(bootstrap, eos_topic)
    txn_corpus: list[bytes] = []
    txn_topic_id = live_topic_id(bootstrap, txn_topic)
    for n in range(4):
        tid = f"fuzz-live-txn-{n}"
        pid, epoch = live_txn_ids(bootstrap, tid)
        txn_corpus += txn_request_seeds(pid, epoch, tid, txn_topic, f"fuzz-live-group-{n}", txn_topic_id)
    rt = RoundTrip(bootstrap, topic, stats)
    rt.start()
    trt = TxnRoundTrip(bootstrap, eos_topic)
    trt.start()
    deadline = time.monotonic() + seconds
    fuzzer = LiveFuzzer(port, frames, seed, connections, deadline, stats, txn_corpus)
    stop_watch = threading.Event()

    def watch() -> None:
        last_print = time.monotonic()
        while not stop_watch.is_set():
            hwm, _rss = broker.memory()
            stats.peak_hwm_kib = max(stats.peak_hwm_kib, hwm)
            if not broker.alive():
                fuzzer.stop = True
                # the frame that ended it is among the last ones of the most recent connections
                last = [d[-1] for d in list(fuzzer.history.values())[-2 * connections :] if d]
                path = crashes_dir / "live-broker-exit-last-frames.bin"
                path.write_bytes(b"".join(last))
                killer = frame_that_kills(last)
                if killer is not None:
                    (crashes_dir / "live-broker-exit-frame.bin").write_bytes(killer)
                out = broker.output().rstrip().splitlines()
                stats.failures.setdefault("broker process exited",
                                          f"exit code {broker.proc.returncode if broker.proc else None}; its log "
                                          f"ends:\n" + "\n".join(out[-5:]) + f"\nthe last frame of each of the "
                                          f"{len(last)} most recent connections: {path}" + (
                                              f"\nthis one also kills a process that only decodes it: "
                                              f"{crashes_dir / 'live-broker-exit-frame.bin'} ({killer.hex()[:200]})"
                                              if killer is not None else ""))
                return
            check_log()
            if rt.stalled():
                stats.failures.setdefault("round trip made no progress for 30 s",
                                          f"produced {stats.rt_produced}, consumed {stats.rt_consumed}")
            if trt.stalled():
                stats.failures.setdefault("transactional round trip made no progress (30 s reading, 60 s producing)",
                                          f"committed {len(trt.committed)}, consumed {trt.consumed}; "
                                          f"{'; '.join(trt.errors[:2])}")
            stats.txn = (trt.transactions, len(trt.committed), trt.aborted, trt.consumed)
            if time.monotonic() - last_print > 10:
                last_print = time.monotonic()
                print(f"  {stats.frames:>9,} frames  {stats.connections:,} connections  round trip "
                      f"{stats.rt_consumed:,}/{stats.rt_produced:,}  transactions {trt.transactions:,} (read "
                      f"committed {trt.consumed:,}/{len(trt.committed):,})  broker RSS peak {hwm / 1024:.0f} MiB",
                      flush=True)
            time.sleep(0.5)

    tail = LogTail(broker.log_path)
    crashes_dir.mkdir(parents=True, exist_ok=True)

    def check_log(final: bool = False) -> None:
        for key, (n, example) in log_failures(tail.poll(final)).items():
            name = f"broker log: {key}"
            if name in log_counts:
                log_counts[name] += n
                continue
            log_counts[name] = n
            m = re.search(r"127\.0\.0\.1:(\d+)", example)
            sent = fuzzer.history.get(int(m.group(1))) if m else None
            if sent:
                path = crashes_dir / f"live-{_slug((key, ''))}.bin"
                path.write_bytes(b"".join(sent))
                example += f"\nframes sent on that connection (the last is the likeliest culprit): {path}"
            stats.failures[name] = example

    log_counts: dict[str, int] = {}
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    started = time.monotonic()
    try:
        asyncio.run(fuzzer.run(topic))
    finally:
        elapsed = time.monotonic() - started
        rt.finish()
        if rt.stats.rt_consumed < rt.stats.rt_produced:
            stats.failures.setdefault("round trip: not every produced record was consumed back",
                                      f"produced {stats.rt_produced}, consumed {stats.rt_consumed}")
        for e in rt.errors[:1]:
            stats.failures.setdefault("round trip: " + e.split(":")[0], "; ".join(rt.errors[:5]))
        trt.finish()
        stats.txn = (trt.transactions, len(trt.committed), trt.aborted, trt.consumed)
        if trt.consumed < len(trt.committed):
            stats.failures.setdefault("transactional round trip: not every committed record was read back",
                                      f"committed {len(trt.committed)}, read committed {trt.consumed}")
        if trt.transactions == 0:
            stats.failures.setdefault("transactional round trip: no transaction completed", "; ".join(trt.errors[:3]))
        for e in trt.errors[:1]:
            stats.failures.setdefault("transactional round trip: " + e.split(":")[0], "; ".join(trt.errors[:5]))
        stop_watch.set()
        watcher.join(5)
        hwm, _ = broker.memory()
        stats.peak_hwm_kib = max(stats.peak_hwm_kib, hwm)
        if bomb and broker.alive():
            decompression_bomb(broker, stats, crashes_dir)
        alive = broker.alive()
        rc = broker.stop()
        if not alive:
            stats.failures.setdefault("broker process exited", f"exit code {rc}")
        elif rc not in (0, -signal.SIGTERM):
            stats.failures.setdefault("broker did not stop cleanly", f"exit code {rc} after SIGTERM")
        check_log(final=True)
        for name, n in log_counts.items():
            stats.failures[name] = f"seen {n}x\n" + stats.failures[name]
        stats.elapsed = elapsed
        stats.log_path = str(broker.log_path)
    return stats


# =============================================================================================
# Capturing real clients' requests


class RecordingProxy:
    """A TCP proxy on 127.0.0.1 that forwards to the broker and records what clients send."""

    def __init__(self, port: int, target_port: int) -> None:
        self.port = port
        self.target_port = target_port
        self.sent = bytearray()
        self.frames: list[bytes] = []
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()

    def start(self) -> None:
        threading.Thread(target=self._run, daemon=True).start()
        self.ready.wait(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)

        async def main() -> None:
            self.server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)
            self.ready.set()
            await self.server.serve_forever()

        with contextlib.suppress(asyncio.CancelledError, RuntimeError):
            self.loop.run_until_complete(main())

    async def _handle(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        try:
            breader, bwriter = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            cwriter.close()
            return
        dec = FrameDecoder(MAX_FRAME)

        async def pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter, record: bool) -> None:
            try:
                while data := await r.read(65536):
                    if record:
                        self.frames.extend(dec.feed(data))
                    w.write(data)
                    await w.drain()
            except (ConnectionError, OSError, FrameError):
                pass
            finally:
                w.close()

        await asyncio.gather(pipe(creader, bwriter, True), pipe(breader, cwriter, False))

    def take(self) -> list[bytes]:
        out, self.frames = self.frames, []
        return out


def _capture_confluent(bootstrap: str, topic: str) -> None:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    admin.describe_configs([ConfigResource("topic", topic)])
    for comp in ("none", "gzip", "snappy", "lz4", "zstd"):
        p = Producer({"bootstrap.servers": bootstrap, "compression.type": comp, "linger.ms": 5,
                      "enable.idempotence": comp == "zstd"})
        for i in range(5):
            p.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode() * 5, headers=[("h", b"x")])
        p.flush(30)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-g", "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "session.timeout.ms": 6000})
    c.subscribe([topic])
    got = 0
    deadline = time.monotonic() + 30
    while got < 25 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got += 1
    c.commit(asynchronous=False)
    c.close()
    admin.list_consumer_groups().result(10)
    admin.delete_topics([topic])[topic].result(30)


def _capture_kafka_python(bootstrap: str, topic: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(topic, 2, 1)])
    for comp in (None, "gzip", "lz4"):
        p = KafkaProducer(bootstrap_servers=bootstrap, compression_type=comp, acks="all")
        for i in range(5):
            p.send(topic, key=f"k{i}".encode(), value=f"v{i}".encode() * 5, headers=[("h", b"x")])
        p.flush(30)
        p.close()
    c = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=f"{topic}-g", auto_offset_reset="earliest",
                      enable_auto_commit=False, consumer_timeout_ms=5000)
    for got, _m in enumerate(c):
        if got >= 14:
            break
    c.commit()
    c.close()
    admin.list_groups()
    admin.describe_groups([f"{topic}-g"])
    admin.delete_topics([topic])
    admin.close()


def _capture_aiokafka(bootstrap: str, topic: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    async def main() -> None:
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, compression_type="gzip", acks="all")
        await p.start()
        for i in range(5):
            await p.send_and_wait(topic, key=f"k{i}".encode(), value=f"v{i}".encode() * 5)
        await p.stop()
        c = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=f"{topic}-g",
                             auto_offset_reset="earliest", enable_auto_commit=False)
        await c.start()
        got = 0
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(30):
                async for _m in c:
                    got += 1
                    if got >= 5:
                        break
        await c.commit()
        await c.stop()

    asyncio.run(main())


def capture_seeds() -> dict[str, int]:
    """Record what each real client sends, through a proxy the broker advertises as itself."""
    SEED_DIR.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="gregor-fuzz-capture-"))
    bport, pport = free_port(), free_port()
    broker = LiveBroker(tmp / "data", bport, {"advertised.listeners": f"PLAINTEXT://127.0.0.1:{pport}"}).start()
    proxy = RecordingProxy(pport, bport)
    proxy.start()
    counts = {}
    try:
        for name, fn in (("confluent_kafka", _capture_confluent), ("kafka_python", _capture_kafka_python),
                         ("aiokafka", _capture_aiokafka)):
            proxy.take()
            try:
                fn(f"127.0.0.1:{pport}", f"fuzz-seed-{name.replace('_', '-')}")
            except Exception as e:  # noqa: BLE001 - keep what was recorded up to there
                print(f"  {name}: {type(e).__name__}: {e} (broker log: {broker.log_path})", flush=True)
            time.sleep(0.5)
            seen = set()
            kept = []
            for f in proxy.take():
                if len(f) > 16384:
                    continue
                sig = (f[:4], f[8:])  # key, version and everything but the correlation id
                if sig in seen:
                    continue
                seen.add(sig)
                kept.append(f)
            (SEED_DIR / f"{name}.frames").write_bytes(b"".join(struct.pack(">i", len(f)) + f for f in kept))
            counts[name] = len(kept)
    finally:
        broker.stop()
    if not log_failures(broker.output()):
        shutil.rmtree(tmp, ignore_errors=True)
    return counts


# =============================================================================================
# Command line


def _table(rows: list[tuple[str, str]]) -> str:
    w = max(len(a) for a, _ in rows)
    return "\n".join(f"  {a.ljust(w)}  {b}" for a, b in rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=["both", "inprocess", "live"], default="both")
    ap.add_argument("--inputs", type=int, default=1_000_000, help="in-process inputs (default 1,000,000)")
    ap.add_argument("--live-frames", type=int, default=200_000, help="mutated frames sent to the live broker")
    ap.add_argument("--seconds", type=float, default=3600, help="time cap of each mode")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workers", type=int, default=1, help="in-process worker processes")
    ap.add_argument("--connections", type=int, default=64, help="concurrent fuzzing connections (live)")
    ap.add_argument("--crashes", type=Path, default=Path("/tmp/gregor-fuzz-crashes"))
    ap.add_argument("--max-restarts", type=int, default=2000, help="stop after this many worker crashes")
    ap.add_argument("--no-bomb", action="store_true",
                    help="live: skip the decompression-bomb Produce to a compacted topic at the end")
    ap.add_argument("--reproduce", type=Path, help="run one saved input and show what happens")
    ap.add_argument("--capture-seeds", action="store_true", help="re-record bench/fuzz-seeds/ and exit")
    args = ap.parse_args(argv)

    if args.reproduce:
        return reproduce(args.reproduce)
    if args.capture_seeds or any(not (SEED_DIR / f"{n}.frames").exists() for n in CLIENTS):
        print("recording real-client requests into bench/fuzz-seeds/ ...", flush=True)
        print(f"  frames kept: {capture_seeds()}", flush=True)
        if args.capture_seeds:
            return 0
    failures_total = 0
    if args.mode in ("both", "inprocess"):
        seeds = all_seeds(args.seed)
        print(f"in-process: {args.inputs:,} inputs, seed {args.seed}, {args.workers} worker(s); seeds: "
              f"{len(seeds['request'])} requests ({len(served_versions())} served API versions), "
              f"{len(seeds['stream'])} streams, {len(seeds['batch'])} batches", flush=True)
        res = run_inprocess(args.inputs, args.seed, args.seconds, args.workers, args.max_restarts)
        saved = save_failures(res.failures.values(), args.crashes)
        failures_total += len(res.failures)
        print("\nIn-process fuzzing")
        print(_table([
            ("inputs tried", f"{res.inputs:,}"),
            ("wall time", f"{res.seconds:.1f} s ({res.inputs / max(res.seconds, 1e-9):,.0f} inputs/s)"),
            ("corpus (request/stream/batch)", "/".join(f"{res.corpus.get(t, 0):,}" for t in TARGETS)),
            ("coverage features", f"{res.features:,}"),
            ("served API versions fuzzed", f"{sum(1 for kv in served_versions() if res.per_api[kv])} of "
                                           f"{len(served_versions())}, fewest inputs on one: "
                                           f"{min(res.per_api[kv] for kv in served_versions()):,} "
                                           f"(request-body inputs: {sum(res.per_api.values()):,})"),
            ("worker crashes / hangs", f"{res.crashes} / {res.hangs}"),
            ("distinct failures", str(len(res.failures))),
        ] + ([("note", res.stopped_early)] if res.stopped_early else [])))
        for f, path in zip(res.failures.values(), saved, strict=True):
            print(f"  - {f.key[0]} at {f.key[1]}: {f.count}x ({', '.join(sorted(f.inputs)[:6])})\n    -> {path}")
    if args.mode in ("both", "live"):
        print(f"\nlive: {args.live_frames:,} frames over {args.connections} connections, seed {args.seed}", flush=True)
        st = run_live(args.live_frames, args.seed, args.seconds, args.connections, args.crashes,
                      bomb=not args.no_bomb)
        failures_total += len(st.failures)
        elapsed = st.elapsed
        print("\nLive broker fuzzing")
        print(_table([
            ("frames sent", f"{st.frames:,}"),
            ("wall time", f"{elapsed:.1f} s ({st.frames / max(elapsed, 1e-9):,.0f} frames/s)"),
            ("connections opened", f"{st.connections:,} ({st.closed_by_broker:,} closed by the broker)"),
            ("frames answered / in-line probe timeouts", f"{st.answered:,} / {st.probe_timeouts:,}"),
            ("probe connection slowest answer", f"{st.probe_max_s:.2f} s"),
            ("round trip (consumed / produced)", f"{st.rt_consumed:,} / {st.rt_produced:,}"),
            ("transactional round trip (transactions; read committed / committed records; aborted)",
             f"{st.txn[0]:,}; {st.txn[3]:,} / {st.txn[1]:,}; {st.txn[2]:,}"),
            ("broker peak RSS (VmHWM)", f"{st.peak_hwm_kib / 1024:.0f} MiB"),
            ("decompression bomb (frame, RSS peak before -> after)",
             f"{st.bomb[0]:,} bytes, {st.bomb[1] >> 10} -> {st.bomb[2] >> 10} MiB" if st.bomb else "not run"),
            ("distinct failures", str(len(st.failures))),
            ("broker log", st.log_path),
        ]))
        args.crashes.mkdir(parents=True, exist_ok=True)
        if st.timeouts:
            honest = collections.Counter({k: n for k, n in st.timeouts.items() if k[0] == "honest"})
            print("  in-line probe timeouts after a frame with an honest size prefix, by its API key: " + (", ".join(
                f"{k[1]}: {n}" for k, n in honest.most_common()) or "none") + f"; after a lying or several: "
                f"{sum(st.timeouts.values()) - sum(honest.values()):,}")
        for (kind, key), sent in st.timeout_examples.items():
            path = args.crashes / f"live-timeout-{kind}-api{key}.bin"
            path.write_bytes(sent)
            print(f"    an honest frame of API {key} held its connection for 3 s (not counted as a failure): {path}")
        for i, (k, v) in enumerate(st.failures.items()):
            print(f"  - {k}\n    {v.splitlines()[-1] if v else ''}")
            (args.crashes / f"live-{i}-{_slug((k, ''))}.txt").write_text(f"{k}\n\n{v}\n")
    print(f"\nTOTAL distinct failures: {failures_total}")
    return 1 if failures_total else 0


if __name__ == "__main__":
    sys.exit(main())
