"""A short, deterministic run of bench/fuzz.py's mutation engine and hypothesis properties over
``codec.decode_request``: whatever the bytes, decoding raises one of the documented malformed-input
errors or returns a request that matches its schema; it never raises anything else and never ends
the process (the decoding runs in a forked child, so a native abort fails the test instead of
killing pytest)."""

from __future__ import annotations

import importlib.util
import multiprocessing
import struct
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gregor.protocol import codec
from tests.support.kio_entities import kio_bytes

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("gregor_bench_fuzz", ROOT / "bench" / "fuzz.py")
assert _spec is not None and _spec.loader is not None
fuzz = importlib.util.module_from_spec(_spec)
sys.modules["gregor_bench_fuzz"] = fuzz
_spec.loader.exec_module(fuzz)

# a few APIs every client uses, flexible and not, including the ones of issue 10's reproducers
APIS = [(3, 12), (3, 1), (0, 9), (0, 3), (1, 12), (1, 4), (20, 1), (20, 6), (11, 7), (14, 5), (19, 7), (42, 2),
        (18, 3), (32, 4)]
# the transactional APIs, flexible and not: InitProducerId, AddPartitionsToTxn (v3 and v4, the batched
# KIP-890 form), AddOffsetsToTxn, EndTxn, WriteTxnMarkers, TxnOffsetCommit, DescribeTransactions,
# ListTransactions (and DescribeProducers when it is served)
TXN_APIS = [(22, 1), (22, 5), (24, 3), (24, 4), (25, 3), (26, 1), (26, 4), (27, 1), (28, 2), (28, 4), (65, 0),
            (66, 1), (61, 0)]
APIS += [a for a in TXN_APIS if a in set(fuzz.served_versions())]
# share groups: ShareGroupHeartbeat, ShareGroupDescribe, ShareFetch, ShareAcknowledge, the share
# coordinator's Read/WriteShareGroupState, DescribeShareGroupOffsets
SHARE_APIS = [(76, 1), (77, 1), (78, 1), (78, 2), (79, 1), (79, 2), (84, 0), (85, 1), (90, 1)]
APIS += [a for a in SHARE_APIS if a in set(fuzz.served_versions())]


def in_child(fn: Callable[[], None]) -> None:
    """Run ``fn`` in a forked process; fail with its traceback, or with its exit status if it died."""
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe()

    def target(conn: Any) -> None:
        try:
            fn()
            conn.send(None)
        except BaseException as e:  # noqa: BLE001 - reported to the parent
            conn.send("".join(traceback.format_exception(e))[-6000:])

    p = ctx.Process(target=target, args=(child,))
    p.start()
    child.close()
    try:
        msg = parent.recv()
    except EOFError:
        p.join(30)
        msg = f"the decoding process died (exit code {p.exitcode}): a native abort, the whole broker would be gone"
    p.join(30)
    if msg:
        pytest.fail(msg, pytrace=False)


def decode_like_the_broker(frame: bytes) -> None:
    try:
        fuzz.run_request(frame, set())
    except fuzz.EXPECTED:
        pass


def test_served_apis_cover_the_reproducers() -> None:
    served = set(fuzz.served_versions())
    assert all(a in served for a in APIS)


def test_mutation_engine_finds_no_failure(tmp_path: Path) -> None:
    res = fuzz.run_inprocess(20_000, seed=20261123, seconds=900, workers=1, progress=False)
    saved = fuzz.save_failures(res.failures.values(), tmp_path)
    report = "\n".join(f"{f.key[0]} at {f.key[1]} ({f.count}x; {', '.join(sorted(f.inputs)[:5])}): "
                       f"{f.data.hex()[:200]}\n  {f.detail.splitlines()[0][:300]}"
                       for f in res.failures.values())
    assert res.inputs == 20_000
    if res.failures:
        pytest.fail(f"{len(res.failures)} distinct failures (reproducers: {saved}):\n{report}", pytrace=False)


def test_every_seed_request_decodes_back_to_itself() -> None:
    """The guard in front of kio must not refuse a valid request: every served API version, in
    every seed shape, decodes to the object that was encoded."""

    def check() -> None:
        import random

        rng = random.Random(5)
        bad = []
        for key, version in fuzz.served_versions():
            cls = codec.request_schema(key, version)
            for variant in (0, 1, 2):
                try:
                    obj = fuzz._instance(cls, variant, rng)
                    body = kio_bytes(obj)
                except Exception:  # noqa: BLE001 - a shape kio itself cannot encode
                    continue
                frame = fuzz.request_header(key, version, 9) + body
                header = codec.parse_header(frame, codec.is_flexible(key, version))
                try:
                    got = codec.decode_request(key, version, frame, header.body_offset)
                except codec.RequestDecodeError as e:
                    bad.append(f"{key} v{version} shape {variant}: refused: {e}")
                    continue
                if got != obj:
                    bad.append(f"{key} v{version} shape {variant}: decoded {got!r} != {obj!r}")
        assert not bad, "\n".join(bad[:20])

    in_child(check)


@pytest.mark.parametrize(("api_key", "version"), APIS)
def test_arbitrary_body_bytes(api_key: int, version: int) -> None:
    @settings(max_examples=300, deadline=None, derandomize=True, database=None)
    @given(body=st.binary(max_size=300))
    def prop(body: bytes) -> None:
        decode_like_the_broker(fuzz.request_header(api_key, version, 7) + body)

    in_child(prop)


@pytest.mark.parametrize(("api_key", "version"), APIS)
def test_valid_request_with_a_count_overwritten(api_key: int, version: int) -> None:
    """Counts, lengths and varints set to huge, negative or over-long values anywhere in a valid
    request (the class of issue 10's 23-byte process abort)."""
    seeds = [s for s in fuzz.request_seeds(3) if struct.unpack_from(">hh", s, 0) == (api_key, version)]
    start = fuzz.Mutator(__import__("random").Random(0)).header_len(seeds[0])

    @settings(max_examples=300, deadline=None, derandomize=True, database=None)
    @given(which=st.integers(0, len(seeds) - 1), pos=st.integers(0, 1 << 16),
           kind=st.sampled_from(["i32", "i16", "varint", "insert-varint", "byte"]),
           i32=st.sampled_from(fuzz.I32), i16=st.sampled_from(fuzz.I16), varint=st.sampled_from(fuzz.VARINTS),
           byte=st.integers(0, 255))
    def prop(which: int, pos: int, kind: str, i32: int, i16: int, varint: bytes, byte: int) -> None:
        frame = bytearray(seeds[which])
        p = start + pos % max(len(frame) - start, 1)
        if kind == "i32":
            frame[p : p + 4] = struct.pack(">i", i32)
        elif kind == "i16":
            frame[p : p + 2] = struct.pack(">h", i16)
        elif kind == "varint":
            frame[p : p + len(varint)] = varint
        elif kind == "insert-varint":
            frame[p:p] = varint
        else:
            frame[p : p + 1] = bytes([byte])
        decode_like_the_broker(bytes(frame))

    in_child(prop)


def test_transactional_seed_requests_decode() -> None:
    """The transactional seeds (coherent ids, transactional and control batches in Produce, Fetch
    read_committed) are valid requests in every served version: the fuzz starts from requests
    that reach the handlers."""

    def check() -> None:
        seeds = fuzz.txn_request_seeds()
        keys = {struct.unpack_from(">h", s, 0)[0] for s in seeds}
        assert {0, 1, 22, 24, 25, 26, 27, 28, 65, 66} <= keys
        for s in seeds:
            fuzz.run_request(s, set())  # raises on a refusal or a schema violation

    in_child(check)


def test_transaction_log_records_and_markers_never_raise_another_error() -> None:
    """The txnlog target (``__transaction_state`` keys and values) and the batch target's control
    batches (read_marker) with the engine's mutations: only the documented errors."""

    def check() -> None:
        eng = fuzz.Engine(11, fuzz.all_seeds(11))
        failures = []
        for i in range(3000):
            seeds = eng.corpus["txnlog"] if i % 2 else eng.corpus["batch"]
            base = eng.rng.choice(seeds)
            if i % 2:
                target, data = "txnlog", base[:1] + eng.mut.mutate(base[1:], lambda b=base: b[1:])
            else:
                target, data = "batch", eng.mut.mutate_batch(base, lambda b=base: b)
            r = eng.run_one(target, data)
            if r is not None:
                failures.append(f"{r[0]}: {r[1][:300]} ({data.hex()[:200]})")
        assert not failures, "\n".join(failures[:10])
        assert any(f[0] == "txnlog" for f in eng.features)
        assert any(f[0] == "batch" and f[1][0] == "marker" for f in eng.features)

    in_child(check)


def test_frame_decoder_matches_a_plain_split() -> None:
    @settings(max_examples=400, deadline=None, derandomize=True, database=None)
    @given(data=st.binary(max_size=400), cuts=st.lists(st.integers(0, 400), max_size=4),
           max_frame=st.sampled_from([64, 1000, fuzz.MAX_FRAME]))
    def prop(data: bytes, cuts: list[int], max_frame: int) -> None:
        try:
            fuzz.run_stream(data, set(), sorted(min(c, len(data)) for c in cuts), max_frame)
        except fuzz.EXPECTED:
            pass

    in_child(prop)
