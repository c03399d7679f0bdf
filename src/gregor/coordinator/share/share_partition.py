"""One share-partition's delivery state (Kafka's SharePartition, KIP-932), pure: no log, no
network, a clock passed in, so that every transition is tested with a manual clock.

The share-partition start offset (SPSO) is the first offset not yet in a terminal state; the end
offset (SPEO) the next offset never handed out. Between them every offset is *in flight*:

- AVAILABLE: may be acquired (again);
- ACQUIRED: handed to one member until its acquisition lock expires (``record_lock_ms``), with the
  number of times it was delivered;
- ACKNOWLEDGED: processed (ACCEPT) — terminal;
- ARCHIVED: rejected (REJECT), a gap, or delivered ``delivery_count_limit`` times without being
  accepted — terminal.

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

import enum
from dataclasses import dataclass


class RecordState(enum.IntEnum):  # Kafka's RecordState ids
    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AcknowledgeType(enum.IntEnum):  # ShareAcknowledge / ShareFetch acknowledgement types
    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4  # KIP-1222


TERMINAL = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)
STATS = ("acquired", "redelivered", "accepted", "released", "rejected", "archived_at_limit", "lock_timeouts")
_KINDS = frozenset(int(k) for k in AcknowledgeType)


class InvalidRecordState(Exception):
    """Kafka's INVALID_RECORD_STATE: an acknowledgement of offsets the member does not hold."""


@dataclass(slots=True)
class InFlight:
    state: RecordState
    delivery_count: int = 0
    member: str | None = None
    lock_expires_ms: int = 0


@dataclass(frozen=True, slots=True)
class Acquired:
    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class StateBatch:
    first_offset: int
    last_offset: int
    state: RecordState
    delivery_count: int


class SharePartition:
    def __init__(self, start_offset: int, record_lock_ms: int = 30_000, delivery_count_limit: int = 5,
                 max_in_flight: int = 2000) -> None:
        if delivery_count_limit < 1 or max_in_flight < 1 or record_lock_ms < 1:
            raise ValueError("record_lock_ms, delivery_count_limit and max_in_flight must be positive")
        self.start_offset = start_offset
        self.end_offset = start_offset
        self.record_lock_ms = record_lock_ms
        self.delivery_count_limit = delivery_count_limit
        self.max_in_flight = max_in_flight
        self.in_flight: dict[int, InFlight] = {}  # offset -> state, for start_offset <= offset < end_offset
        # what happened to records here since the share-partition was loaded (metrics), by STATS' names
        self.stats = dict.fromkeys(STATS, 0)

    # -- restore ---------------------------------------------------------------------------------
    @classmethod
    def restore(cls, start_offset: int, batches: list[StateBatch], **settings: int) -> SharePartition:
        """From persisted state: what was ACQUIRED comes back AVAILABLE."""
        sp = cls(start_offset, **settings)
        for b in batches:
            for offset in range(max(b.first_offset, start_offset), b.last_offset + 1):
                state = RecordState.AVAILABLE if b.state == RecordState.ACQUIRED else b.state
                if state == RecordState.AVAILABLE and b.delivery_count >= sp.delivery_count_limit:
                    state = RecordState.ARCHIVED  # delivered as often as allowed (its lock ended with the leader)
                sp.in_flight[offset] = InFlight(state, b.delivery_count)
                sp.end_offset = max(sp.end_offset, offset + 1)
        for offset in range(start_offset, sp.end_offset):  # holes: offsets never handed out are available
            sp.in_flight.setdefault(offset, InFlight(RecordState.AVAILABLE))
        sp._advance()
        return sp

    # -- acquire ---------------------------------------------------------------------------------
    def acquire(self, member: str, log_end: int, max_records: int, now_ms: int) -> list[Acquired]:
        """Hand ``member`` up to ``max_records`` offsets below ``log_end`` (the end of what its
        fetch read): AVAILABLE in-flight offsets first, then new ones from the SPEO."""
        self.expire(now_ms)
        out: list[tuple[int, int]] = []
        for offset in range(self.start_offset, self.end_offset):
            if len(out) >= max_records:
                break
            r = self.in_flight[offset]
            if r.state == RecordState.AVAILABLE and offset < log_end:
                if r.delivery_count >= self.delivery_count_limit:  # never past the limit
                    self._settle(r, RecordState.ARCHIVED)
                    continue
                self._take(offset, r, member, now_ms)
                out.append((offset, r.delivery_count))
        while (len(out) < max_records and self.end_offset < log_end
               and self.end_offset - self.start_offset < self.max_in_flight):
            r = self.in_flight[self.end_offset] = InFlight(RecordState.AVAILABLE)
            self._take(self.end_offset, r, member, now_ms)
            out.append((self.end_offset, r.delivery_count))
            self.end_offset += 1
        self._advance()
        return _ranges(out)

    def _take(self, offset: int, r: InFlight, member: str, now_ms: int) -> None:
        self.stats["acquired"] += 1
        if r.delivery_count:
            self.stats["redelivered"] += 1
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
            for offset in range(first, last + 1):
                r = self.in_flight.get(offset)
                if r is None or r.state != RecordState.ACQUIRED or r.member != member:
                    raise InvalidRecordState(f"offset {offset} is not acquired by {member}")
        for first, last, kind in batches:
            for offset in range(first, last + 1):
                r = self.in_flight[offset]
                if kind == AcknowledgeType.ACCEPT:
                    self.stats["accepted"] += 1
                    self._settle(r, RecordState.ACKNOWLEDGED)
                elif kind in (AcknowledgeType.REJECT, AcknowledgeType.GAP):
                    self.stats["rejected"] += kind == AcknowledgeType.REJECT
                    self._settle(r, RecordState.ARCHIVED)
                elif kind == AcknowledgeType.RELEASE:
                    self.stats["released"] += 1
                    self._release(r)
                else:  # RENEW
                    r.lock_expires_ms = now_ms + self.record_lock_ms
        self._advance()

    def _settle(self, r: InFlight, state: RecordState) -> None:
        r.state, r.member, r.lock_expires_ms = state, None, 0

    def _release(self, r: InFlight) -> None:
        """Back to AVAILABLE, or ARCHIVED once delivered ``delivery_count_limit`` times."""
        if r.delivery_count >= self.delivery_count_limit:
            self.stats["archived_at_limit"] += 1
        self._settle(r, RecordState.ARCHIVED if r.delivery_count >= self.delivery_count_limit
                     else RecordState.AVAILABLE)

    # -- locks and members -----------------------------------------------------------------------
    def expire(self, now_ms: int) -> int:
        """Release every record whose acquisition lock expired; returns how many."""
        n = 0
        for r in self.in_flight.values():
            if r.state == RecordState.ACQUIRED and r.lock_expires_ms <= now_ms:
                self._release(r)
                n += 1
        self.stats["lock_timeouts"] += n
        if n:
            self._advance()
        return n

    def release_member(self, member: str) -> int:
        """The member left (or its share session closed): its records are released."""
        n = 0
        for r in self.in_flight.values():
            if r.state == RecordState.ACQUIRED and r.member == member:
                self._release(r)
                n += 1
        if n:
            self._advance()
        return n

    def advance_start(self, log_start: int) -> None:
        """The log's start moved past the share-partition start offset (retention, DeleteRecords):
        what is no longer in the log cannot be delivered and leaves the in-flight window."""
        if log_start <= self.start_offset:
            return
        for offset in range(self.start_offset, min(log_start, self.end_offset)):
            del self.in_flight[offset]
        self.start_offset = log_start
        self.end_offset = max(self.end_offset, log_start)
        self._advance()

    def next_fetch_offset(self) -> int:
        """Where a fetch should read from: the first AVAILABLE in-flight offset (a redelivery),
        else the end offset; -1 when nothing may be acquired (the in-flight limit is reached and
        nothing in flight is AVAILABLE)."""
        for offset in range(self.start_offset, self.end_offset):
            if self.in_flight[offset].state == RecordState.AVAILABLE:
                return offset
        if self.end_offset - self.start_offset >= self.max_in_flight:
            return -1
        return self.end_offset

    def next_lock_expiry(self) -> int | None:
        """When the earliest acquisition lock expires (ms), None when nothing is acquired."""
        times = [r.lock_expires_ms for r in self.in_flight.values() if r.state == RecordState.ACQUIRED]
        return min(times) if times else None

    def _advance(self) -> None:
        while self.start_offset < self.end_offset and self.in_flight[self.start_offset].state in TERMINAL:
            del self.in_flight[self.start_offset]
            self.start_offset += 1

    # -- persistence and views ----------------------------------------------------------------------
    def state_batches(self) -> list[StateBatch]:
        """The in-flight ranges as persisted: consecutive offsets of one state and delivery count,
        ACQUIRED as AVAILABLE."""
        out: list[StateBatch] = []
        for offset in range(self.start_offset, self.end_offset):
            r = self.in_flight[offset]
            state = RecordState.AVAILABLE if r.state == RecordState.ACQUIRED else r.state
            last = out[-1] if out else None
            if last is not None and last.last_offset == offset - 1 and last.state == state \
                    and last.delivery_count == r.delivery_count:
                out[-1] = StateBatch(last.first_offset, offset, state, r.delivery_count)
            else:
                out.append(StateBatch(offset, offset, state, r.delivery_count))
        return out

    def counts(self) -> dict[RecordState, int]:
        out = dict.fromkeys(RecordState, 0)
        for r in self.in_flight.values():
            out[r.state] += 1
        return out


def _ranges(items: list[tuple[int, int]]) -> list[Acquired]:
    """Consecutive offsets with the same delivery count as one range."""
    out: list[Acquired] = []
    for offset, count in items:
        last = out[-1] if out else None
        if last is not None and last.last_offset == offset - 1 and last.delivery_count == count:
            out[-1] = Acquired(last.first_offset, offset, count)
        else:
            out.append(Acquired(offset, offset, count))
    return out
