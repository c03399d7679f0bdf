"""Group-attributed consumption metrics across the brokers of a cluster (issue 13).

Two groups whose consumers share a client id read partitions led by three different brokers; their
coordinator moves (a controlled shutdown of its broker, then the preferred leaders come back).
Each broker serving a fetch attributes it from the groups it follows in ``__consumer_offsets``, so
every sample carries the right group on every broker, the counts over all brokers equal what the
consumers read, no sample has an empty group and none of theirs falls to ``__no_group__``; the
telemetry topic holds every broker's rows, the stopped broker's included."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter, defaultdict

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from gregor.protocol.consumer_offsets import partition_for
from gregor.protocol.telemetry_records import TELEMETRY_TOPIC
from tests.support.broker_process import free_port
from tests.support.cluster import BrokerCluster
from tests.support.group_readers import read_together
from tests.support.metrics_scrape import scrape
from tests.support.waiting import wait_for
from tests.support.wire_state import coordinator_of

pytestmark = pytest.mark.timeout(300)

OFFSETS_PARTITIONS = 6
TOPICS = {"orders": "ga", "payments": "gb"}  # topic -> the group reading it
# partition i led by broker i + 1: every broker leads one partition of each topic
ASSIGNMENT = [[1, 2, 3], [2, 3, 1], [3, 1, 2]]
CLIENT_ID = "app"  # both groups' consumers: the client id cannot tell them apart


def same_coordinator_groups() -> tuple[str, str]:
    """Two group names hashing to the same __consumer_offsets partition (one coordinator)."""
    by_partition: dict[int, str] = {}
    for i in range(1000):
        name = f"readers-{i}"
        p = partition_for(name, OFFSETS_PARTITIONS)
        if p in by_partition:
            return by_partition[p], name
        by_partition[p] = name
    raise AssertionError("unreachable")


class Reader(threading.Thread):
    """A consumer in a thread, committing what it read after every poll."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": CLIENT_ID,
                                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                                  "topic.metadata.refresh.interval.ms": 1000})
        self.consumer.subscribe([topic])
        self.read = 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            msgs = [m for m in self.consumer.consume(500, 0.2) if m.error() is None]
            if msgs:
                self.read += len(msgs)
                try:
                    self.consumer.commit(asynchronous=False)
                except Exception:  # noqa: BLE001 - a commit during the move is retried by the next one
                    pass
        self.consumer.close()


def counts(port: int) -> dict[tuple[str, str], float]:
    _, samples = scrape(port)
    out: dict[tuple[str, str], float] = defaultdict(float)
    for labels, v in samples.get("gregor_group_consumed_messages_total", []):
        assert labels["group"], f"a sample without a group: {labels}"
        out[(labels["group"], labels["topic"])] += v
    return out


def produce(bootstrap: str, n: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for topic in TOPICS:
        for i in range(n):
            p.produce(topic, value=b"v" * 100, partition=i % 3)
    assert p.flush(30) == 0


def leaders(admin: AdminClient) -> dict[tuple[str, int], int]:
    md = admin.list_topics(timeout=10)
    return {(t, p.id): p.leader for t in TOPICS for p in md.topics[t].partitions.values()}


def start_cluster(tmp_path, zookeeper, settings: dict[str, str]) -> tuple[BrokerCluster, dict[int, int], AdminClient]:
    """Three brokers, each with its own metrics endpoint (broker id -> port), and the two topics
    with every broker leading one partition of each."""
    cluster = BrokerCluster(tmp_path / "cluster", zookeeper, 3, {
        "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS), "group.initial.rebalance.delay.ms": "0",
        **settings})
    ports = {}
    for i, b in zip(cluster.ids, cluster.brokers, strict=True):
        ports[i] = free_port()
        b.overrides["metrics.listener"] = f"http://127.0.0.1:{ports[i]}"
    try:
        cluster.start()
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        for f in admin.create_topics([NewTopic(t, 3, replica_assignment=ASSIGNMENT) for t in TOPICS]).values():
            f.result(30)
        wait_for(lambda: all(leader == ASSIGNMENT[p][0] for (_, p), leader in leaders(admin).items()), 60,
                 "each broker leading one partition of each topic")
    except BaseException:
        cluster.kill_all()
        raise
    return cluster, ports, admin


def test_every_broker_attributes_fetches_to_their_groups_while_the_coordinator_moves(tmp_path, zookeeper):
    ga, gb = same_coordinator_groups()
    groups = {"orders": ga, "payments": gb}
    cluster, ports, admin = start_cluster(tmp_path, zookeeper, {
        "telemetry.interval.ms": "1000", "telemetry.topic.num.partitions": "2",
        "leader.imbalance.check.interval.seconds": "2"})
    readers: list[Reader] = []
    try:
        readers = [Reader(cluster.bootstrap, groups[t], t) for t in TOPICS]
        for r in readers:
            r.start()
        n1 = 300
        produce(cluster.bootstrap, n1)
        wait_for(lambda: all(r.read >= n1 for r in readers), 90, "phase 1 read")

        seen: list = []

        def totals(expected: int, restarted: int | None = None, before: dict | None = None):
            got: Counter = Counter()
            seen[:] = [got]
            for i, port in ports.items():
                for key, v in counts(port).items():
                    got[key] += v - (before.get(i, {}).get(key, 0) if before and i != restarted else 0)
            return got if all(got[(groups[t], t)] == expected for t in TOPICS) else None

        try:
            wait_for(lambda: totals(n1), 30, "every broker's counts adding up to phase 1")
        except AssertionError:
            raise AssertionError(f"phase 1 counts over all brokers {seen}, per broker "
                                 f"{[dict(counts(p)) for p in ports.values()]}") from None
        phase1 = {i: dict(counts(port)) for i, port in ports.items()}
        assert all(sum(v for (g, _), v in phase1[i].items() if g in (ga, gb)) > 0 for i in ports), \
            f"every broker served some of the groups' fetches: {phase1}"
        assert not any(g == "__no_group__" and t in TOPICS for i in phase1 for (g, t) in phase1[i])
        assert [r.read for r in readers] == [n1, n1]

        # the coordinator moves: its broker stops (controlled shutdown), then returns and takes
        # its preferred leaderships back
        coordinator = coordinator_of(cluster.bootstrap, ga)
        time.sleep(1.5)  # one more telemetry interval with the phase-1 counts
        assert cluster.stop(coordinator) == 0
        wait_for(lambda: coordinator_of(cluster.bootstrap, ga) not in (coordinator, -1), 60, "a new coordinator")
        cluster.start_broker(coordinator)
        wait_for(lambda: all(leader == ASSIGNMENT[p][0] for (_, p), leader in leaders(admin).items()), 90,
                 "the preferred leaders back")
        n2 = 200
        produce(cluster.bootstrap, n2)
        wait_for(lambda: all(r.read >= n1 + n2 for r in readers), 90, "phase 2 read")
        try:
            wait_for(lambda: totals(n2, coordinator, phase1), 30, "every broker's counts adding up to phase 2")
        except AssertionError:
            raise AssertionError(f"phase 2 counts over all brokers {seen} (expected {n2} per group; restarted "
                                 f"broker {coordinator}), per broker now {[dict(counts(p)) for p in ports.values()]}, "
                                 f"after phase 1 {phase1}; reads {[r.read for r in readers]}") from None
        assert [r.read for r in readers] == [n1 + n2, n1 + n2]
        for i, port in ports.items():
            assert not any(g == "__no_group__" and t in TOPICS for (g, t) in counts(port)), f"broker {i}"
        time.sleep(2.5)  # the last interval's telemetry

        # the telemetry topic: rows from every broker; per (broker, start) the newest counters add
        # up to everything each group read
        c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "telemetry-check",
                      "auto.offset.reset": "earliest", "enable.auto.commit": False})
        c.subscribe([TELEMETRY_TOPIC])
        newest: dict[tuple, int] = {}
        brokers_seen = set()
        deadline = time.monotonic() + 30
        idle = 0
        while time.monotonic() < deadline and idle < 6:
            msgs = c.consume(1000, 0.5)
            idle = 0 if msgs else idle + 1
            for m in msgs:
                if m.error() is not None:
                    continue
                row = json.loads(m.value())
                assert row["group"], f"a telemetry row without a group: {row}"
                if row["topic"] not in TOPICS:
                    continue
                assert row["group"] == groups[row["topic"]], row
                brokers_seen.add(row["broker"])
                key = (row["broker"], row["broker_start"], row["group"], row["topic"], row["partition"])
                newest[key] = max(newest.get(key, 0), row["messages"])
        c.close()
        assert brokers_seen == set(ports)
        by_group: Counter = Counter()
        for (_, _, group, _, _), v in newest.items():
            by_group[group] += v
        assert by_group == {ga: n1 + n2, gb: n1 + n2}
    finally:
        for r in readers:
            r.done.set()
        for r in readers:
            r.join(30)
        cluster.kill_all()


def test_a_broker_without_a_replica_of_the_offsets_partition_follows_it_from_the_leader(tmp_path, zookeeper):
    """offsets.topic.replication.factor=1: two of the three brokers hold no replica of the groups'
    __consumer_offsets partition and follow it by fetching from its leader; they still attribute
    every fetch they serve to the right group."""
    ga, gb = same_coordinator_groups()
    groups = {"orders": ga, "payments": gb}
    cluster, ports, _ = start_cluster(tmp_path, zookeeper, {"offsets.topic.replication.factor": "1",
                                                            "telemetry.interval.ms": "0"})
    readers: list[Reader] = []
    try:
        readers = [Reader(cluster.bootstrap, groups[t], t) for t in TOPICS]
        for r in readers:
            r.start()
        wait_for(lambda: all(coordinator_of(cluster.bootstrap, g) > 0 for g in groups.values()), 60, "coordinators")
        time.sleep(3)  # the groups are formed and followed (every 0.5 s) before any data arrives
        produce(cluster.bootstrap, 300)
        wait_for(lambda: all(r.read >= 300 for r in readers), 90, "everything read")

        def attributed():
            per_broker = {i: dict(counts(port)) for i, port in ports.items()}
            total = Counter()
            for c in per_broker.values():
                total.update(c)
            return per_broker if all(total[(groups[t], t)] == 300 for t in TOPICS) else None

        per_broker = wait_for(attributed, 30, "every broker's counts adding up")
        coordinator = coordinator_of(cluster.bootstrap, ga)
        assert all(any(g in (ga, gb) for g, _ in per_broker[i]) for i in ports if i != coordinator), per_broker
        assert not any(g == "__no_group__" and t in TOPICS for c in per_broker.values() for g, t in c), per_broker
    finally:
        for r in readers:
            r.done.set()
        for r in readers:
            r.join(30)
        cluster.kill_all()


@pytest.mark.parametrize("groups", [{"orders-service": None, "audit-service": None},
                                    {"a": None, "b": 700, "c": 1500}], ids=["two-together", "three-diverging"])
def test_groups_with_the_default_client_id_are_counted_apart_over_the_brokers(tmp_path, zookeeper, groups):
    """The report on three brokers: groups with librdkafka's default client id start together on
    a new topic whose partitions three brokers lead; each broker counts what it served, and the
    sums over the brokers are what each group read."""
    cluster, ports, admin = start_cluster(tmp_path, zookeeper, {})
    try:
        admin.create_topics([NewTopic("fresh", 3, replica_assignment=ASSIGNMENT)])["fresh"].result(30)
        wait_for(lambda: all(p.leader == ASSIGNMENT[p.id][0]
                             for p in admin.list_topics(timeout=10).topics["fresh"].partitions.values()),
                 60, "each broker leading one partition of fresh")
        read_together(cluster.bootstrap, list(ports.values()), "fresh", groups, 3000)
    finally:
        cluster.kill_all()
