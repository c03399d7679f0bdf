"""Share-group metrics, computed when Prometheus scrapes (nothing on the hot paths), from the
share-partitions loaded on this broker (their leader: coordinator/share/share_partitions.py):

- ``gregor_share_partition_records{group,topic,partition,state}``: in-flight records by state
  (available, acquired, acknowledged, archived), between the start and end offsets;
- ``gregor_share_partition_start_offset`` and ``..._end_offset``: the window;
- ``gregor_share_partition_lag``: records from the start offset to the high watermark whose
  delivery is not complete (KIP-1226's share-partition lag);
- counters since this broker started leading the share-partition: acquired, redelivered, accepted,
  released, rejected, archived at the delivery count limit, lock timeouts, dead-lettered (copied to
  the group's dead-letter topic, KIP-1191) and dead-letter failures (archived without the copy).

One series set per (group, partition) loaded here: as many as the share groups consume."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from gregor.coordinator.share.share_partition import STATS, RecordState, SharePartition

Views = Callable[[], list[tuple[str, str, int, SharePartition]]]
HighWatermark = Callable[[str, int], int | None]

LABELS = ["group", "topic", "partition"]


class ShareMetrics:
    def __init__(self, views: Views, high_watermark: HighWatermark,
                 members: Callable[[str], int] = lambda group: 0) -> None:
        self.views = views
        self.high_watermark = high_watermark
        self.members = members  # a share group's members with a share session on this broker

    def collect(self) -> Iterator[Any]:
        records = GaugeMetricFamily("gregor_share_partition_records", "In-flight records of a share-partition "
                                    "by state", labels=[*LABELS, "state"])
        start = GaugeMetricFamily("gregor_share_partition_start_offset", "Share-partition start offset: every "
                                  "record before it is acknowledged or archived", labels=LABELS)
        end = GaugeMetricFamily("gregor_share_partition_end_offset", "Share-partition end offset: the next "
                                "offset never handed out", labels=LABELS)
        lag = GaugeMetricFamily("gregor_share_partition_lag", "Records from the start offset to the high "
                                "watermark whose delivery is not complete", labels=LABELS)
        counters = {name: CounterMetricFamily(f"gregor_share_partition_{name}", f"Records {name.replace('_', ' ')} "
                                              "since the share-partition was loaded on this broker", labels=LABELS)
                    for name in STATS}
        for group, topic, partition, sp in self.views():
            labels = [group, topic, str(partition)]
            counts = sp.counts()
            for state in RecordState:
                records.add_metric([*labels, state.name.lower()], counts[state])
            start.add_metric(labels, sp.start_offset)
            end.add_metric(labels, sp.end_offset)
            hw = self.high_watermark(topic, partition)
            if hw is not None:
                lag.add_metric(labels, sp.lag(hw))
            for name, family in counters.items():
                family.add_metric(labels, sp.stats[name])
        yield records
        yield start
        yield end
        yield lag
        yield from counters.values()
