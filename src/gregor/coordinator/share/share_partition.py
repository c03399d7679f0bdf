"""One share-partition's delivery state (Kafka's SharePartition, KIP-932), pure: no log, no
network, a clock passed in, so that every transition is tested with a manual clock.

The share-partition start offset (SPSO) is the first offset not yet in a terminal state; the end
offset (SPEO) the next offset never handed out. Between them every offset is *in flight*:

- AVAILABLE: may be acquired (again);
- ACQUIRED: handed to one member until its acquisition lock expires (``record_lock_ms``), with the
  number of times it was delivered;
- ACKNOWLEDGED: processed (ACCEPT) — terminal;
- ARCHIVED: rejected (REJECT), a gap, or delivered ``delivery_count_limit`` times without being
  accepted — terminal;
- ARCHIVING (KIP-1191, when the group has a dead-letter topic: ``dead_letters``): rejected or
  delivered too often, waiting for its copy in the dead-letter topic; never delivered again, not
  terminal (the SPSO stays before it) until ``archived`` says the copy was written (or given up).
  ``dead_letter_work`` hands each such range out once; a restored one is handed out again.

``acquire`` hands out AVAILABLE in-flight offsets first (redeliveries, in offset order), then new
offsets from the SPEO up to what the fetch read, never more than ``max_in_flight`` offsets past the
SPSO. ``acknowledge`` applies ACCEPT, RELEASE, REJECT, RENEW (KIP-1222: the lock is extended) or GAP
to offsets the member holds; anything else is refused whole (INVALID_RECORD_STATE) and changes
nothing. An expired lock, or the member leaving, makes its records AVAILABLE again (ARCHIVED once the
limit is reached). The SPSO moves over every terminal prefix.

``state_batches`` is what is persisted (Kafka's ShareSnapshot/ShareUpdate state batches): in-flight
ranges with their state and delivery count, ACQUIRED written as AVAILABLE (after a restart or a
leader move what was not acknowledged is delivered again, what was is not)."""

from __future__ import annotations

import bisect
import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


class RecordState(enum.IntEnum):  # Kafka's RecordState ids
    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVING = 3  # KIP-1191
    ARCHIVED = 4


class AcknowledgeType(enum.IntEnum):  # ShareAcknowledge / ShareFetch acknowledgement types
    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4  # KIP-1222


TERMINAL = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)
COALESCE_ABOVE = 64  # runs; past that, neighbours in the same state are joined again
STATS = ("acquired", "redelivered", "accepted", "released", "rejected", "archived_at_limit", "lock_timeouts",
         "dead_lettered", "dead_letter_failures")
# why a record is dead-lettered (the __dlq.errors.message header, Kafka's words)
REJECTED = "Offset rejected by client."
LIMIT_REACHED = "Offset delivery count exceeded the threshold."
_KINDS = frozenset(int(k) for k in AcknowledgeType)


class InvalidRecordState(Exception):
    """Kafka's INVALID_RECORD_STATE: an acknowledgement of offsets the member does not hold."""


@dataclass(slots=True)
class InFlight:
    state: RecordState
    delivery_count: int = 0
    member: str | None = None
    lock_expires_ms: int = 0


@dataclass(slots=True)
class Run:
    """Consecutive in-flight offsets in one state: the unit everything works on, so that a fetch
    of a thousand records costs one run, not a thousand entries. Split only where an
    acknowledgement or an acquisition cuts it."""

    first: int
    last: int
    state: RecordState
    delivery_count: int = 0
    member: str | None = None
    lock_expires_ms: int = 0
    cause: str | None = None  # ARCHIVING: why (REJECTED, LIMIT_REACHED; None after a restore)
    handed_out: bool = False  # ARCHIVING: given to the dead-letter writer

    def piece(self, first: int, last: int) -> Run:
        return Run(first, last, self.state, self.delivery_count, self.member, self.lock_expires_ms, self.cause,
                   self.handed_out)

    def key(self) -> tuple[object, ...]:
        return (self.state, self.delivery_count, self.member, self.lock_expires_ms, self.cause, self.handed_out)


@dataclass(frozen=True, slots=True)
class Acquired:
    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """Offsets to copy to the dead-letter topic, with their delivery count and why."""

    first_offset: int
    last_offset: int
    delivery_count: int
    cause: str


@dataclass(frozen=True, slots=True)
class StateBatch:
    first_offset: int
    last_offset: int
    state: RecordState
    delivery_count: int


class SharePartition:
    def __init__(self, start_offset: int, record_lock_ms: int = 30_000, delivery_count_limit: int = 5,
                 max_in_flight: int = 2000, dead_letters: bool = False) -> None:
        if delivery_count_limit < 1 or max_in_flight < 1 or record_lock_ms < 1:
            raise ValueError("record_lock_ms, delivery_count_limit and max_in_flight must be positive")
        self.start_offset = start_offset
        self.end_offset = start_offset
        self.record_lock_ms = record_lock_ms
        self.delivery_count_limit = delivery_count_limit
        self.max_in_flight = max_in_flight
        self.dead_letters = dead_letters
        # the in-flight offsets [start_offset, end_offset) as runs, in order, without holes
        self.runs: list[Run] = []
        # what happened to records here since the share-partition was loaded (metrics), by STATS' names
        self.stats = dict.fromkeys(STATS, 0)

    @property
    def in_flight(self) -> dict[int, InFlight]:
        """Offset by offset (for tests and views; the work is done on runs)."""
        return {o: InFlight(r.state, r.delivery_count, r.member, r.lock_expires_ms)
                for r in self.runs for o in range(r.first, r.last + 1)}

    # -- restore ---------------------------------------------------------------------------------
    @classmethod
    def restore(cls, start_offset: int, batches: list[StateBatch], **settings: Any) -> SharePartition:
        """From persisted state: what was ACQUIRED comes back AVAILABLE, what was ARCHIVING is
        handed out to the dead-letter writer again (ARCHIVED if the group has no dead-letter
        topic now)."""
        sp = cls(start_offset, **settings)
        at = start_offset
        for b in sorted(batches, key=lambda b: b.first_offset):
            first = max(b.first_offset, at)
            if first > b.last_offset:
                continue
            if first > at:  # a hole: offsets never handed out are available
                sp.runs.append(Run(at, first - 1, RecordState.AVAILABLE))
            state = RecordState.AVAILABLE if b.state == RecordState.ACQUIRED else b.state
            if state == RecordState.AVAILABLE and b.delivery_count >= sp.delivery_count_limit:
                state = RecordState.ARCHIVING  # delivered as often as allowed (its lock ended with the leader)
            if state == RecordState.ARCHIVING and not sp.dead_letters:
                state = RecordState.ARCHIVED
            sp.runs.append(Run(first, b.last_offset, state, b.delivery_count))
            at = b.last_offset + 1
        sp.end_offset = at
        sp._advance()
        return sp

    # -- finding and cutting runs -------------------------------------------------------------------
    def _index(self, offset: int) -> int:
        """The index of the run holding ``offset`` (which must be in flight)."""
        return bisect.bisect_right(self.runs, offset, key=lambda r: r.first) - 1

    def _cut(self, offset: int) -> None:
        """Make ``offset`` the first of a run (if in flight)."""
        if not self.start_offset < offset < self.end_offset:
            return
        i = self._index(offset)
        r = self.runs[i]
        if r.first != offset:
            self.runs[i:i + 1] = [r.piece(r.first, offset - 1), r.piece(offset, r.last)]

    def _span(self, first: int, last: int) -> list[Run]:
        """The runs exactly covering [first, last] (cut at both ends; both in flight)."""
        self._cut(first)
        self._cut(last + 1)
        i = self._index(first)
        j = self._index(last)
        return self.runs[i:j + 1]

    # -- acquire ---------------------------------------------------------------------------------
    def acquire(self, member: str, log_end: int, max_records: int, now_ms: int,
                batch_ends: Sequence[int] = ()) -> list[Acquired]:
        """Hand ``member`` up to ``max_records`` offsets below ``log_end`` (the end of what its
        fetch read): AVAILABLE in-flight offsets first, then new ones from the SPEO.

        ``batch_ends`` (the next offsets of the batches read, in order) asks for KIP-1206's
        batch-optimised acquisition: new offsets run to the end of the batch the limit falls in
        (within the in-flight limit), so that a consumer is rarely sent records it did not
        acquire, but at most ``max_records`` past the limit (Kafka takes the whole batch: one
        producer batch of 10,000 records would all go to one consumer asking for 500, and the
        others of its share group would wait); without them the limit is strict
        (``share.acquire.mode=record_limit``)."""
        self.expire(now_ms)
        out: list[Acquired] = []
        left = max_records
        i = 0
        while i < len(self.runs) and left > 0:
            r = self.runs[i]
            if r.first >= log_end:
                break
            if r.state == RecordState.AVAILABLE:
                if r.delivery_count >= self.delivery_count_limit:  # never past the limit
                    self.stats["archived_at_limit"] += r.last - r.first + 1
                    self._give_up(r, LIMIT_REACHED)
                else:
                    last = min(r.last, log_end - 1, r.first + left - 1)
                    if last < r.last:
                        self.runs[i:i + 1] = [r.piece(r.first, last), r.piece(last + 1, r.last)]
                        r = self.runs[i]
                    self._take(r, member, now_ms)
                    out.append(Acquired(r.first, r.last, r.delivery_count))
                    left -= r.last - r.first + 1
            i += 1
        room = self.max_in_flight - (self.end_offset - self.start_offset)
        n = min(left, log_end - self.end_offset, room)
        if n > 0 and batch_ends:
            at = bisect.bisect_left(batch_ends, self.end_offset + n)
            if at < len(batch_ends) and batch_ends[at] - self.end_offset - n <= max_records:
                n = min(batch_ends[at] - self.end_offset, log_end - self.end_offset, room)
        if n > 0:
            r = Run(self.end_offset, self.end_offset + n - 1, RecordState.AVAILABLE)
            self.runs.append(r)
            self._take(r, member, now_ms)
            out.append(Acquired(r.first, r.last, r.delivery_count))
            self.end_offset += n
        self._advance()
        return _merged(out)

    def _take(self, r: Run, member: str, now_ms: int) -> None:
        n = r.last - r.first + 1
        self.stats["acquired"] += n
        if r.delivery_count:
            self.stats["redelivered"] += n
        r.state = RecordState.ACQUIRED
        r.member = member
        r.delivery_count += 1
        r.lock_expires_ms = now_ms + self.record_lock_ms

    # -- acknowledge ------------------------------------------------------------------------------
    def acknowledge(self, member: str, batches: list[tuple[int, int, AcknowledgeType]], now_ms: int) -> None:
        """Apply every batch, or none (InvalidRecordState when an offset is not held by
        ``member``: not in flight, not acquired, acquired by another, or its lock expired)."""
        self.expire(now_ms)
        for first, last, kind in batches:
            if first > last:
                raise InvalidRecordState(f"batch {first}-{last}: the first offset is after the last")
            if kind not in _KINDS:
                raise InvalidRecordState(f"unknown acknowledgement type {kind}")
            if first < self.start_offset or last >= self.end_offset:
                raise InvalidRecordState(f"offsets {first}-{last} are not in flight")
            for i in range(self._index(first), self._index(last) + 1):
                r = self.runs[i]
                if r.state != RecordState.ACQUIRED or r.member != member:
                    raise InvalidRecordState(f"offset {max(r.first, first)} is not acquired by {member}")
        for first, last, kind in batches:
            for r in self._span(first, last):
                n = r.last - r.first + 1
                if kind == AcknowledgeType.ACCEPT:
                    self.stats["accepted"] += n
                    self._settle(r, RecordState.ACKNOWLEDGED)
                elif kind == AcknowledgeType.REJECT:
                    self.stats["rejected"] += n
                    self._give_up(r, REJECTED)
                elif kind == AcknowledgeType.GAP:
                    self._settle(r, RecordState.ARCHIVED)
                elif kind == AcknowledgeType.RELEASE:
                    self.stats["released"] += n
                    self._release(r)
                else:  # RENEW
                    r.lock_expires_ms = now_ms + self.record_lock_ms
        self._advance()

    def _settle(self, r: Run, state: RecordState) -> None:
        r.state, r.member, r.lock_expires_ms = state, None, 0

    def _give_up(self, r: Run, cause: str) -> None:
        """Never delivered again: ARCHIVING for the dead-letter topic, else ARCHIVED."""
        if self.dead_letters:
            self._settle(r, RecordState.ARCHIVING)
            r.cause, r.handed_out = cause, False
        else:
            self._settle(r, RecordState.ARCHIVED)

    def _release(self, r: Run) -> None:
        """Back to AVAILABLE, or given up once delivered ``delivery_count_limit`` times."""
        if r.delivery_count >= self.delivery_count_limit:
            self.stats["archived_at_limit"] += r.last - r.first + 1
            self._give_up(r, LIMIT_REACHED)
        else:
            self._settle(r, RecordState.AVAILABLE)

    # -- dead letters (KIP-1191) ----------------------------------------------------------------------
    def dead_letter_work(self) -> list[DeadLetter]:
        """The ARCHIVING ranges not handed out yet, now handed out (each once)."""
        out: list[DeadLetter] = []
        for r in self.runs:
            if r.state == RecordState.ARCHIVING and not r.handed_out:
                r.handed_out = True
                cause = r.cause or (LIMIT_REACHED if r.delivery_count >= self.delivery_count_limit else REJECTED)
                out.append(DeadLetter(r.first, r.last, r.delivery_count, cause))
        return out

    def archived(self, first: int, last: int) -> int:
        """The dead-letter copies of [first, last] are written (or given up): those still ARCHIVING
        become ARCHIVED; returns how many."""
        first, last = max(first, self.start_offset), min(last, self.end_offset - 1)
        if first > last:
            return 0
        n = 0
        for r in self._span(first, last):
            if r.state == RecordState.ARCHIVING:
                self._settle(r, RecordState.ARCHIVED)
                r.cause, r.handed_out = None, False
                n += r.last - r.first + 1
        self._advance()
        return n

    # -- locks and members -----------------------------------------------------------------------
    def expire(self, now_ms: int) -> int:
        """Release every record whose acquisition lock expired; returns how many."""
        n = 0
        for r in self.runs:
            if r.state == RecordState.ACQUIRED and r.lock_expires_ms <= now_ms:
                self._release(r)
                n += r.last - r.first + 1
        if n:
            self.stats["lock_timeouts"] += n
            self._advance()
        return n

    def release_member(self, member: str) -> int:
        """The member left (or its share session closed): its records are released."""
        n = 0
        for r in self.runs:
            if r.state == RecordState.ACQUIRED and r.member == member:
                self._release(r)
                n += r.last - r.first + 1
        if n:
            self._advance()
        return n

    def advance_start(self, log_start: int) -> None:
        """The log's start moved past the share-partition start offset (retention, DeleteRecords):
        what is no longer in the log cannot be delivered and leaves the in-flight window."""
        if log_start <= self.start_offset:
            return
        if log_start >= self.end_offset:
            self.runs = []
            self.start_offset = self.end_offset = log_start
            return
        self._cut(log_start)
        self.runs = self.runs[self._index(log_start):]
        self.start_offset = log_start
        self._advance()

    def next_fetch_offset(self) -> int:
        """Where a fetch should read from: the first AVAILABLE in-flight offset (a redelivery),
        else the end offset; -1 when nothing may be acquired (the in-flight limit is reached and
        nothing in flight is AVAILABLE)."""
        for r in self.runs:
            if r.state == RecordState.AVAILABLE:
                return r.first
        if self.end_offset - self.start_offset >= self.max_in_flight:
            return -1
        return self.end_offset

    def next_lock_expiry(self) -> int | None:
        """When the earliest acquisition lock expires (ms), None when nothing is acquired."""
        times = [r.lock_expires_ms for r in self.runs if r.state == RecordState.ACQUIRED]
        return min(times) if times else None

    def _advance(self) -> None:
        """Drop the terminal runs at the start; join neighbours left in the same state."""
        k = 0
        while k < len(self.runs) and self.runs[k].state in TERMINAL:
            k += 1
        if k:
            del self.runs[:k]
        self.start_offset = self.runs[0].first if self.runs else self.end_offset
        if len(self.runs) > COALESCE_ABOVE:
            self._coalesce()

    def _coalesce(self) -> None:
        out: list[Run] = []
        for r in self.runs:
            last = out[-1] if out else None
            if last is not None and last.key() == r.key():
                last.last = r.last
            else:
                out.append(r)
        self.runs = out

    # -- persistence and views ----------------------------------------------------------------------
    def state_batches(self) -> list[StateBatch]:
        """The in-flight ranges as persisted: consecutive offsets of one state and delivery count,
        ACQUIRED as AVAILABLE."""
        out: list[StateBatch] = []
        for r in self.runs:
            state = RecordState.AVAILABLE if r.state == RecordState.ACQUIRED else r.state
            last = out[-1] if out else None
            if last is not None and last.last_offset == r.first - 1 and last.state == state \
                    and last.delivery_count == r.delivery_count:
                out[-1] = StateBatch(last.first_offset, r.last, state, r.delivery_count)
            else:
                out.append(StateBatch(r.first, r.last, state, r.delivery_count))
        return out

    def lag(self, high_watermark: int) -> int:
        """Records from the start offset to ``high_watermark`` whose delivery is not complete
        (KIP-1226's share-partition lag)."""
        done = sum(r.last - r.first + 1 for r in self.runs if r.state in TERMINAL)
        return max(high_watermark - self.start_offset - done, 0)

    def stuck(self) -> int:
        """In-flight records delivered more than once and not done: what keeps failing."""
        return sum(r.last - r.first + 1 for r in self.runs
                   if r.delivery_count >= 2 and r.state in (RecordState.AVAILABLE, RecordState.ACQUIRED))

    def counts(self) -> dict[RecordState, int]:
        out = dict.fromkeys(RecordState, 0)
        for r in self.runs:
            out[r.state] += r.last - r.first + 1
        return out


def _merged(items: list[Acquired]) -> list[Acquired]:
    """Adjacent acquired ranges with the same delivery count as one."""
    out: list[Acquired] = []
    for a in items:
        last = out[-1] if out else None
        if last is not None and last.last_offset == a.first_offset - 1 and last.delivery_count == a.delivery_count:
            out[-1] = Acquired(last.first_offset, a.last_offset, a.delivery_count)
        else:
            out.append(a)
    return out
