"""KIP-392 against three real brokers in three racks: the leader sends a consumer to the replica in
its rack (``preferred_read_replica``), that replica serves it up to its high watermark, and a real
consumer (librdkafka with ``client.rack``) reads everything from the follower."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest
from confluent_kafka import Consumer

from gregor.admin.wire_client import WireClient as Wire
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode
from tests.support.replication import FAST_SHORT_LAG, create_topic, partition_state, produce_all
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(240)

RACKS = ["r1", "r2", "r3"]


def fetch_v11(bootstrap: str, topic: str, rack: str, offset: int = 0):  # noqa: ANN201
    wire = Wire(bootstrap)
    try:
        resp = wire.call(ApiKey.FETCH, 11, {
            "replica_id": -1, "max_wait": timedelta(milliseconds=0), "min_bytes": 1, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1, "rack_id": rack,
            "topics": [{"topic": topic, "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                                         "fetch_offset": offset, "log_start_offset": -1,
                                                         "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": []})
    finally:
        wire.close()
    return resp.responses[0].partitions[0]


def test_a_consumer_reads_from_the_replica_in_its_rack(cluster_factory):
    cluster = cluster_factory(3, {**FAST_SHORT_LAG, "replica.selector.class": "RackAwareReplicaSelector"}, racks=RACKS)
    create_topic(cluster.bootstrap, "racked", 1, 3, {"min.insync.replicas": "2"})
    values = [b"v%05d" % i + b"x" * 200 for i in range(500)]
    produce_all(cluster.bootstrap, "racked", values)
    leader, replicas, _ = partition_state(cluster.bootstrap, "racked")
    wait_for(lambda: len(partition_state(cluster.bootstrap, "racked")[2]) == 3, what="full ISR")
    follower = next(r for r in replicas if r != leader)
    follower_rack = RACKS[follower - 1]
    leader_addr = cluster.broker(leader).bootstrap

    # the leader names the follower in the client's rack, with no records but its offsets
    p = fetch_v11(leader_addr, "racked", follower_rack)
    assert p.error_code == ErrorCode.none
    assert p.preferred_read_replica == follower
    assert not p.records
    assert p.high_watermark == 500
    # a client in the leader's rack, or in no rack, is served by the leader
    for rack in (RACKS[leader - 1], ""):
        own = fetch_v11(leader_addr, "racked", rack)
        assert own.preferred_read_replica == -1 and own.records
    # the follower serves a consumer, up to its high watermark (it learns the leader's in its next fetch)
    got = wait_for(lambda: (r := fetch_v11(cluster.broker(follower).bootstrap, "racked", follower_rack))
                   .high_watermark == 500 and r, what="follower's high watermark")
    assert got.error_code == ErrorCode.none and got.preferred_read_replica == -1 and got.records

    # librdkafka follows the redirection: nearly all bytes come from the follower
    rx: dict[int, int] = {}

    def stats(js: str) -> None:
        for b in json.loads(js)["brokers"].values():
            if b.get("nodeid", -1) >= 0:
                rx[b["nodeid"]] = max(rx.get(b["nodeid"], 0), b["rxbytes"])

    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "racked-readers", "client.rack": follower_rack,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False, "statistics.interval.ms": 200,
                  "stats_cb": stats, "fetch.wait.max.ms": 100})
    c.subscribe(["racked"])
    seen: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(seen) < len(values) and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            seen.append(m.value())
    t_end = time.monotonic() + 1.5
    while time.monotonic() < t_end:
        c.poll(0.1)
    c.close()
    assert seen == values
    payload = sum(len(v) for v in values)
    assert rx.get(follower, 0) > payload, rx
    assert rx.get(leader, 0) < payload / 2, rx


def list_latest(bootstrap: str, topic: str) -> int:
    """The high watermark, as a consumer's ListOffsets(latest) sees it."""
    wire = Wire(bootstrap)
    try:
        resp = wire.call(ApiKey.LIST_OFFSETS, 4, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
    finally:
        wire.close()
    return resp.topics[0].partitions[0].offset


def test_a_follower_fetch_past_the_leaders_log_end_moves_nothing(cluster_factory):
    """A client posing as follower 2 with an offset past the leader's log end gets
    OFFSET_OUT_OF_RANGE, and the high watermark stays where the real follower holds it."""
    from confluent_kafka.admin import AdminClient, NewTopic

    cluster = cluster_factory(3, {**FAST_SHORT_LAG, "replica.lag.time.max.ms": "60000"})
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("posed", 1, replica_assignment=[[1, 2]])])["posed"].result(30)
    produce_all(cluster.bootstrap, "posed", [b"a"] * 5)
    wait_for(lambda: list_latest(cluster.broker(1).bootstrap, "posed") == 5, what="high watermark 5")
    cluster.pause(2)  # the real follower stops fetching (and stays in the ISR for a minute)
    try:
        produce_all(cluster.broker(1).bootstrap, "posed", [b"b"] * 10, acks="1", idempotent=False)
        wire = Wire(cluster.broker(1).bootstrap)
        resp = wire.call(ApiKey.FETCH, 12, {
            "replica_id": 2, "max_wait": timedelta(milliseconds=0), "min_bytes": 1, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1, "rack_id": "",
            "topics": [{"topic": "posed", "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                                        "fetch_offset": 1000, "last_fetched_epoch": -1,
                                                        "log_start_offset": 0, "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": []})
        wire.close()
        assert resp.responses[0].partitions[0].error_code == ErrorCode.offset_out_of_range
        time.sleep(0.5)
        assert list_latest(cluster.broker(1).bootstrap, "posed") == 5
    finally:
        cluster.resume(2)
    wait_for(lambda: list_latest(cluster.broker(1).bootstrap, "posed") == 15, what="the real follower catching up")
