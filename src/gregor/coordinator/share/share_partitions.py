"""The share-partitions this broker leads (Kafka's SharePartitionManager): for each (share group,
topic-partition) led here, its delivery state (share_partition.py), loaded from the share
coordinator on first use and written back through it (persister.py).

- **Loading**: the stored state (start offset, in-flight batches; what was acquired comes back
  available), or, for a share-partition that has none, a start at the log end
  (``share.auto.offset.reset=latest``, the default) or the log start (``earliest``), written at
  once so that a restart does not move it.
- **Fetching** reads the log from the first offset that may be acquired (a redelivery, else the
  end offset), up to the high watermark (the last stable offset with
  ``share.isolation.level=read_committed``), acquires at most ``max_records`` offsets of what it
  read for the member, and answers the whole batches that hold them (bytes as stored; the client
  keeps the acquired offsets). Offsets of control batches are archived, never delivered.
- **Acknowledging** applies ACCEPT / RELEASE / REJECT / RENEW / GAP to what the member holds,
  then writes the state; the acknowledgement is answered once the write is replicated.
- A member's share session closing releases what it still holds; an expired lock releases the
  records for another delivery (after ``share.delivery.count.limit`` deliveries they are archived).
- Losing the leadership of a partition drops its share-partitions here; the next leader loads
  them from the share coordinator.
- **Dead letters** (KIP-1191): with a dead-letter topic set for the group, what is rejected or
  delivered too often waits ARCHIVING while dead_letters.py copies it, then is archived (and the
  state written); a share-partition loaded with ARCHIVING records copies them again.
- The group's settings are read on every fetch and acknowledgement: a group config changed while
  its consumers run applies to their next records.

Every share-partition has a lock: its fetches, acknowledgements and writes run one at a time."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from gregor.coordinator.share.dead_letters import DeadLetterFailed, DeadLetterWriter
from gregor.coordinator.share.persister import Persister
from gregor.coordinator.share.share_partition import (
    AcknowledgeType,
    Acquired,
    DeadLetter,
    InvalidRecordState,
    RecordState,
    SharePartition,
    StateBatch,
)
from gregor.protocol import record_batch as rb
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.share_state_records import PersistedBatch, SharePartitionKey

log = logging.getLogger("gregor.coordinator.share")

CONTROL_FLAG = 0x20  # the batch attribute of transaction markers
TRANSACTIONAL_FLAG = 0x10
READ_MIN_BYTES = 64 * 1024
STATE_UNAVAILABLE = frozenset({ErrorCode.coordinator_not_available, ErrorCode.not_coordinator,
                               ErrorCode.coordinator_load_in_progress})


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class Held:
    """One share-partition led here."""

    key: SharePartitionKey
    topic: str
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    sp: SharePartition | None = None
    state_epoch: int = 0
    leader_epoch: int = -1
    written: tuple[int, list[StateBatch]] | None = None  # what the share coordinator has
    bytes_per_record: float = 1024.0  # of what was read here: how much to read for max_records
    # no share session fetches it: the share coordinator may have been told a new state (an
    # operator's reset) since; checked on the next fetch
    stale: bool = False


@dataclass
class FetchedPartition:
    records: bytes = b""
    acquired: list[Acquired] = field(default_factory=list)
    error: ErrorCode = ErrorCode.none
    message: str | None = None


@dataclass(frozen=True)
class ShareSettings:
    record_lock_ms: int
    delivery_count_limit: int
    max_in_flight: int
    auto_offset_reset: str
    read_committed: bool
    dead_letter_topic: str = ""  # errors.deadletterqueue.topic.name
    dead_letter_copy: bool = False  # errors.deadletterqueue.copy.record.enable


class SharePartitionManager:
    def __init__(self, logs: Any, replicas: Any, persister: Persister,
                 settings: Callable[[str], ShareSettings], clock: Callable[[], int] = now_ms,
                 dead_letters: DeadLetterWriter | None = None,
                 refresh_settings: Callable[[str], Awaitable[None]] | None = None) -> None:
        self.logs = logs
        self.replicas = replicas
        self.persister = persister
        self.settings = settings
        self.refresh_settings = refresh_settings  # reads a group's configs at their source now
        self.clock = clock
        self.dead_letters = dead_letters
        self._tasks: set[asyncio.Task[None]] = set()  # the dead-letter copies under way
        self.held: dict[tuple[str, str, int], Held] = {}
        # what happened to each share-partition while this broker led it, across its loads here
        # (a reset, leadership lost and gained again): counters for metrics and telemetry
        self.stats: dict[tuple[str, str, int], dict[str, int]] = {}
        replicas.on_leadership.append(self.on_leadership)

    def on_leadership(self, topic: str, partition: int, leader_epoch: int, is_leader: bool) -> None:
        """A partition led elsewhere now (or led again at a new epoch): its share-partitions are
        forgotten here, and loaded again from the share coordinator when fetched."""
        for k in [k for k in self.held if k[1] == topic and k[2] == partition]:
            del self.held[k]

    # -- loading ------------------------------------------------------------------------------------
    def _holder(self, group: str, topic: str, partition: int, topic_id: uuid.UUID) -> Held:
        part = self.replicas.leader_partition(topic, partition)  # NOT_LEADER_OR_FOLLOWER, unknown partition
        k = (group, topic, partition)
        held = self.held.get(k)
        if held is None or held.leader_epoch != part.leader_epoch:
            held = self.held[k] = Held(SharePartitionKey(group, topic_id, partition), topic,
                                       leader_epoch=part.leader_epoch)
        return held

    def _open(self, group: str, topic: str, partition: int, topic_id: uuid.UUID) -> tuple[Held, Any]:
        """The share-partition and its log, if this broker leads the partition."""
        held = self._holder(group, topic, partition, topic_id)
        plog = self.logs.get(topic, partition)
        if plog is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition)
        return held, plog

    async def _load(self, held: Held, plog: Any) -> SharePartition:
        if held.sp is not None and held.stale:
            stored = await self.persister.read(held.key, held.leader_epoch)
            held.stale = False
            if stored is None or stored.state_epoch != held.state_epoch:
                log.info("share group %s %s-%d: its state was reset; loaded again", held.key.group, held.topic,
                         held.key.partition)
                held.sp = None
                return await self._load(held, plog)
        if held.sp is not None:
            return held.sp
        stored = await self.persister.read(held.key, held.leader_epoch)
        if stored is None and self.refresh_settings is not None:
            # where a new share-partition starts follows share.auto.offset.reset, which its client
            # may have set just before: in a cluster it is read from ZooKeeper, not the mirror that
            # a watch updates some milliseconds after the change (librdkafka's 0171/0176/0180 on
            # three brokers started partitions at the log end)
            await self.refresh_settings(held.key.group)
        s = self.settings(held.key.group)
        params: dict[str, Any] = {"record_lock_ms": s.record_lock_ms, "delivery_count_limit": s.delivery_count_limit,
                  "max_in_flight": s.max_in_flight, "dead_letters": bool(s.dead_letter_topic)}
        if stored is not None:
            batches = [StateBatch(b.first_offset, b.last_offset, RecordState(b.delivery_state), b.delivery_count)
                       for b in stored.batches]
            sp = SharePartition.restore(max(stored.start_offset, 0), batches, **params)
            held.state_epoch = stored.state_epoch
            held.written = (sp.start_offset, sp.state_batches())
        else:
            start = plog.log_start_offset if s.auto_offset_reset == "earliest" else plog.high_watermark
            sp = SharePartition(start, **params)
            await self.persister.write(held.key, 0, held.leader_epoch, start, [])
            held.written = (start, [])
            log.info("share group %s starts %s-%d at offset %d (share.auto.offset.reset=%s)", held.key.group,
                     held.topic, held.key.partition, start, s.auto_offset_reset)
        sp.advance_start(plog.log_start_offset)
        sp.stats = self.stats.setdefault((held.key.group, held.topic, held.key.partition), sp.stats)
        held.sp = sp
        return sp

    def _apply(self, held: Held, sp: SharePartition) -> ShareSettings:
        """The group's settings as they are now, on the share-partition."""
        s = self.settings(held.key.group)
        sp.record_lock_ms, sp.delivery_count_limit = s.record_lock_ms, s.delivery_count_limit
        sp.max_in_flight, sp.dead_letters = s.max_in_flight, bool(s.dead_letter_topic)
        return s

    # -- dead letters ----------------------------------------------------------------------------------
    def _dispatch(self, held: Held, sp: SharePartition, plog: Any) -> None:
        """Start the copies of what became ARCHIVING."""
        for letter in sp.dead_letter_work():
            task = asyncio.get_running_loop().create_task(self._dead_letter(held, sp, plog, letter))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _dead_letter(self, held: Held, sp: SharePartition, plog: Any, letter: DeadLetter) -> None:
        group, partition = held.key.group, held.key.partition
        n = letter.last_offset - letter.first_offset + 1
        s = self.settings(group)
        if self.dead_letters is None or not s.dead_letter_topic:
            log.info("share group %s %s-%d: offsets %d-%d archived without a dead-letter copy (the group has no "
                     "dead-letter topic now)", group, held.topic, partition, letter.first_offset, letter.last_offset)
        else:
            try:
                await self.dead_letters.write(group, held.topic, partition, plog, letter, s.dead_letter_topic,
                                              s.dead_letter_copy)
                sp.stats["dead_lettered"] += n
            except DeadLetterFailed as e:
                sp.stats["dead_letter_failures"] += n
                log.error("share group %s %s-%d: offsets %d-%d archived without a dead-letter copy: %s", group,
                          held.topic, partition, letter.first_offset, letter.last_offset, e)
            except Exception:  # a defect: logged, and the records archived all the same
                sp.stats["dead_letter_failures"] += n
                log.exception("share group %s %s-%d: the dead-letter copy of offsets %d-%d failed", group,
                              held.topic, partition, letter.first_offset, letter.last_offset)
        async with held.lock:
            if held.sp is not sp or self.held.get((group, held.topic, partition)) is not held:
                return  # loaded again (reset, or another leader): that load copies them again
            sp.archived(letter.first_offset, letter.last_offset)
            try:
                await self._persist(held)
            except KafkaError as e:
                log.warning("share group %s %s-%d: writing the state after dead letters failed (written with the "
                            "next change): %s", group, held.topic, partition, e.message)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self.dead_letters is not None:
            await self.dead_letters.producer.close()

    async def _persist(self, held: Held) -> None:
        sp = held.sp
        assert sp is not None
        now = (sp.start_offset, sp.state_batches())
        if now == held.written:
            return
        await self.persister.write(held.key, held.state_epoch, held.leader_epoch, now[0],
                                   [PersistedBatch(b.first_offset, b.last_offset, int(b.state), b.delivery_count)
                                    for b in now[1]])
        held.written = now

    # -- fetch -----------------------------------------------------------------------------------------
    async def fetch(self, group: str, member: str, topic: str, partition: int, topic_id: uuid.UUID,
                    max_records: int, max_bytes: int, record_limit: bool = False) -> FetchedPartition:
        """``record_limit``: KIP-1206's strict mode (at most ``max_records``); else whole batches."""
        try:
            held, plog = self._open(group, topic, partition, topic_id)
            async with held.lock:
                sp = await self._load(held, plog)
                out = self._acquire(held, sp, plog, member, max_records, max_bytes, record_limit)
                self._dispatch(held, sp, plog)
                return out
        except KafkaError as e:
            if e.code in STATE_UNAVAILABLE:
                # the share coordinator cannot answer yet (its topic is being created, its leader
                # moves, its ISR is short): nothing is delivered now, the consumer fetches again
                log.warning("share group %s %s-%d: the share-partition state is not available (%s); nothing "
                            "is delivered until it is", group, topic, partition, e.message or e.code.name)
                return FetchedPartition()
            return FetchedPartition(error=e.code, message=e.message)

    def _acquire(self, held: Held, sp: SharePartition, plog: Any, member: str, max_records: int,
                 max_bytes: int, record_limit: bool) -> FetchedPartition:
        now = self.clock()
        s = self._apply(held, sp)
        sp.expire(now)
        sp.advance_start(plog.log_start_offset)
        offset = sp.next_fetch_offset()
        if offset < 0:
            return FetchedPartition()
        bound = plog.last_stable_offset if s.read_committed else plog.high_watermark
        if offset >= bound:
            return FetchedPartition()
        # read about what max_records needs (a fetch may allow 50 MB for 500 records)
        want = int(min(max(max_bytes, 1), max(READ_MIN_BYTES, max_records * held.bytes_per_record * 1.25)))
        res = plog.read(offset, want, min_one_batch=True, max_offset=bound)
        data = res.records
        if not data:
            return FetchedPartition()
        headers = _headers(data)
        if not headers:
            return FetchedPartition()
        read_records = headers[-1].next_offset - headers[0].base_offset
        if read_records > 0:
            held.bytes_per_record = 0.7 * held.bytes_per_record + 0.3 * (len(data) / read_records)
        ends = () if record_limit else [h.next_offset for h in headers]
        acquired = sp.acquire(member, headers[-1].next_offset, max(max_records, 1), now, ends)
        # transaction markers are not records, and a read_committed group never sees an aborted
        # transaction's: both archived at once, never delivered
        controls = [(h.base_offset, h.last_offset) for h in headers if h.attributes & CONTROL_FLAG]
        if s.read_committed:
            controls += _aborted(headers, plog.aborted_transactions(offset, headers[-1].next_offset))
        if controls and acquired:
            gaps = [(max(a.first_offset, f), min(a.last_offset, last), AcknowledgeType.GAP)
                    for a in acquired for f, last in controls if f <= a.last_offset and last >= a.first_offset]
            if gaps:
                sp.acknowledge(member, gaps, now)
                acquired = _minus(acquired, [(f, last) for f, last, _ in gaps])
        if not acquired:
            return FetchedPartition()
        wanted = [h for h in headers if not h.attributes & CONTROL_FLAG
                  and any(a.first_offset <= h.last_offset and a.last_offset >= h.base_offset for a in acquired)]
        mv = memoryview(data)
        return FetchedPartition(b"".join(bytes(mv[h.position:h.position + h.size]) for h in wanted), acquired)

    # -- acknowledge -----------------------------------------------------------------------------------
    async def acknowledge(self, group: str, member: str, topic: str, partition: int, topic_id: uuid.UUID,
                          batches: list[tuple[int, int, AcknowledgeType]]) -> tuple[ErrorCode, str | None]:
        try:
            held, plog = self._open(group, topic, partition, topic_id)
            async with held.lock:
                sp = await self._load(held, plog)
                self._apply(held, sp)
                try:
                    sp.acknowledge(member, batches, self.clock())
                except InvalidRecordState as e:
                    return ErrorCode.invalid_record_state, str(e)
                await self._persist(held)
                self._dispatch(held, sp, plog)
            return ErrorCode.none, None
        except KafkaError as e:
            return e.code, e.message

    async def release_member(self, group: str, member: str, partitions: list[tuple[str, int]]) -> None:
        """The member's share session ended: what it holds in these partitions is released."""
        for topic, partition in partitions:
            held = self.held.get((group, topic, partition))
            if held is None or held.sp is None:
                continue
            async with held.lock:
                sp = held.sp
                if sp is not None and sp.release_member(member):
                    try:
                        await self._persist(held)
                    except KafkaError as e:
                        log.warning("share group %s %s-%d: writing the state after member %s left failed: %s",
                                    group, topic, partition, member, e.message)
                    plog = self.logs.get(topic, partition)
                    if plog is not None:
                        self._dispatch(held, sp, plog)

    def forget(self, group: str, topic: str, partition: int) -> None:
        """No share session of the group fetches the partition here any more: its state (all of
        it written) is checked against the share coordinator's on the next fetch, so that an
        operator's reset of an empty group's offsets is what its next consumer sees (it stays
        here meanwhile: its metrics, the lag of a group nobody consumes, go on)."""
        held = self.held.get((group, topic, partition))
        if held is not None:
            held.stale = True

    def next_expiry_ms(self, group: str, partitions: list[tuple[str, int]]) -> int | None:
        times = []
        for topic, partition in partitions:
            held = self.held.get((group, topic, partition))
            if held is not None and held.sp is not None and (t := held.sp.next_lock_expiry()) is not None:
                times.append(t)
        return min(times) if times else None

    def views(self) -> list[tuple[str, str, int, SharePartition]]:
        """(group, topic, partition, state) of every share-partition loaded here."""
        return [(g, t, p, h.sp) for (g, t, p), h in sorted(self.held.items()) if h.sp is not None]


def _aborted(headers: list[rb.BatchHeader], aborted: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The offset ranges of the transactional batches of aborted transactions (Kafka's consumer
    does the same walk): a producer's transaction is aborted from its first offset until its
    marker."""
    starts = sorted((first, pid) for pid, first in aborted)
    active: set[int] = set()
    i = 0
    out = []
    for h in headers:
        while i < len(starts) and starts[i][0] <= h.base_offset:
            active.add(starts[i][1])
            i += 1
        if h.attributes & CONTROL_FLAG:
            active.discard(h.producer_id)
        elif h.attributes & TRANSACTIONAL_FLAG and h.producer_id in active:
            out.append((h.base_offset, h.last_offset))
    return out


def _headers(data: bytes) -> list[rb.BatchHeader]:
    out = []
    pos = 0
    mv = memoryview(data)
    while len(data) - pos >= rb.LOG_OVERHEAD:
        h = rb.read_header(mv, pos)
        if pos + h.size > len(data):
            break
        out.append(h)
        pos += h.size
    return out


def _minus(acquired: list[Acquired], removed: list[tuple[int, int]]) -> list[Acquired]:
    out: list[Acquired] = []
    for a in acquired:
        pieces = [(a.first_offset, a.last_offset)]
        for f, last in removed:
            nxt = []
            for lo, hi in pieces:
                if last < lo or f > hi:
                    nxt.append((lo, hi))
                    continue
                if lo < f:
                    nxt.append((lo, f - 1))
                if hi > last:
                    nxt.append((last + 1, hi))
            pieces = nxt
        out += [Acquired(lo, hi, a.delivery_count) for lo, hi in pieces]
    return out

