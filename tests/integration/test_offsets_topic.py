"""__consumer_offsets as Kafka tools see it, and offsets at scale across restarts."""

import datetime
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from gregor.admin.wire_client import WireClient as Wire
from gregor.protocol.consumer_offsets import (
    GroupMetadataKey,
    OffsetCommitKey,
    decode_key,
    decode_value,
    partition_for,
)
from gregor.protocol.errors import ErrorCode
from tests.support.waiting import wait_for


def test_commits_are_kafka_records_in_the_groups_partition(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("orders", 2)])["orders"].result(10)
    groups = ["billing", "analytics-é", "日本"]
    for g in groups:
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": g})
        c.commit(offsets=[TopicPartition("orders", 0, 11), TopicPartition("orders", 1, 22, "meta")],
                 asynchronous=False)
        c.close()
    md = admin.list_topics("__consumer_offsets", timeout=10)
    assert len(md.topics["__consumer_offsets"].partitions) == 50
    # read the internal topic with a plain consumer and decode with Kafka's formats
    reader = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "reader", "enable.auto.commit": False})
    found: dict[str, dict] = {}
    for g in groups:
        p = partition_for(g, 50)
        reader.assign([TopicPartition("__consumer_offsets", p, 0)])
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(found.get(g, {})) < 2:
            m = reader.poll(0.5)
            if m is None or m.error():
                continue
            key = decode_key(m.key())
            value = decode_value(key, m.value())
            if isinstance(key, OffsetCommitKey) and key.group == g:
                # (confluent-kafka-python sends commit metadata with its C string terminator)
                found.setdefault(g, {})[(key.topic, key.partition)] = (value.offset, value.metadata.rstrip("\x00"),
                                                                       m.partition())
    reader.close()
    for g in groups:
        p = partition_for(g, 50)
        assert found[g] == {("orders", 0): (11, "", p), ("orders", 1): (22, "meta", p)}


def test_internal_topic_is_flagged_and_protected(broker):
    w = Wire(broker.bootstrap)
    md = w.call(3, 12, {"topics": None, "allow_auto_topic_creation": False,
                        "include_topic_authorized_operations": False})
    internal = {t.name: t.is_internal for t in md.topics}
    assert internal["__consumer_offsets"] is True
    from gregor.protocol.records import build_batch

    r = w.call(0, 9, {"acks": -1, "timeout": 1000, "transactional_id": None, "topic_data": [
        {"name": "__consumer_offsets", "partition_data": [{"index": 0, "records": build_batch([(b"k", b"v")])}]}]})
    assert r.responses[0].partition_responses[0].error_code == ErrorCode.invalid_topic_exception
    r = w.call(20, 6, {"topics": [{"name": "__consumer_offsets", "topic_id": None}], "timeout": 1000})
    assert r.responses[0].error_code != 0


def test_find_coordinator_for_groups_on_every_partition(broker):
    """Every __consumer_offsets partition has a coordinator here: no group can loop on
    COORDINATOR_NOT_AVAILABLE."""
    by_partition: dict[int, str] = {}
    i = 0
    while len(by_partition) < 50:
        by_partition.setdefault(partition_for(f"group-{i}", 50), f"group-{i}")
        i += 1
    w = Wire(broker.bootstrap)
    r = w.call(10, 4, {"key_type": 0, "coordinator_keys": list(by_partition.values())})
    assert len(r.coordinators) == 50
    assert all(c.error_code == 0 and c.node_id == 0 and c.port == broker.port for c in r.coordinators)
    r3 = w.call(10, 3, {"key": "group-0", "key_type": 0})
    assert r3.error_code == 0 and r3.host == "127.0.0.1"
    # a transactional id's coordinator: this broker, once __transaction_state (created by the
    # first lookup) is led here
    txn = wait_for(lambda: (a := w.call(10, 3, {"key": "my-txn", "key_type": 1})).error_code == 0 and a, 30,
                   "a transaction coordinator")
    assert txn.node_id == 0 and txn.port == broker.port


def test_offsets_for_2000_partitions_with_1kb_metadata_survive_restart(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("wide", 2000)])["wide"].result(60)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "wide-group"})
    meta = "x" * 1000
    c.commit(offsets=[TopicPartition("wide", p, p * 3, meta) for p in range(2000)], asynchronous=False)
    c.close()
    broker.restart()
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "wide-group"})
    got = c.committed([TopicPartition("wide", p) for p in range(2000)], timeout=30)
    c.close()
    assert [tp.offset for tp in got] == [p * 3 for p in range(2000)]
    assert all(tp.metadata.rstrip("\x00") == meta for tp in got)
    assert "Finished loading offsets and group metadata from __consumer_offsets-" + str(
        partition_for("wide-group", 50)) in broker.output()


def test_admin_clients_describe_list_delete_groups(broker):
    from kafka import KafkaAdminClient

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("adm-g", 1)])["adm-g"].result(10)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "live", "auto.offset.reset": "earliest"})
    c.subscribe(["adm-g"])
    deadline = time.monotonic() + 20
    while not c.assignment() and time.monotonic() < deadline:
        c.poll(0.2)
    idle = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "idle"})
    idle.commit(offsets=[TopicPartition("adm-g", 0, 1)], asynchronous=False)
    idle.close()

    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    listed = {g["group_id"]: g for g in kp.list_groups()}
    assert {"live", "idle"} <= set(listed)
    assert listed["live"]["group_state"] == "Stable" and listed["idle"]["group_state"] == "Empty"
    assert listed["live"]["protocol_type"] == "consumer"
    desc = kp.describe_groups(["live"])["live"]
    assert desc["error"] is None and desc["group_state"] == "Stable" and len(desc["members"]) == 1
    assignment = desc["members"][0]["member_assignment"]  # decoded by kafka-python's consumer protocol
    assert [(t["topic"], t["partitions"]) for t in assignment["assigned_partitions"]] == [("adm-g", [0])]
    offsets = kp.list_group_offsets({"idle": None})["idle"]
    assert [(tp.topic, tp.partition, om.offset) for tp, om in offsets.items()] == [("adm-g", 0, 1)]

    futures = admin.delete_consumer_groups(["idle", "live"], request_timeout=10)
    futures["idle"].result(10)
    with pytest.raises(Exception, match="NON_EMPTY_GROUP"):
        futures["live"].result(10)
    c.close()
    kp.close()
    remaining = {g.group_id for g in admin.list_consumer_groups().result(10).valid}
    assert "idle" not in remaining


def test_offsets_of_empty_group_expire_after_retention(broker_factory):
    """The broker's expiry timer removes an empty group's offsets once their retention is over and
    then the group itself. The retention is the commit's own (OffsetCommit v2-v4 retention time, 3 s)
    so that the test does not wait out offsets.retention.minutes=1; which retention applies when is
    tested without a network (tests/coordinator/test_offsets.py)."""
    from gregor.admin.client import AdminClient as GregorAdmin
    from gregor.protocol.api_keys import ApiKey

    b = broker_factory(**{"offsets.retention.check.interval.ms": "1000"})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("exp", 1)])["exp"].result(10)
    tool = GregorAdmin(b.bootstrap)
    r = tool.coordinator_conn("fading")._call(ApiKey.OFFSET_COMMIT, 4, {
        "group_id": "fading", "generation_id_or_member_epoch": -1, "member_id": "",
        "retention_time": datetime.timedelta(seconds=3),
        "topics": [{"name": "exp", "partitions": [{"partition_index": 0, "committed_offset": 5,
                                                   "committed_metadata": ""}]}]})
    tool.close()
    assert r.topics[0].partitions[0].error_code == 0
    old = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "fading"})
    assert old.committed([TopicPartition("exp", 0)], timeout=10)[0].offset == 5
    deadline = time.monotonic() + 30
    gone = False
    while time.monotonic() < deadline and not gone:
        time.sleep(1)
        gone = old.committed([TopicPartition("exp", 0)], timeout=10)[0].offset < 0
    old.close()
    assert gone
    assert "Removed 1 expired offsets in" in b.output()
    assert "fading" not in {g.group_id for g in admin.list_consumer_groups().result(10).valid}


def test_delete_topic_removes_its_committed_offsets(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("temp", 1)])["temp"].result(10)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "tmpg"})
    c.commit(offsets=[TopicPartition("temp", 0, 3)], asynchronous=False)
    admin.delete_topics(["temp"])["temp"].result(10)
    admin.create_topics([NewTopic("temp", 1)])["temp"].result(10)
    assert c.committed([TopicPartition("temp", 0)], timeout=10)[0].offset < 0
    c.close()


def test_group_key_helpers_are_kafkas():
    assert GroupMetadataKey("g") != OffsetCommitKey("g", "t", 0)
    p = Producer({})
    del p
