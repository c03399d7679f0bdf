"""Three brokers whose replication runs over an authenticated, encrypted listener (SASL_SSL with
PLAIN between brokers), clients on SCRAM: a user created through one broker authenticates on
another (ZooKeeper holds the credentials), acks=all writes are replicated, and every broker's
Metadata names the brokers' endpoints of the client's listener."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from tests.support.broker_process import free_port
from tests.support.cluster import BrokerCluster
from tests.support.tls import KEY_PASSWORD, make_pki

BROKER_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" '
               'password="broker-secret" user_broker="broker-secret";')


def test_replication_over_sasl_ssl_and_scram_users_shared_through_zookeeper(tmp_path, zookeeper):
    pki = make_pki(tmp_path / "pki")
    overrides = {
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512", "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "inter.broker.listener.name": "SASL_SSL", "listener.name.sasl_ssl.plain.sasl.jaas.config": BROKER_JAAS,
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.server_encrypted),
        "ssl.key.password": KEY_PASSWORD, "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca),
        "offsets.topic.replication.factor": "3", "transaction.state.log.replication.factor": "3",
    }
    cluster = BrokerCluster(tmp_path / "cluster", zookeeper, 3, overrides)
    secure_ports = {}
    for i, b in zip(cluster.ids, cluster.brokers, strict=True):
        secure_ports[i] = free_port()
        b.overrides["listeners"] = f"PLAINTEXT://127.0.0.1:{b.port},SASL_SSL://127.0.0.1:{secure_ports[i]}"
    try:
        cluster.start()
        admin = AdminClient({"bootstrap.servers": cluster.broker(1).bootstrap})
        for f in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
                "carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"carol-secret")]).values():
            f.result(30)
        topic = f"secure-{uuid.uuid4().hex[:6]}"
        admin.create_topics([NewTopic(topic, 3, 3)])[topic].result(30)
        conf = {"bootstrap.servers": f"127.0.0.1:{secure_ports[3]}", "security.protocol": "SASL_SSL",
                "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "carol", "sasl.password": "carol-secret",
                "ssl.ca.location": str(pki.ca), "log_level": 3}
        deadline = time.monotonic() + 30
        md = None
        while time.monotonic() < deadline:  # broker 3 mirrors the user from ZooKeeper within moments
            try:
                md = AdminClient(conf).list_topics(timeout=5)
                break
            except Exception:  # noqa: BLE001 - not mirrored yet: authentication fails, retry
                time.sleep(0.5)
        assert md is not None
        assert sorted((b.id, b.port) for b in md.brokers.values()) == sorted(secure_ports.items())
        p = Producer({**conf, "acks": "all", "enable.idempotence": True})
        for n in range(300):
            p.produce(topic, str(n).encode())
        assert p.flush(60) == 0
        c = Consumer({**conf, "group.id": "carol-group", "auto.offset.reset": "earliest"})
        c.subscribe([topic])
        got = set()
        deadline = time.monotonic() + 60
        while len(got) < 300 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got.add(int(m.value()))
        c.close()
        assert got == set(range(300))
        # every partition fully replicated: the followers fetched over SASL_SSL
        md = AdminClient(conf).list_topics(topic, timeout=10)
        assert all(len(p.isrs) == 3 for p in md.topics[topic].partitions.values())
    finally:
        cluster.kill_all()


ALICE_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret" '
              'user_broker="broker-secret";')


def test_acls_live_in_zookeeper_and_every_broker_enforces_a_change(tmp_path, zookeeper):
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    overrides = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                 "super.users": "User:ANONYMOUS", "sasl.enabled.mechanisms": "PLAIN",
                 "listener.name.sasl_plaintext.plain.sasl.jaas.config": ALICE_JAAS}
    cluster = BrokerCluster(tmp_path / "cluster", zookeeper, 3, overrides)
    sasl_ports = {}
    for i, b in zip(cluster.ids, cluster.brokers, strict=True):
        sasl_ports[i] = free_port()
        b.overrides["listeners"] = f"PLAINTEXT://127.0.0.1:{b.port},SASL_PLAINTEXT://127.0.0.1:{sasl_ports[i]}"
    try:
        cluster.start()
        topic = f"acl-{uuid.uuid4().hex[:6]}"
        admin1 = AdminClient({"bootstrap.servers": cluster.broker(1).bootstrap})
        admin1.create_topics([NewTopic(topic, 6, 1)])[topic].result(30)
        alice = {"bootstrap.servers": f"127.0.0.1:{sasl_ports[2]}", "security.protocol": "SASL_PLAINTEXT",
                 "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": "alice-secret",
                 "log_level": 0, "message.timeout.ms": 15000}

        def produce_errors() -> set[int]:
            errors: list = []
            p = Producer(alice)
            for part in range(6):  # every partition: leaders on every broker
                p.produce(topic, b"x", partition=part, on_delivery=lambda err, _m: errors.append(err))
            p.flush(30)
            return {e.code() for e in errors if e is not None}

        assert produce_errors() == {KafkaError.TOPIC_AUTHORIZATION_FAILED}
        for f in admin1.create_acls([AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL,
                                                "User:alice", "*", AclOperation.WRITE,
                                                AclPermissionType.ALLOW)]).values():
            f.result(30)
        deadline = time.monotonic() + 20
        while produce_errors() and time.monotonic() < deadline:  # every broker mirrors ZooKeeper's ACLs
            time.sleep(0.5)
        assert produce_errors() == set()
        admin3 = AdminClient({"bootstrap.servers": cluster.broker(3).bootstrap})
        found = admin3.describe_acls(AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, None,
                                                      None, AclOperation.ANY, AclPermissionType.ANY)).result(30)
        assert [(a.principal, a.operation) for a in found] == [("User:alice", AclOperation.WRITE)]
        for f in admin3.delete_acls([AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, None,
                                                      None, AclOperation.ANY, AclPermissionType.ANY)]).values():
            f.result(30)
        deadline = time.monotonic() + 20
        while produce_errors() != {KafkaError.TOPIC_AUTHORIZATION_FAILED} and time.monotonic() < deadline:
            time.sleep(0.5)
        assert produce_errors() == {KafkaError.TOPIC_AUTHORIZATION_FAILED}
    finally:
        cluster.kill_all()


def test_brokers_renew_their_sasl_sessions_with_each_other(tmp_path, zookeeper):
    """connections.max.reauth.ms bounds every SASL session, the brokers' own too: a broker's
    connections to the others (replica fetchers) get a new session before theirs ends, so
    replication never loses its connections and acks=all writes keep flowing."""
    pki = make_pki(tmp_path / "pki")
    overrides = {
        "sasl.enabled.mechanisms": "PLAIN", "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "inter.broker.listener.name": "SASL_SSL", "listener.name.sasl_ssl.plain.sasl.jaas.config": BROKER_JAAS,
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.server_encrypted),
        "ssl.key.password": KEY_PASSWORD, "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca),
        "connections.max.reauth.ms": "2000",
    }
    cluster = BrokerCluster(tmp_path / "cluster", zookeeper, 3, overrides)
    for b in cluster.brokers:
        b.overrides["listeners"] = f"PLAINTEXT://127.0.0.1:{b.port},SASL_SSL://127.0.0.1:{free_port()}"
    try:
        cluster.start()
        topic = f"renew-{uuid.uuid4().hex[:6]}"
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic(topic, 3, 3)])[topic].result(30)
        failed: list = []
        p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "log_level": 3,
                      "message.timeout.ms": 20000})
        end = time.monotonic() + 7  # several sessions of 2 s
        n = 0
        while time.monotonic() < end:
            p.produce(topic, b"r", on_delivery=lambda err, _m: failed.append(err) if err else None)
            n += 1
            p.poll(0.02)
        assert p.flush(30) == 0 and not failed and n > 100
        logs = "".join(b.output() for b in cluster.brokers)
        assert "(User:broker) expired without re-authentication" not in logs
        md = admin.list_topics(topic, timeout=10)
        assert all(len(part.isrs) == 3 for part in md.topics[topic].partitions.values())
    finally:
        cluster.kill_all()
