"""Real clients against three real brokers over a real ZooKeeper.

confluent-kafka, kafka-python, aiokafka and kcat each produce continuously with acks=all (and
idempotence) to a replicated topic (RF 3, min.insync.replicas 2) while the leader of partition 0
is SIGKILLed or stopped with a controlled shutdown (SIGTERM), and keep producing to the new
leader, which the client's own metadata must name. A consumer group of the same library consumes
part of the data and commits before the leader goes; another member of the group, bootstrapped
from a single surviving broker, resumes at the committed offsets afterwards: every acknowledged
message is read exactly once, in order per partition, and the final commit is the log end. The
group is chosen so that its coordinator (the leader of its ``__consumer_offsets`` partition,
RF 3) is the broker that goes: the committed offsets have to outlive it. A member that keeps
consuming and committing while its coordinator goes (confluent-kafka, kafka-python) follows the
group to the new coordinator and never resumes below an acknowledged commit.

The project's own clients too: the ``gregor`` CLI's admin commands against any one broker, and
the Spark connector's batch read and write.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as AioTP
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTP
from kafka.structs import OffsetAndMetadata

from gregor.admin.client import AdminClient as GregorAdmin
from tests.support.waiting import wait_for
from tests.support.wire_state import (
    CLIENTS_OFFSETS_PARTITIONS,
    coordinator_of,
    fully_replicated,
    group_coordinated_by,
    leaders,
)

pytestmark = pytest.mark.timeout(300)

PARTITIONS = 3
OVERRIDES = {"zookeeper.session.timeout.ms": "4000", "replica.lag.time.max.ms": "3000",
             "replica.fetch.wait.max.ms": "200", "replica.fetch.backoff.ms": "200",
             "controlled.shutdown.retry.backoff.ms": "500", "leader.imbalance.check.interval.seconds": "3600",
             "offsets.topic.replication.factor": "3", "offsets.topic.num.partitions": str(CLIENTS_OFFSETS_PARTITIONS),
             "group.initial.rebalance.delay.ms": "0"}
BEFORE = 150  # acknowledged messages before the leader goes
AFTER = 150  # acknowledged messages on partition 0 once the client names its new leader
KCAT = shutil.which("kcat") or shutil.which("kafkacat")

Read = dict[int, list[tuple[int, bytes]]]  # partition -> (offset, value) in the order read


def value(partition: int, seq: int) -> bytes:
    return b"p%d-%06d" % (partition, seq)


def total(read: Read) -> int:
    return sum(map(len, read.values()))


# -- the cluster (its state as gregor's wire client sees it: tests/support/wire_state.py) ------
def start_cluster(cluster_factory: Callable[..., Any]) -> Any:
    """Three brokers (the factory waits until each lists all three in its Metadata)."""
    return cluster_factory(3, overrides=OVERRIDES)


def create_topic(bootstrap: str, name: str, partitions: int = PARTITIONS) -> dict[int, int]:
    """RF 3, min.insync.replicas 2; {partition: leader} once fully replicated."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 3, config={"min.insync.replicas": "2"})])[name].result(30)
    return wait_for(lambda: fully_replicated(bootstrap, name, partitions), what=f"{name} fully replicated")


def log_ends(bootstrap: str, topic: str) -> dict[int, int]:
    """Each partition's log end offset (ListOffsets latest, asked of its leader)."""
    admin = GregorAdmin(bootstrap.split(",")[0])
    try:
        return {p: o for (_t, p), o in admin.list_offsets([(topic, p) for p in range(PARTITIONS)], -1).items()}
    finally:
        admin.close()


# -- what was produced and read ----------------------------------------------------------------
@dataclass
class Production:
    """Acknowledged (offset, value) per partition, in the order of the acknowledgements, and the
    delivery failures. Acknowledgements arrive on the client's own threads."""

    acked: Read = field(default_factory=lambda: {p: [] for p in range(PARTITIONS)})
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def ack(self, partition: int, offset: int, v: bytes) -> None:
        with self.lock:
            self.acked[partition].append((offset, v))

    def fail(self, error: object) -> None:
        with self.lock:
            self.errors.append(str(error))

    def count(self, partition: int | None = None) -> int:
        with self.lock:
            return total(self.acked) if partition is None else len(self.acked[partition])


def check_everything_read_once_in_order(prod: Production, ends: dict[int, int], first: Read,
                                        committed: dict[int, int], second: Read) -> None:
    """Nothing failed; each partition's log is exactly its acknowledged messages in the order
    sent; the first consumer read from 0 to its commit, the second from that commit to the log
    end, so every acknowledged message was read once."""
    assert not prod.errors, prod.errors[:5]
    for p in range(PARTITIONS):
        acked = prod.acked[p]
        assert [o for o, _ in acked] == list(range(len(acked))), f"partition {p}: acknowledged offsets"
        assert [v for _, v in acked] == [value(p, i) for i in range(len(acked))], f"partition {p}: order"
        assert ends[p] == len(acked), f"partition {p}: log end {ends[p]}, {len(acked)} acknowledged"
        start = committed.get(p, 0)
        assert [o for o, _ in first[p]] == list(range(start)), f"partition {p}: first consumer up to its commit"
        assert [o for o, _ in second[p]] == list(range(start, ends[p])), \
            f"partition {p}: second consumer from the commit ({start}) to the end ({ends[p]})"
        assert first[p] + second[p] == acked, f"partition {p}: values read"


@dataclass(frozen=True)
class Until:
    """When a consumer stops: once it has read ``count`` messages, or once every partition is
    read to ``ends`` (from ``committed``, where it has read nothing). A predicate for the Python
    clients; kcat is told ``-c count`` or ``-e`` (exit at the end of every partition)."""

    count: int | None = None
    ends: dict[int, int] | None = None
    committed: dict[int, int] = field(default_factory=dict)

    def __call__(self, read: Read) -> bool:
        if self.count is not None:
            return total(read) >= self.count
        assert self.ends is not None
        return all((read[p][-1][0] + 1 if read[p] else self.committed.get(p, 0)) >= end
                   for p, end in self.ends.items())


# -- the clients -------------------------------------------------------------------------------
class Client(Protocol):
    name: str

    def start_producing(self, bootstrap: str, topic: str, prod: Production, stop: threading.Event) -> None:
        """Produce value(p, seq) to every partition p in turn (acks=all, idempotent) until ``stop``
        is set, then flush; returns once the producer is running."""

    def join_producer(self) -> None:
        """Wait until the producer has flushed and closed."""

    def leader_seen(self, topic: str, partition: int) -> int | None:
        """The partition's leader in the running producer's metadata (-1/None: unknown)."""

    def consume(self, bootstrap: str, group: str, topic: str, until: Until
                ) -> tuple[Read, dict[int, int]]:
        """Subscribe in ``group``, read until ``until(read)``, commit, close; what was read and
        the group's committed offsets (as the library reports them)."""


class ThreadedProducer:
    """A producer loop on a thread of its own (confluent-kafka, kafka-python)."""

    def _start_thread(self, target: Callable[[], None]) -> None:
        self.failure: BaseException | None = None

        def run() -> None:
            try:
                target()
            except BaseException as e:  # noqa: BLE001 - reported by join_producer
                self.failure = e

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def join_producer(self) -> None:
        self.thread.join(150)
        assert not self.thread.is_alive(), "the producer did not finish"
        assert self.failure is None, repr(self.failure)


class Confluent(ThreadedProducer):
    name = "confluent"

    def start_producing(self, bootstrap: str, topic: str, prod: Production, stop: threading.Event) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                  "message.timeout.ms": 120000, "linger.ms": 5})

        def done(err: Any, msg: Any) -> None:
            if err is not None:
                prod.fail(err)
            else:
                prod.ack(msg.partition(), msg.offset(), msg.value())

        def loop() -> None:
            seq = 0
            while not stop.is_set():
                for p in range(PARTITIONS):
                    self.producer.produce(topic, value(p, seq), partition=p, on_delivery=done)
                seq += 1
                self.producer.poll(0.005)
            if left := self.producer.flush(120):
                prod.fail(f"{left} messages undelivered after 120 s")

        self._start_thread(loop)

    def leader_seen(self, topic: str, partition: int) -> int | None:
        # list_topics asks a broker through the producer's own connections and metadata cache
        return self.producer.list_topics(topic, timeout=10).topics[topic].partitions[partition].leader

    def consume(self, bootstrap: str, group: str, topic: str, until: Until
                ) -> tuple[Read, dict[int, int]]:
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                      "auto.offset.reset": "earliest"})
        try:
            c.subscribe([topic])
            read: Read = {p: [] for p in range(PARTITIONS)}
            deadline = time.monotonic() + 90
            while not until(read):
                assert time.monotonic() < deadline, f"read {total(read)} messages in 90 s"
                for m in c.consume(500, 0.5):
                    if m.error() is None:
                        read[m.partition()].append((m.offset(), m.value()))
            c.commit(asynchronous=False)
            committed = c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30)
            return read, {tp.partition: tp.offset for tp in committed if tp.offset >= 0}
        finally:
            c.close()


class KafkaPython(ThreadedProducer):
    name = "kafka-python"

    def start_producing(self, bootstrap: str, topic: str, prod: Production, stop: threading.Event) -> None:
        self.producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True,
                                      linger_ms=5, delivery_timeout_ms=120000)

        def loop() -> None:
            seq = 0
            while not stop.is_set():
                for p in range(PARTITIONS):
                    v = value(p, seq)
                    f = self.producer.send(topic, v, partition=p)
                    f.add_callback(lambda md, v=v: prod.ack(md.partition, md.offset, v))
                    f.add_errback(prod.fail)
                seq += 1
                time.sleep(0.005)
            self.producer.flush(120)
            self.producer.close(30)

        self._start_thread(loop)

    def leader_seen(self, topic: str, partition: int) -> int | None:
        return self.producer._metadata.leader_for_partition(KpTP(topic, partition))  # noqa: SLF001

    def consume(self, bootstrap: str, group: str, topic: str, until: Until
                ) -> tuple[Read, dict[int, int]]:
        c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                          auto_offset_reset="earliest")
        try:
            c.subscribe([topic])
            read: Read = {p: [] for p in range(PARTITIONS)}
            deadline = time.monotonic() + 90
            while not until(read):
                assert time.monotonic() < deadline, f"read {total(read)} messages in 90 s"
                for tp, records in c.poll(timeout_ms=500).items():
                    read[tp.partition] += [(r.offset, r.value) for r in records]
            c.commit()
            committed = {p: c.committed(KpTP(topic, p)) for p in range(PARTITIONS)}
            return read, {p: o for p, o in committed.items() if o is not None and o >= 0}
        finally:
            c.close(autocommit=False)


class AioKafka:
    """aiokafka's producer runs on an event loop in a thread of its own; its consumer on the
    test's thread with asyncio.run."""

    name = "aiokafka"

    def start_producing(self, bootstrap: str, topic: str, prod: Production, stop: threading.Event) -> None:
        started = threading.Event()
        self.failure: BaseException | None = None

        async def main() -> None:
            self.producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True,
                                             linger_ms=5, request_timeout_ms=60000)
            await self.producer.start()
            started.set()
            try:
                seq = 0
                while not stop.is_set():
                    for p in range(PARTITIONS):
                        v = value(p, seq)
                        fut = await self.producer.send(topic, v, partition=p)
                        fut.add_done_callback(lambda f, v=v: prod.fail(f.exception()) if f.exception()
                                              else prod.ack(f.result().partition, f.result().offset, v))
                    seq += 1
                    await asyncio.sleep(0.005)
                await self.producer.flush()
            finally:
                await self.producer.stop()

        def run() -> None:
            try:
                asyncio.run(main())
            except BaseException as e:  # noqa: BLE001 - reported by join_producer
                self.failure = e
            finally:
                started.set()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        started.wait(60)
        assert self.failure is None, repr(self.failure)

    def join_producer(self) -> None:
        self.thread.join(150)
        assert not self.thread.is_alive(), "the producer did not finish"
        assert self.failure is None, repr(self.failure)

    def leader_seen(self, topic: str, partition: int) -> int | None:
        return self.producer.client.cluster.leader_for_partition(AioTP(topic, partition))

    def consume(self, bootstrap: str, group: str, topic: str, until: Until
                ) -> tuple[Read, dict[int, int]]:
        async def run() -> tuple[Read, dict[int, int]]:
            c = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                                 auto_offset_reset="earliest")
            await c.start()
            try:
                read: Read = {p: [] for p in range(PARTITIONS)}
                deadline = time.monotonic() + 90
                while not until(read):
                    assert time.monotonic() < deadline, f"read {total(read)} messages in 90 s"
                    for tp, records in (await c.getmany(timeout_ms=500)).items():
                        read[tp.partition] += [(r.offset, r.value) for r in records]
                await c.commit()
                committed = {p: await c.committed(AioTP(topic, p)) for p in range(PARTITIONS)}
                return read, {p: o for p, o in committed.items() if o is not None and o >= 0}
            finally:
                await c.stop()

        return asyncio.run(run())


class Kcat:
    """One ``kcat -P`` per partition fed through its stdin; -vvv reports each delivery with its
    partition and offset, in order per partition. The consumer is ``kcat -G`` (librdkafka's
    KafkaConsumer: offsets committed at close); kcat has no command to read a group's committed
    offsets, so those are read with the gregor CLI."""

    name = "kcat"

    def __init__(self, cli_bootstrap: Callable[[], str]) -> None:
        self.cli_bootstrap = cli_bootstrap
        self.metadata_bootstrap = ""

    def start_producing(self, bootstrap: str, topic: str, prod: Production, stop: threading.Event) -> None:
        assert KCAT is not None
        self.metadata_bootstrap = bootstrap
        self.procs = [subprocess.Popen(
            [KCAT, "-b", bootstrap, "-P", "-t", topic, "-p", str(p), "-v", "-v", "-v",
             "-X", "acks=all", "-X", "enable.idempotence=true", "-X", "linger.ms=5",
             "-X", "message.timeout.ms=120000"],
            stdin=subprocess.PIPE, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL) for p in range(PARTITIONS)]
        delivered = re.compile(r"Message delivered to partition (\d+) \(offset (\d+)\)")

        def reports(p: int, proc: subprocess.Popen[bytes]) -> None:
            seq = 0
            assert proc.stderr is not None
            for line in proc.stderr:
                text = line.decode(errors="replace")
                if m := delivered.search(text):
                    prod.ack(int(m.group(1)), int(m.group(2)), value(p, seq))
                    seq += 1
                elif "Delivery failed" in text:
                    prod.fail(f"kcat -p {p}: {text.strip()}")

        def feed() -> None:
            seq = 0
            while not stop.is_set():
                for p, proc in enumerate(self.procs):
                    assert proc.stdin is not None
                    proc.stdin.write(value(p, seq) + b"\n")
                    proc.stdin.flush()
                seq += 1
                time.sleep(0.005)
            for proc in self.procs:
                assert proc.stdin is not None
                proc.stdin.close()  # kcat flushes what it has and exits

        self.threads = [threading.Thread(target=reports, args=(p, proc), daemon=True)
                        for p, proc in enumerate(self.procs)]
        self.threads.append(threading.Thread(target=feed, daemon=True))
        for t in self.threads:
            t.start()

    def join_producer(self) -> None:
        for proc in self.procs:
            assert proc.wait(150) == 0, f"kcat -P exited with {proc.returncode}"
        for t in self.threads:
            t.join(30)
            assert not t.is_alive()

    def leader_seen(self, topic: str, partition: int) -> int | None:
        # kcat -L: librdkafka's metadata, from the first broker of the producers' bootstrap that answers
        out = subprocess.run([KCAT, "-b", self.metadata_bootstrap, "-L", "-J", "-t", topic], capture_output=True,
                             timeout=30)
        if out.returncode:
            return None
        md = json.loads(out.stdout)
        return next(p["leader"] for t in md["topics"] if t["topic"] == topic
                    for p in t["partitions"] if p["partition"] == partition)

    def consume(self, bootstrap: str, group: str, topic: str, until: Until
                ) -> tuple[Read, dict[int, int]]:
        """``kcat -G`` with ``-c`` or ``-e``: kcat stops by itself after the last message it
        prints and closes the consumer, which commits the offsets of the messages printed. (A
        SIGTERM would not do: kcat stores the offset of a message it polls, then drops it
        unprinted once it is told to stop.)"""
        assert KCAT is not None
        stop = ["-c", str(until.count)] if until.count is not None else ["-e"]
        out = subprocess.run([KCAT, "-b", bootstrap, "-G", group, "-X", "auto.offset.reset=earliest", *stop,
                              "-f", "%p %o %s\n", topic], capture_output=True, timeout=120)
        assert out.returncode == 0, f"kcat -G exited with {out.returncode}: {out.stderr.decode()}"
        read: Read = {p: [] for p in range(PARTITIONS)}
        for line in out.stdout.splitlines():
            p, o, v = line.split()
            read[int(p)].append((int(o), v))
        assert until(read), f"kcat -G read {total(read)} messages"
        return read, {p: o for (t, p), o in cli_committed(self.cli_bootstrap(), group).items() if t == topic}


def gregor_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gregor", *args], capture_output=True, text=True, timeout=60)


def cli_committed(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    """The group's committed offsets from ``gregor groups describe --json``."""
    out = gregor_cli("groups", "describe", group, "--bootstrap-server", bootstrap, "--json")
    assert out.returncode == 0, out.stderr
    return {(r["topic"], r["partition"]): r["current_offset"] for r in json.loads(out.stdout)["offsets"]
            if r["current_offset"] is not None}


# -- the leader change, the same for every client ----------------------------------------------
def produce_and_consume_through_a_leader_change(cluster: Any, client: Client, *, kill: bool,
                                                producer_bootstrap: Callable[[int], str]) -> None:
    topic = f"{client.name}-orders"
    victim = create_topic(cluster.bootstrap, topic)[0]
    group = group_coordinated_by(cluster.bootstrap, victim, f"{client.name}-group")
    survivors = [i for i in cluster.ids if i != victim]
    one_broker = cluster.broker(survivors[-1]).bootstrap

    prod = Production()
    stop = threading.Event()
    client.start_producing(producer_bootstrap(victim), topic, prod, stop)
    try:
        wait_for(lambda: prod.count() >= BEFORE, what=f"{BEFORE} acknowledgements")
        assert client.leader_seen(topic, 0) == victim
        first, committed = client.consume(cluster.bootstrap, group, topic, Until(count=BEFORE // 2))
        # (a partition assigned but not read yet has no commit, or a commit of 0, by library)
        assert {p: committed.get(p, 0) for p in range(PARTITIONS)} == {p: len(first[p]) for p in range(PARTITIONS)}
        assert sum(committed.values()) >= BEFORE // 2

        if kill:
            cluster.kill(victim)
        else:
            assert cluster.stop(victim) == 0  # a controlled shutdown: leadership moves before it exits
        new_leader = wait_for(lambda: client.leader_seen(topic, 0) in survivors and client.leader_seen(topic, 0),
                              what=f"{client.name}'s metadata to name a new leader of partition 0")
        assert leaders(one_broker, topic)[0][0] == new_leader
        on_new_leader = prod.count(0)
        wait_for(lambda: prod.count(0) >= on_new_leader + AFTER, what=f"{AFTER} acknowledgements from the new leader")
    finally:
        stop.set()
    client.join_producer()

    ends = log_ends(one_broker, topic)
    assert coordinator_of(one_broker, group) in survivors  # the group's coordinator moved with its partition
    second, committed_after = client.consume(one_broker, group, topic, Until(ends=ends, committed=committed))
    check_everything_read_once_in_order(prod, ends, first, committed, second)
    assert committed_after == ends


def test_confluent_kafka_through_a_leader_sigkill(cluster_factory):
    cluster = start_cluster(cluster_factory)
    produce_and_consume_through_a_leader_change(cluster, Confluent(), kill=True,
                                                producer_bootstrap=lambda _victim: cluster.bootstrap)


def test_kafka_python_through_a_controlled_shutdown_of_the_leader(cluster_factory):
    cluster = start_cluster(cluster_factory)
    # bootstrapped from one broker that stays: it must learn the others from Metadata
    produce_and_consume_through_a_leader_change(
        cluster, KafkaPython(), kill=False,
        producer_bootstrap=lambda victim: cluster.broker(next(i for i in cluster.ids if i != victim)).bootstrap)


def test_aiokafka_through_a_leader_sigkill_bootstrapped_from_that_leader(cluster_factory):
    cluster = start_cluster(cluster_factory)
    # bootstrapped from the broker that dies: only what Metadata told the client is left
    produce_and_consume_through_a_leader_change(cluster, AioKafka(), kill=True,
                                                producer_bootstrap=lambda victim: cluster.broker(victim).bootstrap)


@pytest.mark.skipif(KCAT is None, reason="kcat is installed by `make setup`")
def test_kcat_through_a_controlled_shutdown_of_the_leader(cluster_factory):
    cluster = start_cluster(cluster_factory)
    client = Kcat(cli_bootstrap=lambda: cluster.broker(cluster.alive_ids()[0]).bootstrap)
    produce_and_consume_through_a_leader_change(cluster, client, kill=False,
                                                producer_bootstrap=lambda _victim: cluster.bootstrap)


# -- a consumer group that is live while its coordinator dies ----------------------------------
def check_read_in_order_from_commits(prod: Production, ends: dict[int, int], reads: Read,
                                     acked_commits: dict[int, list[tuple[int, int]]]) -> dict[int, int]:
    """Each partition read in order from 0 to its end: every step is the next offset, or a step
    back after a rebalance to a position no lower than the last commit acknowledged by then (an
    acknowledged commit is never lost); the number of messages read again per partition."""
    assert not prod.errors, prod.errors[:5]
    again: dict[int, int] = {}
    for p in range(PARTITIONS):
        acked = dict(prod.acked[p])
        assert len(acked) == ends[p], f"partition {p}: log end {ends[p]}, {len(acked)} acknowledged"
        expected, floor, seen = 0, 0, set()
        commits = iter(sorted(acked_commits[p]))  # (the read count when acknowledged, offset)
        pending = next(commits, None)
        for i, (offset, v) in enumerate(reads[p]):
            while pending is not None and pending[0] <= i:
                floor = max(floor, pending[1])
                pending = next(commits, None)
            assert offset == expected or floor <= offset < expected, \
                f"partition {p}: read {offset} after {expected - 1} (last acknowledged commit {floor})"
            assert v == acked[offset], f"partition {p} offset {offset}: {v!r}, acknowledged {acked[offset]!r}"
            seen.add(offset)
            expected = offset + 1
        missing = sorted(set(range(ends[p])) - seen)
        assert not missing, f"partition {p}: offsets never read: {missing[:10]}"
        again[p] = len(reads[p]) - len(seen)
    return again


class Member(Protocol):
    """One member of a consumer group, polled and committed by the test."""

    def poll(self) -> list[tuple[int, int, bytes]]:
        """The next messages: (partition, offset, value)."""

    def commit(self, offsets: dict[int, int]) -> None:
        """Commit synchronously; raises when the commit is refused."""

    def close(self) -> None: ...


class ConfluentMember:
    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self.topic = topic
        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                           "auto.offset.reset": "earliest"})
        self.c.subscribe([topic])

    def poll(self) -> list[tuple[int, int, bytes]]:
        return [(m.partition(), m.offset(), m.value()) for m in self.c.consume(200, 0.5) if m.error() is None]

    def commit(self, offsets: dict[int, int]) -> None:
        done = self.c.commit(offsets=[TopicPartition(self.topic, p, o) for p, o in offsets.items()],
                             asynchronous=False)
        failed = [tp for tp in done if tp.error is not None]
        if failed:
            raise RuntimeError(f"commit refused: {[(tp.partition, str(tp.error)) for tp in failed]}")

    def close(self) -> None:
        self.c.close()


class KafkaPythonMember:
    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self.topic = topic
        self.c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                               auto_offset_reset="earliest")
        self.c.subscribe([topic])

    def poll(self) -> list[tuple[int, int, bytes]]:
        return [(tp.partition, r.offset, r.value)
                for tp, records in self.c.poll(timeout_ms=500, max_records=200).items() for r in records]

    def commit(self, offsets: dict[int, int]) -> None:
        self.c.commit({KpTP(self.topic, p): OffsetAndMetadata(o, "", -1) for p, o in offsets.items()})

    def close(self) -> None:
        self.c.close(autocommit=False)


def member_lives_through_the_loss_of_its_coordinator(cluster: Any, make_member: Callable[[str, str, str], Member],
                                                     name: str, *, kill: bool) -> None:
    """One member consumes and commits after every batch while the broker that coordinates its
    group (and leads partition 0) goes: the client finds the new coordinator (the new leader of
    the group's __consumer_offsets partition, which loaded the group from the replicated
    partition), keeps reading and committing, never resumes below a commit the old coordinator
    acknowledged, and reads everything."""
    topic = f"{name}-live"
    victim = create_topic(cluster.bootstrap, topic)[0]
    group = group_coordinated_by(cluster.bootstrap, victim, f"{name}-live-group")
    survivors = [i for i in cluster.ids if i != victim]

    producer = Confluent()
    prod = Production()
    stop_producing = threading.Event()
    producer.start_producing(cluster.bootstrap, topic, prod, stop_producing)

    reads: Read = {p: [] for p in range(PARTITIONS)}
    acked_commits: dict[int, list[tuple[int, int]]] = {p: [] for p in range(PARTITIONS)}
    refused: list[str] = []
    ends: dict[int, int] = {}
    lock = threading.Lock()
    failure: list[BaseException] = []

    def consume() -> None:
        member = make_member(cluster.bootstrap, group, topic)
        try:
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline:
                with lock:
                    if ends and Until(ends=ends)(reads):
                        break
                msgs = member.poll()
                if not msgs:
                    continue
                with lock:
                    for p, o, v in msgs:
                        reads[p].append((o, v))
                    counts = {p: len(reads[p]) for p in range(PARTITIONS)}
                last = {p: o + 1 for p, o, _v in msgs}
                try:
                    member.commit(last)
                except Exception as e:  # noqa: BLE001 - a commit refused while the coordinator moves
                    refused.append(f"{type(e).__name__}: {e}")
                    continue
                with lock:
                    for p, o in last.items():
                        acked_commits[p].append((counts[p], o))
        except BaseException as e:  # noqa: BLE001 - reported below
            failure.append(e)
        finally:
            member.close()

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    try:
        wait_for(lambda: prod.count() >= BEFORE and all(acked_commits.values()),
                 what="acknowledgements and a commit on every partition")
        with lock:
            at_the_move = {p: max(o for _n, o in acked_commits[p]) for p in range(PARTITIONS)}
        if kill:
            cluster.kill(victim)
        else:
            assert cluster.stop(victim) == 0
        wait_for(lambda: producer.leader_seen(topic, 0) in survivors, what="the producer to see a new leader")
        wait_for(lambda: coordinator_of(cluster.bootstrap, group) in survivors, what="a new coordinator")
        on_new_leader = prod.count(0)
        wait_for(lambda: prod.count(0) >= on_new_leader + AFTER, what=f"{AFTER} acknowledgements from the new leader")
    finally:
        stop_producing.set()
    producer.join_producer()
    with lock:
        ends.update(log_ends(cluster.broker(survivors[0]).bootstrap, topic))
    consumer.join(200)
    assert not consumer.is_alive(), f"the member did not read to the end: {ends}, read {total(reads)}"
    assert not failure, repr(failure[0])
    again = check_read_in_order_from_commits(prod, ends, reads, acked_commits)
    # the member's last acknowledged commits are the ends, beyond what it had committed when its
    # coordinator went: made to the new coordinator
    assert {p: acked_commits[p][-1][1] for p in range(PARTITIONS)} == ends
    assert all(ends[p] > at_the_move[p] for p in range(PARTITIONS))
    assert {(topic, p): o for p, o in ends.items()} == {
        tp: o for tp, o in cli_committed(cluster.broker(survivors[0]).bootstrap, group).items() if tp[0] == topic}
    print(f"{name}: read again after the coordinator moved: {again}; commits refused meanwhile: {refused}")


def test_confluent_kafka_group_member_lives_through_its_coordinators_sigkill(cluster_factory):
    cluster = start_cluster(cluster_factory)
    member_lives_through_the_loss_of_its_coordinator(cluster, ConfluentMember, "confluent", kill=True)


def test_kafka_python_group_member_lives_through_its_coordinators_controlled_shutdown(cluster_factory):
    cluster = start_cluster(cluster_factory)
    member_lives_through_the_loss_of_its_coordinator(cluster, KafkaPythonMember, "kafka-python", kill=False)


# -- the gregor CLI ----------------------------------------------------------------------------
def cli_json(*args: str) -> Any:
    out = gregor_cli(*args, "--json")
    assert out.returncode == 0, f"gregor {' '.join(args)}: {out.returncode} {out.stderr}"
    return json.loads(out.stdout)


def test_gregor_cli_against_any_broker_through_a_leader_and_coordinator_sigkill(cluster_factory):
    """topics create/list/describe/delete and groups list/describe/coordinator/reset-offsets, each
    pointed at a single broker (every broker answers for the whole cluster), before and after the
    broker that leads partition 0 and coordinates the group is SIGKILLed; the lag columns
    (committed offsets against log ends) follow the moves."""
    cluster = start_cluster(cluster_factory)
    address = {i: cluster.broker(i).bootstrap for i in cluster.ids}
    topic = "cli-orders"
    created = cli_json("topics", "create", topic, "--partitions", "3", "--replication-factor", "3",
                       "--config", "min.insync.replicas=2", "--bootstrap-server", address[2])
    assert created == [{"topic": topic, "result": "created"}]
    again = gregor_cli("topics", "create", topic, "--partitions", "3", "--bootstrap-server", address[3])
    assert again.returncode == 1 and "TOPIC_ALREADY_EXISTS" in again.stderr
    lead = wait_for(lambda: fully_replicated(cluster.bootstrap, topic, PARTITIONS), what=f"{topic} fully replicated")

    p = Producer({"bootstrap.servers": address[1], "acks": "all", "enable.idempotence": True})
    for i in range(30):
        for part in range(PARTITIONS):
            p.produce(topic, value(part, i), partition=part)
    assert p.flush(60) == 0

    def described(broker: int) -> dict[str, Any]:
        [t] = cli_json("topics", "describe", topic, "--bootstrap-server", address[broker])
        return t

    views = {i: described(i) for i in cluster.ids}
    assert views[1] == views[2] == views[3], views
    t = views[1]
    assert t["partitions"] == 3 and t["configs"] == {"min.insync.replicas": "2"} and t["topic_id"]
    assert {d["partition"]: d["leader"] for d in t["partition_details"]} == lead
    for d in t["partition_details"]:
        assert sorted(d["replicas"]) == [1, 2, 3] and sorted(d["isr"]) == [1, 2, 3]
        assert (d["log_start_offset"], d["log_end_offset"]) == (0, 30)
    for i in cluster.ids:
        assert topic in cli_json("topics", "list", "--bootstrap-server", address[i])

    victim = lead[0]
    survivors = [i for i in cluster.ids if i != victim]
    group = group_coordinated_by(cluster.bootstrap, victim, "cli-group")
    c = Consumer({"bootstrap.servers": address[survivors[0]], "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    read = 0
    deadline = time.monotonic() + 60
    while read < 90:
        assert time.monotonic() < deadline, f"read {read} of 90"
        read += sum(1 for m in c.consume(100, 0.5) if m.error() is None)
    # and a topic whose only replica is the broker that goes: offline once it has gone
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("cli-single", 1, replica_assignment=[[victim]])])["cli-single"].result(30)
    wait_for(lambda: leaders(cluster.bootstrap, "cli-single").get(0, (-1, []))[0] == victim,
             what="cli-single's leader")
    p.produce("cli-single", b"x", partition=0)
    p.produce("cli-single", b"y", partition=0)
    assert p.flush(60) == 0
    c.commit(offsets=[TopicPartition(topic, 0, 10), TopicPartition(topic, 1, 20), TopicPartition(topic, 2, 30),
                      TopicPartition("cli-single", 0, 1)], asynchronous=False)
    c.close()

    def lags(broker: int, of: str = topic) -> dict[int, tuple[int, int | None, int | None]]:
        d = cli_json("groups", "describe", group, "--bootstrap-server", address[broker])
        assert d["state"] == "Empty" and d["protocol_type"] == "consumer"
        return {r["partition"]: (r["current_offset"], r["log_end_offset"], r["lag"]) for r in d["offsets"]
                if r["topic"] == of}

    def listed(broker: int) -> list[dict[str, Any]]:
        return [g for g in cli_json("groups", "list", "--bootstrap-server", address[broker]) if g["group"] == group]

    for i in cluster.ids:
        assert lags(i) == {0: (10, 30, 20), 1: (20, 30, 10), 2: (30, 30, 0)}
        assert listed(i) == [{"group": group, "type": "classic", "state": "Empty", "protocol_type": "consumer",
                             "coordinator": victim}]
    where = cli_json("groups", "coordinator", group, "--bootstrap-server", address[survivors[0]])
    assert (where["coordinator"], where["partition_leader"], where["status"]) == (victim, victim, "loaded")

    cluster.kill(victim)
    dead = gregor_cli("topics", "list", "--bootstrap-server", address[victim])
    assert dead.returncode == 1 and "cannot connect" in dead.stderr
    # until its ZooKeeper session expires the dead broker is still registered and still leads:
    # describe answers all the same (what that leader would have said is unknown), groups list
    # names the broker that did not answer and lists the others' groups
    for d in described(survivors[0])["partition_details"]:
        assert (d["leader"], d["log_end_offset"]) in ((victim, None), *((s, 30) for s in survivors)), d
    listing = gregor_cli("groups", "list", "--bootstrap-server", address[survivors[0]], "--json")
    assert all(g["coordinator"] in survivors for g in json.loads(listing.stdout)), listing.stdout
    if listing.returncode:  # (the dead broker was still registered)
        assert f"the groups of broker {victim} ({address[victim]})" in listing.stderr, listing.stderr
    else:  # (this machine was slow: the session had expired already)
        assert victim not in cluster.brokers_seen(survivors[0])

    def moved(broker: int) -> dict[str, Any] | None:
        t = described(broker)
        details = t["partition_details"]
        ok = all(d["leader"] in survivors and victim not in d["isr"] and d["log_end_offset"] == 30 for d in details)
        return t if ok else None

    after = {i: wait_for(lambda i=i: moved(i), what=f"broker {i} to describe leaders and ISRs without {victim}")
             for i in survivors}
    assert after[survivors[0]] == after[survivors[1]]
    assert after[survivors[0]]["topic_id"] == t["topic_id"]
    new_coordinator = wait_for(lambda: (n := coordinator_of(address[survivors[0]], group)) in survivors and n,
                               what="a new coordinator")
    for i in survivors:
        assert lags(i) == {0: (10, 30, 20), 1: (20, 30, 10), 2: (30, 30, 0)}
        assert listed(i) == [{"group": group, "type": "classic", "state": "Empty", "protocol_type": "consumer",
                              "coordinator": new_coordinator}]
        where = cli_json("groups", "coordinator", group, "--bootstrap-server", address[i])
        assert (where["coordinator"], where["partition_leader"], where["status"]) == \
            (new_coordinator, new_coordinator, "loaded")

    # the offline partition: no leader, log offsets unknown, no lag to show, and nothing to reset
    [offline] = cli_json("topics", "describe", "cli-single", "--bootstrap-server", address[survivors[0]])
    [single] = offline["partition_details"]
    assert (single["leader"], single["isr"], single["log_start_offset"], single["log_end_offset"]) == \
        (-1, [victim], None, None)
    assert lags(survivors[0], "cli-single") == {0: (1, None, None)}
    refused = gregor_cli("groups", "reset-offsets", group, "--topic", "cli-single", "--to-earliest", "--execute",
                         "--bootstrap-server", address[survivors[0]])
    assert refused.returncode == 1 and "cli-single-0 are unknown" in refused.stderr, refused
    assert lags(survivors[1], "cli-single") == {0: (1, None, None)}

    reset = cli_json("groups", "reset-offsets", group, "--topic", topic, "--to-earliest", "--execute",
                     "--bootstrap-server", address[survivors[1]])
    assert sorted((r["partition"], r["previous_offset"], r["new_offset"]) for r in reset) == \
        [(0, 10, 0), (1, 20, 0), (2, 30, 0)]
    p = Producer({"bootstrap.servers": address[survivors[0]], "acks": "all", "enable.idempotence": True})
    for part in range(PARTITIONS):
        p.produce(topic, b"more", partition=part)
    assert p.flush(60) == 0
    for i in survivors:
        assert lags(i) == {0: (0, 31, 31), 1: (0, 31, 31), 2: (0, 31, 31)}

    assert cli_json("topics", "delete", topic, "--bootstrap-server", address[survivors[1]]) == \
        [{"topic": topic, "result": "deleted"}]
    for i in survivors:
        wait_for(lambda i=i: topic not in cli_json("topics", "list", "--bootstrap-server", address[i]),
                 what=f"broker {i} to forget {topic}")


# -- the Spark connector -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def spark():
    """A local-mode session as tests/spark uses (tests/support/spark_session.py), stopped at the
    end of this module unless it was running already."""
    from pyspark.sql import SparkSession

    from tests.support.spark_session import new_session

    running = SparkSession.getActiveSession()
    s = new_session()
    yield s
    if running is None:
        s.stop()


@pytest.mark.timeout(420)
def test_spark_batch_write_and_read_through_a_leader_sigkill(spark, cluster_factory):
    """A batch write from one broker's address, the leader of partition 0 SIGKILLed, a second
    batch write that waits out the election, and a batch read from one surviving broker: every
    row once, at consecutive offsets, in the order written per partition."""
    cluster = start_cluster(cluster_factory)
    topic = "spark-orders"
    victim = create_topic(cluster.bootstrap, topic)[0]
    survivors = [i for i in cluster.ids if i != victim]
    per_write = 600  # rows per partition per write

    def write(first_seq: int, bootstrap: str) -> None:
        rows = [(value(p, seq), p) for seq in range(first_seq, first_seq + per_write) for p in range(PARTITIONS)]
        # one Spark partition: one producer, so each topic partition gets its rows in this order
        df = spark.createDataFrame(rows, "value binary, partition int").coalesce(1)
        (df.write.format("gregor").mode("append").option("kafka.bootstrap.servers", bootstrap)
         .option("kafka.acks", "all").option("topic", topic).save())

    write(0, cluster.broker(victim).bootstrap)
    cluster.kill(victim)
    write(per_write, cluster.bootstrap)
    assert all(leader in survivors for leader, _isr in leaders(cluster.broker(survivors[0]).bootstrap, topic).values())

    back = (spark.read.format("gregor").option("kafka.bootstrap.servers", cluster.broker(survivors[1]).bootstrap)
            .option("subscribe", topic).load().select("partition", "offset", "value").collect())
    got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
    for r in sorted(back, key=lambda r: (r.partition, r.offset)):
        got[r.partition].append((r.offset, bytes(r.value)))
    for p in range(PARTITIONS):
        assert [o for o, _ in got[p]] == list(range(2 * per_write)), f"partition {p}: offsets"
        assert [v for _, v in got[p]] == [value(p, seq) for seq in range(2 * per_write)], f"partition {p}: rows"
