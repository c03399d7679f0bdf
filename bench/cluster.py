"""The cluster's costs (issues 12 and 13): produce throughput with replication, the time a partition
is unavailable when its leader dies, the time groups are without a coordinator when a broker dies,
and what replicating __consumer_offsets costs a commit. Figures only, no assertion.

0. The machine: how fast the page cache takes a new file's data and a rewrite in place (on some
   virtual machines, this one included, fresh memory is backed by the host only when first
   written, and every byte a broker stores pays that; replication factor 3 stores it three times).
1. Produce throughput (``throughput``) of ``--size`` byte messages with acks=all (bench/produce_fetch.py's
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
2. Failover (``failover``): a three-broker cluster per ``zookeeper.session.timeout.ms`` in ``--session-timeouts``
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
3. Coordinator failover (``coordinator-failover``): a three-broker cluster with Gregor's defaults
   (offsets.topic.num.partitions 50, offsets.topic.replication.factor 3,
   zookeeper.session.timeout.ms 6000) and ``--groups`` groups spread over the __consumer_offsets
   partitions, each committing an offset (one OffsetCommit v8 per group to its coordinator, over
   a few pipelined connections: no consumers). ``--kills`` times (default 5): every group commits
   a new offset, then one broker (in turn) is SIGKILLed, which takes away the coordinator of about
   a third of the groups; from the kill on, FindCoordinator v4 (all groups not yet served in one
   request) goes to a survivor, then an OffsetFetch v8 of its groups to each coordinator named,
   every 50 ms; a group is served again once its coordinator answers without error with the
   offset committed before the kill (another offset is reported as a wrong offset). Per kill: the
   time the last group was served, the median affected group's, the groups affected, and the parts
   (session expiry of the dead broker's znode, the elections of its partitions' new leaders in
   their state nodes, the new leaders' "Finished loading" log lines). Then the killed broker is
   restarted and the next kill waits until it is back in every ISR and leads its preferred
   partitions again: ``--rebalance-interval`` sets leader.imbalance.check.interval.seconds (5;
   Gregor's and Kafka's default 300 would only make the wait between kills longer). The goal: every
   group served again within 10 s.
4. Commit throughput (``commits``): OffsetCommit v8 of one group (``--commit-partitions``
   partitions each) to its coordinator from ``--commit-connections`` connections with
   ``--commit-depth`` in flight each, for ``--commit-seconds``, on two three-broker clusters running
   side by side, one with offsets.topic.replication.factor 1 and one with 3, ``--rounds`` times in
   alternating order: commits/s, the latency of a commit (median, p99) under that load and alone
   (one at a time, 100 commits), and the RF3/RF1 ratio. A commit is answered when the high
   watermark covers it, so with replication factor 3 each commit waits for a follower fetch round
   trip (the leader's append wakes the followers' waiting fetches; their next fetch moves the high
   watermark).

5. Commit availability (``commit-availability``): a three-broker cluster with Gregor's defaults and
   ``--groups``/10 groups (at least 30), each committing every 50 ms to its coordinator. Each broker
   in turn is SIGKILLed and restarted, then stopped with a controlled shutdown and restarted; for
   the groups whose coordinator did not move during a step (a broker that only follows their
   partition died or restarted: the controller bumps their leader epoch and nothing else), the
   longest gap between successful commits and the number of errors. Goal: no error at all.

Everything runs on this machine under a temporary directory, removed at the end (``--keep``
keeps it, with every process's log); every process is killed at the end, also after an error,
Ctrl-C or SIGTERM.

    .venv/bin/python bench/cluster.py                 # the full run (about 15 minutes)
    .venv/bin/python bench/cluster.py --quick         # a smoke run: fewer messages and kills
    .venv/bin/python bench/cluster.py --json          # the figures as JSON on stdout (text on stderr)
    .venv/bin/python bench/cluster.py --only failover --kills 3 --session-timeouts 6000 --keep
    .venv/bin/python bench/cluster.py --only coordinator-failover,commits   # issue 13's figures
    .venv/bin/python bench/cluster.py --only coordinator-failover --groups 20 --kills 1 --keep
    .venv/bin/python bench/cluster.py --only commit-availability   # issue 23's: no error while nothing moves
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
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
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
from gregor.admin.wire_client import WireClient, decode_response_frame  # noqa: E402
from gregor.protocol.api_keys import ApiKey  # noqa: E402
from gregor.protocol.consumer_offsets import OFFSETS_TOPIC, partition_for  # noqa: E402

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


# -- the wire: requests from this process, without a client library ----------------------------

CLIENT_ID = "bench-cluster"


def pipelined(wire: WireClient, api_key: int, version: int, bodies: list[dict[str, Any]],
              depth: int) -> list[Any]:
    """Send ``bodies`` on one connection with up to ``depth`` requests unanswered at a time; the
    decoded responses in order. (A Gregor broker works on one request of a connection at a time:
    more in flight only hides the client's own turnaround.)"""
    out: list[Any] = []
    sent: list[int] = []
    i = 0
    while len(out) < len(bodies):
        while i < len(bodies) and len(sent) - len(out) < depth:
            wire.send_raw(wire.request_bytes(api_key, version, bodies[i]))
            sent.append(wire.corr)
            i += 1
        corr, response = decode_response_frame(api_key, version, wire.recv_frame())
        if corr != sent[len(out)]:
            raise ConnectionError(f"response to request {corr} where {sent[len(out)]} was expected")
        out.append(response)
    return out


class Link:
    """One connection to a broker, opened on first use and again after a failure (a dead broker
    refuses at once on this host, so a link to it costs nothing)."""

    def __init__(self, address: str, timeout: float = 10) -> None:
        self.address, self.timeout = address, timeout
        self.wire: WireClient | None = None

    def calls(self, api_key: int, version: int, bodies: list[dict[str, Any]], depth: int = 1) -> list[Any]:
        """The responses; OSError (the connection dropped) when the broker could not answer them all."""
        try:
            if self.wire is None:
                self.wire = WireClient(self.address, self.timeout, client_id=CLIENT_ID)
            return pipelined(self.wire, api_key, version, bodies, depth)
        except OSError:
            self.close()
            raise

    def close(self) -> None:
        if self.wire is not None:
            self.wire.close()
            self.wire = None


class Links:
    """A link per broker address, made on first use."""

    def __init__(self) -> None:
        self.by_address: dict[str, Link] = {}

    def __getitem__(self, address: str) -> Link:
        if address not in self.by_address:
            self.by_address[address] = Link(address)
        return self.by_address[address]

    def close(self) -> None:
        for link in self.by_address.values():
            link.close()


def broker_address(dc: devcluster.DevCluster, broker_id: int) -> str:
    return f"{devcluster.HOST}:{dc.plan.brokers[broker_id - 1].port}"


def find_coordinators(link: Link, groups: list[str]) -> dict[str, tuple[int, str, int]]:
    """FindCoordinator v4 for many groups in one request: group -> (node id, host:port, error code)."""
    response = link.calls(ApiKey.FIND_COORDINATOR, 4, [{"key_type": 0, "coordinator_keys": groups}])[0]
    return {c.key: (c.node_id, f"{c.host}:{c.port}", int(c.error_code)) for c in response.coordinators}


def commit_body(group: str, topic: str, offsets: dict[int, int]) -> dict[str, Any]:
    """OffsetCommit v8 of a group that only stores offsets (generation -1, no member)."""
    return {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": topic, "partitions": [
                {"partition_index": p, "committed_offset": o, "committed_leader_epoch": -1, "committed_metadata": ""}
                for p, o in offsets.items()]}]}


def commit_errors(response: Any) -> list[int]:
    return [int(p.error_code) for t in response.topics for p in t.partitions if p.error_code]


def commit_groups(dc: devcluster.DevCluster, offsets: dict[str, int], topic: str, timeout: float,
                  connections: int = 4, depth: int = 8) -> None:
    """Commit ``offsets[group]`` for partition 0 of ``topic`` in every group, each by one OffsetCommit
    to its coordinator, ``connections`` connections per coordinator working at once; groups whose
    commit failed (a coordinator still loading, or moved) are looked up and committed again."""
    todo = dict(offsets)
    deadline = time.monotonic() + timeout
    ask = Link(dc.plan.bootstrap.split(",")[0])
    last: dict[str, str] = {}
    try:
        while todo:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(todo)} groups not committed after {timeout:.0f} s, e.g. "
                                   f"{dict(list(last.items())[:3])}")
            coordinators = find_coordinators(ask, sorted(todo))
            by_address: dict[str, list[str]] = {}
            for g, (_node, address, code) in coordinators.items():
                if code:
                    last[g] = f"FindCoordinator error {code}"
                else:
                    by_address.setdefault(address, []).append(g)
            jobs = [(address, gs[i::connections]) for address, gs in by_address.items() for i in range(connections)
                    if gs[i::connections]]

            def run(job: tuple[str, list[str]]) -> list[str]:
                address, gs = job
                link = Link(address)
                try:
                    responses = link.calls(ApiKey.OFFSET_COMMIT, 8,
                                           [commit_body(g, topic, {0: todo[g]}) for g in gs], depth)
                except OSError as e:
                    for g in gs:
                        last[g] = f"{address}: {e}"
                    return []
                finally:
                    link.close()
                done = []
                for g, r in zip(gs, responses, strict=True):
                    if commit_errors(r):
                        last[g] = f"OffsetCommit errors {commit_errors(r)}"
                    else:
                        done.append(g)
                return done

            with ThreadPoolExecutor(max(len(jobs), 1)) as pool:
                for done in pool.map(run, jobs):
                    for g in done:
                        del todo[g]
            if todo:
                time.sleep(0.2)
    finally:
        ask.close()


# -- 3. coordinator failover for many groups ---------------------------------------------------

GROUPS_TOPIC = "group-offsets"
GROUP_SERVE_WAIT_S = 120.0
POLL_PAUSE_S = 0.05
LOADED = re.compile(rf"Finished loading offsets and group metadata from {OFFSETS_TOPIC}-(\d+) in (\d+) milliseconds")


def offsets_states(zk: KazooClient) -> dict[int, dict[str, Any]]:
    """The state node of every __consumer_offsets partition."""
    parts = zk.get_children(f"/brokers/topics/{OFFSETS_TOPIC}/partitions")
    return {int(p): partition_state(zk, OFFSETS_TOPIC, int(p)) for p in parts}


def offsets_assignment(zk: KazooClient) -> dict[int, list[int]]:
    data, _ = zk.get(f"/brokers/topics/{OFFSETS_TOPIC}")
    return {int(p): [int(r) for r in rs] for p, rs in json.loads(data)["partitions"].items()}


def offsets_balanced(zk: KazooClient, partitions: int) -> bool:
    """Every __consumer_offsets partition has all three replicas in its ISR and is led by its
    preferred replica (so each broker coordinates about a third of the groups)."""
    if not zk.exists(f"/brokers/topics/{OFFSETS_TOPIC}"):
        return False
    assignment = offsets_assignment(zk)
    states = offsets_states(zk)
    return (len(states) == partitions == len(assignment)
            and all(len(st["isr"]) == CLUSTER_SIZE and st["leader"] == assignment[p][0] for p, st in states.items()))


class GroupPoller:
    """Whether each group is served: FindCoordinator v4 for the groups not yet served, from one
    broker, then for every coordinator named an OffsetFetch v8 of its groups; a group is served
    once its coordinator answers without error with the offset it committed."""

    def __init__(self, expected: dict[str, int], topic: str) -> None:
        self.expected, self.topic = expected, topic
        self.links = Links()
        self.last_error: dict[str, str] = {}
        self.wrong: dict[str, int] = {}  # group -> the offset answered where another was committed

    def poll(self, ask: str, groups: list[str]) -> dict[str, float]:
        """The groups among ``groups`` served now, with the time (time.time()) their answer came."""
        served: dict[str, float] = {}
        try:
            coordinators = find_coordinators(self.links[ask], groups)
        except OSError as e:
            for g in groups:
                self.last_error[g] = f"FindCoordinator to {ask}: {e}"
            return served
        by_address: dict[str, list[str]] = {}
        for g, (_node, address, code) in coordinators.items():
            if code:
                self.last_error[g] = f"FindCoordinator: error {code}"
            else:
                by_address.setdefault(address, []).append(g)
        for address, gs in by_address.items():
            # require_stable, as consumers ask (librdkafka's read_committed default, the Java
            # consumer): the answer waits for what the new coordinator loaded to be committed
            body = {"groups": [{"group_id": g, "topics": [{"name": self.topic, "partition_indexes": [0]}]} for g in gs],
                    "require_stable": True}
            try:
                response = self.links[address].calls(ApiKey.OFFSET_FETCH, 8, [body])[0]
            except OSError as e:
                for g in gs:
                    self.last_error[g] = f"OffsetFetch to {address}: {type(e).__name__}"
                continue
            now = time.time()
            for r in response.groups:
                parts = [p for t in r.topics for p in t.partitions]
                if r.error_code or not parts or parts[0].error_code:
                    why = f"error {r.error_code or parts[0].error_code}" if parts else "no partition answered"
                    self.last_error[r.group_id] = f"OffsetFetch from {address}: {why}"
                elif parts[0].committed_offset != self.expected[r.group_id]:
                    self.wrong[r.group_id] = parts[0].committed_offset
                    self.last_error[r.group_id] = (f"OffsetFetch from {address}: offset {parts[0].committed_offset}, "
                                                   f"committed {self.expected[r.group_id]}")
                else:
                    served[r.group_id] = now
        return served

    def until_served(self, ask: Callable[[], str], timeout: float) -> tuple[dict[str, float], list[str]]:
        """Poll until every group is served or ``timeout``: (group -> when served, groups never served)."""
        pending = sorted(self.expected)
        served: dict[str, float] = {}
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            got = self.poll(ask(), pending)
            served.update(got)
            pending = [g for g in pending if g not in got]
            if pending:
                time.sleep(POLL_PAUSE_S)
        return served, pending

    def close(self) -> None:
        self.links.close()


@dataclass
class GroupKill:
    number: int
    killed: int
    was_controller: bool
    partitions_lost: int  # __consumer_offsets partitions the killed broker led
    groups_affected: int  # groups it coordinated
    # seconds from the kill
    session_expired: float | None = None
    controller_elected: float | None = None
    first_elected: float | None = None
    last_elected: float | None = None
    first_loaded: float | None = None
    last_loaded: float | None = None
    longest_load_ms: int = 0
    loads_seen: int = 0
    affected_median: float | None = None  # the median affected group's time until served
    last_served: float | None = None  # the last group's (of all groups)
    unaffected_max: float | None = None  # the last group the kill did not concern
    never_served: list[str] = field(default_factory=list)
    never_served_errors: dict[str, str] = field(default_factory=dict)
    wrong_offsets: dict[str, int] = field(default_factory=dict)
    # seconds from the restart of the killed broker
    restart_ready: float = 0.0
    balanced_again: float = 0.0


def loads_after(log_path: Path, offset: int, partitions: set[int]) -> list[tuple[float, int, int]]:
    """(when, partition, milliseconds) of each 'Finished loading' line for ``partitions`` in the log
    from ``offset`` on."""
    found = []
    with open(log_path, "rb") as f:
        f.seek(offset)
        for raw in f:
            line = raw.decode(errors="replace")
            m = LOADED.search(line)
            if m is not None and int(m.group(1)) in partitions and (t := log_time(line)) is not None:
                found.append((t, int(m.group(1)), int(m.group(2))))
    return found


def measure_group_kill(number: int, victim: int, dc: devcluster.DevCluster, zk: KazooClient,
                       poller: GroupPoller, partitions: int) -> GroupKill:
    states = offsets_states(zk)
    lost = {p for p, st in states.items() if st["leader"] == victim}
    affected = {g for g in poller.expected if partition_for(g, partitions) in lost}
    controller = int(json.loads(zk.get("/controller")[0])["brokerid"])
    k = GroupKill(number, victim, controller == victim, len(lost), len(affected))
    expired = Moment(zk, f"/brokers/ids/{victim}", lambda data: data is None)
    controller_moved = Moment(zk, "/controller", lambda data: data is not None
                              and json.loads(data)["brokerid"] != victim) if k.was_controller else None

    def new_leader(data: bytes | None) -> int | None:
        if data is None:
            return None
        leader = json.loads(data)["leader"]
        return leader if leader not in (-1, victim) else None

    elected = [Moment(zk, f"/brokers/topics/{OFFSETS_TOPIC}/partitions/{p}/state", new_leader) for p in sorted(lost)]
    log_offsets = {b.broker_id: b.log_path.stat().st_size for b in dc.plan.brokers}
    survivors = [b for b in range(1, CLUSTER_SIZE + 1) if b != victim]
    turn = iter(range(1 << 30))

    def ask() -> str:  # FindCoordinator to the survivors in turn
        return broker_address(dc, survivors[next(turn) % len(survivors)])

    poller.wrong.clear()
    t_kill = time.time()
    dc.kill_broker(victim)
    served, pending = poller.until_served(ask, GROUP_SERVE_WAIT_S)
    times = {g: t - t_kill for g, t in served.items()}
    if times:
        k.last_served = max(times.values())
    hit = [times[g] for g in affected if g in times]
    k.affected_median = statistics.median(hit) if hit else None
    k.unaffected_max = max((t for g, t in times.items() if g not in affected), default=None)
    k.never_served = pending
    k.never_served_errors = {g: poller.last_error.get(g, "?") for g in pending[:10]}
    k.wrong_offsets = dict(poller.wrong)
    wait_for(lambda: expired.at is not None, 30, f"broker {victim}'s session to expire")
    assert expired.at is not None
    k.session_expired = expired.at - t_kill
    if controller_moved is not None and controller_moved.at is not None:
        k.controller_elected = controller_moved.at - t_kill
    at = [m.at - t_kill for m in elected if m.at is not None]
    if at:
        k.first_elected, k.last_elected = min(at), max(at)
    loads = [x for b in survivors for x in loads_after(dc.plan.brokers[b - 1].log_path, log_offsets[b], lost)]
    if loads:
        k.loads_seen = len(loads)
        k.first_loaded = min(t for t, _p, _ms in loads) - t_kill
        k.last_loaded = max(t for t, _p, _ms in loads) - t_kill
        k.longest_load_ms = max(ms for _t, _p, ms in loads)

    t_restart = time.monotonic()
    dc.restart_broker(victim)
    k.restart_ready = time.monotonic() - t_restart
    wait_for(lambda: offsets_balanced(zk, partitions), ISR_WAIT_S,
             f"broker {victim} back in every ISR of {OFFSETS_TOPIC} and leading its preferred partitions")
    k.balanced_again = time.monotonic() - t_restart
    return k


def describe_group_kill(k: GroupKill) -> str:
    role = " (the controller too)" if k.was_controller else ""
    parts = [f"session expired {_s(k.session_expired, '')}"]
    if k.controller_elected is not None:
        parts.append(f"new controller {k.controller_elected:5.2f}")
    parts += [f"elected {_s(k.first_elected, '')}..{_s(k.last_elected, '').strip()}",
              f"loaded {_s(k.first_loaded, '')}..{_s(k.last_loaded, '').strip()} (longest load {k.longest_load_ms} ms)",
              f"groups served: median affected {_s(k.affected_median, '')}, last {_s(k.last_served)}"]
    text = (f"  kill {k.number:2d}: broker {k.killed}{role}, coordinator of {k.groups_affected} groups "
            f"({k.partitions_lost} partitions): " + ", ".join(parts)
            + f"; restarted in {k.restart_ready:.1f} s, back in every ISR and leading again in "
            f"{k.balanced_again:.1f} s")
    if k.never_served:
        text += (f"\n    NEVER SERVED within {GROUP_SERVE_WAIT_S:.0f} s: {len(k.never_served)} groups, e.g. "
                 + "; ".join(f"{g}: {e}" for g, e in list(k.never_served_errors.items())[:5]))
    if k.wrong_offsets:
        text += (f"\n    WRONG OFFSETS answered for {len(k.wrong_offsets)} groups, e.g. "
                 f"{dict(list(k.wrong_offsets.items())[:5])}")
    return text


# (stage, from, to): GroupKill's times from the kill
GROUP_STAGES = [("session expiry", "", "session_expired"),
                ("election (expiry to last elected)", "session_expired", "last_elected"),
                ("loading (last elected to last loaded)", "last_elected", "last_loaded"),
                ("to the clients (last loaded to last served)", "last_loaded", "last_served")]


def coordinator_failover(args: argparse.Namespace, root: Path, say: Report) -> dict[str, Any]:
    overrides = {"leader.imbalance.check.interval.seconds": str(args.rebalance_interval)}
    n = args.groups
    say(f"Coordinator failover: {n} groups over the {OFFSETS_TOPIC} partitions (Gregor's defaults: "
        "offsets.topic.num.partitions 50, replication factor 3, zookeeper.session.timeout.ms 6000), a broker "
        f"SIGKILLed {args.group_kills} times in turn; leader.imbalance.check.interval.seconds="
        f"{args.rebalance_interval} so that the restarted broker leads its partitions again before the next kill "
        "(times in seconds after the kill)")
    say("  session expired: the killed broker's /brokers/ids node is gone; elected: the state nodes of its "
        f"{OFFSETS_TOPIC} partitions name new leaders (first..last); loaded: the new leaders' 'Finished loading' "
        "lines (first..last); served: FindCoordinator v4 from a survivor, then OffsetFetch v8 to the coordinator "
        f"named answers the offset committed before the kill (polled every {POLL_PAUSE_S * 1000:.0f} ms)")
    groups = [f"bench-group-{i:04d}" for i in range(n)]
    kills: list[GroupKill] = []
    with running_cluster(root, "groups", overrides) as dc, zk_client(dc) as zk:
        create_topic(dc.plan.bootstrap, GROUPS_TOPIC, 1, CLUSTER_SIZE)
        first = Link(broker_address(dc, 1))
        try:
            wait_for(lambda: all(code == 0 for _n, _a, code in find_coordinators(first, groups[:1]).values()), 60,
                     f"{OFFSETS_TOPIC} to be created")
        finally:
            first.close()
        wait_for(lambda: zk.exists(f"/brokers/topics/{OFFSETS_TOPIC}"), 60, f"{OFFSETS_TOPIC} in ZooKeeper")
        partitions = len(offsets_assignment(zk))
        wait_for(lambda: offsets_balanced(zk, partitions), 120, f"{OFFSETS_TOPIC} fully replicated")
        spread = len({partition_for(g, partitions) for g in groups})
        expected: dict[str, int] = {}
        poller = GroupPoller(expected, GROUPS_TOPIC)
        try:
            for i in range(1, args.group_kills + 1):
                # a new offset for every group before each kill: the one the new coordinator must answer
                expected.update({g: i * 1_000_000 + j for j, g in enumerate(groups)})
                t = time.monotonic()
                commit_groups(dc, expected, GROUPS_TOPIC, 120)
                committed = time.monotonic() - t
                served, pending = poller.until_served(lambda: broker_address(dc, 1), 60)
                if pending:
                    raise RuntimeError(f"{len(pending)} groups not served before kill {i}, e.g. "
                                       f"{[(g, poller.last_error.get(g)) for g in pending[:3]]}")
                if i == 1:
                    say(f"  {n} groups on {spread} of {partitions} partitions; {n} OffsetCommits in {committed:.1f} s "
                        f"({n / committed:.0f}/s, 4 connections per coordinator)")
                victim = (i - 1) % CLUSTER_SIZE + 1
                kills.append(measure_group_kill(i, victim, dc, zk, poller, partitions))
                say(describe_group_kill(kills[-1]))
        finally:
            poller.close()
    last = [k.last_served for k in kills if k.last_served is not None and not k.never_served]
    medians = [k.affected_median for k in kills if k.affected_median is not None]
    held = bool(kills) and len(last) == len(kills) and max(last) <= 10.0 and not any(k.wrong_offsets for k in kills)
    summary: dict[str, Any] = {"groups": n, "offsets_partitions": partitions, "partitions_used": spread,
                               "kills": [asdict(k) for k in kills],
                               "last_served_median_s": statistics.median(last) if last else None,
                               "last_served_max_s": max(last) if last else None,
                               "affected_median_median_s": statistics.median(medians) if medians else None,
                               "goal_held": held}
    if last:
        say(f"  every group served again after a kill: median {statistics.median(last):.2f} s, max {max(last):.2f} s "
            f"over {len(last)} kills; the median affected group: median {statistics.median(medians):.2f} s")
    unserved = sum(len(k.never_served) for k in kills)
    wrong = sum(len(k.wrong_offsets) for k in kills)
    say(f"  goal 'every group served again within 10 s with the defaults': {'held' if held else 'NOT held'}"
        + (f" ({unserved} group-kills never served, {wrong} wrong offsets answered)" if unserved or wrong else ""))
    stages = {name: [b - (getattr(k, a) if a else 0.0) for k in kills
                     if (b := getattr(k, z)) is not None and (not a or getattr(k, a) is not None)]
              for name, a, z in GROUP_STAGES}
    medians_s: dict[str, float | None] = {name: statistics.median(v) if v else None for name, v in stages.items()}
    summary["median_stages_s"] = medians_s
    say("  median of each stage: " + ", ".join(f"{name} {_s(v).strip()}" for name, v in medians_s.items()))
    return summary


# -- 4. commit throughput -----------------------------------------------------------------------

COMMIT_GROUP = "bench-commits"
COMMIT_TOPIC = "commit-bench"
COMMIT_TARGETS = ("rf1", "rf3")


def commit_load(address: str, partitions: int, connections: int, depth: int, seconds: float) -> dict[str, Any]:
    """OffsetCommits of one group (``partitions`` partitions each) to ``address`` from
    ``connections`` connections, each with ``depth`` in flight, for ``seconds``: the count,
    the time taken, each commit's latency (send to answer) and the errors answered."""
    barrier = threading.Barrier(connections + 1)
    results: list[tuple[list[float], int]] = []
    lock = threading.Lock()

    def worker(idx: int) -> None:
        wire = WireClient(address, 30, client_id=f"{CLIENT_ID}-{idx}")
        latencies: list[float] = []
        errors, seq = 0, idx * 1_000_000_000
        inflight: deque[tuple[int, float]] = deque()
        try:
            barrier.wait()
            deadline = time.monotonic() + seconds
            while True:
                while len(inflight) < depth and time.monotonic() < deadline:
                    seq += 1
                    wire.send_raw(wire.request_bytes(ApiKey.OFFSET_COMMIT, 8, commit_body(
                        COMMIT_GROUP, COMMIT_TOPIC, dict.fromkeys(range(partitions), seq))))
                    inflight.append((wire.corr, time.perf_counter()))
                if not inflight:
                    break
                corr, response = decode_response_frame(ApiKey.OFFSET_COMMIT, 8, wire.recv_frame())
                want, sent = inflight.popleft()
                if corr != want:
                    raise ConnectionError(f"response to request {corr} where {want} was expected")
                latencies.append(time.perf_counter() - sent)
                errors += bool(commit_errors(response))
        finally:
            wire.close()
            with lock:
                results.append((latencies, errors))

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(connections)]
    for t in threads:
        t.start()
    barrier.wait()
    start = time.monotonic()
    for t in threads:
        t.join(seconds + 60)
    elapsed = time.monotonic() - start
    latencies = [x for lat, _e in results for x in lat]
    return {"commits": len(latencies), "seconds": elapsed, "errors": sum(e for _l, e in results),
            "latencies": latencies}


def lone_commit_ms(address: str, partitions: int, count: int) -> float:
    """The median latency of ``count`` commits sent one after another (one in flight)."""
    return statistics.median(commit_load_count(address, partitions, count)) * 1000


def commit_load_count(address: str, partitions: int, count: int) -> list[float]:
    wire = WireClient(address, 30, client_id=f"{CLIENT_ID}-lone")
    latencies = []
    try:
        for i in range(count):
            t = time.perf_counter()
            r = wire.call(ApiKey.OFFSET_COMMIT, 8, commit_body(COMMIT_GROUP, COMMIT_TOPIC,
                                                               dict.fromkeys(range(partitions), i)))
            latencies.append(time.perf_counter() - t)
            if commit_errors(r):
                raise RuntimeError(f"OffsetCommit answered {commit_errors(r)}")
    finally:
        wire.close()
    return latencies


def commit_coordinator(dc: devcluster.DevCluster, partitions: int) -> tuple[int, str]:
    """The coordinator of the commit group, once it takes a commit: the first FindCoordinator
    creates __consumer_offsets, and the broker named may answer NOT_COORDINATOR for a moment
    (another broker read the election from ZooKeeper before it did)."""
    link = Link(broker_address(dc, 1))
    try:
        def takes_commits() -> tuple[int, str] | None:
            node, address, code = find_coordinators(link, [COMMIT_GROUP])[COMMIT_GROUP]
            if code:
                return None
            coordinator = Link(address)
            try:
                response = coordinator.calls(ApiKey.OFFSET_COMMIT, 8, [commit_body(
                    COMMIT_GROUP, COMMIT_TOPIC, dict.fromkeys(range(partitions), 0))])[0]
            except OSError:
                return None
            finally:
                coordinator.close()
            return None if commit_errors(response) else (node, address)

        got: tuple[int, str] = wait_for(takes_commits, 60, f"a coordinator for {COMMIT_GROUP} taking commits")
        return got
    finally:
        link.close()


def commit_throughput(args: argparse.Namespace, root: Path, say: Report) -> dict[str, Any]:
    conns, depth, secs, parts = args.commit_connections, args.commit_depth, args.commit_seconds, args.commit_partitions
    say(f"Commit throughput: OffsetCommit v8 of one group ({parts} partitions each) to its coordinator from "
        f"{conns} connection(s) with {depth} in flight each, {secs:g} s a run, {args.rounds} round(s) alternating; "
        f"{OFFSETS_TOPIC} with replication factor 1 and 3 on two three-broker clusters running side by side")
    runs: list[dict[str, Any]] = []
    with running_cluster(root, "commits-rf1", {"offsets.topic.replication.factor": "1"}) as dc1, \
            running_cluster(root, "commits-rf3", {}) as dc3:
        setups: dict[str, tuple[str, dict[str, int]]] = {}
        for name, dc in (("rf1", dc1), ("rf3", dc3)):
            create_topic(dc.plan.bootstrap, COMMIT_TOPIC, parts, 1)
            node, address = commit_coordinator(dc, parts)
            commit_load_count(address, parts, 50)  # warm up: connections, the group, the code paths
            pids = {c.name: c.proc.pid for c in dc.brokers if c.proc is not None}
            rf = len(partition_state_of_group(dc, COMMIT_GROUP)["isr"])
            say(f"  {name}: coordinator broker {node}, {OFFSETS_TOPIC} partition ISR of {rf}")
            setups[name] = (address, pids)
        for r in range(args.rounds):
            for name in COMMIT_TARGETS if r % 2 == 0 else COMMIT_TARGETS[::-1]:
                address, pids = setups[name]
                meter = CpuMeter(pids)
                load = commit_load(address, parts, conns, depth, secs)
                cpu = meter.stop()
                lone = lone_commit_ms(address, parts, 100)
                lat = load.pop("latencies")
                run = {"round": r + 1, "target": name, **load, "commits_s": load["commits"] / load["seconds"],
                       "median_ms": statistics.median(lat) * 1000 if lat else None,
                       "p99_ms": sorted(lat)[int(len(lat) * 0.99)] * 1000 if lat else None,
                       "lone_median_ms": lone, "cpu": cpu}
                runs.append(run)
                say(f"  round {r + 1} {name}: {run['commits_s']:7.0f} commits/s ({load['commits']} in "
                    f"{load['seconds']:.1f} s, {load['errors']} errors), latency median {_ms(run['median_ms'])} "
                    f"p99 {_ms(run['p99_ms'])}; one at a time: median {lone:.1f} ms ({describe_cpu(cpu)})")
    median = {t: {k: statistics.median(x[k] for x in runs if x["target"] == t)
                  for k in ("commits_s", "median_ms", "lone_median_ms")} for t in COMMIT_TARGETS}
    for t in COMMIT_TARGETS:
        say(f"  median  {t}: {median[t]['commits_s']:7.0f} commits/s, latency median {median[t]['median_ms']:.1f} ms "
            f"({conns * depth} in flight), {median[t]['lone_median_ms']:.1f} ms one at a time")
    ratio = median["rf3"]["commits_s"] / median["rf1"]["commits_s"]
    say(f"  ratio rf3/rf1: {ratio:.2f}x commits/s; a lone commit costs {median['rf3']['lone_median_ms']:.1f} ms "
        f"with replication factor 3 against {median['rf1']['lone_median_ms']:.1f} ms (the followers' fetch round trip)")
    return {"connections": conns, "depth": depth, "seconds": secs, "partitions": parts, "rounds": args.rounds,
            "runs": runs, "median": median, "ratio_rf3_rf1": ratio}


def partition_state_of_group(dc: devcluster.DevCluster, group: str) -> dict[str, Any]:
    with zk_client(dc) as zk:
        return partition_state(zk, OFFSETS_TOPIC, partition_for(group, len(offsets_assignment(zk))))


def _ms(v: float | None) -> str:
    return "?" if v is None else f"{v:.1f} ms"


# -- main ----------------------------------------------------------------------------------------

SECTIONS = ("throughput", "failover", "coordinator-failover", "commits", "commit-availability")


def _sections(text: str) -> list[str]:
    names = [x.strip() for x in text.split(",") if x.strip()]
    unknown = [x for x in names if x not in SECTIONS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"{', '.join(unknown) or text!r}: the parts are {', '.join(SECTIONS)}")
    return names


# -- 5. commit availability while nothing moves -----------------------------------------------

AVAILABILITY_TOPIC = "availability"


class CommitPacer:
    """Groups committing every ``every_s`` each, one thread per coordinator address: the time of
    every answer and the errors, per group. A group whose coordinator moves is looked up again."""

    def __init__(self, dc: devcluster.DevCluster, groups: list[str], every_s: float = 0.05) -> None:
        self.dc, self.groups, self.every_s = dc, groups, every_s
        self.ok: dict[str, list[float]] = {g: [] for g in groups}
        self.errors: dict[str, list[tuple[float, str]]] = {g: [] for g in groups}
        self.where: dict[str, str] = {}
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._offset = 0

    def locate(self) -> None:
        for b in range(1, CLUSTER_SIZE + 1):
            link = Link(broker_address(self.dc, b))
            try:
                found = find_coordinators(link, self.groups)
            except OSError:
                continue
            finally:
                link.close()
            self.where = {g: address for g, (_n, address, code) in found.items() if code == 0}
            return

    def start(self) -> CommitPacer:
        self.locate()
        by_address: dict[str, list[str]] = {}
        for g in self.groups:
            by_address.setdefault(self.where.get(g, ""), []).append(g)
        for gs in by_address.values():
            t = threading.Thread(target=self._run, args=(gs,), daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def _run(self, gs: list[str]) -> None:
        links = Links()
        try:
            while not self._stop.is_set():
                started = time.monotonic()
                by_address: dict[str, list[str]] = {}
                for g in gs:
                    by_address.setdefault(self.where.get(g, ""), []).append(g)
                for address, some in by_address.items():
                    self._offset += 1
                    now = time.monotonic()
                    if not address:
                        for g in some:
                            self.errors[g].append((now, "no coordinator known"))
                        continue
                    try:
                        responses = links[address].calls(
                            ApiKey.OFFSET_COMMIT, 8,
                            [commit_body(g, AVAILABILITY_TOPIC, {0: self._offset}) for g in some], depth=8)
                    except OSError as e:
                        for g in some:
                            self.errors[g].append((time.monotonic(), f"{address}: {e}"))
                        self.locate()
                        continue
                    at = time.monotonic()
                    for g, r in zip(some, responses, strict=True):
                        codes = commit_errors(r)
                        if codes:
                            self.errors[g].append((at, ",".join(str(c) for c in codes)))
                        else:
                            self.ok[g].append(at)
                    if any(commit_errors(r) for r in responses):
                        self.locate()
                self._stop.wait(max(self.every_s - (time.monotonic() - started), 0.0))
        finally:
            links.close()

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(30)

    def window(self, groups: list[str], start: float, end: float) -> tuple[float, int]:
        """(longest gap in ms between successful commits within [start, end], errors) over ``groups``."""
        gap = 0.0
        errors = 0
        for g in groups:
            times = [start] + [t for t in self.ok[g] if start <= t <= end] + [end]
            gap = max(gap, max(b - a for a, b in zip(times, times[1:], strict=False)))
            errors += sum(1 for t, _ in self.errors[g] if start <= t <= end)
        return gap * 1000, errors


def commit_availability(args: argparse.Namespace, root: Path, say: Report) -> dict[str, Any]:
    """Groups whose coordinator does not move must see no error while a follower of its partition
    dies and while the other brokers restart one by one (issue 23: a new leader epoch of the same
    leader reloaded the shard, and every commit of its groups failed for as long as that took)."""
    n = max(args.groups // 10, 30)
    say(f"Commit availability: {n} groups committing every 50 ms each (OffsetCommit v8 to their coordinators) on "
        "a three-broker cluster with Gregor's defaults; for the groups whose coordinator does not move: the longest "
        "gap between successful commits and the errors, while a broker that only follows their partitions is "
        "SIGKILLed (and restarted), and while each other broker is restarted in turn with a controlled shutdown "
        "(goal: no error, and gaps of a few round trips)")
    groups = [f"avail-{i:03d}" for i in range(n)]
    out: dict[str, Any] = {"groups": n, "steps": []}
    with running_cluster(root, "availability", {"leader.imbalance.check.interval.seconds": "5"}) as dc, \
            zk_client(dc) as zk:
        create_topic(dc.plan.bootstrap, AVAILABILITY_TOPIC, 1, CLUSTER_SIZE)
        commit_groups(dc, {g: 0 for g in groups}, AVAILABILITY_TOPIC, 120)
        partitions = len(offsets_assignment(zk))
        wait_for(lambda: offsets_balanced(zk, partitions), ISR_WAIT_S, f"{OFFSETS_TOPIC} balanced")
        pacer = CommitPacer(dc, groups).start()
        try:
            time.sleep(2)
            for victim in range(1, CLUSTER_SIZE + 1):
                for kind in ("SIGKILL", "controlled shutdown"):
                    states = offsets_states(zk)
                    steady = [g for g in groups if states[partition_for(g, partitions)]["leader"] != victim]
                    start = time.monotonic()
                    if kind == "SIGKILL":
                        dc.kill_broker(victim)
                    else:
                        dc.broker(victim).signal(signal.SIGTERM)
                        proc = dc.broker(victim).proc
                        if proc is not None:
                            proc.wait(90)
                    time.sleep(8)  # past the session timeout: the controller has taken it out of the ISRs
                    dc.restart_broker(victim)
                    wait_for(lambda: offsets_balanced(zk, partitions), ISR_WAIT_S,
                             f"broker {victim} back in every ISR and leading its preferred partitions")
                    time.sleep(1)
                    end = time.monotonic()
                    after = offsets_states(zk)
                    steady = [g for g in steady if after[partition_for(g, partitions)]["leader"]
                              == states[partition_for(g, partitions)]["leader"]]
                    gap_ms, errors = pacer.window(steady, start, end)
                    step = {"victim": victim, "kind": kind, "groups": len(steady), "longest_gap_ms": round(gap_ms),
                            "errors": errors, "seconds": round(end - start, 1)}
                    out["steps"].append(step)
                    say(f"  broker {victim} {kind} and back ({step['seconds']} s): {len(steady)} groups whose "
                        f"coordinator stayed, longest gap {gap_ms:.0f} ms, {errors} errors")
        finally:
            pacer.stop()
    out["errors"] = sum(s["errors"] for s in out["steps"])
    out["longest_gap_ms"] = max((s["longest_gap_ms"] for s in out["steps"]), default=0)
    say(f"  goal 'no error for a group whose coordinator does not move': {'held' if out['errors'] == 0 else 'NOT held'}"
        f" ({out['errors']} errors; longest gap {out['longest_gap_ms']} ms)")
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true",
                    help="a smoke run: 20000 messages, 1 round, 2 kills, 100 groups, 2 s commit runs")
    ap.add_argument("--messages", type=int, help="messages per throughput run (default 300000, --quick 20000)")
    ap.add_argument("--size", type=int, default=1024, help="message size in bytes (default 1024)")
    ap.add_argument("--partitions", type=int, default=1, help="partitions of the throughput topics (default 1)")
    ap.add_argument("--rounds", type=int, help="throughput and commit throughput rounds (default 3, --quick 1)")
    ap.add_argument("--kills", type=int, help="leader kills per session timeout (default 10, --quick 2) and broker "
                                              "kills of the coordinator failover (default 5, --quick 2)")
    ap.add_argument("--session-timeouts", default="6000,4000", metavar="MS,MS",
                    help="zookeeper.session.timeout.ms values of the failover runs (default 6000,4000)")
    ap.add_argument("--rate", type=int, default=1000, help="messages a second during the failover runs (default 1000)")
    ap.add_argument("--no-idempotence", dest="idempotence", action="store_false",
                    help="the failover producer without enable.idempotence (librdkafka then skips its partition drain)")
    ap.add_argument("--groups", type=int, help="groups of the coordinator failover (default 1000, --quick 100)")
    ap.add_argument("--rebalance-interval", type=int, default=5, metavar="S",
                    help="leader.imbalance.check.interval.seconds of the coordinator failover cluster (default 5, "
                         "Kafka's and Gregor's 300: the restarted broker leads its partitions again that much later)")
    ap.add_argument("--commit-seconds", type=float,
                    help="seconds of each commit throughput run (default 10, --quick 2)")
    ap.add_argument("--commit-connections", type=int, default=8,
                    help="connections committing at once in the commit throughput runs (default 8)")
    ap.add_argument("--commit-depth", type=int, default=1,
                    help="commits in flight per connection (default 1: a Gregor broker works on one request of a "
                         "connection at a time)")
    ap.add_argument("--commit-partitions", type=int, default=4, help="partitions in each commit (default 4)")
    ap.add_argument("--only", type=_sections, metavar="PART[,PART]",
                    help=f"run these parts only, of {', '.join(SECTIONS)}")
    ap.add_argument("--json", action="store_true", help="the figures as JSON on stdout, the text on stderr")
    ap.add_argument("--keep", action="store_true", help="keep the data directory (the brokers' and ZooKeeper's logs)")
    args = ap.parse_args(argv)
    args.messages = args.messages or (20_000 if args.quick else 300_000)
    args.rounds = args.rounds or (1 if args.quick else 3)
    args.group_kills = args.kills if args.kills is not None else (2 if args.quick else 5)
    args.kills = args.kills if args.kills is not None else (2 if args.quick else 10)
    args.groups = args.groups or (100 if args.quick else 1000)
    args.commit_seconds = args.commit_seconds or (2.0 if args.quick else 10.0)
    args.only = args.only or list(SECTIONS)
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
        if "throughput" in args.only:
            result["throughput"] = throughput(args, root, say)
        if "failover" in args.only and args.kills > 0:
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
        if "coordinator-failover" in args.only and args.group_kills > 0:
            result["coordinator_failover"] = coordinator_failover(args, root, say)
        if "commits" in args.only:
            result["commits"] = commit_throughput(args, root, say)
        if "commit-availability" in args.only:
            result["commit_availability"] = commit_availability(args, root, say)
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
