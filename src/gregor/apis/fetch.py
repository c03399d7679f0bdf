"""Fetch (1): serve byte ranges of partition logs, long-polling up to ``max_wait`` until
``min_bytes`` are available.

Limits as in Kafka: ``partition_max_bytes`` per partition and ``max_bytes`` for the response,
the latter capped by the broker's ``fetch.max.bytes`` whatever the client asks, except that the
first partition with data always gets at least one whole batch (KIP-74) so a consumer can never be
stuck behind a batch larger than its limits.

A partition's records of ``REGION_BYTES`` or more are not read here: they travel as a FileRegion
that the connection reads in chunks as the socket drains, so a large response does not sit in
memory (see docs/architecture.md).

Every partition goes through the replication seam (``ctx.replicas``) once per request: a
follower's fetch (``replica_id`` >= 0) goes to the leader, tells it the follower's log end (the
fetch offset) and log start, and reads up to the log end; a consumer reads up to the high
watermark, from the leader or (Fetch v11+, KIP-392) from any replica hosted here.
``current_leader_epoch`` (KIP-320) older than the replica's is FENCED_LEADER_EPOCH, newer is
UNKNOWN_LEADER_EPOCH, and is checked again when a long poll ends. With ``replica.selector.class``
set, the leader answers a consumer in another rack with ``preferred_read_replica`` (KIP-392,
replication/replica_selector.py) and no records; the consumer then reads from that replica.

Transactions: a consumer's fetch with ``isolation_level`` 1 (read_committed) is answered up to the
last stable offset instead of the high watermark, with the aborted transactions overlapping the
records returned (``aborted_transactions``, from the segments' transaction indexes: one index
lookup, no record read); read_uncommitted answers null there. Every response carries the
partition's last stable offset.

Fetch sessions (KIP-227) are declined the way a Kafka broker with a full session cache declines
them: every response carries session id 0, so clients keep sending full fetch requests.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from gregor.apis.authorization import TOPIC, Op, allowed_names, cluster_allowed, enabled
from gregor.apis.handler import RequestContext, handles
from gregor.log.file_region import FileRegion
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.fetch_response import PartitionData, TopicData, encode_fetch_response
from gregor.replication.replica_selector import ReplicaView, preferred_read_replica

INVALID_SESSION_ID = 0
READ_COMMITTED = 1
FINAL_EPOCH = -1
REGION_BYTES = 1 << 20


@handles(ApiKey.FETCH, 4, 16)
async def fetch(ctx: RequestContext, req: Any) -> dict[str, Any] | list[bytes | FileRegion]:
    session_id = getattr(req, "session_id", 0)
    session_epoch = getattr(req, "session_epoch", FINAL_EPOCH)
    if session_id != INVALID_SESSION_ID:
        return _top_error(ErrorCode.fetch_session_id_not_found)
    if session_epoch not in (0, FINAL_EPOCH):
        return _top_error(ErrorCode.invalid_fetch_session_epoch)

    wanted = _resolve(ctx, req, by_id=ctx.version >= 13)
    # KIP-392: partitions whose consumer should read from another replica, and which one
    redirect: dict[tuple[str, int], int] = {}
    replica_id = _replica_id(ctx, req)
    if enabled(ctx):
        wanted = _authorize(ctx, wanted, replica_id)
    wanted = _check_replicas(ctx, req, wanted, redirect, replica_id)
    max_wait = req.max_wait.total_seconds()
    # Kafka: the response limit is the smaller of the request's and fetch.max.bytes, and min_bytes
    # never exceeds it
    max_bytes = min(max(req.max_bytes, 0), ctx.config["fetch.max.bytes"])
    min_bytes = min(max(req.min_bytes, 1), max(max_bytes, 1))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max_wait
    # replication is not consumption: a follower's fetch is not attributed to any group
    metrics = ctx.metrics if replica_id < 0 else None
    client_id = ctx.header.client_id or ""
    # (topic, partition, fetch offset) of the known topics, for attribution (metrics on only);
    # internal topics (__consumer_offsets read by other brokers' group followers) are not counted
    positions = ([(t, p, offset) for t, p, offset, *_ in wanted if t is not None and not t.startswith("__")]
                 if metrics is not None else [])
    tally = metrics.attribute_fetch(client_id, ctx.client_host, positions, ctx.connection_state) if metrics else None
    recheck = replica_id < 0
    committed = replica_id < 0 and getattr(req, "isolation_level", 0) == READ_COMMITTED
    waited = False
    while True:
        if waited and recheck:
            # the leader epoch may have moved during the long poll: a consumer that asked at an
            # older epoch gets FENCED_LEADER_EPOCH, not records written at the new one (Kafka's
            # delayed fetch checks again when it completes)
            wanted = _recheck_epochs(ctx, req, wanted)
        waited = True
        topics, total, any_error, served = _read_all(ctx, max_bytes, wanted, redirect, committed)
        remaining = deadline - loop.time()
        if total >= min_bytes or any_error or redirect or remaining <= 0:
            break
        _close_regions(topics)
        await ctx.logs.notifier.wait([(t, p) for t, p, *_ in wanted if t is not None], remaining)
    if metrics is not None:
        metrics.account_fetch(tally, positions, served)
    return encode_fetch_response(ctx.version, ErrorCode.none, INVALID_SESSION_ID, topics)


def _authorize(ctx: RequestContext, wanted: list[Wanted], replica_id: int) -> list[Wanted]:
    """Kafka's: a follower needs CLUSTER_ACTION on the cluster, a consumer READ on each topic;
    what is refused is answered TOPIC_AUTHORIZATION_FAILED."""
    if replica_id >= 0:
        ok = cluster_allowed(ctx, Op.CLUSTER_ACTION)
        readable = {w[0] for w in wanted if w[0] is not None} if ok else set()
    else:
        readable = allowed_names(ctx, Op.READ, TOPIC, {w[0] for w in wanted if w[0] is not None})
    return [w if w[0] is None or w[0] in readable or w[5] else
            (w[0], w[1], w[2], w[3], w[4], ErrorCode.topic_authorization_failed, w[6]) for w in wanted]


def _replica_id(ctx: RequestContext, req: Any) -> int:
    """The fetching replica's broker id; -1 for a consumer."""
    state = getattr(req, "replica_state", None)
    if state is not None and ctx.version >= 15:
        return int(state.replica_id)
    return int(getattr(req, "replica_id", -1))


def _close_regions(topics: list[TopicData[FileRegion]]) -> None:
    for t in topics:
        for p in t.partitions:
            if isinstance(p.records, FileRegion):
                p.records.close()


def _top_error(code: ErrorCode) -> dict[str, Any]:
    return {"throttle_time": 0, "error_code": code, "session_id": INVALID_SESSION_ID, "responses": []}


# (topic name or None if unknown, partition, fetch offset, partition max bytes, topic key, error,
# read up to the high watermark (consumers in a cluster) rather than the log end)
Wanted = tuple[str | None, int, int, int, Any, ErrorCode, bool]


def _check_replicas(ctx: RequestContext, req: Any, wanted: list[Wanted],
                    redirect: dict[tuple[str, int], int], replica_id: int) -> list[Wanted]:
    """Leadership and leader epochs of every partition, once per request (not per long-poll
    round); a follower's fetch offset is its log end, which moves the leader's high watermark.
    A consumer's partitions that ``replica.selector.class`` sends to another replica go into
    ``redirect``."""
    replicas = ctx.replicas
    asked = _request_partitions(ctx, req)
    selector = ctx.config["replica.selector.class"]
    client_rack = (getattr(req, "rack_id", "") or "") if selector is not None and ctx.version >= 11 else ""
    out: list[Wanted] = []
    for name, partition, offset, pmax, key, err, _ in wanted:
        if name is not None and not err:
            epoch, log_start = asked.get((key, partition), (-1, -1))
            try:
                if replica_id >= 0:
                    part = replicas.leader_partition(name, partition, epoch)
                    if offset > part.log.log_end_offset:
                        # as Kafka: a follower cannot be ahead of its leader; counting it would
                        # move the high watermark over records no follower has
                        raise KafkaError(ErrorCode.offset_out_of_range,
                                         f"broker {replica_id} fetches {name}-{partition} at {offset}, past the"
                                         f" leader's log end {part.log.log_end_offset}")
                    replicas.follower_fetched(part, replica_id, offset, log_start)
                elif ctx.version >= 11:
                    part = replicas.local_partition(name, partition, epoch)
                    if client_rack and part.is_leader:
                        other = _preferred_replica(ctx, part, selector, client_rack, offset)
                        if other is not None:
                            redirect[(name, partition)] = other
                else:
                    replicas.leader_partition(name, partition, epoch)
            except KafkaError as e:
                err = e.code
        out.append((name, partition, offset, pmax, key, err, replica_id < 0))
    return out


def _request_partitions(ctx: RequestContext, req: Any) -> dict[tuple[Any, int], tuple[int, int]]:
    """(topic key, partition) -> (current leader epoch, the fetching replica's log start)."""
    by_id = ctx.version >= 13
    return {(ft.topic_id if by_id else ft.topic, fp.partition):
            (getattr(fp, "current_leader_epoch", -1), getattr(fp, "log_start_offset", -1))
            for ft in req.topics for fp in ft.partitions}


def _recheck_epochs(ctx: RequestContext, req: Any, wanted: list[Wanted]) -> list[Wanted]:
    """A consumer's partitions checked again after a long-poll wait: still served here, at the
    epoch the consumer asked with."""
    replicas = ctx.replicas
    asked = _request_partitions(ctx, req)
    out: list[Wanted] = []
    for name, partition, offset, pmax, key, err, consumer in wanted:
        if name is not None and not err:
            epoch = asked.get((key, partition), (-1, -1))[0]
            try:
                if ctx.version >= 11:
                    replicas.local_partition(name, partition, epoch)
                else:
                    replicas.leader_partition(name, partition, epoch)
            except KafkaError as e:
                err = e.code
        out.append((name, partition, offset, pmax, key, err, consumer))
    return out


def _preferred_replica(ctx: RequestContext, part: Any, selector: str, client_rack: str, offset: int) -> int | None:
    """KIP-392: the live replica the selector prefers for this consumer, if not this leader."""
    now = int(time.monotonic() * 1000)  # the clock of the replica manager's follower states
    log = part.log
    leader_view = ReplicaView(ctx.cluster.node_id, ctx.cluster.rack, log.log_end_offset, log.log_start_offset, 0)
    followers = []
    for broker_id, fs in part.followers.items():
        endpoint = ctx.cluster.broker(broker_id)
        if endpoint is None or fs.log_end_offset < 0:
            continue  # not alive, or has not fetched since this broker became leader
        followers.append(ReplicaView(broker_id, endpoint.rack, fs.log_end_offset, max(fs.log_start_offset, 0),
                                     now - fs.last_caught_up_ms))
    return preferred_read_replica(selector, client_rack, offset, leader_view, followers)


def _resolve(ctx: RequestContext, req: Any, by_id: bool) -> list[Wanted]:
    out: list[Wanted] = []
    topics = ctx.topics
    for ft in req.topics:
        if by_id:
            key = ft.topic_id
            topic = topics.get_by_id(key) if isinstance(key, uuid.UUID) else None
            missing = ErrorCode.unknown_topic_id
        else:
            key = ft.topic
            topic = topics.get(key)
            missing = ErrorCode.unknown_topic_or_partition
        for fp in ft.partitions:
            if topic is None:
                out.append((None, fp.partition, fp.fetch_offset, fp.partition_max_bytes, key, missing, False))
            else:
                out.append((topic.name, fp.partition, fp.fetch_offset, fp.partition_max_bytes, key,
                            ErrorCode.none, False))
    return out


Served = list[tuple[str, int, int, int]]  # topic, partition, messages, bytes


def _read_all(ctx: RequestContext, max_bytes: int, wanted: list[Wanted], redirect: dict[tuple[str, int], int],
              committed: bool = False) -> tuple[list[TopicData[FileRegion]], int, bool, Served]:
    logs = ctx.logs
    served: Served = []
    budget = max_bytes
    total = 0
    any_error = False
    first_with_data = True
    grouped: dict[Any, TopicData[FileRegion]] = {}
    for name, partition, offset, pmax, key, err, upto_hwm in wanted:
        entry: PartitionData[FileRegion] = PartitionData(partition, err)
        plog = logs.get(name, partition) if name is not None and not err else None
        if name is not None and plog is None and not err:
            entry.error_code = ErrorCode.unknown_topic_or_partition
        if plog is not None and redirect and (name, partition) in redirect:
            # KIP-392: no records, only where to read them (with the offsets a consumer checks)
            entry.preferred_read_replica = redirect[(plog.topic, partition)]
            entry.high_watermark = plog.high_watermark
            entry.last_stable_offset = plog.last_stable_offset
            entry.log_start_offset = plog.log_start_offset
        elif plog is not None:
            try:
                lso = plog.last_stable_offset
                bound = (lso if committed else plog.high_watermark) if upto_hwm else None
                res = plog.read(offset, min(pmax, budget), min_one_batch=first_with_data, region_above=REGION_BYTES,
                                max_offset=bound)
                entry.records = res.region if res.region is not None else res.records
                entry.high_watermark = res.high_watermark
                entry.last_stable_offset = lso
                entry.log_start_offset = res.log_start_offset
                size = len(entry.records)
                if committed:
                    entry.aborted_transactions = (plog.aborted_transactions(offset, res.next_offset)
                                                  if size else [])
                if size:
                    first_with_data = False
                    total += size
                    budget = max(budget - size, 0)
                    # messages from the fetch offset on (the first batch may start before it)
                    served.append((plog.topic, partition, max(res.next_offset - offset, 0), size))
            except KafkaError as e:
                entry.error_code = e.code
                entry.high_watermark = entry.last_stable_offset = plog.high_watermark
                entry.log_start_offset = plog.log_start_offset
        if entry.error_code:
            any_error = True
        topic = grouped.get(key)
        if topic is None:
            topic = grouped[key] = TopicData(key)
        topic.partitions.append(entry)
    return list(grouped.values()), total, any_error, served
