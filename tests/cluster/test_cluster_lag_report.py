"""``gregor lag-report`` over the real ``__gregor_telemetry`` of a three-broker cluster while a
partition's leadership moves, checked against what the consumer received and what each broker's
Prometheus endpoint counted.

Topic ``clicks``: 3 partitions, RF 3, partition p led by broker p + 1. The group's coordinator is
broker 1, so the move touches no group state. Telemetry every second on every broker.

  setup   the consumer joins and commits offset 0 on every partition before anything is produced:
          each leader writes rows with ``messages`` 0 for its partition, so when consumption starts
          the keys are established and every message served counts (the first row of a key that
          was never reported carries consumption from before the period, and the report gives it
          no rate; see docs/lag-report.md)
  phase 1 a producer writes 10 messages per partition every 0.1 s; the consumer reads and commits
          after every batch
  move    0.2 s after a telemetry row of broker 2 (seen by tailing the telemetry topic), broker 2
          stops with a controlled shutdown: clicks-1 moves to broker 3 (next in its replica
          list); 3 s later broker 2 restarts and takes its preferred leadership back
          (leader.imbalance.check.interval.seconds 2); production and consumption go on
  end     the producer stops; the consumer reads everything, commits and leaves; 3 more
          telemetry intervals; the report is cut there (``--until``)

The report runs as a user runs it (the CLI in a subprocess, Spark local[2], the cluster as its
bootstrap). Checked: partitions 0 and 2 were served by their leader alone, exactly what the
consumer received; brokers 1 and 3, never restarted, report per partition exactly the messages and
bytes of their Prometheus counters; clicks-1 was served by brokers 2 and 3, 3 only between the
stop and the return, 2 before and after (its rows before the stop end with the row the test saw,
its rows after the restart equal its Prometheus counter); partition_status has one row per
partition, written by its final leader, lag 0, committed = what the consumer committed, OK; no
sample of the group is REWIND or STOP; the JSON summary's served_by names every broker that
served, in the order they began, and its totals per broker equal broker_serving; the HTML has the
"Serving brokers" section with the group's three brokers and the served-by chain.

Broker 2 is stopped 0.2 s after one of its telemetry rows, with the consumer reading clicks-1
from it: what it served in between is in the row it writes as it stops (Broker.stop writes a
last telemetry interval once its leaderships have moved), so per partition the brokers' served
messages add up to what the consumer received.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_END, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from gregor.lagreport import rules
from gregor.protocol.telemetry_records import TELEMETRY_TOPIC, home_partition
from tests.support.broker_process import free_port
from tests.support.cluster import BrokerCluster
from tests.support.metrics_scrape import scrape
from tests.support.waiting import wait_for
from tests.support.wire_state import group_coordinated_by, leaders

pytestmark = pytest.mark.timeout(300)

TOPIC = "clicks"
PARTITIONS = 3
ASSIGNMENT = [[1, 2, 3], [2, 3, 1], [3, 1, 2]]  # partition p led by broker p + 1
MOVED = 1  # clicks-1: broker 2 -> 3 (controlled shutdown of 2) -> 2 (preferred leader again)
OLD_LEADER, NEW_LEADER = 2, 3
COORDINATOR = 1  # the group's coordinator stays up: the move touches only clicks-1
INTERVAL_MS = 1000
WINDOW = 5
STOP_AFTER_ROW_S = 0.2  # broker 2's controlled shutdown begins this long after one of its telemetry rows
SETTINGS = {
    "telemetry.interval.ms": str(INTERVAL_MS), "telemetry.topic.num.partitions": "2",
    "offsets.topic.num.partitions": "3", "offsets.topic.replication.factor": "3",  # as group_coordinated_by needs
    "group.initial.rebalance.delay.ms": "0", "leader.imbalance.check.interval.seconds": "2",
    "replica.lag.time.max.ms": "3000", "replica.fetch.wait.max.ms": "200", "replica.fetch.backoff.ms": "200",
    "controlled.shutdown.retry.backoff.ms": "500", "zookeeper.session.timeout.ms": "4000"}


class Consuming(threading.Thread):
    """One group member: commits offset 0 on every partition once assigned (``ready``), then
    reads, counting per partition what it received (with the time), and commits after every
    batch; on ``drain`` it stops once it has ``want[p]`` messages of each partition, commits and
    closes."""

    def __init__(self, bootstrap: str, group: str) -> None:
        super().__init__(daemon=True)
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": "lag-app",
                                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                                  "fetch.wait.max.ms": 100, "topic.metadata.refresh.interval.ms": 1000})
        self.received: Counter = Counter()
        self.offsets: dict[int, set[int]] = defaultdict(set)
        self.times: dict[int, list[float]] = defaultdict(list)
        self.ready = threading.Event()
        self.done = threading.Event()
        self.want: dict[int, int] | None = None
        self.committed: dict[int, int] = {}
        self.errors: list[BaseException] = []

    def commit(self, offsets: list[TopicPartition] | None = None) -> None:
        try:
            if offsets is None:
                self.consumer.commit(asynchronous=False)
            else:
                self.consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException:
            pass  # retried by the next commit (the loop commits after every batch and at the end)

    def run(self) -> None:
        try:
            self.consumer.subscribe([TOPIC])
            while not self.ready.is_set():
                self.consumer.poll(0.1)
                if len(self.consumer.assignment()) == PARTITIONS:
                    self.commit([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
                    got = self.consumer.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], 10)
                    if all(tp.offset == 0 for tp in got):
                        self.ready.set()
            while not self.done.is_set():
                msgs = [m for m in self.consumer.consume(500, 0.2) if m.error() is None]
                now = time.time()
                for m in msgs:
                    self.received[m.partition()] += 1
                    self.offsets[m.partition()].add(m.offset())
                    self.times[m.partition()].append(now)
                if msgs:
                    self.commit()
                if self.want is not None and all(self.received[p] >= n for p, n in self.want.items()):
                    break
            self.commit()
            got = self.consumer.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], 10)
            self.committed = {tp.partition: tp.offset for tp in got}
        except BaseException as e:  # surfaced by the test
            self.errors.append(e)
        finally:
            self.consumer.close()


class Producing(threading.Thread):
    """10 messages per partition every 0.1 s (idempotent, acks=all) until ``stop``; ``delivered``
    counts the acknowledged messages per partition."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 5, "topic.metadata.refresh.interval.ms": 1000})
        self.delivered: Counter = Counter()
        self.failed: list[str] = []
        self.stop = threading.Event()

    def on_delivery(self, err, msg) -> None:
        if err is None:
            self.delivered[msg.partition()] += 1
        else:
            self.failed.append(str(err))

    def run(self) -> None:
        while not self.stop.is_set():
            for p in range(PARTITIONS):
                for _ in range(10):
                    self.producer.produce(TOPIC, value=b"c" * 100, partition=p, on_delivery=self.on_delivery)
            self.producer.poll(0)
            time.sleep(0.1)
        if self.producer.flush(60) != 0:
            self.failed.append("messages still undelivered after 60 s")
        self.producer = None  # no reconnection noise once the brokers are gone


def prometheus_counts(port: int, group: str) -> dict[int, tuple[int, int]]:
    """What one broker counted serving ``group`` on the topic since its start: per partition,
    (messages, bytes)."""
    _, samples = scrape(port)
    out: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for i, name in enumerate(("gregor_group_consumed_messages_total", "gregor_group_consumed_bytes_total")):
        for labels, v in samples.get(name, []):
            if labels["group"] == group and labels["topic"] == TOPIC:
                out[int(labels["partition"])][i] = int(v)
    return {p: (m, b) for p, (m, b) in out.items()}


def next_telemetry_row(bootstrap: str, group: str, broker: int, partition: int, timeout: float = 10) -> dict:
    """The next row ``broker`` writes for ``group``'s key of clicks-``partition``, read from the
    end of the group's home partition of ``__gregor_telemetry`` as soon as it is there."""
    home = home_partition(group, int(SETTINGS["telemetry.topic.num.partitions"]))
    tail = Consumer({"bootstrap.servers": bootstrap, "group.id": "telemetry-tail", "enable.auto.commit": False,
                     "fetch.wait.max.ms": 10})
    try:
        tail.assign([TopicPartition(TELEMETRY_TOPIC, home, OFFSET_END)])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = tail.poll(0.05)
            if m is None or m.error() is not None:
                continue
            row = json.loads(m.value())
            if (row["broker"], row["group"], row["topic"], row["partition"]) == (broker, group, TOPIC, partition):
                return row
        raise AssertionError(f"no telemetry row of broker {broker} for {group} {TOPIC}-{partition} in {timeout} s")
    finally:
        tail.close()


def topic_leaders(bootstrap: str) -> dict[int, int]:
    return {p: leader for p, (leader, _isr) in leaders(bootstrap, TOPIC).items()}


def preferred_leaders(bootstrap: str) -> bool:
    st = leaders(bootstrap, TOPIC)
    return len(st) == PARTITIONS and all(st[p][0] == ASSIGNMENT[p][0] and len(st[p][1]) == 3 for p in st)


def run_report(bootstrap: str, out: Path, until_ms: int) -> tuple[dict, float]:
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "gregor", "lag-report", "--bootstrap-server", bootstrap,
                           "--out", str(out), "--master", "local[2]", "--window", str(WINDOW),
                           "--until", str(until_ms), "--json",
                           "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.ui.enabled=false"],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout), time.monotonic() - started


def read_table(out: Path, name: str):
    import pandas as pd

    return pd.read_parquet(out / "tables" / name)


def test_lag_report_over_a_clusters_telemetry_across_a_leadership_move(tmp_path, zookeeper):
    timings: dict[str, float] = {}
    t_start = time.monotonic()
    cluster = BrokerCluster(tmp_path / "cluster", zookeeper, 3, SETTINGS)
    ports = {}
    for i, b in zip(cluster.ids, cluster.brokers, strict=True):
        ports[i] = free_port()
        b.overrides["metrics.listener"] = f"http://127.0.0.1:{ports[i]}"
    consuming: Consuming | None = None
    producing: Producing | None = None
    try:
        cluster.start()
        bootstrap = cluster.bootstrap
        admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, replica_assignment=ASSIGNMENT)])[TOPIC].result(30)
        wait_for(lambda: preferred_leaders(bootstrap), 60, "each broker leading one partition, ISR of 3")
        group = group_coordinated_by(bootstrap, COORDINATOR, "lag-report")
        timings["cluster"] = time.monotonic() - t_start

        consuming = Consuming(bootstrap, group)
        consuming.start()
        wait_for(consuming.ready.is_set, 60, "the consumer assigned every partition, offsets 0 committed")
        time.sleep(3.5 * INTERVAL_MS / 1000)  # each leader writes its partition's key (messages 0) 3 times

        t0 = time.monotonic()
        producing = Producing(bootstrap)
        producing.start()
        time.sleep(4)
        assert all(consuming.received[p] > 0 for p in range(PARTITIONS)), consuming.received
        # broker 2 stops 0.2 s after one of its telemetry writes (its next is due 1 s after it; a
        # controlled shutdown takes 0.1-0.4 s here): what it serves clicks-1 in between is served
        # after its last row
        for _ in range(5):
            last_row = next_telemetry_row(bootstrap, group, OLD_LEADER, MOVED)
            if time.time() <= last_row["ts"] / 1000 + STOP_AFTER_ROW_S:
                break  # seen in time (else: the next one)
        time.sleep(max(0.0, last_row["ts"] / 1000 + STOP_AFTER_ROW_S - time.time()))
        stop_ms = int(time.time() * 1000)
        assert cluster.stop(OLD_LEADER) == 0
        stopped_ms = int(time.time() * 1000)
        wait_for(lambda: topic_leaders(bootstrap).get(MOVED) == NEW_LEADER, 10, "clicks-1 led by broker 3")
        moved_at = dict(consuming.received)
        time.sleep(3)
        assert consuming.received[MOVED] > moved_at[MOVED], "clicks-1 read from its new leader"
        back_ms = int(time.time() * 1000)
        cluster.start_broker(OLD_LEADER)
        wait_for(lambda: preferred_leaders(bootstrap), 60, "broker 2 leading clicks-1 again")
        returned_ms = int(time.time() * 1000)
        returned_at = dict(consuming.received)
        time.sleep(3)
        producing.stop.set()
        producing.join(90)
        assert not producing.is_alive() and not producing.failed, producing.failed
        consuming.want = dict(producing.delivered)
        consuming.join(60)
        assert not consuming.is_alive() and not consuming.errors, consuming.errors
        assert consuming.received[MOVED] > returned_at[MOVED], "clicks-1 read from broker 2 after its return"
        timings["workload"] = time.monotonic() - t0
        received = {p: consuming.received[p] for p in range(PARTITIONS)}
        # the ground truth: every acknowledged message received once, every offset committed
        assert received == dict(producing.delivered), (received, producing.delivered)
        assert {p: len(consuming.offsets[p]) for p in range(PARTITIONS)} == received
        assert consuming.committed == received

        # everything served is reported within 3 more intervals
        time.sleep(3 * INTERVAL_MS / 1000)
        prom = {i: prometheus_counts(port, group) for i, port in ports.items()}
        until_ms = int(time.time() * 1000)

        out = tmp_path / "lag-report"
        summary, timings["report"] = run_report(bootstrap, out, until_ms)
    finally:
        if producing is not None:
            producing.stop.set()
        if consuming is not None:
            consuming.done.set()
        cluster.kill_all()
    timings["total"] = time.monotonic() - t_start
    print("timings (s):", {k: round(v, 1) for k, v in timings.items()})

    serving = read_table(out, "broker_serving")
    mine = serving[(serving["group"] == group) & (serving["topic"] == TOPIC)]
    print(mine.sort_values(["partition", "broker"]).to_string())
    print("received per partition:", received, "prometheus at the end (messages, bytes):", prom)
    by = {(int(r.partition), int(r.broker)): r for r in mine.itertuples()}
    served = {p: sum(int(r.messages) for (q, _), r in by.items() if q == p) for p in range(PARTITIONS)}

    # the partitions that stayed with their leader: it alone served them, every message received
    for p in (0, 2):
        assert {b for (q, b), r in by.items() if q == p and r.messages > 0} == {ASSIGNMENT[p][0]}, p
        assert served[p] == received[p], p
    # brokers that never restarted report exactly what their Prometheus counters say, per partition
    for b in (1, 3):
        assert {p: (int(r.messages), int(r.bytes)) for (p, bb), r in by.items() if bb == b and r.messages > 0} \
            == {p: mb for p, mb in prom[b].items() if mb[0] > 0}, b
    # clicks-1 was served by its old leader and by its new one, the new one only while it led, the
    # old one again after its return
    moved = {b: r for (p, b), r in by.items() if p == MOVED and r.messages > 0}
    assert set(moved) == {OLD_LEADER, NEW_LEADER}, moved
    assert stop_ms < moved[NEW_LEADER].first_served_ts
    assert moved[NEW_LEADER].last_served_ts < returned_ms + 3 * INTERVAL_MS
    assert moved[OLD_LEADER].first_served_ts < stop_ms and moved[OLD_LEADER].last_served_ts > back_ms
    # broker 2 before its stop: its rows, the last one written as it stopped (after the SIGTERM,
    # before it exited), and from its restart what its Prometheus counter says
    samples = read_table(out, "samples")
    samples = samples[samples["group"] == group]
    old = samples[(samples["broker"] == OLD_LEADER) & (samples["partition"] == MOVED)].sort_values("ts")
    first_life = old[old["ts"] < back_ms]
    final_row = first_life[first_life["ts"] > stop_ms]
    assert len(final_row) == 1 and int(final_row["ts"].iloc[0]) <= stopped_ms, (
        f"broker {OLD_LEADER} should write one last row while stopping: {first_life.tail(3).to_string()}")
    second_life = old[old["ts"] >= back_ms]
    assert int(second_life["messages"].max()) == prom[OLD_LEADER][MOVED][0]
    truly_served = received[MOVED] - prom[NEW_LEADER][MOVED][0] - prom[OLD_LEADER][MOVED][0]
    after_last_row = sum(1 for t in consuming.times[MOVED] if last_row["ts"] / 1000 < t <= stopped_ms / 1000)
    print(f"broker {OLD_LEADER} served clicks-1 {truly_served} messages before its stop, {after_last_row} of them "
          f"after its last timed row; its final row reported {int(first_life['messages'].max())}")
    assert int(first_life["messages"].max()) == truly_served
    assert int(moved[OLD_LEADER].messages) == truly_served + prom[OLD_LEADER][MOVED][0]

    # one partition_status row per partition, from its final leader: caught up, OK
    status = read_table(out, "partition_status")
    status = status[status["group"] == group]
    assert sorted(zip(status["topic"], status["partition"], strict=True)) == [(TOPIC, p) for p in range(PARTITIONS)]
    for r in status.itertuples():
        assert (r.broker, r.committed, r.log_end, r.lag, r.status) == \
            (ASSIGNMENT[r.partition][0], received[r.partition], received[r.partition], 0, rules.OK), r

    # no false alarm from the move anywhere in the samples
    assert samples["broker"].nunique() == 3
    assert not samples["status"].isin([rules.REWIND, rules.STOP]).any(), \
        samples[samples["status"].isin([rules.REWIND, rules.STOP])].to_string()
    print("statuses in the samples:", samples["status"].value_counts(dropna=False).to_dict())

    # the summary: every broker that served, in the order it began; totals per broker
    g = next(x for x in summary["groups"] if x["group"] == group)
    first = {}
    for (_, b), r in by.items():
        if r.messages > 0:
            first[b] = min(first.get(b, 1 << 62), r.first_served_ts)
    assert g["served_by"] == sorted(first, key=lambda b: (first[b], b)) and set(g["served_by"]) == {1, 2, 3}
    totals = {s["broker"]: s["messages"] for s in summary["serving"] if s["group"] == group}
    assert totals == {b: sum(int(r.messages) for (_, bb), r in by.items() if bb == b) for b in (1, 2, 3)}
    assert sum(totals.values()) == sum(served.values())
    assert g["status"] == rules.OK

    page = (out / "report.html").read_text()
    assert 'id="serving"' in page and "Serving brokers" in page and "3 brokers serving" in page
    section = page.split('id="serving"', 1)[1].split("</section>", 1)[0]
    assert section.count("<tr>") == 1 + 3 and group in section  # header, the group on 3 brokers
    assert " → ".join(map(str, g["served_by"])) in page

    # per partition, the brokers' served messages add up to what the consumer received
    assert served[MOVED] == received[MOVED], (served, received)
