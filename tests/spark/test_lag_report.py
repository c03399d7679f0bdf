"""``gregor lag-report`` on a scripted workload with known truth, run as a user runs it (the CLI
in a subprocess, Spark in local mode, against a real broker and real consumers).

Timeline (seconds), telemetry every 0.5 s, status window 7 samples (3 s):
  0     a producer writes 20 messages every 0.3 s to topic ``events`` (2 partitions; not a divisor
        of the telemetry interval, so that samples do not all fall at the same moment after a
        burst: at 0.25 s each sample could find the healthy group one burst behind, never caught
        up, and judge it WARNING);
        groups healthy, slow (2 members, 5 msg/s each, committing each one), stalled, stopped
        and rewound start consuming;
  3     stalled pauses its partitions (stays in the group, commits nothing);
        stopped closes (commits, leaves);  rewound pauses;
  7     rewound commits offsets 40 lower;
  8.5   t_eval: the statuses are checked at this sample;
  9     the producer stops; the report is cut (--until) 1.5 s later, when lags are exact.

Beside them a share group (KIP-932), ``queue``, consumes the same topic with a ShareConsumer that
releases every fourth record at its first delivery (delivered again) and accepts everything else.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import (
    AcknowledgeType,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    ShareConsumer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from gregor.lagreport import charts, rules
from tests.support.broker_process import BrokerProcess

TOPIC = "events"
WINDOW = 7
EXPECTED = {"healthy": (rules.OK, rules.OK), "slow": (rules.WARNING, rules.WARNING),
            "stalled": (rules.STALL, rules.ERROR), "stopped": (rules.STOP, rules.ERROR),
            "rewound": (rules.REWIND, rules.ERROR)}


def consumer(bootstrap: str, group: str, **extra) -> Consumer:
    # one client id per application, as Kafka recommends: consumers of several groups starting at
    # the same offset at the same moment with one client id cannot be told apart (docs/metrics.md)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": f"{group}-app",
                  "auto.offset.reset": "earliest",
                  "enable.auto.commit": True, "auto.commit.interval.ms": 100, "session.timeout.ms": 6000,
                  "fetch.wait.max.ms": 50, **extra})
    c.subscribe([TOPIC])
    return c


class Workload:
    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.stop = threading.Event()
        self.producing = threading.Event()
        self.produced = [0, 0]
        self.marks: dict[str, float] = {}
        self.errors: list[BaseException] = []
        self.threads: list[threading.Thread] = []
        self.committed: dict[str, dict[int, int]] = {}
        self.share_deliveries = [0, 0]  # of the share group, per partition: first deliveries and again
        self.share_redeliveries = [0, 0]

    def spawn(self, fn, *args) -> None:
        def guarded() -> None:
            try:
                fn(*args)
            except BaseException as e:  # surfaced by the test
                self.errors.append(e)

        t = threading.Thread(target=guarded, daemon=True)
        t.start()
        self.threads.append(t)

    def at(self, second: float) -> None:
        time.sleep(max(0.0, self.t0 + second - time.time()))

    def produce(self) -> None:
        p = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 0})
        while self.producing.is_set():
            for i in range(20):
                p.produce(TOPIC, value=b"x" * 100, partition=i % 2)
                self.produced[i % 2] += 1
            p.flush(5)
            time.sleep(0.3)

    def healthy(self) -> None:
        c = consumer(self.bootstrap, "healthy")
        while not self.stop.is_set():
            c.poll(0.05)
        self.committed["healthy"] = committed_of(c)
        c.close()

    def slow_member(self) -> None:
        c = consumer(self.bootstrap, "slow", **{"enable.auto.commit": False})
        while not self.stop.is_set():
            m = c.poll(0.05)
            if m is not None and m.error() is None:
                c.commit(message=m, asynchronous=False)
                time.sleep(0.2)
        c.close()

    def stalled(self) -> None:
        c = consumer(self.bootstrap, "stalled")
        self.run_until(c, 3)
        c.pause(c.assignment())
        while not self.stop.is_set():
            c.poll(0.05)
        self.committed["stalled"] = committed_of(c)
        c.close()

    def stopped(self) -> None:
        c = consumer(self.bootstrap, "stopped")
        self.run_until(c, 3)
        self.committed["stopped"] = committed_of(c)
        c.close()

    def rewound(self) -> None:
        c = consumer(self.bootstrap, "rewound", **{"enable.auto.commit": False})
        while time.time() < self.t0 + 3:
            m = c.poll(0.05)
            if m is not None and m.error() is None:
                c.commit(message=m, asynchronous=False)
        c.pause(c.assignment())
        while time.time() < self.t0 + 7:
            c.poll(0.05)
        back = [TopicPartition(TOPIC, p, max(0, o - 40)) for p, o in committed_of(c).items()]
        c.commit(offsets=back, asynchronous=False)
        self.marks["rewind"] = time.time()
        while not self.stop.is_set():
            c.poll(0.05)
        self.committed["rewound"] = committed_of(c)
        c.close()

    def share_queue(self) -> None:
        c = ShareConsumer({"bootstrap.servers": self.bootstrap, "group.id": "queue", "client.id": "queue-app",
                           "share.acknowledgement.mode": "explicit", "max.poll.records": 50})
        c.subscribe([TOPIC])
        while not self.stop.is_set():
            msgs = [m for m in c.poll(0.1) if m.error() is None]
            for m in msgs:
                self.share_deliveries[m.partition()] += 1
                if m.delivery_count() > 1:
                    self.share_redeliveries[m.partition()] += 1
                release = m.offset() % 4 == 0 and m.delivery_count() == 1
                c.acknowledge(m, AcknowledgeType.RELEASE if release else AcknowledgeType.ACCEPT)
            if msgs:
                c.commit_sync()
        c.close()

    def run_until(self, c: Consumer, second: float) -> None:
        while time.time() < self.t0 + second:
            c.poll(0.05)
        try:
            c.commit(asynchronous=False)
        except KafkaException as e:
            if e.args[0].code() != KafkaError._NO_OFFSET:  # auto-commit had already committed it all
                raise

    def run(self) -> None:
        self.t0 = time.time()
        self.producing.set()
        self.spawn(self.produce)
        for fn in (self.healthy, self.slow_member, self.slow_member, self.stalled, self.stopped, self.rewound,
                   self.share_queue):
            self.spawn(fn)
        self.at(8.5)
        self.marks["eval"] = time.time()
        self.at(9)
        self.producing.clear()
        time.sleep(1.6)  # telemetry catches the final log end offsets
        self.marks["until"] = time.time()


def committed_of(c: Consumer) -> dict[int, int]:
    return {tp.partition: tp.offset for tp in c.committed([TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)],
                                                           timeout=10)}


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    data = tmp_path_factory.mktemp("broker")
    b = BrokerProcess(data / "data", {"telemetry.interval.ms": "500", "group.initial.rebalance.delay.ms": "0"})
    b.start()
    try:
        yield run_workload_and_report(b, tmp_path_factory)
    finally:
        b.kill()


def run_workload_and_report(b: BrokerProcess, tmp_path_factory):
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 2)])[TOPIC].result(10)
    w = Workload(b.bootstrap)
    w.run()
    out = tmp_path_factory.mktemp("lag-report")
    proc = subprocess.run([sys.executable, "-m", "gregor", "lag-report", "--bootstrap-server", b.bootstrap,
                           "--out", str(out), "--master", "local[2]", "--window", str(WINDOW),
                           "--until", str(int(w.marks["until"] * 1000)), "--json",
                           "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.ui.enabled=false"],
                          capture_output=True, text=True, timeout=240)
    w.stop.set()
    for t in w.threads:
        t.join(20)
    assert not w.errors, w.errors
    assert proc.returncode == 0, proc.stderr[-3000:]
    return w, out, json.loads(proc.stdout)


def read_table(out: Path, name: str):
    import pandas as pd

    return pd.read_parquet(out / "tables" / name)


def test_statuses_at_the_scripted_moment(report):
    w, out, _ = report
    samples = read_table(out, "samples")
    t_eval = int(w.marks["eval"] * 1000)
    at = samples[samples["ts"] <= t_eval].sort_values("ts").groupby(["group", "topic", "partition"]).last()
    for group, (partition_status, _) in EXPECTED.items():
        got = at.loc[group]["status"].tolist()
        assert got == [partition_status, partition_status], (group, at.loc[group].to_dict("records"))
    timeline = read_table(out, "group_timeline")
    at_group = timeline[timeline["ts"] <= t_eval].sort_values("ts").groupby("group").last()
    for group, (_, group_status) in EXPECTED.items():
        assert at_group.loc[group, "status"] == group_status, group
    # the rewind shows at the sample after it, not before
    rewound = samples[(samples["group"] == "rewound")]
    first_rewind = rewound[rewound["status"] == rules.REWIND]["ts"].min()
    assert first_rewind >= int(w.marks["rewind"] * 1000) - 600


def test_lags_equal_the_truth(report):
    w, out, summary = report
    current = read_table(out, "partition_status").set_index(["group", "partition"])
    for group in ("healthy", "stalled", "stopped", "rewound"):
        for p in (0, 1):
            row = current.loc[(group, p)]
            assert row["log_end"] == w.produced[p], (group, p)
            assert row["committed"] == w.committed[group][p], (group, p)
            assert row["lag"] == w.produced[p] - w.committed[group][p], (group, p)
    assert current.loc[("healthy", 0), "lag"] == 0
    top = [g["group"] for g in summary["top_lagging"]]
    lags = {g["group"]: g["total_lag"] for g in summary["groups"]}
    assert top == sorted((g for g in lags if lags[g] > 0), key=lambda g: (-lags[g], g))[: len(top)]
    assert "healthy" not in top and {"stalled", "stopped", "rewound"} <= set(top)


def test_rates_and_commits(report):
    w, out, _ = report
    samples = read_table(out, "samples")
    healthy = samples[samples["group"] == "healthy"]
    # the healthy group read everything: its summed rate over time equals what was produced
    per_partition = healthy.groupby("partition")["messages"].max()
    assert per_partition.tolist() == w.produced
    busy = healthy[(healthy["ts"] > (w.t0 + 2) * 1000) & (healthy["ts"] < (w.t0 + 8) * 1000)]
    assert 30 < busy["messages_per_s"].median() < 50  # 40 msg/s per partition were produced
    commits = read_table(out, "commits")
    assert set(commits["group"]) >= set(EXPECTED)
    rewind = commits[(commits["group"] == "rewound")].sort_values("commit_ts")
    assert rewind.groupby("partition")["offset"].last().tolist() == [w.committed["rewound"][0],
                                                                    w.committed["rewound"][1]]


def test_summary_and_report_files(report):
    _, out, summary = report
    statuses = {g["group"]: g["status"] for g in summary["groups"]}
    # at the end of the report the producer has stopped: the slow group catches up
    assert {g: statuses[g] for g in EXPECTED} == {"healthy": rules.OK, "slow": rules.OK, "stalled": rules.ERROR,
                                                 "stopped": rules.ERROR, "rewound": rules.ERROR}
    assert summary["status_counts"][rules.ERROR] == 3
    for name in ("samples", "commits", "group_timeline", "partition_throughput", "partition_status",
                 "group_status", "top_lagging"):
        assert list((out / "tables" / name).glob("*.parquet")), name
    page = (out / "report.html").read_text()
    assert page.count("<svg") == 4
    for external in ("<script", "<link", 'src="http', 'href="http', "url(http"):  # self-contained
        assert external not in page


def test_share_groups_in_the_report(report):
    """The share group's partitions: the start offset caught up with the log end, the lag 0, OK,
    and about a fifth of its deliveries were redeliveries (every fourth record released once)."""
    w, out, summary = report
    shares = read_table(out, "share_partitions").set_index(["group", "partition"])
    for p in (0, 1):
        row = shares.loc[("queue", p)]
        assert row["log_end"] == w.produced[p] and row["lag"] == 0 and row["start_offset"] == w.produced[p]
        assert row["status"] == rules.OK and row["stuck"] == 0 and row["in_flight"] == 0
        assert 0.1 < row["redelivery_rate"] < 0.3, row.to_dict()
        assert row["delivered"] <= w.share_deliveries[p] and row["redelivered"] <= w.share_redeliveries[p]
    assert {s["group"] for s in summary["share_partitions"]} == {"queue"}
    assert {g["group"]: g["status"] for g in summary["groups"]}["queue"] == rules.OK
    assert 'id="share-groups"' in (out / "report.html").read_text()


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is installed by `make setup`")
def test_report_renders_its_plots_in_a_browser(report, tmp_path):
    from PIL import Image

    _, out, _ = report
    shot = tmp_path / "report.png"
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}", "--hide-scrollbars", "--window-size=1300,3400"]
    subprocess.run([CHROMIUM, *flags, f"--screenshot={shot}", (out / "report.html").as_uri()],
                   capture_output=True, timeout=120, check=True)
    img = Image.open(shot).convert("RGB")
    assert img.size == (1300, 3400)
    colors = img.getcolors(maxcolors=img.size[0] * img.size[1])  # (count, colour) of each distinct colour

    def count(hex_color: str) -> int:
        want = tuple(int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
        return sum(n for n, px in colors if all(abs(a - b) <= 6 for a, b in zip(px, want, strict=True)))

    # the status timeline paints every status of the workload; the line plots draw their series
    for status in (rules.OK, rules.WARNING, rules.STALL, rules.STOP, rules.REWIND):
        assert count(charts.STATUS_COLORS[status]) > 200, status
    assert sum(count(c) for c in charts.PALETTE[:5]) > 2000
    dom = subprocess.run([CHROMIUM, *flags, "--dump-dom", (out / "report.html").as_uri()], capture_output=True,
                         text=True, timeout=120, check=True).stdout
    assert dom.count("<svg") == 4 and "Status timeline" in dom


def test_report_without_samples_yet(spark, broker_factory, tmp_path):
    """A new broker: the telemetry topic is empty; the job writes empty tables and says why."""
    from gregor.lagreport import job, report

    b = broker_factory(**{"telemetry.interval.ms": "60000"})
    opts = job.JobOptions(b.bootstrap, tmp_path / "out")
    paths = job.run(spark, opts)
    summary = report.summarise(paths, opts)
    assert summary.samples == 0 and summary.groups == []
    page = report.render_html(summary, report.chart_frames(paths, summary), opts)
    assert page.count("<svg") == 4 and "no data in this period" in page
    assert "No telemetry samples" in report.terminal_summary(summary, tmp_path / "r.html", tmp_path)
