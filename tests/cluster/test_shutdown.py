"""Stopping a broker of a cluster (real processes): SIGTERM moves its leaderships away before it
exits and it never takes a place in an ISR again on its way out; a broker that cannot reach
ZooKeeper says so and exits, and SIGTERM stops it cleanly while it is still trying."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.support.broker_process import free_port
from tests.support.replication import FAST_SHORT_LAG, create_topic, partition_state
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(240)


def serve(tmp_path: Path, *overrides: str) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "gregor", "serve", "--override", f"log.dirs={tmp_path / 'data'}",
           "--override", f"listeners=PLAINTEXT://127.0.0.1:{free_port()}"]
    for o in overrides:
        cmd += ["--override", o]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def test_a_broker_still_joining_its_cluster_answers_no_client(tmp_path):
    """Found by the fault campaign: a broker restarted while ZooKeeper was away answered Metadata
    with no brokers, no leaders and no controller, and librdkafka dropped every broker it knew
    (the producer stalled for good). As Kafka, requests are served only once the broker joined:
    until then a client's connection is refused and it tries the other brokers."""
    from gregor.admin.wire_client import WireClient
    from gregor.protocol.api_keys import ApiKey

    port = free_port()
    cmd = [sys.executable, "-m", "gregor", "serve", "--override", f"log.dirs={tmp_path / 'data'}",
           "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
           "--override", f"zookeeper.connect=127.0.0.1:{free_port()}",
           "--override", "zookeeper.connection.timeout.ms=60000"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        assert proc.stdout is not None
        seen = b""
        while b"Connecting to 127.0.0.1" not in seen:  # it is trying to reach ZooKeeper now
            line = proc.stdout.readline()
            assert line, seen[-2000:]
            seen += line
        time.sleep(1)
        answer = None
        try:
            answer = WireClient(f"127.0.0.1:{port}", timeout=5).call(ApiKey.METADATA, 9, {
                "topics": None, "allow_auto_topic_creation": False, "include_cluster_authorized_operations": False,
                "include_topic_authorized_operations": False})
        except (ConnectionError, OSError):
            pass
        assert answer is None, f"answered before joining: brokers {answer.brokers}, controller {answer.controller_id}"
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


def test_no_zookeeper_is_a_clear_error(tmp_path):
    proc = serve(tmp_path, f"zookeeper.connect=127.0.0.1:{free_port()}", "zookeeper.connection.timeout.ms=2000")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert b"no ZooKeeper server at 127.0.0.1:" in out and b"zookeeper.connection.timeout.ms" in out


def test_sigterm_while_joining_stops_cleanly(tmp_path):
    proc = serve(tmp_path, f"zookeeper.connect=127.0.0.1:{free_port()}", "zookeeper.connection.timeout.ms=60000")
    assert proc.stdout is not None
    seen = b""
    deadline = time.monotonic() + 60
    while b"Connecting to 127.0.0.1" not in seen and time.monotonic() < deadline:  # it is retrying now
        line = proc.stdout.readline()
        if not line:
            break
        seen += line
    assert proc.poll() is None, seen[-2000:]
    proc.terminate()
    out, _ = proc.communicate(timeout=30)
    out = seen + out
    assert proc.returncode == 0, out[-2000:]
    assert b"stopped while starting" in out and b"stopped cleanly" in out


def test_controlled_shutdown_moves_leadership_and_leaves_every_isr(cluster_factory):
    cluster = cluster_factory(3, {**FAST_SHORT_LAG, "replica.lag.time.max.ms": "30000"})
    create_topic(cluster.bootstrap, "steady", 6, 3, {"min.insync.replicas": "2"})
    wait_for(lambda: all(len(partition_state(cluster.bootstrap, "steady", p)[2]) == 3 for p in range(6)),
             what="full ISRs")
    leaders = {p: partition_state(cluster.bootstrap, "steady", p)[0] for p in range(6)}
    victim = max(set(leaders.values()), key=list(leaders.values()).count)
    others = [b for b in cluster.ids if b != victim]

    acked: list[int] = []
    errors: list[object] = []
    running = threading.Event()
    running.set()

    def produce() -> None:
        p = Producer({"bootstrap.servers": ",".join(cluster.broker(b).bootstrap for b in others), "acks": "all",
                      "enable.idempotence": True, "linger.ms": 5, "message.timeout.ms": 60000})
        i = 0
        while running.is_set():
            p.produce("steady", b"%d" % i, partition=i % 6,
                      on_delivery=lambda err, msg: errors.append(err) if err else acked.append(msg.offset()))
            p.poll(0.005)
            i += 1
        p.flush(60)

    t = threading.Thread(target=produce, daemon=True)  # a wedged client must fail the test, not hang pytest
    t.start()
    wait_for(lambda: len(acked) > 200, what="production under way")
    assert cluster.stop(victim) == 0
    log = cluster.broker(victim).output()
    assert "controlled shutdown succeeded" in log
    # on its way out, after its leaderships moved, it did not start following anyone
    tail = log[log.index("controlled shutdown succeeded"):]
    assert "follower of broker" not in tail, tail[:3000]
    with cluster.zk_client() as zk:
        for p in range(6):
            state = json.loads(zk.get(f"/brokers/topics/steady/partitions/{p}/state")[0])
            assert state["leader"] in others
            assert victim not in state["isr"], (p, state)
    before = len(acked)
    wait_for(lambda: len(acked) > before + 200, timeout=20, what="acks=all going on without the stopped broker")
    running.clear()
    t.join(90)
    assert not t.is_alive(), "the producer did not finish within 90 s"
    assert not errors, errors[:5]


def test_a_broker_starting_while_zookeeper_is_away_waits_for_it(tmp_path, zookeeper_factory):
    """A broker restarted while ZooKeeper is down (or restarting) waits for it, within
    zookeeper.connection.timeout.ms, and joins once it is back. (The fault campaign found a broker
    whose registration met a ConnectionLoss end its start-up with exit code 1: every start-up step
    now waits for the connection, tests/cluster/controller/test_zk_broker.py.)"""
    from tests.support.cluster import BrokerCluster

    zk = zookeeper_factory()
    cluster = BrokerCluster(tmp_path / "cluster", zk, 2, {"zookeeper.session.timeout.ms": "6000",
                                                           "zookeeper.connection.timeout.ms": "60000"})
    try:
        cluster.start()
        cluster.kill(2)
        zk.stop()
        b = cluster.broker(2)
        b.start(wait=False)  # joining waits for ZooKeeper (and it serves no client meanwhile)
        wait_for(lambda: "Connecting to" in b.output(), 30, "broker 2 trying to reach ZooKeeper")
        time.sleep(3)
        assert b.alive(), b.output()[-2000:]
        zk.start()
        cluster.wait_registered([1, 2], timeout=60)
        cluster.wait_formed(timeout=60)
        assert b.alive()
    finally:
        cluster.kill_all()
