"""Every group on every broker of a cluster: the ``__consumer_offsets`` partitions this broker does
not coordinate, followed read-only (as Burrow follows them from outside).

A fetch is served by its partition's leader (or a follower, KIP-392), which is usually not the
group's coordinator. To attribute it to its group, the serving broker needs what the coordinator
knows: every member's client id, host and assignment. That is in the coordinator's own records:
each GroupMetadata record in ``__consumer_offsets`` carries the whole membership of a generation,
and the OffsetCommit records the committed offsets. So every broker replays the partitions it
does not coordinate into read-only shards (the same ``GroupCoordinatorShard`` and the same
replay as loading, so the two cannot disagree) and keeps them current:

- from its own replica of the partition when it has one (a follower), as soon as the replica
  fetcher appends to it, up to its log end: a member's assignment is answered (SyncGroup) only
  once every ISR replica has the record, so a follower in the ISR knows a generation before any
  member can fetch with it. A tail a new leader truncates is replayed again (see below);
- otherwise by fetching from the partition's leader (a consumer's Fetch, served up to the high
  watermark), every ``interval_s``: such a broker learns a new generation up to ``interval_s``
  late, and the fetches it serves to the new generation's members meanwhile are attributed when
  they are answered rather than when they arrived.

Nothing here is fed by client connections, so no disconnect anywhere can remove a label: a
group's membership changes only when its coordinator writes a new generation. A followed
partition whose log moved under it (truncated below what was replayed, or its start moved past
it) is replayed again from its start.

What this cannot know: a member's assignment is what the group's leader assigned in the last
generation the coordinator wrote (during a rebalance the previous one, as on the coordinator
itself); membership reaches other brokers within ``interval_s`` plus replication.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
from collections.abc import Callable, Iterator
from typing import Any

from gregor.cluster.broker_client import BrokerClients, BrokerUnreachable
from gregor.cluster.metadata import ClusterMetadata
from gregor.coordinator.group.api import MemberView
from gregor.coordinator.group.shard import RECORD_SERDE, GroupCoordinatorShard
from gregor.coordinator.runtime.timer import Operation
from gregor.log.log_manager import LogManager
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.consumer_offsets import OFFSETS_TOPIC, GroupMetadataKey
from gregor.protocol.errors import ErrorCode
from gregor.protocol.records import iter_batches, iter_key_values

log = logging.getLogger("gregor.coordinator")

READ_BYTES = 1 << 20
FETCH_VERSION = 12


class NoTimer:
    """A followed shard never acts: its timers (session expiry, offset expiry) are the
    coordinator's business."""

    def schedule(self, key: str, delay_ms: int, operation: Operation) -> None:
        pass

    def cancel(self, key: str) -> None:
        pass

    def is_scheduled(self, key: str) -> bool:
        return False


WAKE = (OFFSETS_TOPIC, -1)  # notified to wake the follower at once (no partition has this number)


class FollowedPartition:
    """One partition's read-only shard and the next offset to replay into it."""

    def __init__(self, partition: int, shard: GroupCoordinatorShard, start: int = 0) -> None:
        self.partition = partition
        self.shard = shard
        self.position = start

    def replay(self, data: bytes | memoryview, upto: int) -> bool:
        """Replay the whole batches of ``data`` from ``position`` that end at or below ``upto``;
        returns whether a group's membership record was among them."""
        decode_key, decode_value, error = RECORD_SERDE.decode_key, RECORD_SERDE.decode_value, RECORD_SERDE.error
        members_changed = False
        for h in iter_batches(data):
            if h.next_offset <= self.position:
                continue
            if h.next_offset > upto:
                break
            if not h.is_control:
                for key_bytes, value_bytes in iter_key_values(data, h):
                    if key_bytes is None:
                        continue
                    try:
                        key = decode_key(key_bytes)
                        value = decode_value(key, value_bytes)
                    except error:
                        continue  # the coordinator's loader skips it too (with a warning)
                    self.shard.replay(key, value)
                    members_changed |= isinstance(key, GroupMetadataKey)
            self.position = h.next_offset
        return members_changed


class FollowedGroups:
    """``coordinated_here()`` names the partitions whose shards this broker runs (not followed);
    ``led_here(partition)`` whether this broker leads it (a partition led here is not started to
    be followed: its shard is loading or about to; one followed already stays followed until its
    shard is loaded, so that attribution has no gap); ``make_shard(partition)`` builds a read-only
    shard; ``on_members_changed()`` is called when a followed group's membership changed (metrics
    attribution rebuilds its index). On one node every partition is led here and nothing is
    followed."""

    def __init__(self, cluster: ClusterMetadata, logs: LogManager, partitions: Callable[[], int],
                 coordinated_here: Callable[[], set[int]], make_shard: Callable[[int], GroupCoordinatorShard],
                 on_members_changed: Callable[[], None], interval_s: float = 0.5,
                 led_here: Callable[[int], bool] = lambda partition: False) -> None:
        self.cluster = cluster
        self.led_here = led_here
        self.logs = logs
        self.partitions = partitions
        self.coordinated_here = coordinated_here
        self.make_shard = make_shard
        self.on_members_changed = on_members_changed
        self.interval_s = interval_s
        self.followed: dict[int, FollowedPartition] = {}
        # partition -> (the members its coordinator here had when it unloaded, the log end then):
        # they stand for the partition until it is followed up to that offset, so that fetches are
        # attributed without a gap while this broker hands the partition over
        self.bridges: dict[int, tuple[list[MemberView], int]] = {}
        self._clients = BrokerClients(f"gregor-{cluster.node_id}-groups-follower", request_timeout_ms=10_000)
        self._task: asyncio.Task[None] | None = None

    # -- views ---------------------------------------------------------------------------------
    def bridge(self, partition: int, members: list[MemberView], upto: int) -> None:
        """This broker stops coordinating ``partition``: ``members`` (its coordinator's last view)
        stand for it until it is followed up to ``upto``, and it is followed from now on."""
        self.bridges[partition] = (members, upto)
        self.logs.notifier.notify(WAKE)

    def bridged_members(self) -> Iterator[MemberView]:
        for members, _upto in list(self.bridges.values()):
            yield from members

    def shards(self) -> Iterator[GroupCoordinatorShard]:
        for fp in list(self.followed.values()):
            yield fp.shard

    def shard(self, partition: int) -> GroupCoordinatorShard | None:
        fp = self.followed.get(partition)
        return fp.shard if fp is not None else None

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._clients.close()

    async def _run(self) -> None:
        while True:
            try:
                await self.step()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - following must survive anything and try again
                log.exception("following %s failed; trying again", OFFSETS_TOPIC)
            # woken as soon as a followed replica here grows (the replica fetcher notifies), or a
            # partition is handed over to be followed (bridge)
            await self.logs.notifier.wait([(OFFSETS_TOPIC, p) for p in self.followed] + [WAKE], self.interval_s)

    def stop_following(self, partition: int) -> None:
        """This broker now coordinates ``partition`` (its loaded shard answers from now on)."""
        if self.followed.pop(partition, None) is not None:
            self.on_members_changed()

    # -- one round -----------------------------------------------------------------------------
    async def step(self) -> None:
        """Bring every followed partition up to its high watermark once."""
        n = self.partitions()
        here = self.coordinated_here()
        wanted = {p for p in range(n) if p not in here and (p in self.followed or not self.led_here(p))}
        for p in list(self.followed):
            if p not in wanted:
                self.stop_following(p)
        for p in list(self.bridges):
            if p in here:
                del self.bridges[p]  # coordinated here again
        remote: dict[int, list[FollowedPartition]] = {}
        changed = False
        for p in sorted(wanted):
            fp = self.followed.get(p)
            if fp is None:
                fp = self.followed[p] = FollowedPartition(p, self.make_shard(p))
                log.info("following %s-%d (coordinated by broker %d) for fetch attribution", OFFSETS_TOPIC, p,
                         self.cluster.partition(OFFSETS_TOPIC, p).leader)
            plog = self.logs.get(OFFSETS_TOPIC, p)
            if plog is not None:
                changed |= await self._read_local(fp, plog)
                bridged = self.bridges.get(p)
                if bridged is not None and self.followed[p].position >= min(bridged[1], plog.log_end_offset):
                    del self.bridges[p]  # followed far enough: its own view takes over
                    changed = True
            else:
                leader = self.cluster.partition(OFFSETS_TOPIC, p).leader
                if leader >= 0 and leader != self.cluster.node_id:
                    remote.setdefault(leader, []).append(fp)
        for leader, fps in remote.items():
            for _ in range(100):  # a large partition comes in several reads, at once
                more, behind = await self._fetch(leader, fps)
                changed |= more
                if not behind:
                    break
        if changed:
            self.on_members_changed()

    def _restart(self, fp: FollowedPartition, start: int, why: str) -> FollowedPartition:
        log.info("following %s-%d again from offset %d: %s", OFFSETS_TOPIC, fp.partition, start, why)
        fresh = self.followed[fp.partition] = FollowedPartition(fp.partition, self.make_shard(fp.partition), start)
        return fresh

    async def _read_local(self, fp: FollowedPartition, plog: Any) -> bool:
        end = plog.log_end_offset
        if end < fp.position:
            fp = self._restart(fp, plog.log_start_offset, f"the log was truncated to {end}")
        elif plog.log_start_offset > fp.position:
            fp = self._restart(fp, plog.log_start_offset, f"the log now starts at {plog.log_start_offset}")
        changed = False
        while fp.position < end:
            data = plog.read(fp.position, READ_BYTES, max_offset=end).records
            if not data:
                break
            before = fp.position
            changed |= fp.replay(bytes(data), end)
            if fp.position == before:
                break
            await asyncio.sleep(0)
        return changed

    async def _fetch(self, leader: int, fps: list[FollowedPartition]) -> tuple[bool, bool]:
        """One Fetch from ``leader``: (a membership changed, some partition is still behind)."""
        endpoint = self.cluster.broker(leader)
        if endpoint is None:
            return False, False
        client = await self._clients.for_broker(leader, endpoint.host, endpoint.port)
        try:
            resp = await client.request(ApiKey.FETCH, FETCH_VERSION, {
                "replica_id": -1, "max_wait": datetime.timedelta(0), "min_bytes": 0, "max_bytes": 8 * READ_BYTES,
                "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                "topics": [{"topic": OFFSETS_TOPIC, "partitions": [
                    {"partition": fp.partition, "current_leader_epoch": -1, "fetch_offset": fp.position,
                     "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": READ_BYTES}
                    for fp in fps]}],
                "forgotten_topics_data": [], "rack_id": ""})
        except BrokerUnreachable as e:
            log.debug("following %s from broker %d: %s", OFFSETS_TOPIC, leader, e)
            return False, False
        by_partition = {fp.partition: fp for fp in fps}
        changed = behind = False
        for t in resp.responses:
            for r in t.partitions:
                fp = by_partition.get(r.partition_index)
                if fp is None or self.followed.get(fp.partition) is not fp:
                    continue
                if r.error_code == ErrorCode.offset_out_of_range:
                    self._restart(fp, max(r.log_start_offset, 0), "the leader's log no longer holds its position")
                elif r.error_code == ErrorCode.none and r.records:
                    before = fp.position
                    changed |= fp.replay(bytes(r.records), r.high_watermark)
                    behind |= before < fp.position < r.high_watermark
        return changed, behind
