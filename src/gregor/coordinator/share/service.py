"""Share delivery (KIP-932) as the APIs use it: ShareFetch and ShareAcknowledge over the share
sessions (share_sessions.py) and the share-partitions led here (share_partitions.py), with the
long poll of ShareFetch.

Acknowledgements come first (each partition's answered with its own error), then the fetch; a
fetch with nothing to acquire waits up to ``max_wait`` for new records or an expiring lock. A
connection that closes ends the share sessions opened on it, releasing what their members hold,
as Kafka does."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gregor.coordinator.share.share_partition import AcknowledgeType
from gregor.coordinator.share.share_partitions import FetchedPartition, SharePartitionManager, ShareSettings
from gregor.coordinator.share.share_sessions import FINAL_EPOCH, INITIAL_EPOCH, ShareSession, ShareSessions
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.share_state_records import SharePartitionKey

log = logging.getLogger("gregor.coordinator.share")

TP = tuple[str, int]  # topic name, partition


@dataclass
class PartitionAnswer:
    topic_id: uuid.UUID
    partition: int
    error: ErrorCode = ErrorCode.none
    message: str | None = None
    ack_error: ErrorCode = ErrorCode.none
    ack_message: str | None = None
    fetched: FetchedPartition | None = None


@dataclass
class ShareAnswer:
    error: ErrorCode = ErrorCode.none
    message: str | None = None
    partitions: list[PartitionAnswer] = field(default_factory=list)
    lock_timeout_ms: int = 0


Acks = dict[TP, tuple[uuid.UUID, list[tuple[int, int, AcknowledgeType]] | None]]  # None: malformed


def ack_batches(batches: Any) -> list[tuple[int, int, AcknowledgeType]] | None:
    """A request's acknowledgement batches as (first, last, type) ranges; None when malformed
    (a type per offset whose count does not match the range, a type outside 0-4, an empty list)."""
    out: list[tuple[int, int, AcknowledgeType]] = []
    for b in batches:
        first, last, types = int(b.first_offset), int(b.last_offset), list(b.acknowledge_types)
        if first < 0 or last < first or not types or any(t not in (0, 1, 2, 3, 4) for t in types):
            return None
        if len(types) == 1:
            out.append((first, last, AcknowledgeType(types[0])))
        elif len(types) == last - first + 1:
            out += [(first + i, first + i, AcknowledgeType(t)) for i, t in enumerate(types)]
        else:
            return None
    return out


class _SessionEnds:
    """Kept in the connection's state: when the connection closes, its share sessions end."""

    def __init__(self, service: ShareService) -> None:
        self.service = service

    def connection_closed(self) -> None:
        self.service.connection_closed(self)


class ShareService:
    def __init__(self, partitions: SharePartitionManager, settings: Callable[[str], ShareSettings],
                 wait: Callable[[list[TP], float], Any], max_sessions: int = 2000) -> None:
        self.partitions = partitions
        self.settings = settings
        self.sessions = ShareSessions(max_sessions)
        self._wait = wait  # the log notifier: returns when one of the partitions got records
        self._tasks: set[asyncio.Task[None]] = set()

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await self.partitions.close()
        await self.partitions.persister.close()

    async def reset_offsets(self, group: str, partitions: list[tuple[str, int, uuid.UUID, int]]
                            ) -> list[tuple[ErrorCode, str | None]]:
        """An empty share group's start offsets set (AlterShareGroupOffsets): each share-partition
        gets a new state at a new state epoch, nothing in flight; offset -1 deletes the state
        (DeleteShareGroupOffsets: the next consumer starts where share.auto.offset.reset says)."""
        out: list[tuple[ErrorCode, str | None]] = []
        for topic, partition, topic_id, offset in partitions:
            key = SharePartitionKey(group, topic_id, partition)
            try:
                if offset < 0:
                    await self.partitions.persister.delete(key)
                else:
                    stored = await self.partitions.persister.read(key, -1)
                    await self.partitions.persister.initialize(key, (stored.state_epoch + 1) if stored else 0, offset)
                self.partitions.forget(group, topic, partition)
                out.append((ErrorCode.none, None))
            except KafkaError as e:
                out.append((e.code, e.message))
        return out

    async def describe_offsets(self, group: str, partitions: list[tuple[str, int, uuid.UUID]]
                               ) -> list[tuple[int, int, int, ErrorCode, str | None]]:
        """(start offset, leader epoch, lag, error, message) of each share-partition as stored;
        start offset -1 for one without state. The lag (KIP-1226) is the records from the start
        offset to the high watermark whose delivery is not complete, when this broker hosts the
        partition (-1 otherwise)."""
        out: list[tuple[int, int, int, ErrorCode, str | None]] = []
        for topic, partition, topic_id in partitions:
            try:
                stored = await self.partitions.persister.read(SharePartitionKey(group, topic_id, partition), -1)
            except KafkaError as e:
                out.append((-1, -1, -1, e.code, e.message))
                continue
            if stored is None:
                out.append((-1, -1, -1, ErrorCode.none, None))
                continue
            plog = self.partitions.logs.get(topic, partition)
            lag = -1
            if plog is not None:
                done = sum(b.last_offset - b.first_offset + 1 for b in stored.batches
                           if b.delivery_state in (2, 4) and b.first_offset >= stored.start_offset)
                lag = max(plog.high_watermark - stored.start_offset - done, 0)
            out.append((stored.start_offset, stored.leader_epoch, lag, ErrorCode.none, None))
        return out

    def connection_token(self, state: dict[Any, Any]) -> object:
        token = state.get(_SessionEnds)
        if token is None:
            token = state[_SessionEnds] = _SessionEnds(self)
        return token

    def connection_closed(self, token: object) -> None:
        for session in self.sessions.of_connection(token):
            self.sessions.remove(session)
            task = asyncio.get_running_loop().create_task(self._session_ended(session))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _session_ended(self, session: ShareSession) -> None:
        """Release what the member holds; forget the partitions no session of its group fetches."""
        await self.partitions.release_member(session.group, session.member, list(session.partitions))
        fetched = {tp for s in self.sessions.sessions.values() if s.group == session.group for tp in s.partitions}
        for topic, partition in session.partitions:
            if (topic, partition) not in fetched:
                self.partitions.forget(session.group, topic, partition)

    async def share_fetch(self, group: str, member: str, epoch: int, wanted: list[tuple[str, int, uuid.UUID]],
                          forgotten: list[TP], acks: Acks, max_records: int, max_bytes: int, max_wait_s: float,
                          token: object, record_limit: bool = False) -> ShareAnswer:
        if epoch == FINAL_EPOCH and wanted:
            return ShareAnswer(ErrorCode.invalid_request, "a ShareFetch that closes its share session cannot fetch")
        try:
            session = self.sessions.begin(group, member, epoch, wanted, forgotten, token)
        except KafkaError as e:
            return ShareAnswer(e.code, e.message)
        answer = ShareAnswer(lock_timeout_ms=self.settings(group).record_lock_ms)
        by_tp: dict[TP, PartitionAnswer] = {}
        for tp, (topic_id, batches) in acks.items():
            by_tp[tp] = await self._acknowledge(group, member, tp, topic_id, batches)
        if epoch != FINAL_EPOCH:
            await self._fetch(group, member, session, by_tp, max_records, max_bytes, max_wait_s, record_limit)
        if self.sessions.finish(session, epoch):
            await self._session_ended(session)
        answer.partitions = list(by_tp.values())
        return answer

    async def share_acknowledge(self, group: str, member: str, epoch: int, acks: Acks, token: object) -> ShareAnswer:
        if epoch == INITIAL_EPOCH:
            return ShareAnswer(ErrorCode.invalid_share_session_epoch,
                               "ShareAcknowledge cannot open a share session (epoch 0)")
        try:
            session = self.sessions.begin(group, member, epoch, [], [], token)
        except KafkaError as e:
            return ShareAnswer(e.code, e.message)
        answer = ShareAnswer(lock_timeout_ms=self.settings(group).record_lock_ms)
        for tp, (topic_id, batches) in acks.items():
            answer.partitions.append(await self._acknowledge(group, member, tp, topic_id, batches))
        if self.sessions.finish(session, epoch):
            await self._session_ended(session)
        return answer

    async def _acknowledge(self, group: str, member: str, tp: TP, topic_id: uuid.UUID,
                           batches: list[tuple[int, int, AcknowledgeType]] | None) -> PartitionAnswer:
        out = PartitionAnswer(topic_id, tp[1])
        if batches is None:
            out.ack_error, out.ack_message = ErrorCode.invalid_request, "malformed acknowledgement batches"
        elif batches:
            out.ack_error, out.ack_message = await self.partitions.acknowledge(group, member, tp[0], tp[1], topic_id,
                                                                               batches)
        return out

    async def _fetch(self, group: str, member: str, session: ShareSession, by_tp: dict[TP, PartitionAnswer],
                     max_records: int, max_bytes: int, max_wait_s: float, record_limit: bool) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(max_wait_s, 0.0)
        tps = list(session.partitions)
        while True:
            budget_records, budget_bytes, got = max_records, max_bytes, False
            for tp in tps:
                topic_id = session.partitions[tp]
                assert isinstance(topic_id, uuid.UUID)
                if budget_records <= 0 or budget_bytes <= 0:
                    break
                fetched = await self.partitions.fetch(group, member, tp[0], tp[1], topic_id, budget_records,
                                                      budget_bytes, record_limit)
                entry = by_tp.setdefault(tp, PartitionAnswer(topic_id, tp[1]))
                if fetched.error:
                    entry.error, entry.message = fetched.error, fetched.message
                    got = True
                    continue
                if fetched.acquired:
                    entry.fetched = fetched
                    got = True
                    budget_records -= sum(a.last_offset - a.first_offset + 1 for a in fetched.acquired)
                    budget_bytes -= len(fetched.records)
            remaining = deadline - loop.time()
            if got or remaining <= 0 or not tps:
                break
            expiry = self.partitions.next_expiry_ms(group, tps)
            if expiry is not None:
                remaining = min(remaining, max(expiry - self.partitions.clock(), 0) / 1000 + 0.001)
            await self._wait(tps, remaining)
        for tp in tps:  # every partition of the session is answered
            by_tp.setdefault(tp, PartitionAnswer(session.partitions[tp], tp[1]))  # type: ignore[arg-type]
