"""A follower's fetcher: one per leader broker, copying the leader's batches for every partition
this broker follows there (Kafka's ReplicaFetcherThread, as one asyncio task).

A partition added to a fetcher first truncates (KIP-101/KIP-279): it asks the leader, with
OffsetForLeaderEpoch, where the last leader epoch it has ends on the leader, and truncates its
log there (no lower than its high watermark's safety allows: below the point both logs agree).
Then it fetches with Fetch, ``replica_id`` = this broker, from its log end; the leader learns the
follower's log end from that offset. Batches are appended as the leader wrote them
(``append_as_follower``); the follower's high watermark is the leader's, bounded by its own log
end.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gregor.cluster.broker_client import BrokerClient, BrokerUnreachable
from gregor.cluster.metadata import BrokerEndpoint
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from gregor.cluster.replica_manager import Partition, ReplicaManager

log = logging.getLogger(__name__)

FETCH_VERSION = 12  # topic names, current leader epoch, replica id in the body
OFFSET_FOR_LEADER_EPOCH_VERSION = 4
LIST_OFFSETS_VERSION = 4
UNDEFINED_EPOCH = -1


@dataclass
class _Fetching:
    part: Partition
    truncating: bool = True


class ReplicaFetcher:
    def __init__(self, manager: ReplicaManager, leader: BrokerEndpoint, config: Any) -> None:
        self.manager = manager
        self.leader = leader
        self.config = config
        self.client = BrokerClient(leader.node_id, leader.host, leader.port,
                                   client_id=f"broker-{manager.node_id}-fetcher-{leader.node_id}",
                                   request_timeout_ms=int(config["replica.socket.timeout.ms"]))
        self.partitions: dict[tuple[str, int], _Fetching] = {}
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
        self.partitions[part.tp] = _Fetching(part)
        self._wake.set()

    def remove(self, tp: tuple[str, int]) -> None:
        self.partitions.pop(tp, None)

    def has(self, tp: tuple[str, int]) -> bool:
        return tp in self.partitions

    async def _run(self) -> None:
        while not self._stopped:
            if not self.partitions:
                self._wake.clear()
                await self._wake.wait()
                continue
            try:
                truncating = [f for f in self.partitions.values() if f.truncating]
                if truncating:
                    await self._truncate(truncating)
                    continue
                await self._fetch_once()
            except BrokerUnreachable as e:
                log.warning("replica fetcher for broker %d: %s; retrying in %.1f s", self.leader.node_id, e,
                            self.backoff)
                await asyncio.sleep(self.backoff)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("replica fetcher for broker %d failed; retrying", self.leader.node_id)
                await asyncio.sleep(self.backoff)

    # -- truncation (KIP-101, KIP-279) ---------------------------------------------------------
    async def _truncate(self, items: list[_Fetching]) -> None:
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for item in items:
            plog = item.part.log
            plog.ensure_loaded()
            by_topic.setdefault(item.part.topic, []).append(
                {"partition": item.part.partition, "current_leader_epoch": item.part.leader_epoch,
                 "leader_epoch": plog.epochs.latest_epoch})
        resp = await self.client.request(ApiKey.OFFSET_FOR_LEADER_EPOCH, OFFSET_FOR_LEADER_EPOCH_VERSION, {
            "replica_id": self.manager.node_id,
            "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]})
        backoff = False
        for t in resp.topics:
            for r in t.partitions:
                f = self.partitions.get((t.topic, r.partition))
                if f is None or not f.truncating:
                    continue
                if r.error_code != ErrorCode.none:
                    # the leader does not know its leadership yet (or lost it): try again shortly
                    log.info("%s-%d: the leader's OffsetForLeaderEpoch answered %s", t.topic, r.partition,
                             ErrorCode(r.error_code).name)
                    backoff = True
                    continue
                # KIP-279: until both sides agree on the latest epoch, ask again with the new one
                f.truncating = not self._truncate_one(f.part, r.leader_epoch, r.end_offset)
        if backoff:
            await asyncio.sleep(self.backoff)

    def _truncate_one(self, part: Partition, leader_epoch: int, end_offset: int) -> bool:
        """Truncate as the leader's answer says; True when done (both logs agree below the log
        end), False when the follower must ask again with its new latest epoch."""
        plog = part.log
        leo = plog.log_end_offset
        done = True
        if leader_epoch == UNDEFINED_EPOCH or end_offset < 0:
            # the leader has no epoch at or below ours: only the high watermark is known safe
            target = min(plog.high_watermark, leo)
        elif leader_epoch == plog.epochs.latest_epoch:
            target = min(end_offset, leo)
        else:
            # the leader's largest epoch at or below ours differs: keep what we have of that epoch,
            # no further than where it ends on the leader
            _, own_end = plog.epochs.end_offset_for(leader_epoch, leo)
            target = min(end_offset, own_end if own_end >= 0 else leo, leo)
            done = target >= leo  # nothing removed: no further step can remove more
        if target < leo:
            log.info("%s-%d: truncating a divergent tail %d..%d (leader %d says epoch %d ends at %d)",
                     part.topic, part.partition, target, leo, self.leader.node_id, leader_epoch, end_offset)
            plog.truncate_to(target)
        return done

    # -- fetching ------------------------------------------------------------------------------
    async def _fetch_once(self) -> None:
        items = list(self.partitions.values())
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for item in items:
            plog = item.part.log
            by_topic.setdefault(item.part.topic, []).append({
                "partition": item.part.partition, "current_leader_epoch": item.part.leader_epoch,
                "fetch_offset": plog.log_end_offset, "last_fetched_epoch": -1,
                "log_start_offset": plog.log_start_offset,
                "partition_max_bytes": int(self.config["replica.fetch.max.bytes"])})
        resp = await self.client.request(ApiKey.FETCH, FETCH_VERSION, {
            "replica_id": self.manager.node_id,
            "max_wait": datetime.timedelta(milliseconds=int(self.config["replica.fetch.wait.max.ms"])),
            "min_bytes": int(self.config["replica.fetch.min.bytes"]),
            "max_bytes": int(self.config["replica.fetch.response.max.bytes"]),
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
            "forgotten_topics_data": [], "rack_id": ""})
        if resp.error_code != ErrorCode.none:
            raise BrokerUnreachable(f"fetch from broker {self.leader.node_id}: {ErrorCode(resp.error_code).name}")
        backoff = False
        for t in resp.responses:
            for r in t.partitions:
                f = self.partitions.get((t.topic, r.partition_index))
                if f is None:
                    continue  # removed while the fetch was out
                try:
                    backoff |= await self._handle(f, r)
                except KafkaError as e:
                    log.warning("%s-%d: cannot append the leader's batches: %s", t.topic, r.partition_index,
                                e.message)
                    backoff = True
        if backoff:
            await asyncio.sleep(self.backoff)

    async def _handle(self, f: _Fetching, r: Any) -> bool:
        """Apply one partition's answer; True to back off before the next fetch."""
        part = f.part
        err = r.error_code
        if err == ErrorCode.none:
            plog = part.log
            records = r.records
            if records:
                plog.append_as_follower(bytes(records))
                self.manager.logs.notifier.notify(part.tp)  # what follows the replica (followed groups)
            if r.log_start_offset > plog.log_start_offset:
                with contextlib.suppress(KafkaError):
                    plog.advance_log_start_offset(min(r.log_start_offset, plog.log_end_offset))
            self.manager.follower_high_watermark(part, r.high_watermark)
            return False
        if err == ErrorCode.offset_out_of_range:
            await self._out_of_range(part)
            return False
        if err in (ErrorCode.fenced_leader_epoch, ErrorCode.unknown_leader_epoch, ErrorCode.not_leader_or_follower,
                   ErrorCode.unknown_topic_or_partition):
            return True  # the leader has a different picture; ZooKeeper will tell us who leads
        log.warning("%s-%d: fetch from leader %d answered %s", part.topic, part.partition, self.leader.node_id,
                    ErrorCode(err).name)
        return True

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
                "replica_id": self.manager.node_id, "isolation_level": 0,
                "topics": [{"name": part.topic, "partitions": [
                    {"partition_index": part.partition, "current_leader_epoch": part.leader_epoch,
                     "timestamp": ts}]}]})
            p = resp.topics[0].partitions[0]
            if p.error_code != ErrorCode.none:
                raise BrokerUnreachable(f"ListOffsets for {part.topic}-{part.partition}: "
                                        f"{ErrorCode(p.error_code).name}")
            out.append(p.offset)
        return out[0], out[1]
