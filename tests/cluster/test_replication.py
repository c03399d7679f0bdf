"""Three real brokers over a real ZooKeeper: replicated topics, acks=all, leader failover, a
follower that falls behind, and a divergent tail truncated on return."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from gregor.admin.wire_client import WireClient as Wire
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode
from tests.support.replication import FAST_SHORT_LAG, consume_all, create_topic, partition_state, produce_all
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(240)


def test_rf3_acks_all_survives_leader_kill_and_nothing_acknowledged_is_lost(cluster_factory):
    cluster = cluster_factory(3, overrides=FAST_SHORT_LAG)
    create_topic(cluster.bootstrap, "orders", 1, 3, {"min.insync.replicas": "2"})
    leader, replicas, isr = wait_for(lambda: (st := partition_state(cluster.bootstrap, "orders"))[0] >= 0
                                     and len(st[2]) == 3 and st, what="a leader with a full ISR")
    assert sorted(replicas) == [1, 2, 3]
    first = produce_all(cluster.bootstrap, "orders", [f"a{i}".encode() for i in range(200)])
    assert sorted(first) == list(range(200))

    cluster.kill(leader)
    new_leader = wait_for(lambda: (st := partition_state(cluster.broker(next(i for i in cluster.ids if i != leader))
                                                         .bootstrap, "orders"))[0] not in (-1, leader) and st[0],
                          what="a new leader")
    assert new_leader != leader
    survivors = ",".join(cluster.broker(i).bootstrap for i in cluster.ids if i != leader)
    second = produce_all(survivors, "orders", [f"b{i}".encode() for i in range(200)])
    assert sorted(second) == list(range(200, 400))

    cluster.restart(leader)
    wait_for(lambda: len(partition_state(cluster.bootstrap, "orders")[2]) == 3, 60, "the old leader back in the ISR")
    got = consume_all(cluster.bootstrap, "orders", 400)
    assert [o for o, _ in got] == list(range(400))
    assert [v for _, v in got] == [f"a{i}".encode() for i in range(200)] + [f"b{i}".encode() for i in range(200)]


def test_acks_all_needs_min_insync_replicas(cluster_factory):
    cluster = cluster_factory(3, overrides=FAST_SHORT_LAG)
    create_topic(cluster.bootstrap, "strict", 1, 3, {"min.insync.replicas": "2"})
    leader, _, _ = wait_for(lambda: (st := partition_state(cluster.bootstrap, "strict"))[0] >= 0
                            and len(st[2]) == 3 and st, what="a full ISR")
    followers = [i for i in cluster.ids if i != leader]
    cluster.pause(followers[0])
    wait_for(lambda: len(partition_state(cluster.broker(leader).bootstrap, "strict")[2]) == 2, 30,
             "the paused follower to leave the ISR")
    assert len(produce_all(cluster.broker(leader).bootstrap, "strict", [b"x"] * 10)) == 10
    cluster.pause(followers[1])
    wait_for(lambda: len(partition_state(cluster.broker(leader).bootstrap, "strict")[2]) == 1, 30,
             "the ISR to shrink to the leader")
    p = Producer({"bootstrap.servers": cluster.broker(leader).bootstrap, "acks": "all",
                  "message.timeout.ms": 3000, "retries": 0})
    errors: list[object] = []
    p.produce("strict", b"y", partition=0, on_delivery=lambda err, msg: errors.append(err))
    p.flush(10)
    assert errors and errors[0] is not None and "NOT_ENOUGH_REPLICAS" in str(errors[0])
    cluster.resume(followers[0])
    cluster.resume(followers[1])
    wait_for(lambda: len(partition_state(cluster.broker(leader).bootstrap, "strict")[2]) == 3, 60,
             "both followers to catch up and rejoin")
    assert len(produce_all(cluster.broker(leader).bootstrap, "strict", [b"z"] * 5)) == 5


def test_divergent_tail_is_truncated_when_the_old_leader_returns(cluster_factory):
    cluster = cluster_factory(3, overrides=FAST_SHORT_LAG)
    create_topic(cluster.bootstrap, "tail", 1, 3, {"min.insync.replicas": "1"})
    leader, _, _ = wait_for(lambda: (st := partition_state(cluster.bootstrap, "tail"))[0] >= 0
                            and len(st[2]) == 3 and st, what="a full ISR")
    assert len(produce_all(cluster.bootstrap, "tail", [b"committed"] * 50)) == 50
    followers = [i for i in cluster.ids if i != leader]
    for f in followers:
        cluster.pause(f)
    # the followers' long-poll fetches in flight complete empty (replica.fetch.wait.max.ms=200)
    # before the writes below: they never see them; all this well within replica.lag.time.max.ms,
    # so the leader has not shrunk the ISR to itself when it dies
    time.sleep(0.6)
    # acks=1 writes the followers never see
    produce_all(cluster.broker(leader).bootstrap, "tail", [b"lost"] * 20, acks="1", idempotent=False)
    cluster.kill(leader)
    for f in followers:
        cluster.resume(f)
    survivors = ",".join(cluster.broker(i).bootstrap for i in followers)
    wait_for(lambda: partition_state(survivors, "tail")[0] in followers, 60, "a new leader among the followers")
    assert len(produce_all(survivors, "tail", [b"after"] * 30)) == 30
    cluster.restart(leader)
    wait_for(lambda: len(partition_state(cluster.bootstrap, "tail")[2]) == 3, 60, "the old leader back in the ISR")
    log = cluster.broker(leader).output()
    assert "truncating a divergent tail" in log
    got = consume_all(cluster.bootstrap, "tail", 80)
    assert [v for _, v in got] == [b"committed"] * 50 + [b"after"] * 30
    assert [o for o, _ in got] == list(range(80))


def test_not_leader_is_answered_and_metadata_lists_the_cluster(cluster_factory):
    cluster = cluster_factory(3, overrides=FAST_SHORT_LAG)
    create_topic(cluster.bootstrap, "spread", 6, 2)
    md = wait_for(lambda: (m := AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(timeout=10))
                  and all(p.leader >= 0 for p in m.topics["spread"].partitions.values()) and m,
                  what="leaders for every partition")
    assert sorted(md.brokers) == [1, 2, 3]
    assert {p.leader for p in md.topics["spread"].partitions.values()} == {1, 2, 3}
    for p in md.topics["spread"].partitions.values():
        assert len(p.replicas) == 2 and p.leader == p.replicas[0]
    p0 = md.topics["spread"].partitions[0]
    outsider = next(i for i in cluster.ids if i not in p0.replicas)
    wire = Wire(cluster.broker(outsider).bootstrap)
    resp = wire.call(ApiKey.LIST_OFFSETS, 4, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": "spread", "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
    assert resp.topics[0].partitions[0].error_code == ErrorCode.not_leader_or_follower
    wire.close()


def test_manual_replica_assignments_are_kept_and_checked(cluster_factory):
    from confluent_kafka.admin import NewPartitions

    cluster = cluster_factory(3, overrides=FAST_SHORT_LAG)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("manual", 2, replica_assignment=[[3, 1], [1, 2]])])["manual"].result(30)
    bad = admin.create_topics([NewTopic("bad", 1, replica_assignment=[[9, 1]])])["bad"]
    with pytest.raises(KafkaException) as e:
        bad.result(30)
    assert e.value.args[0].name() == "INVALID_REPLICA_ASSIGNMENT"
    admin.create_partitions([NewPartitions("manual", 3, replica_assignment=[[2, 3]])])["manual"].result(30)
    md = wait_for(lambda: (m := admin.list_topics("manual", timeout=10)) and len(m.topics["manual"].partitions) == 3
                  and all(p.leader >= 0 for p in m.topics["manual"].partitions.values()) and m,
                  what="three partitions with leaders")
    assert {i: list(p.replicas) for i, p in md.topics["manual"].partitions.items()} == {0: [3, 1], 1: [1, 2], 2: [2, 3]}
