"""Faults in a cluster of real processes (issue 12; Kafka 2.8's ZooKeeper mode is the reference):
brokers SIGKILLed under a continuous idempotent acks=all load, the controller killed while it
initialises a new topic and while it elects leaders, and ZooKeeper down for 30 s under load.

What the tests check at the end: every acknowledged record is read exactly once, at the offset it
was acknowledged with, in the order it was produced, offsets without gaps; and once every replica
is back in the ISR, the replicas' log files hold the same bytes up to the high watermark (read from
the brokers' data directories, batch by batch).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from gregor.cluster.zk import znodes as zn
from tests.support.cluster import BrokerCluster
from tests.support.replication import (
    FAST_DEFAULT_LAG,
    ContinuousProducer,
    check_read_exactly_once,
    check_replicas_identical,
    consume_to_end,
    create_topic,
    get,
    last_acked,
    states,
    wait_full_isr,
    wait_states,
)
from tests.support.waiting import wait_for
from tests.support.zk_relay import ZkRelay

pytestmark = pytest.mark.timeout(300)


# -- ZooKeeper's view (the partitions' states: tests/support/replication.py) ------------------------
def controller_of(zk: KazooClient) -> int:
    """The controller's id; -1 while there is none (``/controller`` goes with its session)."""
    got = get(zk, zn.CONTROLLER)
    return zn.decode_controller(got[0]) if got else -1


def controller_epoch(zk: KazooClient) -> int:
    return zn.decode_controller_epoch(zk.get(zn.CONTROLLER_EPOCH)[0])


def start_cluster(cluster_factory: Callable[..., BrokerCluster], size: int = 3, **kw: object) -> BrokerCluster:
    """A cluster whose brokers all name the controller in Metadata. A broker is ready before the
    first controller is elected; librdkafka's admin client that reads controller -1 from its first
    Metadata waits for a broker state change, not for a metadata refresh, and its CreateTopics
    would time out."""
    cluster = cluster_factory(size, overrides=FAST_DEFAULT_LAG, **kw)
    for b in cluster.ids:
        admin = AdminClient({"bootstrap.servers": cluster.broker(b).bootstrap})
        wait_for(lambda admin=admin: admin.list_topics(timeout=10).controller_id >= 0, 30,
                 f"broker {b} to know the controller")
    return cluster


# -- checks (the load, and the checks it shares: tests/support/replication.py) -----------------------
def restart_and_check(cluster: BrokerCluster, prod: ContinuousProducer, topic: str, parts: int, brokers: list[int],
                      isr_timeout: float = 90) -> None:
    """Restart the killed ``brokers``; once every ISR is full and the producer got 300 more
    acknowledgements: nothing failed, every acknowledged record is read exactly once, and the
    replicas are byte-identical."""
    for b in brokers:
        cluster.restart(b, timeout=60)
    wait_full_isr(cluster, topic, parts, timeout=isr_timeout)
    prod.wait_acked(300, 90, "acknowledgements after both brokers returned")
    prod.stop()
    assert not prod.failed and not prod.fatal, (prod.failed[:5], prod.fatal)
    counts = check_read_exactly_once(cluster.bootstrap, prod)
    assert sum(counts.values()) == prod.count
    wait_full_isr(cluster, topic, parts)
    check_replicas_identical(cluster, topic, parts, counts)


def check_acks_1(bootstrap: str, prod: ContinuousProducer, kept_leader: set[int]) -> dict[int, int]:
    """acks=1 without idempotence promises less: offsets without gaps, and the acknowledged
    records of the partitions in ``kept_leader`` (never led by another replica: nothing truncated)
    read back at their offsets. Returns the number of records of each partition."""
    got = consume_to_end(bootstrap, prod.topic, prod.partitions, last_acked(prod, kept_leader))
    for p in range(prod.partitions):
        assert [o for o, _ in got[p]] == list(range(len(got[p]))), f"partition {p}: offsets are not contiguous from 0"
        if p in kept_leader:
            at = dict(got[p])
            lost = [(o, v, at.get(o)) for o, v in prod.acked[p] if at.get(o) != v]
            assert not lost, f"partition {p}: acknowledged records not read back (offset, acked, found): {lost[:5]}"
            values = set(at.values())
            missing = [v for v in prod.acked_unknown[p] if v not in values]
            assert not missing, f"partition {p}: acknowledged records (offset unknown) not in the log: {missing[:5]}"
    return {p: len(got[p]) for p in got}


# -- more checks ------------------------------------------------------------------------------------
def segment_bytes(cluster: BrokerCluster, broker_id: int, topic: str, partition: int) -> int:
    return sum(f.stat().st_size for f in (cluster.broker(broker_id).data_dir / f"{topic}-{partition}").glob("*.log"))


def expect_not_enough_replicas(bootstrap: str, topic: str, partition: int) -> None:
    """An acks=all write (no retries) is refused with NOT_ENOUGH_REPLICAS, before anything is appended."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "retries": 0, "message.timeout.ms": 10000,
                  "enable.idempotence": False})
    errors: list[KafkaError | None] = []
    p.produce(topic, b"refused", partition=partition, on_delivery=lambda err, msg: errors.append(err))
    assert p.flush(20) == 0
    assert errors and errors[0] is not None and errors[0].code() == KafkaError.NOT_ENOUGH_REPLICAS, errors


def produce_one_each(bootstrap: str, topic: str, partitions: int, value: bytes) -> dict[int, int]:
    """One acks=all record to each partition; the offset of each (every one must be acknowledged)."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                  "message.timeout.ms": 60000, "linger.ms": 5})
    offsets: dict[int, int] = {}
    errors: list[str] = []

    def done(err: KafkaError | None, msg: object) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            offsets[msg.partition()] = msg.offset()  # type: ignore[attr-defined]

    for i in range(partitions):
        p.produce(topic, value, partition=i, on_delivery=done)
    assert p.flush(90) == 0
    assert not errors, errors[:5]
    return offsets


def read_at(bootstrap: str, topic: str, offsets: dict[int, int], timeout: float = 60) -> dict[int, bytes]:
    """The value at ``offsets[p]`` of each partition p."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.monotonic_ns()}",
                  "enable.auto.commit": False, "auto.offset.reset": "error"})
    try:
        c.assign([TopicPartition(topic, p, o) for p, o in offsets.items()])
        out: dict[int, bytes] = {}
        deadline = time.monotonic() + timeout
        while len(out) < len(offsets) and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            assert m.error() is None, m.error()
            if m.offset() == offsets[m.partition()]:
                out[m.partition()] = m.value()
        return out
    finally:
        c.close()


def metadata_agrees(bootstrap: str, topic: str, expected: dict[int, zn.PartitionState]) -> bool:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    t = md.topics.get(topic)
    if t is None or t.error is not None or len(t.partitions) != len(expected):
        return False
    return all(t.partitions[p].leader == st.leader and sorted(t.partitions[p].isrs) == sorted(st.isr)
               for p, st in expected.items())


def wait_metadata_agrees(cluster: BrokerCluster, bootstrap: str, topic: str, partitions: int,
                         ok: Callable[[zn.PartitionState], bool], timeout: float, what: str
                         ) -> dict[int, zn.PartitionState]:
    """Until every partition's state satisfies ``ok`` and ``bootstrap``'s Metadata agrees with it,
    the states read again each time (a controller may still be moving a partition through an
    intermediate state, which a snapshot would keep); the states."""
    with cluster.zk_client() as zk:
        def check() -> dict[int, zn.PartitionState] | None:
            sts = states(zk, topic, partitions)
            if not all(st is not None and ok(st) for st in sts.values()):
                return None
            return sts if metadata_agrees(bootstrap, topic, sts) else None  # type: ignore[arg-type]
        return wait_for(check, timeout, what)  # type: ignore[no-any-return]


# -- ZooKeeper out of reach (the relay: tests/support/zk_relay.py) -----------------------------------
@pytest.fixture
def relayed_zookeeper(zookeeper_factory):
    """A ZooKeeper server of the test's own and a relay in front of it."""
    server = zookeeper_factory()
    relay = ZkRelay(server)
    yield server, relay
    relay.close()


def leaders_from_metadata(bootstrap: str, topic: str) -> dict[int, int]:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    return {p: pm.leader for p, pm in md.topics[topic].partitions.items()}


# -- the tests --------------------------------------------------------------------------------------
def test_two_brokers_killed_under_acks_all_load_lose_nothing_acknowledged(cluster_factory):
    """An idempotent acks=all producer (min.insync.replicas=2, RF 3) runs throughout. The leader of
    partition 0 is SIGKILLed while it holds records its followers have not fetched (they are
    SIGSTOPped for a moment: those records are not acknowledged); then a second broker is
    SIGKILLed: the survivor alone in the ISRs refuses acks=all writes with NOT_ENOUGH_REPLICAS
    while the producer retries; then both come back."""
    cluster = start_cluster(cluster_factory)
    topic, parts = "load", 3
    create_topic(cluster.bootstrap, topic, parts, 3, {"min.insync.replicas": "2"})
    before = wait_full_isr(cluster, topic, parts)
    prod = ContinuousProducer(cluster.bootstrap, topic, parts).start()
    prod.wait_acked(300, 60, "acknowledgements before any fault")

    first = before[0].leader
    second, survivor = [b for b in cluster.ids if b != first]
    # the replicas' files are byte for byte the same up to where each has fetched. Records its
    # followers lack hold up the producer's acknowledgements (and so its next requests), so the
    # leader may be ahead of only one of them: wait a moment for it to be ahead of both. If the
    # producer's requests in flight had all been fetched before the pause (its in-flight limit
    # reached while waiting for acks=all), nothing new comes: resume, let it go on, pause again.
    followers = lambda: [segment_bytes(cluster, b, topic, 0) for b in (second, survivor)]  # noqa: E731
    for attempt in range(5):
        for b in (second, survivor):
            cluster.pause(b)
        with contextlib.suppress(AssertionError):
            wait_for(lambda: segment_bytes(cluster, first, topic, 0) > max(followers()), 1)
        if segment_bytes(cluster, first, topic, 0) > min(followers()):
            break
        with contextlib.suppress(AssertionError):
            wait_for(lambda: segment_bytes(cluster, first, topic, 0) > min(followers()), 3)
        if segment_bytes(cluster, first, topic, 0) > min(followers()):
            break
        assert attempt < 4, f"broker {first} never held records a follower does not have"
        for b in (second, survivor):
            cluster.resume(b)
        prod.wait_acked(50, 60, "acknowledgements before pausing the followers again")
    cluster.kill(first)
    for b in (second, survivor):
        cluster.resume(b)
    # the controller takes it out of every ISR; two replicas are enough for min.insync.replicas=2
    wait_states(cluster, topic, parts, lambda st: st.leader not in (first, zn.NO_LEADER) and first not in st.isr,
                20, f"leaders other than broker {first} and ISRs without it")
    prod.wait_acked(300, 60, "acknowledgements with one broker down")

    cluster.kill(second)
    # the last ISR member stays: each partition is led by the survivor alone, or offline
    def alone_ok(st: zn.PartitionState) -> bool:
        return (st.leader == survivor and st.isr == [survivor]) or st.leader == zn.NO_LEADER

    wait_states(cluster, topic, parts, alone_ok, 20, f"broker {survivor} alone in the ISRs")
    own = cluster.broker(survivor).bootstrap
    # a new controller may pass a partition through "offline" on its way to the survivor
    # (Kafka's OfflineReplica, then the election)
    alone = wait_metadata_agrees(cluster, own, topic, parts, alone_ok, 10,
                                 f"broker {survivor} to know it is alone in the ISRs")
    led = [p for p, st in alone.items() if st.leader == survivor]
    assert led, alone
    expect_not_enough_replicas(own, topic, led[0])

    restart_and_check(cluster, prod, topic, parts, [first, second])


@pytest.mark.parametrize("kill_when", ["topic written", "initialising"])
def test_controller_killed_while_a_new_topic_is_created(cluster_factory, kill_when):
    """SIGKILL the controller as soon as the topic's node is in ZooKeeper (CreateTopics went to the
    controller, which wrote it), or as soon as the controller starts writing the partitions' nodes."""
    cluster = start_cluster(cluster_factory)
    topic, parts = "wide", 50
    watched = zn.topic_path(topic) if kill_when == "topic written" else zn.partitions_path(topic)
    with cluster.zk_client() as zk:
        controller = controller_of(zk)
        epoch = controller_epoch(zk)
        pid = cluster.broker(controller).proc.pid
        killed = threading.Event()

        def on_node(data: bytes | None, stat: object) -> bool | None:
            # the controller creates /brokers/topics/<t>/partitions right before the state nodes
            if stat is not None and not killed.is_set():
                os.kill(pid, signal.SIGKILL)
                killed.set()
                return False
            return None

        zk.DataWatch(watched, on_node)
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic(topic, parts, 3)], operation_timeout=30)  # goes to the controller
        assert killed.wait(30), "the controller did not start initialising the topic"
        cluster.kill(controller)
        initialised = sum(st is not None for st in states(zk, topic, parts).values())
        survivors = [b for b in cluster.ids if b != controller]
        wait_for(lambda: controller_of(zk) in survivors, 30, "a new controller")
        assert controller_epoch(zk) > epoch

    live = set(survivors)
    wait_states(cluster, topic, parts, lambda st: st.leader in live and set(st.isr) <= live
                and st.leader in st.isr, 20,
                f"every partition led by a live broker with live ISRs ({initialised} of {parts} "
                "had a state when the controller died)")
    bootstrap = ",".join(cluster.broker(b).bootstrap for b in survivors)
    wait_metadata_agrees(cluster, bootstrap, topic, parts, lambda st: st.leader in live and set(st.isr) <= live
                         and st.leader in st.isr, 30, "Metadata to agree with ZooKeeper")
    offsets = produce_one_each(bootstrap, topic, parts, b"while one broker is down")
    assert read_at(bootstrap, topic, offsets) == {p: b"while one broker is down" for p in range(parts)}

    cluster.restart(controller, timeout=60)
    full = wait_full_isr(cluster, topic, parts)
    assert all(controller in st.isr for st in full.values())
    wait_metadata_agrees(cluster, cluster.bootstrap, topic, parts, lambda st: st.leader >= 0 and len(st.isr) == 3,
                         30, "Metadata to agree with ZooKeeper")
    offsets = produce_one_each(cluster.bootstrap, topic, parts, b"all back")
    assert read_at(cluster.bootstrap, topic, offsets) == {p: b"all back" for p in range(parts)}


@pytest.mark.parametrize("when", ["during its election", "together"])
def test_controller_killed_during_a_leader_election(cluster_factory, when):
    """A broker that leads many partitions is SIGKILLed, and the controller with it: "during its
    election": when the broker's session expires the controller starts electing new leaders, and
    is SIGKILLed as soon as its first election is in ZooKeeper; "together": both at once, before
    any election. The next controller finishes: every partition is led by a live member of its
    ISR, with a higher leader epoch, the dead are out of the ISRs; nothing acknowledged is lost."""
    cluster = start_cluster(cluster_factory, 4)
    topic, parts = "elect", 24
    create_topic(cluster.bootstrap, topic, parts, 3, {"min.insync.replicas": "2"})
    before = wait_full_isr(cluster, topic, parts)
    prod = ContinuousProducer(cluster.bootstrap, topic, parts).start()
    prod.wait_acked(500, 60, "acknowledgements before any fault")
    with cluster.zk_client() as zk:
        before = states(zk, topic, parts)  # type: ignore[assignment]
        controller = controller_of(zk)
        epoch = controller_epoch(zk)
        led: dict[int, list[int]] = {}
        for p, st in before.items():
            led.setdefault(st.leader, []).append(p)
        victim = max((b for b in cluster.ids if b != controller), key=lambda b: len(led.get(b, [])))
        assert len(led[victim]) >= 4, led
        pid = cluster.broker(controller).proc.pid
        killed = threading.Event()
        seen_first: list[bool] = []

        def on_state(data: bytes | None, stat: object) -> bool | None:
            if not seen_first:  # the node as it is when watched
                seen_first.append(True)
                return None
            if data and zn.PartitionState.decode(data, 0).leader != victim and not killed.is_set():
                os.kill(pid, signal.SIGKILL)  # the controller's first election is written
                killed.set()
                return False
            return None

        if when == "together":
            cluster.kill(victim)
            cluster.kill(controller)
        else:
            zk.DataWatch(zn.state_path(topic, led[victim][0]), on_state)
            cluster.kill(victim)
            assert killed.wait(30), "the controller elected no new leader"
            cluster.kill(controller)
        at_kill = states(zk, topic, parts)
        survivors = [b for b in cluster.ids if b not in (victim, controller)]
        wait_for(lambda: controller_of(zk) in survivors, 30, "a new controller")
        assert controller_epoch(zk) == epoch + 1

    live = set(survivors)
    # well within replica.lag.time.max.ms: the controller takes the dead out of the ISRs, not their leaders
    after = wait_states(cluster, topic, parts, lambda st: st.leader in live and set(st.isr) <= live
                        and st.leader in st.isr, 20, "every partition led by a live ISR member, the dead out "
                        f"of the ISRs (the dying controller wrote {sum(s != before[p] for p, s in at_kill.items())} "
                        f"of {parts} states)")
    bootstrap = ",".join(cluster.broker(b).bootstrap for b in survivors)
    wait_metadata_agrees(cluster, bootstrap, topic, parts, lambda st: st.leader in live and set(st.isr) <= live
                         and st.leader in st.isr, 30, "Metadata to agree with ZooKeeper")
    assert any(st.controller_epoch == epoch + 1 for st in after.values()), "the new controller wrote nothing"
    for p, st in after.items():
        assert st.leader in before[p].isr, f"partition {p}: leader {st.leader} was not in the ISR {before[p].isr}"
        assert st.leader_epoch > before[p].leader_epoch, f"partition {p}: {before[p]} -> {st}"
    prod.wait_acked(300, 60, "acknowledgements with two brokers down")

    restart_and_check(cluster, prod, topic, parts, [victim, controller], isr_timeout=120)


@pytest.mark.parametrize("outage", ["killed", "cut off"])
def test_zookeeper_down_for_30_seconds_under_load(cluster_factory, relayed_zookeeper, outage):
    """ZooKeeper out of reach for 30 s, much longer than the brokers' 4 s sessions, under acks=all
    and acks=1 load. "killed": the server is SIGKILLed, then started again over the same data; it
    restores the sessions from its data with a fresh timeout and the brokers resume them. "cut
    off": the server runs on, but the brokers' connections to it are cut (a relay in between); it
    expires their sessions, and when they reach it again they register again and a controller is
    elected again. Meanwhile the leaders go on serving produce and fetch with the leadership they
    had, and the brokers say ZooKeeper is unreachable. Afterwards every partition is led with a
    full ISR, nothing acknowledged with acks=all is lost, and the replicas are identical below the
    high watermark (there was never a second leader writing)."""
    zk_server, relay = relayed_zookeeper
    cluster = start_cluster(cluster_factory, zk=relay)
    parts = 3
    create_topic(cluster.bootstrap, "all", parts, 3, {"min.insync.replicas": "2"})
    create_topic(cluster.bootstrap, "one", parts, 3)
    before = {t: wait_full_isr(cluster, t, parts) for t in ("all", "one")}
    with cluster.zk_client() as zk:
        epoch = controller_epoch(zk)
    all_acks = ContinuousProducer(cluster.bootstrap, "all", parts).start()
    one_acks = ContinuousProducer(cluster.bootstrap, "one", parts, acks="1", idempotent=False).start()
    all_acks.wait_acked(300, 60, "acks=all acknowledgements before the outage")
    one_acks.wait_acked(300, 60, "acks=1 acknowledgements before the outage")
    marks = {b: cluster.broker(b).log_path.stat().st_size for b in cluster.ids}

    if outage == "killed":
        zk_server.kill()
    else:
        relay.cut()
    down_at = time.monotonic()
    # every broker says so
    wait_for(lambda: all("ZooKeeper connection to" in (out := cluster.broker(b).output()[marks[b]:]) and "lost" in out
                         for b in cluster.ids), 20, "each broker to log that ZooKeeper is unreachable")
    # produce (both kinds) goes on with the current leaders, and so does fetch
    n_all = all_acks.wait_acked(300, 20, "acks=all acknowledgements while ZooKeeper is down")
    n_one = one_acks.wait_acked(300, 20, "acks=1 acknowledgements while ZooKeeper is down")
    for t in ("all", "one"):
        assert leaders_from_metadata(cluster.bootstrap, t) == {p: st.leader for p, st in before[t].items()}
    with all_acks._lock:
        during = {p: all_acks.acked[p][-1] for p in range(parts)}  # acknowledged during the outage
    assert read_at(cluster.bootstrap, "all", {p: o for p, (o, _) in during.items()}) == \
        {p: v for p, (_, v) in during.items()}
    assert time.monotonic() - down_at < 30, "the checks during the outage took longer than the outage"
    wait_for(lambda: time.monotonic() - down_at >= 30, 31, "30 s of outage")
    assert all_acks.count > n_all and one_acks.count > n_one, "produce stopped while ZooKeeper was down"

    if outage == "killed":
        zk_server.start()
    else:
        relay.restore()
    cluster.wait_registered(cluster.ids, timeout=60)
    with cluster.zk_client() as zk:
        wait_for(lambda: controller_of(zk) in cluster.ids, 30, "a controller")
        if outage == "cut off":
            # the sessions expired: every broker registered again, a controller was elected again
            wait_for(lambda: controller_epoch(zk) > epoch, 30, "a controller elected again")
            for b in cluster.ids:
                wait_for(lambda b=b: "ZooKeeper session expired" in (out := cluster.broker(b).output()[marks[b]:])
                         and f"registered broker {b} at" in out, 10, f"broker {b} to register in a new session")
            # every leader registered again, so the new controller confirms every leadership for
            # the new registration (a new leader epoch); until it has, the states still read as
            # before the outage and say nothing of what moves
            def confirmed(t: str) -> bool:
                return all(st is not None and st.leader_epoch > before[t][p].leader_epoch
                           for p, st in states(zk, t, parts).items())
            for t in ("all", "one"):
                wait_for(lambda t=t: confirmed(t), 30, f"the new controller to confirm every leadership of {t}")
    for t in ("all", "one"):
        wait_full_isr(cluster, t, parts)
    all_acks.wait_acked(300, 60, "acks=all acknowledgements after ZooKeeper returned")
    one_acks.wait_acked(300, 60, "acks=1 acknowledgements after ZooKeeper returned")
    all_acks.stop()
    one_acks.stop()
    assert not all_acks.failed and not all_acks.fatal, (all_acks.failed[:5], all_acks.fatal)
    assert not one_acks.failed, one_acks.failed[:5]
    # read now, after the last acknowledgement: a partition whose leader epoch is still the one
    # before the outage was never led by another replica
    with cluster.zk_client() as zk:
        now = states(zk, "one", parts)
    kept = {p for p in range(parts) if (st := now[p]) is not None and st.leader_epoch == before["one"][p].leader_epoch}
    counts = {"all": check_read_exactly_once(cluster.bootstrap, all_acks),
              "one": check_acks_1(cluster.bootstrap, one_acks, kept)}
    for t in ("all", "one"):
        wait_full_isr(cluster, t, parts)
        check_replicas_identical(cluster, t, parts, counts[t])
