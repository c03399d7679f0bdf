"""Transaction metrics, computed when Prometheus scrapes (nothing on the hot paths):

- from the transaction coordinator's views (coordinator/transaction/views.py), per
  ``__transaction_state`` partition coordinated here: transactions ongoing and completing, and
  transactions committed and aborted since the partition's shard loaded here;
- from the logs: how far each partition's last stable offset is behind its high watermark, for
  the partitions led here (what read_committed consumers cannot read yet).

Cardinality of ``gregor_partition_lso_lag``: a partition gets a series the first time its last
stable offset is seen behind its high watermark (a transaction was open in it at a scrape), and
keeps it (at 0 once stable) while it is led here, so graphs and alerts see it return to 0 rather
than vanish. Partitions never written transactionally cost no series. A partition not opened
since a clean start (logs are loaded on first use) is not opened for this.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from gregor.coordinator.transaction.views import TransactionShardSummary


class TransactionsView(Protocol):
    """What metrics read of the transaction coordinator (TransactionViews provides it)."""

    def shard_summaries(self) -> Iterable[TransactionShardSummary]: ...


class StableLog(Protocol):
    loaded: bool

    @property
    def last_stable_offset(self) -> int: ...


class StableLogs(Protocol):
    """What metrics read of the logs for the last stable offset (LogManager provides it)."""

    def high_watermarks(self) -> Iterable[tuple[str, int, int]]: ...
    def get(self, topic: str, partition: int) -> StableLog | None: ...


class TransactionMetrics:
    """``leads(topic, partition)``: whether this broker leads the partition."""

    def __init__(self, views: TransactionsView, logs: StableLogs, leads: Callable[[str, int], bool]) -> None:
        self.views = views
        self.logs = logs
        self.leads = leads
        self._lso_series: set[tuple[str, int]] = set()  # partitions whose LSO lag is reported

    def collect(self) -> Iterator[Any]:
        part = ["partition"]
        ongoing = GaugeMetricFamily("gregor_transactions_ongoing", "Transactions in state Ongoing, by "
                                    "__transaction_state partition coordinated here", labels=part)
        completing = GaugeMetricFamily("gregor_transactions_completing", "Transactions in PrepareCommit or "
                                       "PrepareAbort (their markers being written), by __transaction_state "
                                       "partition coordinated here", labels=part)
        committed = CounterMetricFamily("gregor_transactions_committed", "Transactions committed (markers "
                                        "written) since the __transaction_state partition was loaded here",
                                        labels=part)
        aborted = CounterMetricFamily("gregor_transactions_aborted", "Transactions aborted (markers written) "
                                      "since the __transaction_state partition was loaded here; reason timeout: "
                                      "the coordinator aborted it past its transaction.timeout.ms, requested: "
                                      "the producer aborted it or a new instance of it fenced it",
                                      labels=["partition", "reason"])
        for s in self.views.shard_summaries():
            p = str(s.partition)
            ongoing.add_metric([p], s.ongoing)
            completing.add_metric([p], s.completing)
            committed.add_metric([p], s.committed)
            aborted.add_metric([p, "requested"], s.aborted - s.timed_out)
            aborted.add_metric([p, "timeout"], s.timed_out)
        yield from (ongoing, completing, committed, aborted)
        yield self._lso_lag()

    def _lso_lag(self) -> Any:
        lag_family = GaugeMetricFamily("gregor_partition_lso_lag", "Offsets between the last stable offset and "
                                       "the high watermark (what read_committed consumers cannot read yet), for "
                                       "partitions led here that have had an open transaction",
                                       labels=["topic", "partition"])
        reported: set[tuple[str, int]] = set()
        for topic, partition, hw in self.logs.high_watermarks():
            plog = self.logs.get(topic, partition)
            if plog is None or not plog.loaded:
                continue
            lag = hw - plog.last_stable_offset  # the high watermark when no transaction is open: cheap
            key = (topic, partition)
            if (lag > 0 or key in self._lso_series) and self.leads(topic, partition):
                reported.add(key)
                lag_family.add_metric([topic, str(partition)], max(lag, 0))
        self._lso_series = reported
        return lag_family
