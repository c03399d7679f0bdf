"""Compaction of transactional data (log/cleaner.py): aborted batches dropped and never shadowing
committed values, markers kept while their transaction has data, nothing past the last stable
offset cleaned."""

from __future__ import annotations

import asyncio

from gregor.log.cleaner import clean_partition
from gregor.protocol import record_batch as rb
from gregor.protocol.control_records import build_marker_batch
from gregor.protocol.records import build_batch, decode_records, iter_batches


def txn(pid: int, seq: int, key: bytes, value: bytes, ts: int) -> bytes:
    return build_batch([(key, value)], producer_id=pid, producer_epoch=0, base_sequence=seq,
                       attributes=rb.TRANSACTIONAL_BIT, timestamp=ts)


def batches(plog):
    out = []
    for seg in plog.segments:
        data = seg.pread(0, seg.size)
        for h in iter_batches(data):
            recs = decode_records(data, h)
            out.append((h.base_offset, "marker" if h.is_control else [(r.key, r.value) for r in recs]))
    return out


def compacted(make_log, clock, **cfg):
    return make_log(**{"cleanup.policy": "compact", "segment.bytes": 200, "min.compaction.lag.ms": 0,
                       "delete.retention.ms": 1000, **cfg})


def test_aborted_values_never_win_and_markers_stay_with_their_data(make_log, clock):
    plog = compacted(make_log, clock)
    ts = clock.now - 10
    plog.append(txn(1, 0, b"k", b"good", ts))                         # 0
    plog.append_control(build_marker_batch(1, 0, 0, True, ts), 0)      # 1
    plog.append(txn(2, 0, b"k", b"bad", ts))                          # 2
    plog.append_control(build_marker_batch(2, 0, 0, False, ts), 0)     # 3
    plog.append(build_batch([(b"other", b"x")], timestamp=ts))        # 4
    plog.roll()
    plog.append(build_batch([(b"z", b"z")], timestamp=ts))            # 5 (active: not cleaned)
    asyncio.run(clean_partition(plog))
    got = batches(plog)
    assert (0, [(b"k", b"good")]) in got and (1, "marker") in got
    assert all(b[0] != 2 for b in got)  # the aborted batch is gone
    assert (3, "marker") in got          # dropped only with the tombstones
    clock.now += 5000  # past delete.retention.ms: markers with no data left go
    plog.dirty_since_clean = plog.size_bytes
    asyncio.run(clean_partition(plog))
    got = batches(plog)
    assert (1, "marker") in got and all(b[0] != 3 for b in got)
    assert plog.aborted_transactions(0, plog.log_end_offset) == [(2, 2)]  # harmless: its data is gone


def test_nothing_past_the_last_stable_offset_is_cleaned(make_log, clock):
    plog = compacted(make_log, clock)
    ts = clock.now - 10
    plog.append(txn(1, 0, b"k", b"open", ts))                         # 0: ongoing
    for i in range(6):
        plog.append(build_batch([(b"k", b"v%d" % i)], timestamp=ts))
    assert len(plog.segments) > 2 and plog.last_stable_offset == 0
    before = batches(plog)
    asyncio.run(clean_partition(plog))
    assert batches(plog) == before
