"""A follower's fetcher: one per leader broker, copying the leader's batches for every partition
this broker follows there (Kafka's ReplicaFetcherThread and AbstractFetcherThread, as one asyncio
task).

Each partition is fetched in a fetch state tied to the leader epoch it was added at: a response
is applied only to the state that sent the request (a partition re-added at a new epoch while a
request was out starts over with truncation), as Kafka's fetcher checks its fetch state.

- **Truncation** (KIP-101, KIP-279, Kafka's getOffsetTruncationState): a partition added to a
  fetcher first asks the leader (OffsetForLeaderEpoch) where its latest leader epoch ends there.
  If the leader knows that epoch, the follower truncates to the smaller of the two end offsets
  and is done. If the leader answers with an older epoch that the follower does not have, the
  follower truncates to where its own largest epoch below that one ends (removing the leader
  epoch entries past it even when no record goes, e.g. an epoch it was assigned as leader and
  never wrote) and asks again with its new latest epoch, until both agree. An undefined answer
  (the leader has no epoch that old) truncates to the high watermark.
- **Fetching**: Fetch with ``replica_id`` = this broker from the log end, with this replica's log
  start offset; the leader learns both from it. Batches are appended as the leader wrote them; then
  the high watermark (the leader's, bounded by the log end) and the log start offset (the leader's,
  after a DeleteRecords) follow. A first batch that starts below an empty log's start (the leader's
  log start is inside that batch, after a DeleteRecords) starts the log over at the batch's base
  offset and appends it again, as Kafka does.
- **Errors** delay only the partition concerned (Kafka's delayed partitions): a leader that does
  not know its new epoch yet (UNKNOWN_LEADER_EPOCH, NOT_LEADER_OR_FOLLOWER at a new epoch) is asked
  again after 50 ms, doubling up to ``replica.fetch.backoff.ms``; other errors wait that backoff.
  A storage failure is the log directory's (``FetcherHost.storage_failed``).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
from dataclasses import dataclass
from typing import Any, Protocol

from gregor.cluster.broker_client import BrokerClient, BrokerUnreachable
from gregor.cluster.metadata import BrokerEndpoint
from gregor.log.leader_epoch_cache import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
from gregor.log.log_manager import LogManager
from gregor.log.partition_log import PartitionLog, UnexpectedAppendOffset
from gregor.log.storage_errors import StorageError
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.replication.partition import Partition

log = logging.getLogger(__name__)

FETCH_VERSION = 12  # topic names, current leader epoch, replica id in the body
OFFSET_FOR_LEADER_EPOCH_VERSION = 4
LIST_OFFSETS_VERSION = 4
QUICK_RETRY_S = 0.05  # a new leader that has not read its election yet learns it within milliseconds


class FetcherHost(Protocol):
    """What a fetcher needs of its replica manager."""

    node_id: int
    logs: LogManager

    def follower_high_watermark(self, part: Partition, leader_hwm: int) -> None: ...

    def storage_failed(self, part: Partition, error: BaseException) -> None: ...


@dataclass(eq=False)
class FetchState:
    part: Partition
    epoch: int  # the leader epoch this state fetches at (the partition's when it was added)
    truncating: bool = True
    delay_until: float = 0.0
    quick_retries: int = 0


def truncation_target(plog: PartitionLog, leader_epoch: int, end_offset: int) -> tuple[int, bool]:
    """Where to truncate given the leader's answer (its largest epoch at or below the one asked
    for, and where that epoch ends there): (offset, whether truncation is complete)."""
    leo = plog.log_end_offset
    if end_offset == UNDEFINED_EPOCH_OFFSET:
        # the leader has no epoch at or below ours: only the high watermark is known to agree
        return min(plog.high_watermark, leo), True
    if leader_epoch == UNDEFINED_EPOCH:
        return min(end_offset, leo), True
    own_epoch, own_end = plog.epochs.end_offset_for(leader_epoch, leo)
    if own_epoch != leader_epoch:
        # this replica does not have the leader's epoch: cut where its own largest epoch below
        # it ends, and ask again with the epoch that leaves as the latest
        target = own_end if own_end != UNDEFINED_EPOCH_OFFSET else min(plog.high_watermark, leo)
        return min(target, leo), False
    return min(own_end, end_offset, leo), True


class ReplicaFetcher:
    def __init__(self, host: FetcherHost, leader: BrokerEndpoint, config: Any) -> None:
        self.host = host
        self.leader = leader
        self.config = config
        self.client = BrokerClient(leader.node_id, leader.host, leader.port,
                                   client_id=f"broker-{host.node_id}-fetcher-{leader.node_id}",
                                   request_timeout_ms=int(config["replica.socket.timeout.ms"]))
        self.partitions: dict[tuple[str, int], FetchState] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopped = False
        self.backoff = int(config["replica.fetch.backoff.ms"]) / 1000

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """Stop fetching. The task is cancelled until it is done: Python 3.11's wait_for (under
        the client's connect and requests) can swallow a cancellation that arrives as its inner
        future completes, and the fetch loop then went on while this waited for it (a broker
        stopping in a cluster hung here). The loop also checks ``_stopped``."""
        self._stopped = True
        self._wake.set()
        task = self._task
        if task is not None:
            while not task.done():
                task.cancel()
                await asyncio.wait({task}, timeout=0.5)
            with contextlib.suppress(asyncio.CancelledError, Exception):
                task.result()
        await self.client.close()

    def add(self, part: Partition) -> None:
        self.partitions[part.tp] = FetchState(part, part.leader_epoch)
        self._wake.set()

    def remove(self, tp: tuple[str, int]) -> None:
        self.partitions.pop(tp, None)

    def has(self, tp: tuple[str, int]) -> bool:
        return tp in self.partitions

    def _current(self, tp: tuple[str, int], state: FetchState) -> bool:
        """Whether ``state`` is still the partition's fetch state (not removed or re-added)."""
        return self.partitions.get(tp) is state

    # -- the loop ----------------------------------------------------------------------------
    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._stopped:
            now = loop.time()
            ready = [s for s in self.partitions.values() if s.delay_until <= now]
            if not ready:
                self._wake.clear()
                delays = [s.delay_until for s in self.partitions.values()]
                timeout = max(min(delays) - now, 0.0) if delays else None
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout)
                continue
            try:
                truncating = [s for s in ready if s.truncating]
                if truncating:
                    await self._truncate(truncating)
                    continue
                await self._fetch_once(ready)
            except BrokerUnreachable as e:
                log.warning("replica fetcher for broker %d: %s; retrying in %.1f s", self.leader.node_id, e,
                            self.backoff)
                self._delay(ready, self.backoff)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("replica fetcher for broker %d failed; retrying", self.leader.node_id)
                self._delay(ready, self.backoff)

    def _delay(self, states: list[FetchState], seconds: float) -> None:
        until = asyncio.get_running_loop().time() + seconds
        for s in states:
            s.delay_until = until

    def _retry_soon(self, state: FetchState) -> None:
        """The leader has not learnt its new epoch yet: ask again shortly (doubling, up to the
        backoff)."""
        delay = min(QUICK_RETRY_S * (2 ** state.quick_retries), self.backoff)
        state.quick_retries += 1
        self._delay([state], delay)

    # -- truncation --------------------------------------------------------------------------
    async def _truncate(self, states: list[FetchState]) -> None:
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for s in states:
            plog = s.part.log
            plog.ensure_loaded()
            by_topic.setdefault(s.part.topic, []).append(
                {"partition": s.part.partition, "current_leader_epoch": s.epoch,
                 "leader_epoch": plog.epochs.latest_epoch})
        resp = await self.client.request(ApiKey.OFFSET_FOR_LEADER_EPOCH, OFFSET_FOR_LEADER_EPOCH_VERSION, {
            "replica_id": self.host.node_id,
            "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]})
        sent = {s.part.tp: s for s in states}
        for t in resp.topics:
            for r in t.partitions:
                tp = (t.topic, r.partition)
                found = sent.get(tp)
                if found is None or not self._current(tp, found) or not found.truncating:
                    continue
                s = found
                if r.error_code != ErrorCode.none:
                    self._on_leader_error(s, ErrorCode(r.error_code), "OffsetForLeaderEpoch")
                    continue
                s.quick_retries = 0
                try:
                    s.truncating = not self._truncate_one(s.part, r.leader_epoch, r.end_offset)
                except StorageError as e:
                    self.host.storage_failed(s.part, e)

    def _truncate_one(self, part: Partition, leader_epoch: int, end_offset: int) -> bool:
        plog = part.log
        leo = plog.log_end_offset
        target, done = truncation_target(plog, leader_epoch, end_offset)
        if target < leo:
            log.info("%s-%d: truncating a divergent tail %d..%d (leader %d says epoch %d ends at %d)",
                     part.topic, part.partition, target, leo, self.leader.node_id, leader_epoch, end_offset)
        if target < leo or not done:
            # also when no record goes: the epoch entries from ``target`` on do (an epoch assigned
            # here as leader that wrote nothing), so that the next question asks with an older one
            plog.truncate_to(target)
        return done

    # -- fetching ----------------------------------------------------------------------------
    async def _fetch_once(self, states: list[FetchState]) -> None:
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for s in states:
            plog = s.part.log
            by_topic.setdefault(s.part.topic, []).append({
                "partition": s.part.partition, "current_leader_epoch": s.epoch,
                "fetch_offset": plog.log_end_offset, "last_fetched_epoch": -1,
                "log_start_offset": plog.log_start_offset,
                "partition_max_bytes": int(self.config["replica.fetch.max.bytes"])})
        sent = {s.part.tp: (s, s.part.log.log_end_offset) for s in states}
        resp = await self.client.request(ApiKey.FETCH, FETCH_VERSION, {
            "replica_id": self.host.node_id,
            "max_wait": datetime.timedelta(milliseconds=int(self.config["replica.fetch.wait.max.ms"])),
            "min_bytes": int(self.config["replica.fetch.min.bytes"]),
            "max_bytes": int(self.config["replica.fetch.response.max.bytes"]),
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
            "forgotten_topics_data": [], "rack_id": ""})
        if resp.error_code != ErrorCode.none:
            raise BrokerUnreachable(f"fetch from broker {self.leader.node_id}: {ErrorCode(resp.error_code).name}")
        for t in resp.responses:
            for r in t.partitions:
                tp = (t.topic, r.partition_index)
                entry = sent.get(tp)
                if entry is None:
                    continue
                s, fetch_offset = entry
                # removed or re-added while the fetch was out, or truncated since: not this answer's
                if not self._current(tp, s) or s.truncating or s.part.log.log_end_offset != fetch_offset:
                    continue
                try:
                    await self._handle(s, r)
                except StorageError as e:
                    self.host.storage_failed(s.part, e)
                except KafkaError as e:
                    log.warning("%s-%d: cannot append the leader's batches: %s", t.topic, r.partition_index,
                                e.message)
                    self._delay([s], self.backoff)

    async def _handle(self, s: FetchState, r: Any) -> None:
        part = s.part
        err = r.error_code
        if err == ErrorCode.none:
            s.quick_retries = 0
            plog = part.log
            records = r.records
            if records:
                self._append(plog, bytes(records))
                self.host.logs.notifier.notify(part.tp)  # what follows the replica (followed groups)
            self.host.follower_high_watermark(part, r.high_watermark)
            if r.log_start_offset > plog.log_start_offset:  # the leader's DeleteRecords or retention
                with contextlib.suppress(KafkaError):
                    plog.advance_log_start_offset(min(r.log_start_offset, plog.log_end_offset))
            return
        if err == ErrorCode.offset_out_of_range:
            await self._out_of_range(part)
            return
        self._on_leader_error(s, ErrorCode(err), "Fetch")

    @staticmethod
    def _append(plog: PartitionLog, records: bytes) -> None:
        try:
            plog.append_as_follower(records)
        except UnexpectedAppendOffset as e:
            leo = plog.log_end_offset
            if leo == plog.log_start_offset and e.first_offset < leo <= e.last_offset:
                # the leader's log start is inside this batch (DeleteRecords moved it there while
                # this replica was away): start over at the batch and append it whole
                log.info("%s-%d: the leader's log start %d is inside the batch %d-%d; starting the log at %d",
                         plog.topic, plog.partition, leo, e.first_offset, e.last_offset, e.first_offset)
                plog.truncate_fully_and_start_at(e.first_offset)
                plog.append_as_follower(records)
            else:
                raise

    def _on_leader_error(self, s: FetchState, err: ErrorCode, what: str) -> None:
        part = s.part
        if err in (ErrorCode.unknown_leader_epoch, ErrorCode.not_leader_or_follower):
            # the leader has not learnt its election yet (or this replica's view is behind):
            # ask again soon; ZooKeeper tells this replica if someone else leads
            log.info("%s-%d: the leader's %s answered %s; asking again shortly", part.topic, part.partition, what,
                     err.name.upper())
            self._retry_soon(s)
            return
        if err not in (ErrorCode.fenced_leader_epoch, ErrorCode.unknown_topic_or_partition):
            log.warning("%s-%d: %s from leader %d answered %s", part.topic, part.partition, what,
                        self.leader.node_id, err.name.upper())
        self._delay([s], self.backoff)

    async def _out_of_range(self, part: Partition) -> None:
        """Our log end is outside the leader's log: past its end (truncate to it), or below its
        start (start over at the leader's log start, as Kafka's follower does)."""
        earliest, latest = await self._leader_offsets(part)
        plog = part.log
        if plog.log_end_offset > latest:
            log.info("%s-%d: log end %d is past the leader's %d; truncating", part.topic, part.partition,
                     plog.log_end_offset, latest)
            plog.truncate_to(latest)
        elif plog.log_end_offset < earliest:
            log.info("%s-%d: log end %d is below the leader's log start %d; starting over there",
                     part.topic, part.partition, plog.log_end_offset, earliest)
            plog.truncate_fully_and_start_at(earliest)

    async def _leader_offsets(self, part: Partition) -> tuple[int, int]:
        out = []
        for ts in (-2, -1):
            resp = await self.client.request(ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION, {
                "replica_id": self.host.node_id, "isolation_level": 0,
                "topics": [{"name": part.topic, "partitions": [
                    {"partition_index": part.partition, "current_leader_epoch": part.leader_epoch,
                     "timestamp": ts}]}]})
            p = resp.topics[0].partitions[0]
            if p.error_code != ErrorCode.none:
                raise BrokerUnreachable(f"ListOffsets for {part.topic}-{part.partition}: "
                                        f"{ErrorCode(p.error_code).name}")
            out.append(p.offset)
        return out[0], out[1]
