"""Kafka's ZooKeeper node formats: what Kafka 2.8 writes decodes, and what Gregor writes is what
Kafka would write."""

import json
import uuid

import pytest

from gregor.cluster.zk import znodes as z
from gregor.cluster.zk.client import split_connect


def test_broker_registration_as_kafka_writes_it():
    kafka = (b'{"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},'
             b'"endpoints":["PLAINTEXT://10.0.0.7:9092"],"jmx_port":-1,"port":9092,"host":"10.0.0.7",'
             b'"version":5,"timestamp":"1700000000000","rack":"eu-1a"}')
    reg = z.BrokerRegistration.decode(3, kafka)
    assert (reg.broker_id, reg.host, reg.port, reg.rack) == (3, "10.0.0.7", 9092, "eu-1a")
    mine = json.loads(z.BrokerRegistration(3, "10.0.0.7", 9092, None).encode())
    assert mine["endpoints"] == ["PLAINTEXT://10.0.0.7:9092"] and mine["version"] == 5 and mine["rack"] is None
    assert z.BrokerRegistration.decode(3, z.BrokerRegistration(3, "h", 1, "r").encode()).rack == "r"


@pytest.mark.parametrize("data", [b"", b"{", b'{"endpoints":["nonsense"]}', b"{}"])
def test_bad_broker_registration_is_a_clear_error(data):
    with pytest.raises(z.ZnodeFormatError, match="/brokers/ids/4"):
        z.BrokerRegistration.decode(4, data)


def test_partition_state_round_trip_and_kafka_json():
    kafka = b'{"controller_epoch":3,"leader":2,"version":1,"leader_epoch":7,"isr":[2,1,3]}'
    st = z.PartitionState.decode(kafka, zk_version=11)
    assert (st.leader, st.leader_epoch, st.isr, st.controller_epoch, st.zk_version) == (2, 7, [2, 1, 3], 3, 11)
    assert json.loads(st.encode()) == json.loads(kafka)
    moved = st.with_leader(1, [1, 3], controller_epoch=4)
    assert (moved.leader, moved.leader_epoch, moved.isr, moved.controller_epoch) == (1, 8, [1, 3], 4)
    shrunk = st.with_isr([2])
    assert (shrunk.leader_epoch, shrunk.isr, shrunk.zk_version) == (7, [2], 11)
    with pytest.raises(z.ZnodeFormatError):
        z.PartitionState.decode(b'{"leader":1}')


def test_topic_assignment_with_kafka_topic_id():
    tid = uuid.uuid4()
    a = z.TopicAssignment("orders", {1: [2, 3], 0: [1, 2]}, tid)
    obj = json.loads(a.encode())
    assert obj["version"] == 2 and obj["partitions"] == {"0": [1, 2], "1": [2, 3]}
    assert len(obj["topic_id"]) == 22 and "=" not in obj["topic_id"]  # Kafka's Uuid.toString
    back = z.TopicAssignment.decode("orders", a.encode())
    assert back == a
    old = z.TopicAssignment.decode("t", b'{"version":1,"partitions":{"0":[1]}}')
    assert old.topic_id is None and old.partitions == {0: [1]}
    with pytest.raises(z.ZnodeFormatError, match="partitions"):
        z.TopicAssignment.decode("t", b'{"version":2}')


def test_controller_and_epoch_and_config_and_cluster_id():
    assert z.decode_controller(z.encode_controller(5)) == 5
    assert z.decode_controller(b'{"version":1,"brokerid":2,"timestamp":"1"}') == 2
    assert z.decode_controller_epoch(z.encode_controller_epoch(12)) == 12
    with pytest.raises(z.ZnodeFormatError):
        z.decode_controller_epoch(b"x")
    cfg = {"min.insync.replicas": "2", "cleanup.policy": "compact"}
    assert z.decode_topic_config("t", z.encode_topic_config(cfg)) == cfg
    assert z.decode_topic_config("t", None) == {}
    assert z.decode_cluster_id(z.encode_cluster_id("abc")) == "abc"
    assert z.state_path("t", 3) == "/brokers/topics/t/partitions/3/state"


@pytest.mark.parametrize("connect,hosts,chroot", [
    ("127.0.0.1:2181", "127.0.0.1:2181", ""),
    ("a:1,b:2/gregor", "a:1,b:2", "/gregor"),
    ("a:1/kafka/prod", "a:1", "/kafka/prod"),
    ("a:1/", "a:1", ""),
])
def test_connect_string_chroot(connect, hosts, chroot):
    assert split_connect(connect) == (hosts, chroot)
