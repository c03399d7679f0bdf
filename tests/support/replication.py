"""Replicated topics on a cluster of real brokers (tests/support/cluster.py), for the cluster
tests: the brokers' fast timer overrides, creating a topic, the partitions' states (from Metadata,
or from ZooKeeper's state nodes), producing and consuming with checks on what is acknowledged and
read back, a producer under continuous load, and the replicas' log bytes compared below the high
watermark (read from the brokers' data directories, batch by batch)."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import ZnodeStat

from gregor.cluster.zk import znodes as zn
from gregor.protocol import record_batch as rb
from tests.support.cluster import BrokerCluster
from tests.support.waiting import wait_for

# replica.lag.time.max.ms of 3 s: a follower that stops fetching leaves the ISR within seconds
# (tests/cluster/test_replication.py and others)
FAST_SHORT_LAG = {"zookeeper.session.timeout.ms": "4000", "replica.lag.time.max.ms": "3000",
                  "replica.fetch.wait.max.ms": "200", "replica.fetch.backoff.ms": "200",
                  "controlled.shutdown.retry.backoff.ms": "500", "leader.imbalance.check.interval.seconds": "3600"}

# replica.lag.time.max.ms at Kafka's default (30 s): replicas of dead brokers leave the ISRs because
# the controller takes them out, well before their leaders would (tests/cluster/test_faults.py and
# tests/cluster/test_replication_defects.py)
FAST_DEFAULT_LAG = {"zookeeper.session.timeout.ms": "4000", "replica.lag.time.max.ms": "30000",
                    "replica.fetch.wait.max.ms": "200", "replica.fetch.backoff.ms": "200",
                    "controlled.shutdown.retry.backoff.ms": "500", "leader.imbalance.check.interval.seconds": "3600",
                    "offsets.topic.num.partitions": "3"}  # the check consumers' group creates it: keep it small


def create_topic(bootstrap: str, name: str, partitions: int, rf: int, configs: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fs = admin.create_topics([NewTopic(name, partitions, rf, config=configs or {})], operation_timeout=30)
    fs[name].result(30)


def partition_state(bootstrap: str, topic: str, partition: int = 0) -> tuple[int, list[int], list[int]]:
    """(leader, replicas, isr) from Metadata."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    md = admin.list_topics(topic, timeout=10)
    p = md.topics[topic].partitions[partition]
    return p.leader, list(p.replicas), list(p.isrs)


def produce_all(bootstrap: str, topic: str, values: list[bytes], acks: str = "all", partition: int = 0,
                idempotent: bool = True) -> list[int]:
    """Produce and return the acknowledged offsets (raises if any delivery failed)."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "enable.idempotence": idempotent,
                  "message.timeout.ms": 60000, "linger.ms": 5})
    offsets: list[int] = []
    errors: list[object] = []

    def done(err, msg):  # noqa: ANN001
        if err is not None:
            errors.append(err)
        else:
            offsets.append(msg.offset())

    for v in values:
        p.produce(topic, v, partition=partition, on_delivery=done)
        p.poll(0)
    p.flush(90)
    assert not errors, errors
    return offsets


def consume_all(bootstrap: str, topic: str, count: int, partition: int = 0,
                timeout: float = 60) -> list[tuple[int, bytes]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.monotonic_ns()}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, partition, 0)])
    out: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + timeout
    while len(out) < count and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None or m.error():
            continue
        out.append((m.offset(), m.value()))
    c.close()
    return out


# -- ZooKeeper's view -------------------------------------------------------------------------------
def states(zk: KazooClient, topic: str, partitions: int) -> dict[int, zn.PartitionState | None]:
    """Each partition's state node (None: not there)."""
    out: dict[int, zn.PartitionState | None] = {}
    for p in range(partitions):
        path = zn.state_path(topic, p)
        got = get(zk, path)
        out[p] = zn.PartitionState.decode(got[0], got[1].version, path) if got else None
    return out


def get(zk: KazooClient, path: str) -> tuple[bytes, ZnodeStat] | None:
    try:
        return zk.get(path)
    except NoNodeError:
        return None


def wait_states(cluster: BrokerCluster, topic: str, partitions: int,
                ok: Callable[[zn.PartitionState], bool], timeout: float, what: str
                ) -> dict[int, zn.PartitionState]:
    """Until every partition has a state node satisfying ``ok``; the states."""
    with cluster.zk_client() as zk:
        def check() -> dict[int, zn.PartitionState] | None:
            sts = states(zk, topic, partitions)
            return sts if all(st is not None and ok(st) for st in sts.values()) else None  # type: ignore[return-value]
        return wait_for(check, timeout, what)  # type: ignore[return-value]


def wait_full_isr(cluster: BrokerCluster, topic: str, partitions: int, replicas: int = 3,
                  timeout: float = 90) -> dict[int, zn.PartitionState]:
    return wait_states(cluster, topic, partitions, lambda st: st.leader >= 0 and len(st.isr) == replicas, timeout,
                       f"every partition of {topic} with a leader and {replicas} replicas in the ISR")


# -- load -------------------------------------------------------------------------------------------
def file_logger(path: Path) -> logging.Logger:
    lg = logging.getLogger(f"rdkafka.{path.name}")
    lg.propagate = False
    if not lg.handlers:
        h = logging.FileHandler(path)
        h.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
        lg.addHandler(h)
    lg.setLevel(logging.DEBUG)
    return lg


class ContinuousProducer:
    """A producer in a thread sending ``b"<partition>:<seq>"`` to each partition in turn until
    stopped, with at most ``max_outstanding`` records of a partition unanswered, retrying for as
    long as it takes (message.timeout.ms of 5 min). ``acked[p]`` lists the (offset, value) of each
    record acknowledged on partition p, in the order of the acknowledgements."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, acks: str = "all", idempotent: bool = True,
                 max_outstanding: int = 100, pause_s: float = 0.002) -> None:
        self.topic = topic
        self.partitions = partitions
        self.config = {"bootstrap.servers": bootstrap, "acks": acks, "enable.idempotence": idempotent,
                       "message.timeout.ms": 300000, "linger.ms": 5, "retry.backoff.ms": 100,
                       "error_cb": self._on_error}
        if os.environ.get("GREGOR_TEST_RDKAFKA_DEBUG"):
            # diagnosis: librdkafka's debug contexts (e.g. "eos,msg") logged to a file per topic
            # under GREGOR_TEST_RDKAFKA_LOG_DIR (default: the working directory)
            self.config["debug"] = os.environ["GREGOR_TEST_RDKAFKA_DEBUG"]
            self.config["logger"] = file_logger(
                Path(os.environ.get("GREGOR_TEST_RDKAFKA_LOG_DIR", ".")) / f"rdkafka-{topic}-{os.getpid()}.log")
        self.max_outstanding = max_outstanding
        self.pause_s = pause_s
        self.acked: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
        # acknowledged without an offset: librdkafka acknowledges a batch whose answer it lost
        # when a later batch of the same idempotent producer succeeds (IMPLICITACK), and cannot
        # say where it went
        self.acked_unknown: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
        self.failed: list[str] = []  # delivery errors
        self._failed = [0] * partitions
        self.fatal: list[str] = []  # fatal client errors (an idempotent producer's broken guarantees)
        self.unflushed = -1
        self._count = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"producer-{topic}", daemon=True)

    def _on_error(self, err: KafkaError) -> None:
        if err.fatal():
            self.fatal.append(str(err))

    def _done(self, err: KafkaError | None, msg: object) -> None:
        with self._lock:
            if err is not None:
                self.failed.append(str(err))
                self._failed[msg.partition()] += 1  # type: ignore[attr-defined]
            elif msg.offset() is None:  # type: ignore[attr-defined]
                self.acked_unknown[msg.partition()].append(msg.value())  # type: ignore[attr-defined]
                self._count += 1
            else:
                self.acked[msg.partition()].append((msg.offset(), msg.value()))  # type: ignore[attr-defined]
                self._count += 1

    @property
    def count(self) -> int:
        with self._lock:
            return self._count

    def start(self) -> ContinuousProducer:
        self._thread.start()
        return self

    def value(self, partition: int, seq: int) -> bytes:
        """The value of the ``seq``-th record produced to ``partition``."""
        return f"{partition}:{seq:09d}".encode()

    def _run(self) -> None:
        producer = Producer(self.config)
        seq = [0] * self.partitions
        i = 0
        while not self._stop.is_set():
            with self._lock:
                outstanding = [seq[p] - len(self.acked[p]) - len(self.acked_unknown[p]) - self._failed[p]
                               for p in range(self.partitions)]
            # a partition that cannot take writes (no leader, NOT_ENOUGH_REPLICAS) holds up only itself
            ready = [p for p in range(self.partitions) if outstanding[p] < self.max_outstanding]
            if not ready:
                producer.poll(0.05)
                continue
            p = min(ready, key=lambda q: (q - i) % self.partitions)  # the next ready one in turn
            try:
                producer.produce(self.topic, self.value(p, seq[p]), partition=p, on_delivery=self._done)
            except BufferError:
                producer.poll(0.1)
                continue
            except KafkaException as e:  # the producer is in a fatal state
                self.fatal.append(str(e))
                break
            seq[p] += 1
            i = p + 1
            producer.poll(0)
            time.sleep(self.pause_s)
        self.unflushed = producer.flush(120)

    def wait_acked(self, more: int, timeout: float, what: str) -> int:
        """Until ``more`` acknowledgements past the current count; the new count."""
        target = self.count + more
        wait_for(lambda: self.count >= target or self.fatal or not self._thread.is_alive(), timeout, what)
        assert not self.fatal, self.fatal
        assert self._thread.is_alive(), "the producer's thread ended"
        return self.count

    def stop(self) -> None:
        """Stop producing and wait until every record sent is answered."""
        self._stop.set()
        self._thread.join(150)
        assert not self._thread.is_alive(), "the producer did not finish flushing"
        assert not self.fatal, self.fatal
        assert self.unflushed == 0, f"{self.unflushed} records were never answered"


# -- checks -----------------------------------------------------------------------------------------
def high_watermarks(bootstrap: str, topic: str, partitions: int, timeout: float = 30) -> dict[int, int]:
    """Each partition's high watermark as its leader answers ListOffsets, asked again while
    leadership moves (NOT_LEADER_OR_FOLLOWER: the controller's preferred replica election runs
    5 s after it is elected, as Kafka's does)."""
    deadline = time.monotonic() + timeout
    while True:
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "hwm"})
        try:
            return {p: c.get_watermark_offsets(TopicPartition(topic, p), 10)[1] for p in range(partitions)}
        except KafkaException:
            if time.monotonic() > deadline:
                raise
        finally:
            c.close()
        time.sleep(0.2)


def consume_to_end(bootstrap: str, topic: str, partitions: int, at_least: dict[int, int] | None = None,
                   timeout: float = 90) -> dict[int, list[tuple[int, bytes]]]:
    """Every record of every partition from offset 0 to the high watermark as the leaders answer
    ListOffsets now, or to ``at_least[p]`` if that is further (a leader just elected may not know
    the high watermark yet), as (offset, value)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.monotonic_ns()}",
                  "enable.auto.commit": False, "auto.offset.reset": "error", "fetch.wait.max.ms": 100})
    try:
        hwms = high_watermarks(bootstrap, topic, partitions)
        ends = {p: max(hwms[p], (at_least or {}).get(p, 0)) for p in range(partitions)}
        out: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
        todo = {p for p in range(partitions) if ends[p] > 0}
        c.assign([TopicPartition(topic, p, 0) for p in sorted(todo)])
        deadline = time.monotonic() + timeout
        while todo:
            assert time.monotonic() < deadline, f"consumed only {[(p, len(out[p])) for p in todo]} of {ends}"
            m = c.poll(0.5)
            if m is None:
                continue
            assert m.error() is None, m.error()
            p = m.partition()
            if m.offset() < ends[p]:
                out[p].append((m.offset(), m.value()))
            if m.offset() >= ends[p] - 1:
                todo.discard(p)
        return out
    finally:
        c.close()


def seq_of(value: bytes) -> int:
    return int(value.split(b":")[1])


def last_acked(prod: ContinuousProducer, partitions: Iterable[int] | None = None) -> dict[int, int]:
    """One past the largest acknowledged offset of each partition."""
    return {p: max((o for o, _ in prod.acked[p]), default=-1) + 1
            for p in (range(prod.partitions) if partitions is None else partitions)}


def check_read_exactly_once(bootstrap: str, prod: ContinuousProducer) -> dict[int, int]:
    """Every acknowledged record is read once, at its acknowledged offset, in the order produced,
    with no gap in the offsets; returns the number of records of each partition."""
    got = consume_to_end(bootstrap, prod.topic, prod.partitions, last_acked(prod))
    for p in range(prod.partitions):
        offsets = [o for o, _ in got[p]]
        values = [v for _, v in got[p]]
        assert offsets == list(range(len(offsets))), f"partition {p}: offsets are not contiguous from 0"
        seen: dict[bytes, list[int]] = {}
        for o, v in got[p]:
            seen.setdefault(v, []).append(o)
        twice = sorted((v, at) for v, at in seen.items() if len(at) > 1)
        assert not twice, f"partition {p}: records written twice (value, offsets): {twice[:3]}"
        seqs = [seq_of(v) for v in values]
        assert all(v.startswith(f"{p}:".encode()) for v in values)
        assert seqs == sorted(seqs), f"partition {p}: records out of the order they were produced in"
        at = dict(got[p])
        lost = [(o, v, at.get(o)) for o, v in prod.acked[p] if at.get(o) != v]
        assert not lost, f"partition {p}: acknowledged records not read back (offset, acked, found): {lost[:5]}"
        missing = [v for v in prod.acked_unknown[p] if v not in seen]
        assert not missing, f"partition {p}: acknowledged records (offset unknown) not in the log: {missing[:5]}"
        if not prod.failed:  # every record sent was acknowledged: nothing else may be in the log
            n = len(prod.acked[p]) + len(prod.acked_unknown[p])
            assert len(values) == n, f"partition {p}: {len(values)} records in the log, {n} acknowledged"
    return {p: len(got[p]) for p in got}


def log_prefix(data_dir: Path, topic: str, partition: int, hwm: int) -> bytes:
    """The bytes of the replica's batches below ``hwm``, read from its segment files (which must
    end a batch exactly at ``hwm``)."""
    out = bytearray()
    next_offset = 0
    epoch = -1
    for seg in sorted((data_dir / f"{topic}-{partition}").glob("*.log")):
        buf = seg.read_bytes()
        pos = 0
        while pos + rb.HEADER_SIZE <= len(buf) and next_offset < hwm:
            h = rb.read_header(buf, pos)
            assert h.base_offset == next_offset, (
                f"{seg}: batch at byte {pos} starts at offset {h.base_offset}, expected {next_offset}")
            if h.next_offset > hwm:
                raise AssertionError(f"{seg}: the batch at offset {h.base_offset} straddles the high watermark {hwm}")
            # one leader at a time: the leader epochs stamped in the batches never go back
            batch_epoch = int.from_bytes(buf[pos + rb.PARTITION_LEADER_EPOCH:pos + rb.PARTITION_LEADER_EPOCH + 4],
                                         "big", signed=True)
            assert batch_epoch >= epoch, f"{seg}: leader epoch {batch_epoch} at offset {h.base_offset} after {epoch}"
            epoch = batch_epoch
            out += buf[pos:pos + h.size]
            pos += h.size
            next_offset = h.next_offset
    assert next_offset == hwm, f"{data_dir}: {topic}-{partition} holds offsets below {next_offset} only, " \
                               f"the high watermark is {hwm}"
    return bytes(out)


def check_replicas_identical(cluster: BrokerCluster, topic: str, partitions: int, read: dict[int, int]) -> None:
    """With every replica in the ISR (the caller waited for it) and nothing being produced: every
    replica's log holds the same bytes up to the high watermark, which covers the ``read[p]``
    records read."""
    hwms = wait_for(lambda: all((h := high_watermarks(cluster.bootstrap, topic, partitions))[p] >= read[p]
                                for p in range(partitions)) and h, 30,
                    f"high watermarks covering the records read ({read})")
    with cluster.zk_client() as zk:
        assignment = zn.TopicAssignment.decode(topic, zk.get(zn.topic_path(topic))[0]).partitions
    for p in range(partitions):
        prefixes = {b: log_prefix(cluster.broker(b).data_dir, topic, p, hwms[p]) for b in assignment[p]}
        sizes = {b: len(x) for b, x in prefixes.items()}
        assert len(set(prefixes.values())) == 1, f"{topic}-{p}: the replicas differ below the high watermark " \
                                                  f"{hwms[p]} (sizes {sizes})"
