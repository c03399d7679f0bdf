"""Consumption telemetry written to the internal topic ``__gregor_telemetry`` every
``telemetry.interval.ms``, so that history survives restarts and can be analysed at scale (the
Spark lag pipeline reads it).

One record per group/topic/partition per interval; key ``group/topic/partition`` and a JSON value
(the record timestamp is ``ts``):

    {"ts": 1764000000000, "broker": 0, "broker_start": 1763990000000, "group": "billing",
     "topic": "orders", "partition": 3, "messages": 120345, "bytes": 9876543,
     "committed": 120300, "log_end": 120400, "lag": 100, "time_lag_s": 1.7, "state": "Stable", "members": 3,
     "commit_ts": 1763999990000}

``commit_ts`` is when the committed offset was last committed (null without a commit).
``messages`` and ``bytes`` are counters since ``broker_start`` (a new start resets them: readers
take deltas within one start). Groups with committed offsets but no recent fetches are included,
so a stalled group shows up with an unchanged ``messages`` count and a growing ``lag``.

The broker creates the topic with ``telemetry.topic.num.partitions`` partitions and writes every
record of a group to partition ``murmur2(group) % partitions`` (Kafka's default partitioner on the
group name), so a reader of one partition sees whole groups, in time order: the lag report
evaluates each partition on its own, without a shuffle.
"""

from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING, Any

from gregor.protocol.partitioner import partition_for_key
from gregor.protocol.records import build_batch

if TYPE_CHECKING:
    from gregor.broker import Broker

log = logging.getLogger(__name__)

TELEMETRY_TOPIC = "__gregor_telemetry"


class TelemetryWriter:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.started_ms = int(time.time() * 1000)
        self._homes: dict[tuple[str, int], int] = {}

    def ensure_topic(self) -> None:
        if self.broker.topics.get(TELEMETRY_TOPIC) is None:
            self.broker.create_topic(TELEMETRY_TOPIC, self.broker.config["telemetry.topic.num.partitions"],
                                     {"cleanup.policy": "delete", "retention.ms": str(7 * 24 * 3_600_000)},
                                     internal=True)

    def partition_of(self, group_id: str, partitions: int) -> int:
        home = self._homes.get((group_id, partitions))
        if home is None:
            home = self._homes[(group_id, partitions)] = partition_for_key(group_id.encode(), partitions)
        return home

    def rows(self) -> list[dict[str, Any]]:
        b = self.broker
        now_s = time.time()
        now_ms = int(now_s * 1000)
        rows: dict[tuple[str, str, int], dict[str, Any]] = {}
        states: dict[str, tuple[str, int]] = {}
        for shard in b.coordinator.active_shards():
            for group_id, group in shard.groups.items():
                states[group_id] = (group.state.value, len(group.members))
            for group_id, offsets in shard.offsets_mgr.offsets.items():
                for (topic, partition), v in offsets.items():
                    plog = b.logs.get(topic, partition)
                    if plog is None:
                        continue
                    hw = plog.high_watermark
                    rows[(group_id, topic, partition)] = {
                        "committed": v.offset, "commit_ts": v.commit_timestamp, "log_end": hw,
                        "lag": max(hw - v.offset, 0),
                        "time_lag_s": round(b.metrics.history.time_lag((topic, partition), v.offset, hw, now_s), 3)}
        for (group_id, topic, partition), (messages, nbytes) in b.metrics.consumed.items():
            r = rows.setdefault((group_id, topic, partition), {"committed": None, "commit_ts": None, "log_end": None,
                                                               "lag": None, "time_lag_s": None})
            r["messages"], r["bytes"] = messages, nbytes
        out = []
        for (group_id, topic, partition), r in sorted(rows.items()):
            state, members = states.get(group_id, ("", 0))
            out.append({"ts": now_ms, "broker": b.node_id, "broker_start": self.started_ms, "group": group_id,
                        "topic": topic, "partition": partition, "messages": r.get("messages", 0),
                        "bytes": r.get("bytes", 0), "committed": r["committed"], "log_end": r["log_end"],
                        "lag": r["lag"], "time_lag_s": r["time_lag_s"], "state": state,
                        "members": members, "commit_ts": r["commit_ts"]})
        return out

    def write(self) -> int:
        topic = self.broker.topics.get(TELEMETRY_TOPIC)
        rows = self.rows()
        if not rows or topic is None:
            return 0
        by_partition: dict[int, list[dict[str, Any]]] = {}
        for r in rows:
            by_partition.setdefault(self.partition_of(r["group"], topic.partitions), []).append(r)
        written = 0
        for partition, part_rows in sorted(by_partition.items()):
            plog = self.broker.logs.get(TELEMETRY_TOPIC, partition)
            if plog is None:
                continue
            for i in range(0, len(part_rows), 1000):
                chunk = part_rows[i : i + 1000]
                pairs = [(f"{r['group']}/{r['topic']}/{r['partition']}".encode(),
                          json.dumps(r, separators=(",", ":")).encode()) for r in chunk]  # compact: 10% fewer bytes
                plog.append_batch_unchecked(build_batch(pairs, timestamp=chunk[0]["ts"]))
            written += len(part_rows)
            self.broker.logs.notifier.notify((TELEMETRY_TOPIC, partition))
        return written
