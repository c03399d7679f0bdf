"""Loading a shard: replaying its partition from the log start to the log end (Kafka:
CoordinatorLoaderImpl).

The records below the committed offset (the high watermark when the load starts) are replayed as
committed; those above it, a new leader's tail that its followers may not have yet, are replayed
batch by batch as pending writes ending at each batch's end (runtime/committed.py), so that reads
do not see them before the high watermark passes them.

Reads ask the log for at least one whole batch, so neither a large partition nor a large batch or
record can outgrow a load buffer (there is none). Records are first reduced to the newest value
of every key, in log order of those newest writes (what compaction would keep), then decoded and
replayed once each: a partition of a million commits to a few thousand keys decodes a few
thousand. For any history this equals replaying every record in order (a property test checks
it). A record the serde cannot decode is skipped with a warning.

Records written in producers' transactions (a transactional batch) and the transactions' markers
(control batches) are replayed in log order, through the shard's ``replay_transactional`` and
``replay_end_transaction``: what was reduced before them is replayed first, so a plain write and a
transaction's write of the same key keep their order.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gregor.coordinator.runtime.shard import CoordinatorShard, RecordSerde, TransactionalShard
from gregor.log.partition_log import PartitionLog
from gregor.protocol.control_records import read_marker
from gregor.protocol.record_batch import BatchHeader, InvalidBatch
from gregor.protocol.records import iter_batches, iter_key_values

log = logging.getLogger("gregor.coordinator")

LOAD_READ_BYTES = 1 << 20


def keep_newest(latest: dict[bytes, bytes | None], pairs: Iterable[tuple[bytes | None, bytes | None]]) -> int:
    """Fold (key, value) pairs into ``latest`` (newest value per key, ordered by its newest write);
    returns how many keyed records there were."""
    count = 0
    for key, value in pairs:
        if key is not None:
            latest.pop(key, None)  # keep log order of the newest write
            latest[key] = value
            count += 1
    return count


def replay_newest(shard: CoordinatorShard, serde: RecordSerde, latest: dict[bytes, bytes | None],
                  name: str) -> None:
    """Decode and replay the reduced records into ``shard``."""
    decode_key, decode_value, error = serde.decode_key, serde.decode_value, serde.error
    replay = shard.replay
    for key_bytes, value_bytes in latest.items():
        try:
            key = decode_key(key_bytes)
            value = decode_value(key, value_bytes)
        except error as e:
            log.warning("%s: skipping undecodable record with key %r (%s)", name, key_bytes[:64], e)
            continue
        replay(key, value)


async def load(plog: PartitionLog, shard: CoordinatorShard, serde: RecordSerde, name: str,
               still_loading: Callable[[], bool],
               progress: Callable[[int, int], None] = lambda done, total: None,
               committed: int | None = None) -> int | None:
    """Replay ``plog`` into ``shard``; returns the number of records read, or None if
    ``still_loading()`` turned false meanwhile (the shard was unloaded). Yields to the event loop
    between reads, so the broker keeps serving while a large partition loads; ``progress(done,
    total)`` hears how many of the partition's offsets have been read after each read.
    ``committed``: the committed offset (None: everything is committed)."""
    latest: dict[bytes, bytes | None] = {}
    count = 0
    start = offset = plog.log_start_offset
    end = plog.log_end_offset
    committed_end = end if committed is None else max(min(committed, end), start)
    tail: list[tuple[int, dict[bytes, bytes | None] | TxnEvent]] = []  # (batch end, its records) above it
    progress(0, end - start)
    while offset < end:
        data = plog.read(offset, LOAD_READ_BYTES).records
        if not data:
            break
        for h in iter_batches(data):
            if h.next_offset <= offset:
                continue
            if h.is_control or h.is_transactional:
                event = _txn_event(data, h, name)
                if event is None:
                    pass
                elif h.next_offset <= committed_end:
                    replay_newest(shard, serde, latest, name)
                    latest.clear()
                    count += replay_txn_event(shard, serde, event, name)
                else:
                    tail.append((h.next_offset, event))
            else:
                if h.next_offset <= committed_end:
                    count += keep_newest(latest, iter_key_values(data, h))
                else:
                    batch: dict[bytes, bytes | None] = {}
                    count += keep_newest(batch, iter_key_values(data, h))
                    tail.append((h.next_offset, batch))
            offset = h.next_offset
        progress(min(offset, end) - start, end - start)
        await asyncio.sleep(0)  # let the broker serve others between reads
        if not still_loading():
            return None
    replay_newest(shard, serde, latest, name)
    if tail:
        reads = shard.committed_reads
        for batch_end, item in tail:
            reads.pending = batch_end
            try:
                if isinstance(item, TxnEvent):
                    count += replay_txn_event(shard, serde, item, name)
                else:
                    replay_newest(shard, serde, item, name)
            finally:
                reads.pending = -1
    return count


@dataclass(frozen=True, slots=True)
class TxnEvent:
    """A transactional batch's records (``commit`` None), or a transaction marker."""

    producer_id: int
    producer_epoch: int
    pairs: list[tuple[bytes | None, bytes | None]]
    commit: bool | None = None


def _txn_event(data: bytes | bytearray | memoryview, h: BatchHeader, name: str) -> TxnEvent | None:
    try:
        if h.is_control:
            marker = read_marker(data, h)
            if marker is None:
                return None  # a control record of another type: nothing to replay
            return TxnEvent(h.producer_id, h.producer_epoch, [], marker.commit)
        return TxnEvent(h.producer_id, h.producer_epoch, iter_key_values(data, h))
    except InvalidBatch as e:
        log.warning("%s: skipping unreadable batch at offset %d (%s)", name, h.base_offset, e)
        return None


def replay_txn_event(shard: CoordinatorShard, serde: RecordSerde, event: TxnEvent, name: str) -> int:
    """Replay a transactional batch or a marker; returns the number of records replayed."""
    if not isinstance(shard, TransactionalShard):
        log.warning("%s: skipping a transactional batch of producer %d: this coordinator takes none", name,
                    event.producer_id)
        return 0
    if event.commit is not None:
        shard.replay_end_transaction(event.producer_id, event.producer_epoch, event.commit)
        return 0
    count = 0
    for key_bytes, value_bytes in event.pairs:
        if key_bytes is None:
            continue
        try:
            key = serde.decode_key(key_bytes)
            value = serde.decode_value(key, value_bytes)
        except serde.error as e:
            log.warning("%s: skipping undecodable record with key %r (%s)", name, key_bytes[:64], e)
            continue
        shard.replay_transactional(event.producer_id, event.producer_epoch, key, value)
        count += 1
    return count
