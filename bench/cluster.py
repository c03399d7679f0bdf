"""The cluster's costs (issue 12): produce throughput with replication, and the time a partition
is unavailable when its leader dies. Figures only, no assertion.

0. The machine: how fast the page cache takes a new file's data and a rewrite in place (on some
   virtual machines, this one included, fresh memory is backed by the host only when first
   written, and every byte a broker stores pays that; replication factor 3 stores it three times).
1. Produce throughput of ``--size`` byte messages with acks=all (bench/produce_fetch.py's
   confluent-kafka producer: linger.ms=5, 1 MB batches, no idempotence) to one topic of
   ``--partitions`` partitions on
   - a single-node broker (no zookeeper.connect; bench/peers.py's),
   - a replication factor 1 topic on a cluster of three brokers over ZooKeeper (gregor.devcluster),
   - a replication factor 3 topic (min.insync.replicas=2) on the same three brokers,
   the same message count each, ``--rounds`` times in alternating order (a fresh topic each run;
   the single node and the cluster both run throughout, the one not measured idle). MB/s and
   messages/s per run with the CPU seconds each broker, ZooKeeper and the client used and how
   busy the whole machine was (other processes included), the median per target, and the ratios
   RF3/single-node and RF3/RF1.
2. Failover: a three-broker cluster per ``zookeeper.session.timeout.ms`` in ``--session-timeouts``
   (Gregor's default 6000 first), one RF=3 partition with min.insync.replicas=2 and an acks=all
   idempotent producer sending ``--rate`` messages a second throughout. ``--kills`` times: SIGKILL
   the partition's leader, measure the time from the kill to the first acknowledged write of a
   message produced after the kill (its delivery callback: it can only have been written by the
   new leader), restart the killed broker and wait until it is back in the ISR. The parts of that
   time, each from the kill, seen from a ZooKeeper client in this process, the brokers' logs and
   librdkafka's debug log:
   - session expired: the killed broker's /brokers/ids node is gone (ZooKeeper expired its
     session: up to zookeeper.session.timeout.ms after the broker's last heartbeat, plus a tick);
   - new controller (when the killed broker was also the controller): /controller names another;
   - elected: the partition's state node names the new leader (the controller's election);
   - leader acting: the new leader's log says it leads at the new epoch (its ZooKeeper watch);
   - client sends to it: librdkafka applies the new leader (it re-reads the metadata of a
     partition whose leader is down once a second);
   - first ack: the delivery callback. In between, the surviving follower truncates and fetches
     from the new leader and the high watermark moves (milliseconds), but librdkafka (2.16) often
     parks the partition once more and re-reads the metadata a second later: an idempotent
     producer drains the requests it sent to the dead leader first, and the dead broker's handle,
     decommissioned because it left the metadata, hands the partition back to "no leader".
   A note says when the surviving follower's OffsetForLeaderEpoch was refused (it reached the new
   leader before the leader had read its election), which costs it replica.fetch.backoff.ms.

Everything runs on this machine under a temporary directory, removed at the end (``--keep``
keeps it, with every process's log); every process is killed at the end, also after an error,
Ctrl-C or SIGTERM.

    .venv/bin/python bench/cluster.py                 # the full run (about 10 minutes)
    .venv/bin/python bench/cluster.py --quick         # a smoke run: fewer messages and kills
    .venv/bin/python bench/cluster.py --json          # the figures as JSON on stdout (text on stderr)
    .venv/bin/python bench/cluster.py --only failover --kills 3 --session-timeouts 6000 --keep
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import IO, Any

sys.path.insert(0, os.path.dirname(__file__))

from confluent_kafka import KafkaError, Message, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from kazoo.client import KazooClient  # noqa: E402

import peers  # noqa: E402
import produce_fetch  # noqa: E402
from gregor import devcluster  # noqa: E402

CLUSTER_SIZE = 3
FAILOVER_TOPIC = "failover"
# auto leader rebalance off in the failover clusters: leadership moves only because of the kills
FAILOVER_OVERRIDES = {"auto.leader.rebalance.enable": "false"}
# log level 7 and debug=topic for the leader updates only (LeaderUpdates), not librdkafka's
# complaints about the killed broker
FAILOVER_PRODUCER = {"debug": "topic", "log_level": 7, "acks": "all", "linger.ms": 0, "message.timeout.ms": 120_000,
                     "queue.buffering.max.messages": 1_000_000}
ACK_WAIT_S = 90.0
TICK_S = 0.005  # the producer's pace: rate * TICK_S messages at a time
ISR_WAIT_S = 120.0
LOG_TIME = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})\]")


class Report:
    """Text for the reader: standard output, or standard error when the figures go out as JSON."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def __call__(self, line: str = "") -> None:
        print(line, file=self.stream, flush=True)


# -- processes -----------------------------------------------------------------------------------

def free_ports(n: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < n:
        p = peers.free_port()
        if p not in ports:
            ports.append(p)
    return ports


def _sees_every_broker(admin: AdminClient) -> bool:
    return len(admin.list_topics(timeout=10).brokers) == CLUSTER_SIZE


@contextlib.contextmanager
def running_cluster(root: Path, name: str, overrides: dict[str, str]) -> Iterator[devcluster.DevCluster]:
    """ZooKeeper and three brokers (gregor.devcluster) under ``root/name``, killed at the end."""
    zk_port, *ports = free_ports(CLUSTER_SIZE + 1)
    plan = devcluster.build_plan(root / name, zk_port, ports, overrides, quiet=True)
    with open(os.devnull, "w") as quiet:
        dc = devcluster.DevCluster(plan, quiet, quiet)
        try:
            dc.start()
            for b in dc.plan.brokers:  # each broker ready has joined; each must also have seen the others
                admin = AdminClient({"bootstrap.servers": f"{devcluster.HOST}:{b.port}", "log_level": 0})
                wait_for(partial(_sees_every_broker, admin), 30,
                         f"broker {b.broker_id} to see every broker")
            yield dc
        finally:
            dc.kill_all()


@contextlib.contextmanager
def zk_client(dc: devcluster.DevCluster) -> Iterator[KazooClient]:
    zk = KazooClient(hosts=dc.plan.zookeeper_connect, timeout=10)
    zk.start(10)
    try:
        yield zk
    finally:
        zk.stop()
        zk.close()


# -- topics --------------------------------------------------------------------------------------

def wait_for(cond: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.05)
    raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")


def create_topic(bootstrap: str, topic: str, partitions: int, rf: int, configs: dict[str, str] | None = None,
                 assignment: list[list[int]] | None = None) -> None:
    """Create the topic (with ``assignment``: those replicas, the first of each the preferred
    leader) and wait until Metadata shows a leader and a full ISR for each partition."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    new = (NewTopic(topic, partitions, rf, config=configs or {}) if assignment is None
           else NewTopic(topic, partitions, replica_assignment=assignment, config=configs or {}))
    admin.create_topics([new], operation_timeout=30)[topic].result(60)

    def ready() -> bool:
        md = admin.list_topics(topic, timeout=10).topics.get(topic)
        if md is None or md.error is not None or len(md.partitions) != partitions:
            return False
        return all(p.leader >= 0 and len(p.isrs) == rf for p in md.partitions.values())

    wait_for(ready, 60, f"{topic}'s leaders and full ISRs")


def partition_state(zk: KazooClient, topic: str, partition: int = 0) -> dict[str, Any]:
    data, _ = zk.get(f"/brokers/topics/{topic}/partitions/{partition}/state")
    return dict(json.loads(data))


# -- the machine ---------------------------------------------------------------------------------

CLK_TCK = os.sysconf("SC_CLK_TCK")


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) a process has used; 0 when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime (fields 14 and 15)


def machine_cpu() -> tuple[float, float]:
    """CPU seconds the whole machine has spent busy (every process, ours and others'), and in
    steal (taken by the hypervisor)."""
    with open("/proc/stat") as f:
        user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in f.readline().split()[1:9])
    return (user + nice + system + irq + softirq) / CLK_TCK, steal / CLK_TCK


class CpuMeter:
    """CPU seconds used between start and stop by named processes, by this process (the client:
    librdkafka's threads included) and by the machine as a whole."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.procs = {name: process_cpu(pid) for name, pid in pids.items()}
        t = os.times()
        self.client = t.user + t.system
        self.busy, self.steal = machine_cpu()
        self.wall = time.monotonic()

    def stop(self) -> dict[str, Any]:
        t = os.times()
        busy, steal = machine_cpu()
        wall = time.monotonic() - self.wall
        return {"processes_s": {n: process_cpu(pid) - self.procs[n] for n, pid in self.pids.items()},
                "client_s": t.user + t.system - self.client,
                "machine_busy_cores": (busy - self.busy) / wall, "steal_cores": (steal - self.steal) / wall}


def describe_cpu(cpu: dict[str, Any]) -> str:
    procs = cpu["processes_s"]
    brokers = {n: v for n, v in procs.items() if n != "zookeeper"}
    text = f"cpu s: broker{'s' if len(brokers) > 1 else ''} " + "+".join(f"{v:.1f}" for v in brokers.values())
    if "zookeeper" in procs:
        text += f", zk {procs['zookeeper']:.1f}"
    text += f", client {cpu['client_s']:.1f}; machine {cpu['machine_busy_cores']:.2f}/{os.cpu_count()} cores busy"
    if cpu["steal_cores"] >= 0.05:
        text += f", {cpu['steal_cores']:.2f} stolen"
    return text


def page_cache_probe(root: Path, mb: int = 256) -> dict[str, float]:
    """MB/s of writing a new file (the page cache takes fresh memory: on some virtual machines
    the host backs it only then, and every byte a broker writes pays it) and of writing the
    same file again in place (pages already there)."""
    buf = os.urandom(1 << 20)
    path = root / "page-cache-probe"
    result = {}
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        for name in ("new_file_mb_s", "rewrite_mb_s"):
            os.lseek(fd, 0, os.SEEK_SET)
            t = time.perf_counter()
            for _ in range(mb):
                os.write(fd, buf)
            result[name] = mb / (time.perf_counter() - t)
    finally:
        os.close(fd)
        path.unlink()
    return result


# -- 1. throughput -------------------------------------------------------------------------------

TARGETS = ("single-node", "rf1", "rf3")


def throughput(args: argparse.Namespace, root: Path, say: Report) -> dict[str, Any]:
    n, size = args.messages, args.size
    mb = n * size / 1e6
    say(f"Produce throughput: {n} messages of {size} bytes, acks=all, {args.partitions} partition(s), "
        f"{args.rounds} round(s); confluent-kafka {produce_fetch.PRODUCER}")
    runs: list[dict[str, Any]] = []
    with peers.gregor_process() as (single, proc), running_cluster(root, "throughput", {}) as dc:
        bootstrap = dc.plan.bootstrap
        cluster_pids = {c.name: c.proc.pid for c in dc.brokers if c.proc is not None}
        if dc.zookeeper.proc is not None:
            cluster_pids["zookeeper"] = dc.zookeeper.proc.pid
        setups = {"single-node": (single, 1, {}, {"broker": proc.pid}), "rf1": (bootstrap, 1, {}, cluster_pids),
                  "rf3": (bootstrap, 3, {"min.insync.replicas": "2"}, cluster_pids)}
        for r in range(args.rounds):
            order = TARGETS if r % 2 == 0 else TARGETS[::-1]
            for name in order:
                target, rf, configs, pids = setups[name]
                topic = f"bench-{name}-{r}"
                create_topic(target, topic, args.partitions, rf, configs)
                meter = CpuMeter(pids)
                secs = produce_fetch.produce(target, topic, n, size)
                cpu = meter.stop()
                run = {"round": r + 1, "target": name, "seconds": secs, "mb_s": mb / secs, "msg_s": n / secs,
                       "cpu": cpu}
                runs.append(run)
                say(f"  round {r + 1} {name:12s} {run['mb_s']:8.1f} MB/s {run['msg_s']:9.0f} msg/s ({secs:.2f} s; "
                    f"{describe_cpu(cpu)})")
    median = {t: {"mb_s": statistics.median(x["mb_s"] for x in runs if x["target"] == t),
                  "msg_s": statistics.median(x["msg_s"] for x in runs if x["target"] == t)} for t in TARGETS}
    for t in TARGETS:
        say(f"  median  {t:12s} {median[t]['mb_s']:8.1f} MB/s {median[t]['msg_s']:9.0f} msg/s")
    ratios = {"rf3/single-node": median["rf3"]["mb_s"] / median["single-node"]["mb_s"],
              "rf3/rf1": median["rf3"]["mb_s"] / median["rf1"]["mb_s"],
              "rf1/single-node": median["rf1"]["mb_s"] / median["single-node"]["mb_s"]}
    say("  ratios: " + "  ".join(f"{k} {v:.2f}x" for k, v in ratios.items())
        + f"  (goal: rf3/single-node >= 0.4x on {os.cpu_count()} cores shared by three brokers)")
    return {"messages": n, "size": size, "partitions": args.partitions, "rounds": args.rounds,
            "runs": runs, "median": median, "ratios": ratios}


# -- 2. failover ---------------------------------------------------------------------------------

class LeaderUpdates(logging.Handler):
    """librdkafka's debug lines (``debug=topic``) that say the client now sends a partition to a
    new leader: (when, leader) for each, as the producer's poll hands them over."""

    LINE = re.compile(r"applying leader-id update -?\d+ -> (\d+)")

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.seen: list[tuple[float, int]] = []
        self.logger = logging.getLogger(f"bench.cluster.rdkafka.{id(self)}")
        self.logger.propagate = False
        self.logger.setLevel(logging.DEBUG)
        self.logger.addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        m = self.LINE.search(record.getMessage())
        if m is not None:
            self.seen.append((time.time(), int(m.group(1))))

    def first(self, leader: int, after: float) -> float | None:
        return next((t for t, b in self.seen if b == leader and t > after), None)


class SteadyProducer(threading.Thread):
    """Produces ``rate`` messages a second to one partition until stopped, recording each
    delivery as (produced at, acknowledged at, ok): wall-clock times, like the brokers' logs."""

    def __init__(self, bootstrap: str, topic: str, rate: int, size: int, idempotence: bool) -> None:
        super().__init__(name="steady producer", daemon=True)
        self.leader_updates = LeaderUpdates()
        self.producer = Producer({"bootstrap.servers": bootstrap, **FAILOVER_PRODUCER,
                                  "enable.idempotence": idempotence, "logger": self.leader_updates.logger})
        self.topic, self.rate, self.payload = topic, rate, os.urandom(size)
        self.deliveries: list[tuple[float, float, bool]] = []
        self.errors: list[str] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        start, sent_count = time.monotonic(), 0
        while not self.stopping.is_set():
            due = int((time.monotonic() - start) * self.rate) - sent_count
            if due > self.rate:  # the local queue was full for a second: no burst to catch up
                sent_count += due - self.rate
                due = self.rate
            sent = time.time()
            for _ in range(max(due, 0)):
                try:
                    self.producer.produce(self.topic, self.payload, partition=0,
                                          on_delivery=partial(self._done, sent))
                except BufferError:
                    break  # the local queue is full: the next tick tries again
                sent_count += 1
            self.producer.poll(TICK_S)  # returns early to serve each delivery
        self.producer.flush(10)

    def _done(self, sent: float, err: KafkaError | None, msg: Message) -> None:
        self.deliveries.append((sent, time.time(), err is None))
        if err is not None:
            self.errors.append(str(err))

    def first_ack_after(self, t: float, timeout: float) -> float:
        """When the first message produced after ``t`` was acknowledged."""
        start = 0

        def find() -> float | None:
            nonlocal start
            seen = self.deliveries[start:]  # appended by the producer's thread only
            start += len(seen)
            acks = [ack for sent, ack, ok in seen if ok and sent > t]
            return min(acks) if acks else None

        return float(wait_for(find, timeout, "an acknowledged write after the kill"))

    def stop(self) -> None:
        self.stopping.set()
        self.join(15)


@dataclass
class Kill:
    number: int
    killed: int
    was_controller: bool
    new_leader: int = -1
    # seconds from the kill
    session_expired: float | None = None
    controller_elected: float | None = None
    elected: float | None = None
    leader_acting: float | None = None
    client_saw_leader: float | None = None
    first_ack: float = 0.0
    # seconds from the restart of the killed broker
    restart_ready: float = 0.0
    back_in_isr: float = 0.0
    notes: list[str] = field(default_factory=list)


class Moment:
    """The first time a ZooKeeper node's data passes a test (a kazoo DataWatch: called with the
    node's data at once and at every change, None when the node is gone)."""

    def __init__(self, zk: KazooClient, path: str, test: Callable[[bytes | None], Any]) -> None:
        self.at: float | None = None
        self.value: Any = None

        def changed(data: bytes | None, _stat: object) -> bool:
            if self.at is not None:
                return False
            got = test(data)
            if got:
                self.at, self.value = time.time(), got
                return False  # no more watching
            return True

        zk.DataWatch(path, changed)


def log_time(line: str) -> float | None:
    m = LOG_TIME.match(line)
    if m is None:
        return None
    return time.mktime(time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")) + int(m.group(2)) / 1000


def leader_acting_at(log_path: Path, offset: int, topic: str, epoch: int) -> float | None:
    """When the broker's log (from ``offset``) says it leads ``topic``-0 at ``epoch``."""
    text = f"{topic}-0: leader at epoch {epoch} "
    with open(log_path, "rb") as f:
        f.seek(offset)
        for raw in f:
            line = raw.decode(errors="replace")
            if text in line:
                return log_time(line)
    return None


def follower_refusals(log_path: Path, offset: int, topic: str) -> list[str]:
    """The errors a follower's OffsetForLeaderEpoch got from its leader (each followed by a
    replica.fetch.backoff.ms pause), from ``offset`` on in its log."""
    text = f"{topic}-0: the leader's OffsetForLeaderEpoch answered "
    with open(log_path, "rb") as f:
        f.seek(offset)
        lines = [raw.decode(errors="replace") for raw in f]
    return [line.split(text, 1)[1].split()[0] for line in lines if text in line]


def measure_kill(number: int, dc: devcluster.DevCluster, zk: KazooClient, producer: SteadyProducer,
                 topic: str) -> Kill:
    state = partition_state(zk, topic)
    leader, epoch = int(state["leader"]), int(state["leader_epoch"])
    controller = int(json.loads(zk.get("/controller")[0])["brokerid"])
    k = Kill(number, leader, controller == leader)
    expired = Moment(zk, f"/brokers/ids/{leader}", lambda data: data is None)

    def new_leader(data: bytes | None) -> tuple[int, int] | None:
        if data is None:
            return None
        st = json.loads(data)
        return (st["leader"], st["leader_epoch"]) if st["leader"] not in (-1, leader) else None

    elected = Moment(zk, f"/brokers/topics/{topic}/partitions/0/state", new_leader)
    controller_moved = Moment(zk, "/controller", lambda data: data is not None
                              and json.loads(data)["brokerid"] != leader) if k.was_controller else None
    log_offsets = {b.broker_id: b.log_path.stat().st_size for b in dc.plan.brokers}

    t_kill = time.time()
    dc.kill_broker(leader)
    k.first_ack = producer.first_ack_after(t_kill, ACK_WAIT_S) - t_kill
    wait_for(lambda: expired.at is not None and elected.at is not None, 30, "the session expiry and the election")
    assert expired.at is not None and elected.at is not None
    k.session_expired, k.elected = expired.at - t_kill, elected.at - t_kill
    if controller_moved is not None and controller_moved.at is not None:
        k.controller_elected = controller_moved.at - t_kill
    k.new_leader, new_epoch = elected.value
    spec = dc.plan.brokers[k.new_leader - 1]
    acting = wait_for(lambda: leader_acting_at(spec.log_path, log_offsets[k.new_leader], topic, new_epoch), 10,
                      f"broker {k.new_leader}'s log line leading at epoch {new_epoch}")
    k.leader_acting = acting - t_kill
    saw = producer.leader_updates.first(k.new_leader, t_kill)
    k.client_saw_leader = None if saw is None else saw - t_kill
    if new_epoch != epoch + 1:
        k.notes.append(f"leader epoch {epoch} -> {new_epoch}")
    for b in dc.plan.brokers:
        if b.broker_id not in (leader, k.new_leader):
            refused = follower_refusals(b.log_path, log_offsets[b.broker_id], topic)
            if refused:
                k.notes.append(f"broker {b.broker_id}'s OffsetForLeaderEpoch refused {', '.join(refused)}, "
                               "then replica.fetch.backoff.ms")

    t_restart = time.monotonic()
    dc.restart_broker(leader)
    k.restart_ready = time.monotonic() - t_restart
    wait_for(lambda: len(partition_state(zk, topic)["isr"]) == CLUSTER_SIZE, ISR_WAIT_S,
             f"broker {leader} back in the ISR")
    k.back_in_isr = time.monotonic() - t_restart
    return k


def describe_kill(k: Kill) -> str:
    role = "leader and controller" if k.was_controller else "leader"
    parts = [f"session expired {k.session_expired:5.2f}"]
    if k.controller_elected is not None:
        parts.append(f"new controller {k.controller_elected:5.2f}")
    parts += [f"elected {k.elected:5.2f}", f"leader acting {_s(k.leader_acting, '')}",
              f"client sends to it {_s(k.client_saw_leader, '')}", f"first ack {k.first_ack:5.2f} s"]
    notes = f" [{'; '.join(k.notes)}]" if k.notes else ""
    return (f"  kill {k.number:2d}: broker {k.killed} ({role}) -> leader {k.new_leader}: " + ", ".join(parts)
            + f" after the kill; restarted broker ready in {k.restart_ready:.1f} s, back in the ISR in "
            f"{k.back_in_isr:.1f} s{notes}")


def _s(v: float | None, unit: str = " s") -> str:
    return "    ?" if v is None else f"{v:5.2f}{unit}"


# (stage, from, to): Kill's times from the kill
STAGES = [("session expiry", "", "session_expired"), ("election", "session_expired", "elected"),
          ("new leader acting", "elected", "leader_acting"),
          ("client sends to it", "leader_acting", "client_saw_leader"),
          ("first ack", "client_saw_leader", "first_ack")]


def _median_gap(kills: list[Kill], start: str, end: str) -> float | None:
    gaps = [b - (getattr(k, start) if start else 0.0) for k in kills
            if (b := getattr(k, end)) is not None and (not start or getattr(k, start) is not None)]
    return statistics.median(gaps) if gaps else None


def failover(args: argparse.Namespace, root: Path, session_ms: int, say: Report) -> dict[str, Any]:
    overrides = {**FAILOVER_OVERRIDES, "zookeeper.session.timeout.ms": str(session_ms)}
    say(f"zookeeper.session.timeout.ms={session_ms}:")
    kills: list[Kill] = []
    with running_cluster(root, f"failover-{session_ms}", overrides) as dc, zk_client(dc) as zk:
        # the controller first: the first kill takes the controller with the leader (a new controller is
        # elected before the partition's leader); later kills hit it when leadership and control meet again
        controller = int(json.loads(zk.get("/controller")[0])["brokerid"])
        replicas = [controller] + [b for b in range(1, CLUSTER_SIZE + 1) if b != controller]
        create_topic(dc.plan.bootstrap, FAILOVER_TOPIC, 1, CLUSTER_SIZE, {"min.insync.replicas": "2"}, [replicas])
        producer = SteadyProducer(dc.plan.bootstrap, FAILOVER_TOPIC, args.rate, args.size, args.idempotence)
        producer.start()
        try:
            for i in range(1, args.kills + 1):
                producer.first_ack_after(time.time(), ACK_WAIT_S)  # writes flow before each kill
                kills.append(measure_kill(i, dc, zk, producer, FAILOVER_TOPIC))
                say(describe_kill(kills[-1]))
        finally:
            producer.stop()
        failed = len(producer.errors)
    totals = [k.first_ack for k in kills]

    def med(name: str) -> float | None:
        values = [v for k in kills if (v := getattr(k, name)) is not None]
        return statistics.median(values) if values else None

    mp = {p: med(p) for p in ("session_expired", "controller_elected", "elected", "leader_acting",
                              "client_saw_leader", "first_ack")}
    gaps = {name: _median_gap(kills, a, b) for name, a, b in STAGES}
    summary = {"session_timeout_ms": session_ms, "kills": [asdict(k) for k in kills],
               "median_s": statistics.median(totals), "max_s": max(totals), "median_parts_s": mp,
               "median_stages_s": gaps, "failed_deliveries": failed, "failed_examples": producer.errors[:5]}
    say(f"  kill to first ack on the new leader: median {statistics.median(totals):.2f} s, max {max(totals):.2f} s"
        + (" (goal: under 10 s)" if session_ms == 6000 else ""))
    say("  median of each stage: " + ", ".join(f"{name} {_s(v).strip()}" for name, v in gaps.items()))
    with_controller = sum(k.was_controller for k in kills)
    refused = sum(any("OffsetForLeaderEpoch" in n for n in k.notes) for k in kills)
    say(f"  {with_controller} of {len(kills)} kills took the controller too; in {refused} the surviving follower's "
        "OffsetForLeaderEpoch reached the new leader before its election did")
    if failed:
        say(f"  {failed} deliveries failed, e.g. {producer.errors[:3]}")
    return summary


# -- main ----------------------------------------------------------------------------------------

def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true", help="a smoke run: 20000 messages, 1 round, 2 kills")
    ap.add_argument("--messages", type=int, help="messages per throughput run (default 300000, --quick 20000)")
    ap.add_argument("--size", type=int, default=1024, help="message size in bytes (default 1024)")
    ap.add_argument("--partitions", type=int, default=1, help="partitions of the throughput topics (default 1)")
    ap.add_argument("--rounds", type=int, help="throughput rounds (default 3, --quick 1)")
    ap.add_argument("--kills", type=int, help="leader kills per session timeout (default 10, --quick 2)")
    ap.add_argument("--session-timeouts", default="6000,4000", metavar="MS,MS",
                    help="zookeeper.session.timeout.ms values of the failover runs (default 6000,4000)")
    ap.add_argument("--rate", type=int, default=1000, help="messages a second during the failover runs (default 1000)")
    ap.add_argument("--no-idempotence", dest="idempotence", action="store_false",
                    help="the failover producer without enable.idempotence (librdkafka then skips its partition drain)")
    ap.add_argument("--only", choices=["throughput", "failover"], help="run one part only")
    ap.add_argument("--json", action="store_true", help="the figures as JSON on stdout, the text on stderr")
    ap.add_argument("--keep", action="store_true", help="keep the data directory (the brokers' and ZooKeeper's logs)")
    args = ap.parse_args(argv)
    args.messages = args.messages or (20_000 if args.quick else 300_000)
    args.rounds = args.rounds or (1 if args.quick else 3)
    args.kills = args.kills if args.kills is not None else (2 if args.quick else 10)
    args.session_timeouts = [int(x) for x in args.session_timeouts.split(",") if x.strip()]
    return args


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    say = Report(sys.stderr if args.json else sys.stdout)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupt)  # the finally blocks kill every process
    root = Path(tempfile.mkdtemp(prefix="gregor-bench-cluster-"))
    load = os.getloadavg()
    say(f"bench/cluster.py: {os.cpu_count()} cores, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
        f"data under {root}")
    result: dict[str, Any] = {"cores": os.cpu_count(), "load_average": load}
    try:
        probe = result["page_cache"] = page_cache_probe(root)
        say(f"page cache: a new file written at {probe['new_file_mb_s']:.0f} MB/s, rewritten in place at "
            f"{probe['rewrite_mb_s']:.0f} MB/s (each broker pays the first rate for the bytes it stores)")
        if args.only in (None, "throughput"):
            result["throughput"] = throughput(args, root, say)
        if args.only in (None, "failover") and args.kills > 0:
            kind = "idempotent" if args.idempotence else "non-idempotent"
            say(f"Failover: one RF=3 partition (min.insync.replicas=2), an acks=all {kind} producer sending "
                f"{args.rate} messages of {args.size} bytes a second, the leader SIGKILLed {args.kills} times "
                "(times in seconds after the kill)")
            say("  session expired: the killed broker's /brokers/ids node is gone; elected: the partition's state "
                "node names the new leader; leader acting: the new leader's log says it leads; client sends to it: "
                "librdkafka applies the new leader (it re-reads metadata once a second while a leader is down); "
                "first ack: the delivery callback (librdkafka often parks the partition once more, for its "
                "idempotent drain or as it decommissions the dead broker, and re-reads metadata a second later)")
            result["failover"] = [failover(args, root, ms, say) for ms in args.session_timeouts]
    except KeyboardInterrupt:
        say("interrupted: every process was killed")
        return 130
    finally:
        if args.keep:
            say(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
