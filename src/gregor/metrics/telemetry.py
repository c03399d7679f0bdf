"""Consumption telemetry written to the internal topic ``__gregor_telemetry`` every
``telemetry.interval.ms``, so that history survives restarts and can be analysed at scale (the
Spark lag pipeline reads it).

One record per group/topic/partition per interval; key ``group/topic/partition`` and a JSON value
(the record timestamp is ``ts``):

    {"ts": 1764000000000, "broker": 0, "broker_start": 1763990000000, "group": "billing",
     "topic": "orders", "partition": 3, "kind": "consumer", "messages": 120345, "bytes": 9876543,
     "committed": 120300, "log_end": 120400, "lag": 100, "time_lag_s": 1.7, "state": "Stable", "members": 3,
     "commit_ts": 1763999990000}

``kind`` is ``consumer`` (classic and consumer-protocol groups) or ``share`` (share groups,
KIP-932: one row per share-partition, from its leader). A share row's ``committed`` is the
share-partition start offset (every record before it is acknowledged or archived), ``lag`` the
records from there to the high watermark whose delivery is not complete (KIP-1226), ``commit_ts``
when the start offset was seen to move, ``messages`` the deliveries (acquisitions; ``bytes`` is
null), ``members`` the most of the coordinator's count and the members fetching here, and it
adds ``redelivered`` (a counter of deliveries after the first), ``stuck`` (in-flight records
delivered more than once and not done), ``in_flight`` (acquired now), ``archived`` (a counter of
records rejected or delivered too often) and ``dead_lettered`` (a counter of those copied to the
group's dead-letter topic).

``commit_ts`` is when the committed offset was last committed (null without a commit).
``messages`` and ``bytes`` are counters since ``broker_start`` (a new start resets them: readers
take deltas within one start). Groups with committed offsets but no recent fetches are included,
so a stalled group shows up with an unchanged ``messages`` count and a growing ``lag``.

The broker creates the topic with ``telemetry.topic.num.partitions`` partitions and writes every
record of a group to partition ``murmur2(group) % partitions`` (Kafka's default partitioner on the
group name), so a reader of one partition sees whole groups, in time order: the lag report
evaluates each partition on its own, without a shuffle.

Every broker writes what it served and the lag of what it leads (``LeaderSink``): a batch whose
partition is led here is appended through the replication seam, one led elsewhere is produced to
its leader (on one node every partition is led here).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from gregor.coordinator.share.share_partition import RecordState
from gregor.protocol.errors import ErrorCode, KafkaError
from gregor.protocol.records import build_batch
from gregor.protocol.telemetry_records import TELEMETRY_TOPIC, home_partition, record_key
from gregor.replication.leader_producer import LeaderProducer

if TYPE_CHECKING:
    from gregor.cluster.metadata import ClusterMetadata
    from gregor.cluster.topic_admin import TopicAdmin
    from gregor.log.log_manager import LogManager
    from gregor.metrics.registry import BrokerMetrics
    from gregor.replication.replica_manager import ReplicaManager

log = logging.getLogger(__name__)



Sink = Callable[[int, bytes], Awaitable[None]]


class TelemetryWriter:
    """Writes what ``metrics`` counted and its groups view holds; ``partitions`` is
    ``telemetry.topic.num.partitions``. ``sink(partition, batch)`` stores a batch (``LeaderSink``)."""

    def __init__(self, node_id: int, topics: TopicAdmin, logs: LogManager, metrics: BrokerMetrics,
                 partitions: int, sink: Sink, create_topic_at_start: bool = False) -> None:
        self.node_id = node_id
        self.sink = sink
        self.create_topic_at_start = create_topic_at_start
        self.topics = topics
        self.logs = logs
        self.metrics = metrics
        self.partitions = partitions
        self.started_ms = int(time.time() * 1000)
        self._homes: dict[tuple[str, int], int] = {}
        # share-partition -> (its start offset, when that was first seen: the "commit" time)
        self._share_starts: dict[tuple[str, str, int], tuple[int, int | None]] = {}

    def start(self) -> None:
        """Create the topic now (one node), rather than at the first write (a cluster: once the
        brokers have joined)."""
        if self.create_topic_at_start:
            self.ensure_topic()

    async def close(self) -> None:
        close = getattr(self.sink, "close", None)
        if close is not None:
            await close()

    def ensure_topic(self) -> None:
        """Create the topic if it is missing (in a cluster: asynchronously, through ZooKeeper;
        the brokers write once it has leaders)."""
        if self.topics.get(TELEMETRY_TOPIC) is None:
            try:
                self.topics.create_topic(TELEMETRY_TOPIC, self.partitions,
                                         {"cleanup.policy": "delete", "retention.ms": str(7 * 24 * 3_600_000)},
                                         internal=True)
            except KafkaError as e:  # in a cluster: being created (or by another broker)
                log.debug("%s: %s", TELEMETRY_TOPIC, e.message)

    def partition_of(self, group_id: str, partitions: int) -> int:
        home = self._homes.get((group_id, partitions))
        if home is None:
            home = self._homes[(group_id, partitions)] = home_partition(group_id, partitions)
        return home

    def rows(self) -> list[dict[str, Any]]:
        metrics = self.metrics
        now_s = time.time()
        now_ms = int(now_s * 1000)
        rows: dict[tuple[str, str, int], dict[str, Any]] = {}
        states: dict[str, tuple[str, int]] = {}
        for g in metrics.groups.group_summaries(include_followed=True):
            states[g.group_id] = (g.state, g.members)
        for c in metrics.groups.committed_offsets():
            hw = self.logs.high_watermark(c.topic, c.partition)
            if hw is None:
                continue
            rows[(c.group_id, c.topic, c.partition)] = {
                "committed": c.offset, "commit_ts": c.commit_timestamp, "log_end": hw,
                "lag": max(hw - c.offset, 0),
                "time_lag_s": round(metrics.history.time_lag((c.topic, c.partition), c.offset, hw, now_s), 3)}
        for (group_id, topic, partition), (messages, nbytes) in metrics.consumed.items():
            r = rows.setdefault((group_id, topic, partition), {"committed": None, "commit_ts": None, "log_end": None,
                                                               "lag": None, "time_lag_s": None})
            r["messages"], r["bytes"] = messages, nbytes
        out = []
        for (group_id, topic, partition), r in sorted(rows.items()):
            state, members = states.get(group_id, ("", 0))
            out.append({"ts": now_ms, "broker": self.node_id, "broker_start": self.started_ms, "group": group_id,
                        "topic": topic, "partition": partition, "kind": "consumer", "messages": r.get("messages", 0),
                        "bytes": r.get("bytes", 0), "committed": r["committed"], "log_end": r["log_end"],
                        "lag": r["lag"], "time_lag_s": r["time_lag_s"], "state": state,
                        "members": members, "commit_ts": r["commit_ts"]})
        return out + self.share_rows(states, now_s)

    def share_rows(self, states: dict[str, tuple[str, int]], now_s: float) -> list[dict[str, Any]]:
        """One row per share-partition led here (see the module's docstring)."""
        shares = self.metrics.shares
        if shares is None:
            return []
        now_ms = int(now_s * 1000)
        out = []
        for group_id, topic, partition, sp in shares.views():
            hw = self.logs.high_watermark(topic, partition)
            if hw is None:
                continue
            counts = sp.counts()
            start = sp.start_offset
            key = (group_id, topic, partition)
            seen = self._share_starts.get(key)
            if seen is None or seen[0] != start:  # when the start offset moved (first seen: not known)
                seen = self._share_starts[key] = (start, now_ms if seen is not None else None)
            state, members = states.get(group_id, ("", 0))
            stats = sp.stats
            out.append({"ts": now_ms, "broker": self.node_id, "broker_start": self.started_ms, "group": group_id,
                        "topic": topic, "partition": partition, "kind": "share", "messages": stats["acquired"],
                        "bytes": None, "committed": start, "log_end": hw,
                        "lag": sp.lag(hw),
                        "time_lag_s": round(self.metrics.history.time_lag((topic, partition), start, hw, now_s), 3),
                        "state": state or ("Stable" if shares.members(group_id) else ""),
                        "members": max(members, shares.members(group_id)), "commit_ts": seen[1],
                        "redelivered": stats["redelivered"], "stuck": sp.stuck(),
                        "in_flight": counts[RecordState.ACQUIRED],
                        "archived": stats["rejected"] + stats["archived_at_limit"],
                        "dead_lettered": stats["dead_lettered"]})
        return out

    async def write(self) -> int:
        """Write one interval's rows; returns how many were written."""
        topic = self.topics.get(TELEMETRY_TOPIC)
        rows = self.rows()
        if not rows:
            return 0
        if topic is None:
            self.ensure_topic()
            return 0
        by_partition: dict[int, list[dict[str, Any]]] = {}
        for r in rows:
            by_partition.setdefault(self.partition_of(r["group"], topic.partitions), []).append(r)
        written = 0
        for partition, part_rows in sorted(by_partition.items()):
            for i in range(0, len(part_rows), 1000):
                chunk = part_rows[i : i + 1000]
                pairs = [(record_key(r['group'], r['topic'], r['partition']),
                          json.dumps(r, separators=(",", ":")).encode()) for r in chunk]  # compact: 10% fewer bytes
                await self.sink(partition, build_batch(pairs, timestamp=chunk[0]["ts"]))
                written += len(chunk)
        return written


class LeaderSink:
    """A telemetry batch goes to its partition's leader: appended here through the replication
    seam when this broker leads it (replicated like any record), else produced to the leader
    (acks=1). An interval whose partition has no leader, or whose leader does not answer, is
    dropped and logged: telemetry must never hold the broker up."""

    def __init__(self, cluster: ClusterMetadata, replicas: ReplicaManager, timeout_ms: int = 5000) -> None:
        self.replicas = replicas
        self._producer = LeaderProducer(cluster, replicas, f"gregor-{cluster.node_id}-telemetry", timeout_ms)

    async def __call__(self, partition: int, batch: bytes) -> None:
        if self.replicas.leads(TELEMETRY_TOPIC, partition):
            try:
                self.replicas.append_internal(TELEMETRY_TOPIC, partition, batch)
            except KafkaError as e:  # leadership moved this instant, or the disk failed
                log.warning("telemetry for %s-%d dropped this interval: %s", TELEMETRY_TOPIC, partition, e.message)
            return
        code, message = await self._producer.produce(TELEMETRY_TOPIC, partition, batch, acks=1)
        if code != ErrorCode.none:
            log.warning("telemetry for %s-%d dropped this interval: %s", TELEMETRY_TOPIC, partition, message)

    async def close(self) -> None:
        await self._producer.close()
