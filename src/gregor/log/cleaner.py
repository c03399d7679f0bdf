"""Log compaction for ``cleanup.policy=compact`` topics (Kafka's LogCleaner, simplified).

For a partition whose dirty ratio (bytes appended since the last cleaning over total bytes)
reaches ``min.cleanable.dirty.ratio``:

1. build a map key -> newest offset over every sealed segment (the active segment is never
   cleaned, and records younger than ``min.compaction.lag.ms`` are left alone);
2. rewrite each sealed segment keeping only records that are the newest for their key;
   tombstones (null values) are dropped once their segment is older than ``delete.retention.ms``;
   offsets, timestamps, producer ids and the compression codec of each batch are kept;
3. swap each rewritten segment in: ``.cleaned`` -> ``.log.swap`` -> ``.log`` (a crash in between
   is finished or undone at the next start).

On a replicated log only segments wholly below the high watermark are cleaned (Kafka never cleans
past it), a rewritten batch keeps its partition leader epoch, and a rewrite is dropped if the log
was truncated while it ran.

Transactions, as Kafka's cleaner: only segments wholly below the last stable offset are cleaned
(no transaction is ongoing there); the data batches of aborted transactions (from the transaction
indexes) are dropped whole and never enter the key map, so an aborted value never shadows a
committed one; a marker is kept while any batch of its transaction is left, and dropped with the
tombstones (segment older than ``delete.retention.ms``) once none is. The transaction index of a
cleaned segment is kept as it was (an entry whose data is gone filters nothing).

The rewrite decodes records, so it runs in a worker thread, never on the produce or fetch path.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

from gregor.log.partition_log import PartitionLog
from gregor.log.segment import Segment
from gregor.log.transaction_index import AbortedTxn
from gregor.protocol import record_batch as rb
from gregor.protocol.records import Record, build_batch, decode_records, iter_batches

log = logging.getLogger(__name__)


def dirty_ratio(plog: PartitionLog) -> float:
    total = plog.size_bytes
    return plog.dirty_since_clean / total if total else 0.0


Aborted = dict[int, list[tuple[int, int]]]  # producer id -> (first offset, marker offset) of its aborts


def aborted_ranges(plog: PartitionLog, end: int) -> Aborted:
    """The aborted transactions that began below ``end``, by producer (their markers may be in
    later segments)."""
    out: Aborted = {}
    for seg in plog.segments:
        t: AbortedTxn
        for t in seg.txn_index.entries:
            if t.first_offset < end:
                out.setdefault(t.producer_id, []).append((t.first_offset, t.last_offset))
    return out


def _is_aborted(h: rb.BatchHeader, aborted: Aborted) -> bool:
    if not h.is_transactional or h.is_control or h.producer_id not in aborted:
        return False
    return any(first <= h.base_offset <= last for first, last in aborted[h.producer_id])


def build_offset_map(plog: PartitionLog, segments: list[Segment], horizon_ms: int,
                     aborted: Aborted | None = None) -> dict[bytes, int]:
    latest: dict[bytes, int] = {}
    for seg in segments:
        data = seg.pread(0, seg.size)
        for h in iter_batches(data):
            if h.is_control or h.max_timestamp > horizon_ms or (aborted and _is_aborted(h, aborted)):
                continue
            for r in decode_records(data, h):
                if r.key is not None:
                    latest[r.key] = r.offset
    return latest


def clean_segment(seg: Segment, latest: dict[bytes, int], drop_tombstones: bool, horizon_ms: int,
                  aborted: Aborted | None = None, txn_data: dict[int, bool] | None = None) -> Path:
    """Write the compacted copy of ``seg`` next to it; returns the ``.cleaned`` path.
    ``aborted``: the aborted transactions (their data batches are dropped); ``txn_data``: per
    producer, whether a batch of its current transaction was kept, carried from segment to
    segment in offset order (a marker is dropped only when none was, and ``drop_tombstones``)."""
    data = seg.pread(0, seg.size)
    out = bytearray()
    aborted = aborted or {}
    txn_data = {} if txn_data is None else txn_data
    for h in iter_batches(data):
        if h.is_control:
            kept_data = txn_data.pop(h.producer_id, False)
            if kept_data or not drop_tombstones or h.max_timestamp > horizon_ms:
                out += data[h.position : h.position + h.size]
            continue
        if _is_aborted(h, aborted):
            continue
        if h.max_timestamp > horizon_ms:
            out += data[h.position : h.position + h.size]
            if h.is_transactional:
                txn_data[h.producer_id] = True
            continue
        records = decode_records(data, h)
        kept: list[Record] = []
        for r in records:
            if r.key is None or latest.get(r.key, r.offset) != r.offset:
                continue
            if r.value is None and drop_tombstones:
                continue
            kept.append(r)
        if kept and h.is_transactional:
            txn_data[h.producer_id] = True
        if len(kept) == len(records):
            out += data[h.position : h.position + h.size]
        elif kept:
            rebuilt = bytearray(build_batch(kept, codec=h.compression, producer_id=h.producer_id,
                                            producer_epoch=h.producer_epoch, base_sequence=-1,
                                            attributes=h.attributes))
            # the leader epoch that wrote it (not covered by the CRC)
            rebuilt[rb.PARTITION_LEADER_EPOCH : rb.PARTITION_LEADER_EPOCH + 4] = \
                data[h.position + rb.PARTITION_LEADER_EPOCH : h.position + rb.PARTITION_LEADER_EPOCH + 4]
            out += rebuilt
    cleaned = seg.path.with_suffix(".cleaned")
    try:
        with open(cleaned, "wb") as f:
            f.write(out)
            f.flush()
            os.fsync(f.fileno())
    except OSError:
        cleaned.unlink(missing_ok=True)  # a full disk: no partial copy may keep the space
        raise
    return cleaned


def compact(plog: PartitionLog) -> tuple[list[Segment], list[Path], int]:
    """Thread part of a cleaning: returns (segments cleaned, their .cleaned files, bytes before)."""
    sealed = plog.segments[:-1]
    # below the high watermark (a replicated log) and the last stable offset (no open transaction)
    stable = plog.last_stable_offset
    sealed = [s for i, s in enumerate(sealed) if plog.segments[i + 1].base_offset <= stable]
    if not sealed:
        return [], [], 0
    now = plog.clock()
    horizon = now - int(plog.config["min.compaction.lag.ms"])
    aborted = aborted_ranges(plog, plog.segments[len(sealed)].base_offset)
    latest = build_offset_map(plog, sealed, horizon, aborted)
    delete_retention = int(plog.config["delete.retention.ms"])
    files = []
    txn_data: dict[int, bool] = {}
    for seg in sealed:
        drop = seg.max_timestamp >= 0 and now - seg.max_timestamp > delete_retention
        files.append(clean_segment(seg, latest, drop, horizon, aborted, txn_data))
    return sealed, files, sum(s.size for s in sealed)


def swap_in(plog: PartitionLog, sealed: list[Segment], files: list[Path], truncations: int | None = None) -> int:
    """Event-loop part: replace the sealed segments by their cleaned copies. Returns bytes saved.
    ``truncations``: ``plog.truncations`` when the rewrite started (a truncation since then may
    have cut a segment the rewrite copied whole)."""
    if any(s not in plog.segments for s in sealed) or (truncations is not None and truncations != plog.truncations):
        for f in files:
            f.unlink(missing_ok=True)
        return 0  # retention or deletion changed the log meanwhile; try again later
    before = sum(s.size for s in sealed)
    new: list[Segment] = []
    for seg, cleaned in zip(sealed, files, strict=True):
        swap = seg.path.with_suffix(".log.swap")
        os.replace(cleaned, swap)
        seg.close()
        os.replace(swap, seg.path)
        fresh = Segment(plog.dir, seg.base_offset, int(plog.config["index.interval.bytes"]), seg.created_ms)
        fresh.recover(2**31 - 1)
        fresh.next_offset = max(fresh.next_offset, seg.next_offset)  # keep the offset range
        new.append(fresh)
    plog.replace_segments(sealed, new)
    plog.dirty_since_clean = 0
    return before - sum(s.size for s in new)


async def clean_partition(plog: PartitionLog) -> int:
    truncations = plog.truncations
    try:
        sealed, files, _ = await asyncio.to_thread(compact, plog)
    except OSError as e:  # a segment went away under the cleaner (retention, topic deletion), or a full disk
        log.info("%s-%d: cleaning skipped: %s", plog.topic, plog.partition, e)
        for f in plog.dir.glob("*.cleaned"):  # copies of the segments cleaned before the failure
            f.unlink(missing_ok=True)
        return 0
    except Exception:  # noqa: BLE001 - a corrupt batch: logged, never the end of the housekeeping task
        log.exception("%s-%d: cleaning failed; the partition is left as it is", plog.topic, plog.partition)
        for f in plog.dir.glob("*.cleaned"):
            f.unlink(missing_ok=True)
        return 0
    if not sealed:
        return 0
    saved = swap_in(plog, sealed, files, truncations)
    log.info("%s-%d: compacted %d segments, %d bytes freed", plog.topic, plog.partition, len(sealed), saved)
    return saved
