"""Admin APIs answer for the whole cluster (three real brokers over a real ZooKeeper): topic configs
live in ZooKeeper and every broker applies them, DescribeConfigs answers per broker, DescribeCluster
names every live broker and the controller, DeleteTopics removes the replicas on every broker."""

from __future__ import annotations

import json

import pytest
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    KafkaException,
)

from gregor.admin.wire_client import WireClient as Wire
from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode
from tests.support.replication import FAST_SHORT_LAG, create_topic
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(240)


def topic_configs(bootstrap: str, topic: str) -> dict[str, str]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = admin.describe_configs([res])[res].result(20)
    return {k: e.value for k, e in entries.items() if not e.is_default}


def test_topic_configs_are_written_to_zookeeper_and_every_broker_applies_them(cluster_factory):
    cluster = cluster_factory(3, FAST_SHORT_LAG)
    create_topic(cluster.bootstrap, "tuned", 2, 3, {"retention.ms": "100000"})
    one = AdminClient({"bootstrap.servers": cluster.broker(1).bootstrap})
    res = ConfigResource(ConfigResource.Type.TOPIC, "tuned", incremental_configs=[
        ConfigEntry("retention.ms", "200000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND)])
    one.incremental_alter_configs([res])[res].result(20)
    want = {"retention.ms": "200000", "cleanup.policy": "delete,compact"}
    with cluster.zk_client() as zk:
        data, _ = zk.get("/config/topics/tuned")
        assert json.loads(data)["config"] == want
    for b in cluster.ids:
        got = wait_for(lambda b=b: (c := topic_configs(cluster.broker(b).bootstrap, "tuned")).get("retention.ms")
                       == "200000" and c, what=f"broker {b} applying the change")
        assert {k: got[k] for k in want} == want

    # AlterConfigs (not incremental) replaces every override, through another broker
    two = AdminClient({"bootstrap.servers": cluster.broker(2).bootstrap})
    full = ConfigResource(ConfigResource.Type.TOPIC, "tuned", set_config={"segment.ms": "600000"})
    with pytest.warns(DeprecationWarning):  # confluent-kafka deprecates AlterConfigs; clients still send it
        two.alter_configs([full])[full].result(20)
    for b in cluster.ids:
        wait_for(lambda b=b: topic_configs(cluster.broker(b).bootstrap, "tuned") == {"segment.ms": "600000"},
                 what=f"broker {b} replacing the overrides")

    # an invalid value is refused with the key's name, and nothing changes anywhere
    bad = ConfigResource(ConfigResource.Type.TOPIC, "tuned", incremental_configs=[
        ConfigEntry("segment.ms", "1", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException, match="retention.ms"):
        one.incremental_alter_configs([bad])[bad].result(20)
    with cluster.zk_client() as zk:
        data, _ = zk.get("/config/topics/tuned")
        assert json.loads(data)["config"] == {"segment.ms": "600000"}
    assert topic_configs(cluster.broker(3).bootstrap, "tuned") == {"segment.ms": "600000"}


def test_describe_configs_per_broker_and_describe_cluster(cluster_factory):
    cluster = cluster_factory(3, FAST_SHORT_LAG, racks=["ra", "rb", "rc"])
    for b in cluster.ids:
        admin = AdminClient({"bootstrap.servers": cluster.broker(b).bootstrap})
        # librdkafka sends a BROKER resource to that broker
        res = ConfigResource(ConfigResource.Type.BROKER, str(b))
        entries = admin.describe_configs([res])[res].result(20)
        assert entries["broker.rack"].value == ["ra", "rb", "rc"][b - 1]
        assert entries["broker.id"].value == str(b)
    # asking a broker for another broker's configs is refused, saying where to ask
    wire = Wire(cluster.broker(1).bootstrap)
    resp = wire.call(ApiKey.DESCRIBE_CONFIGS, 4, {"resources": [
        {"resource_type": 4, "resource_name": "2", "configuration_keys": None}],
        "include_synonyms": False, "include_documentation": False})
    r = resp.results[0]
    assert r.error_code == ErrorCode.invalid_request and "broker 2" in r.error_message
    # DescribeCluster from any broker: all three, and the same controller
    controllers = set()
    for b in cluster.ids:
        w = Wire(cluster.broker(b).bootstrap)
        d = w.call(ApiKey.DESCRIBE_CLUSTER, 1, {"include_cluster_authorized_operations": False,
                                                 "endpoint_type": 1})
        w.close()
        assert sorted((x.broker_id, x.rack) for x in d.brokers) == [(1, "ra"), (2, "rb"), (3, "rc")]
        controllers.add(d.controller_id)
    assert len(controllers) == 1 and controllers.pop() in cluster.ids
    wire.close()


def test_delete_topic_removes_the_replicas_on_every_broker(cluster_factory):
    cluster = cluster_factory(3, FAST_SHORT_LAG)
    create_topic(cluster.bootstrap, "doomed", 3, 3)
    dirs = [cluster.broker(b).data_dir / f"doomed-{p}" for b in cluster.ids for p in range(3)]
    wait_for(lambda: all(d.is_dir() for d in dirs), what="every replica's directory")
    admin = AdminClient({"bootstrap.servers": cluster.broker(3).bootstrap})
    admin.delete_topics(["doomed"], operation_timeout=30)["doomed"].result(30)
    wait_for(lambda: not any(d.exists() for d in dirs), timeout=30, what="every replica deleted")
    with cluster.zk_client() as zk:
        assert zk.exists("/brokers/topics/doomed") is None
    for b in cluster.ids:
        md = AdminClient({"bootstrap.servers": cluster.broker(b).bootstrap}).list_topics(timeout=10)
        assert "doomed" not in md.topics


def test_a_topic_deleted_with_committed_offsets_and_created_again_starts_empty_everywhere(cluster_factory):
    """librdkafka's 0107 on three brokers: the coordinator's removal of the deleted topic's offsets
    is a replicated write; it had made the deletion stop half-way on the coordinator's broker,
    whose old replicas then came back inside the new topic."""
    from confluent_kafka import Consumer

    from tests.support.replication import consume_all, produce_all

    cluster = cluster_factory(3, {**FAST_SHORT_LAG, "offsets.topic.replication.factor": "3"})
    create_topic(cluster.bootstrap, "again", 3, 3)
    for p in range(3):
        produce_all(cluster.bootstrap, "again", [b"old-%d" % i for i in range(10)], partition=p)
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "again-readers",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe(["again"])
    got = 0
    while got < 30:
        m = c.poll(1)
        if m is not None and not m.error():
            got += 1
    c.commit(asynchronous=False)
    c.close()
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.delete_topics(["again"], operation_timeout=30)["again"].result(30)
    create_topic(cluster.bootstrap, "again", 3, 3)
    for p in range(3):
        produce_all(cluster.bootstrap, "again", [b"new-%d" % i for i in range(4)], partition=p)
        assert [v for _, v in consume_all(cluster.bootstrap, "again", 4, partition=p)] == \
            [b"new-%d" % i for i in range(4)]
    # every replica holds exactly the new records (none kept the old topic's log)
    for b in cluster.ids:
        wire = Wire(cluster.broker(b).bootstrap)
        resp = wire.call(ApiKey.LIST_OFFSETS, 4, {"replica_id": b % 3 + 1, "isolation_level": 0, "topics": [
            {"name": "again", "partitions": [{"partition_index": p, "current_leader_epoch": -1, "timestamp": -1}
                                             for p in range(3)]}]})
        wire.close()
        for part in resp.topics[0].partitions:
            if part.error_code == ErrorCode.none:  # this broker leads it: its log end
                assert part.offset == 4, (b, part)
    def replica_bytes(p: int) -> set[bytes]:
        return {b"".join(f.read_bytes() for f in sorted((cluster.broker(b).data_dir / f"again-{p}").glob("*.log")))
                for b in cluster.ids}

    for p in range(3):  # the three replicas byte-identical (a stale one would hold the old records)
        wait_for(lambda p=p: len(replica_bytes(p)) == 1, what=f"again-{p}'s replicas identical")
        assert b"old-" not in replica_bytes(p).pop()
    assert "deletion listener failed" not in "".join(cluster.broker(b).output() for b in cluster.ids)
    assert "listener" not in "".join(line for b in cluster.ids for line in cluster.broker(b).output().splitlines()
                                     if "ERROR" in line)
