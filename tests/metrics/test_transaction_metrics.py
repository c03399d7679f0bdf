"""Transaction metrics: the coordinator's counts (ongoing, completing, committed, aborted by
reason) from its views, and the last stable offset's lag behind the high watermark of the
partitions led here. Unit level over a shard driven by hand, then a real broker with
confluent-kafka transactional producers, scraped."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from gregor.coordinator.runtime.result import CoordinatorResult
from gregor.coordinator.runtime.shard_runtime import ShardState
from gregor.coordinator.runtime.timer import ManualClock, ManualTimer
from gregor.coordinator.transaction.api import TransactionConfig
from gregor.coordinator.transaction.shard import TransactionCoordinatorShard
from gregor.coordinator.transaction.views import TransactionShardSummary, TransactionViews
from gregor.metrics.transactions import TransactionMetrics
from tests.support.broker_process import free_port
from tests.support.metrics_scrape import scrape
from tests.support.waiting import wait_for


class Driver:
    """One shard, its records replayed as the runtime would (every write committed), its
    markers written at once when ``auto_complete``."""

    def __init__(self) -> None:
        self.clock = ManualClock()
        self.timer = ManualTimer(self.clock)
        self.records: list[Any] = []
        self.markers: list[Any] = []
        self.shard = self.new_shard()
        self.shard.on_loaded()
        self.pid = 100

    def new_shard(self) -> TransactionCoordinatorShard:
        return TransactionCoordinatorShard(0, TransactionConfig(), self.clock, self.timer, 1,
                                           send_markers=self.markers.append)

    def run(self, result: CoordinatorResult[Any]) -> Any:
        for key, value in result.records:
            self.records.append((key, value))
            self.shard.replay(key, value)
        for fn in self.shard.take_completions():
            fn(None)
        return result.response

    def begin(self, tid: str, timeout_ms: int = 60_000) -> tuple[int, int]:
        self.pid += 1
        r = self.run(self.shard.init_producer_id(tid, timeout_ms, new_producer_id=self.pid))
        self.run(self.shard.add_partitions(tid, r.producer_id, r.producer_epoch, [("t", 0)]))
        return r.producer_id, r.producer_epoch

    def finish_markers(self) -> None:
        pending, self.markers[:] = list(self.markers), []
        for m in pending:
            self.run(self.shard.complete_markers(m.transactional_id, m.producer_id, m.producer_epoch))

    def summary(self) -> TransactionShardSummary:
        runtimes = {0: SimpleNamespace(state=ShardState.ACTIVE, shard=self.shard)}
        [s] = TransactionViews(SimpleNamespace(runtimes=runtimes)).shard_summaries()  # type: ignore[arg-type]
        return s


def test_the_views_count_states_and_completions_but_not_the_replay_of_a_load():
    d = Driver()
    for i in range(3):
        pid, epoch = d.begin(f"c{i}")
        d.run(d.shard.end_txn(f"c{i}", pid, epoch, commit=True))
    pid, epoch = d.begin("a")
    d.run(d.shard.end_txn("a", pid, epoch, commit=False))
    d.begin("slow", timeout_ms=1000)
    d.begin("open")
    assert d.summary() == TransactionShardSummary(0, ongoing=2, completing=4, committed=0, aborted=0, timed_out=0)
    d.finish_markers()
    assert d.summary() == TransactionShardSummary(0, ongoing=2, completing=0, committed=3, aborted=1, timed_out=0)
    # past its timeout: the coordinator aborts it (the epoch bumped), counted as a timeout once its markers are in
    d.clock.now_ms += TransactionConfig().abort_timed_out_transactions_interval_ms
    for _key, op in d.timer.pop_due():
        d.run(op())
    assert d.summary().completing == 1 and d.summary().ongoing == 1
    d.finish_markers()
    assert d.summary() == TransactionShardSummary(0, ongoing=1, completing=0, committed=3, aborted=2, timed_out=1)
    # a new instance fencing the open transaction: a requested abort, not a timeout
    d.pid += 1
    d.run(d.shard.init_producer_id("open", 60_000, new_producer_id=d.pid))
    d.finish_markers()
    assert d.summary() == TransactionShardSummary(0, ongoing=0, completing=0, committed=3, aborted=3, timed_out=1)

    # a shard loading the same records (every Prepare and Complete still in the log) counts nothing
    d.shard = d.new_shard()
    for key, value in d.records:
        d.shard.replay(key, value)
    d.shard.on_loaded()
    assert d.summary() == TransactionShardSummary(0, ongoing=0, completing=0, committed=0, aborted=0, timed_out=0)
    pid, epoch = d.begin("c0")
    d.run(d.shard.end_txn("c0", pid, epoch, commit=True))
    d.finish_markers()
    assert d.summary().committed == 1


class Logs:
    def __init__(self) -> None:
        self.parts: dict[tuple[str, int], Any] = {}

    def set(self, topic: str, partition: int, hw: int, lso: int, loaded: bool = True) -> None:
        self.parts[(topic, partition)] = SimpleNamespace(hw=hw, last_stable_offset=lso, loaded=loaded)

    def high_watermarks(self):
        return [(t, p, x.hw) for (t, p), x in self.parts.items()]

    def get(self, topic: str, partition: int) -> Any:
        return self.parts.get((topic, partition))


def lso_series(metrics: TransactionMetrics) -> dict[tuple[str, str], float]:
    family = next(f for f in metrics.collect() if f.name == "gregor_partition_lso_lag")
    return {(s.labels["topic"], s.labels["partition"]): s.value for s in family.samples}


def test_lso_lag_series_appear_with_a_transaction_and_stay_while_led_here():
    logs = Logs()
    led = {("a", 0), ("a", 1), ("b", 0), ("lazy", 0)}
    views = SimpleNamespace(shard_summaries=lambda: [])
    m = TransactionMetrics(views, logs, lambda t, p: (t, p) in led)  # type: ignore[arg-type]
    logs.set("a", 0, 100, 100)
    logs.set("a", 1, 50, 40)
    logs.set("b", 0, 10, 7)
    logs.set("c", 0, 10, 2)  # led by another broker
    logs.set("lazy", 0, 10, 10, loaded=False)  # not opened since start: not opened for this either
    assert lso_series(m) == {("a", "1"): 10, ("b", "0"): 3}  # no series for partitions never unstable
    logs.set("a", 1, 52, 52)
    assert lso_series(m) == {("a", "1"): 0, ("b", "0"): 3}  # back to stable: kept, at 0
    led.discard(("b", 0))
    del logs.parts[("a", 1)]
    assert lso_series(m) == {}  # deleted or led elsewhere: gone
    led.add(("b", 0))
    logs.set("b", 0, 10, 10)
    assert lso_series(m) == {}


def producer(bootstrap: str, tid: str, **extra: Any) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 5, **extra})
    p.init_transactions(30)
    return p


def end_offsets(bootstrap: str, topic: str, partition: int) -> tuple[int, int]:
    """(last stable offset, high watermark) as clients list them."""
    out = []
    for isolation in ("read_committed", "read_uncommitted"):
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "ends", "isolation.level": isolation})
        try:
            out.append(c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10, cached=False)[1])
        finally:
            c.close()
    return out[0], out[1]


def totals(samples: dict[str, list[tuple[dict[str, str], float]]], name: str, **labels: str) -> float:
    return sum(v for lab, v in samples.get(name, []) if all(lab.get(k) == x for k, x in labels.items()))


def test_a_broker_reports_transactions_and_lso_lag(broker_factory):
    port = free_port()
    b = broker_factory(**{"metrics.listener": f"http://127.0.0.1:{port}",
                          "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("txm", 3)])["txm"].result(10)
    p = producer(b.bootstrap, "txm-main")
    for i in range(5):
        p.begin_transaction()
        p.produce("txm", b"x%d" % i, partition=1)
        if i in (1, 3):
            assert p.flush(10) == 0
            p.abort_transaction(30)
        else:
            p.commit_transaction(30)
    # open for longer than its timeout: the coordinator aborts it
    slow = producer(b.bootstrap, "txm-slow", **{"transaction.timeout.ms": 3000})
    slow.begin_transaction()
    for i in range(4):
        slow.produce("txm", b"s%d" % i, partition=0)
    assert slow.flush(10) == 0
    lso, hw = end_offsets(b.bootstrap, "txm", 0)
    assert (lso, hw) == (0, 4)

    _text, s = scrape(port)
    assert totals(s, "gregor_transactions_ongoing") == 1
    assert totals(s, "gregor_transactions_committed_total") == 3
    assert totals(s, "gregor_transactions_aborted_total", reason="requested") == 2
    assert totals(s, "gregor_transactions_aborted_total", reason="timeout") == 0
    lag = {(lab["topic"], lab["partition"]): v for lab, v in s["gregor_partition_lso_lag"]}
    assert lag[("txm", "0")] == hw - lso == 4
    assert ("txm", "2") not in lag  # never written transactionally: no series

    def timed_out() -> bool:
        return totals(scrape(port)[1], "gregor_transactions_aborted_total", reason="timeout") == 1

    wait_for(timed_out, 30, "the coordinator to abort the timed-out transaction")
    _text, s = scrape(port)
    assert totals(s, "gregor_transactions_ongoing") == 0 and totals(s, "gregor_transactions_completing") == 0
    assert totals(s, "gregor_transactions_aborted_total", reason="requested") == 2
    lag = {(lab["topic"], lab["partition"]): v for lab, v in s["gregor_partition_lso_lag"]}
    assert lag[("txm", "0")] == 0  # stable again (the abort marker written), the series kept
    assert end_offsets(b.bootstrap, "txm", 0) == (5, 5)
    # every series is labelled by the __transaction_state partition of the ids coordinated here
    parts = {lab["partition"] for lab, _v in s["gregor_transactions_committed_total"]}
    assert parts and all(p.isdigit() for p in parts)
