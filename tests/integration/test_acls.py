"""ACLs against real clients (docs/security.md): a broker with Kafka's authorizer and SASL users
(admin a super user, alice and bob not); ACLs created, described and deleted with
confluent-kafka's AdminClient; what each principal may and may not do with topics, groups and
transactional ids, with confluent-kafka, kafka-python and aiokafka; DENY over ALLOW; prefixed
and wildcard ACLs; ACLs kept across a restart."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from tests.support.broker_process import BrokerProcess, free_port

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required user_admin="admin-secret" '
        'user_alice="alice-secret" user_bob="bob-secret";')


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory):
    data = tmp_path_factory.mktemp("acl") / "data"
    plain, sasl = free_port(), free_port()
    b = BrokerProcess(data, {
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}",
        "sasl.enabled.mechanisms": "PLAIN", "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer", "super.users": "User:admin",
        "group.coordinator.rebalance.protocols": "classic,consumer"})
    b.port = plain
    b.start()
    b.sasl_port = sasl  # type: ignore[attr-defined]
    yield b
    if b.alive():
        b.stop()


def conf(b, user: str, **extra) -> dict:
    return {"bootstrap.servers": f"127.0.0.1:{b.sasl_port}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": f"{user}-secret", "log_level": 0,
            **extra}


def admin(b) -> AdminClient:
    return AdminClient(conf(b, "admin"))


def create_topic(b, name: str) -> None:
    a = admin(b)
    a.create_topics([NewTopic(name, 1, 1)])[name].result(30)


def grant(b, *bindings: AclBinding) -> None:
    a = admin(b)
    for f in a.create_acls(list(bindings)).values():
        f.result(30)


def acl(rt, name, op, user, pattern=ResourcePatternType.LITERAL, perm=AclPermissionType.ALLOW) -> AclBinding:
    return AclBinding(rt, name, pattern, f"User:{user}", "*", op, perm)


def produce_error(c: dict, topic: str) -> KafkaError | None:
    errors: list[KafkaError] = []
    p = Producer({**c, "message.timeout.ms": 10000})
    p.produce(topic, b"x", on_delivery=lambda err, _m: errors.append(err))
    p.flush(15)
    return errors[0] if errors else None


def test_no_acl_no_access_then_grants_open_exactly_what_they_name(acl_broker):
    b = acl_broker
    topic = f"orders-{uuid.uuid4().hex[:6]}"
    create_topic(b, topic)
    # nothing granted: alice cannot write, and Metadata does not show her the topic
    err = produce_error(conf(b, "alice"), topic)
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    alice = AdminClient(conf(b, "alice"))
    assert topic not in alice.list_topics(timeout=10).topics
    # WRITE on the prefix: she can
    grant(b, acl(ResourceType.TOPIC, "orders-", AclOperation.WRITE, "alice", ResourcePatternType.PREFIXED))
    assert produce_error(conf(b, "alice"), topic) is None
    # bob reads with READ on the topic and on his group
    grant(b, acl(ResourceType.TOPIC, topic, AclOperation.READ, "bob"),
          acl(ResourceType.GROUP, "bob-group", AclOperation.READ, "bob"))
    c = Consumer(conf(b, "bob", **{"group.id": "bob-group", "auto.offset.reset": "earliest"}))
    c.subscribe([topic])
    got = None
    deadline = time.monotonic() + 30
    while got is None and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got = m.value()
    c.commit(asynchronous=False)
    c.close()
    assert got == b"x"
    # ... but not in another group
    c = Consumer(conf(b, "bob", **{"group.id": "not-bobs", "auto.offset.reset": "earliest"}))
    c.subscribe([topic])
    errors = []
    deadline = time.monotonic() + 20
    while not errors and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error():
            errors.append(m.error())
    c.close()
    assert errors and errors[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED


def test_deny_wins_over_allow_and_describe_and_delete_acls(acl_broker):
    b = acl_broker
    secret = f"secret-{uuid.uuid4().hex[:6]}"
    create_topic(b, secret)
    grant(b, acl(ResourceType.TOPIC, "*", AclOperation.ALL, "alice"),
          acl(ResourceType.TOPIC, secret, AclOperation.WRITE, "alice", perm=AclPermissionType.DENY))
    err = produce_error(conf(b, "alice"), secret)
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    a = admin(b)
    found = a.describe_acls(AclBindingFilter(ResourceType.TOPIC, secret, ResourcePatternType.MATCH, None, None,
                                             AclOperation.ANY, AclPermissionType.ANY)).result(30)
    # MATCH: the literal ACL on the topic and the wildcard one that applies to it
    assert {(x.name, x.operation, x.permission_type) for x in found} >= {
        (secret, AclOperation.WRITE, AclPermissionType.DENY), ("*", AclOperation.ALL, AclPermissionType.ALLOW)}
    deleted = a.delete_acls([AclBindingFilter(ResourceType.TOPIC, secret, ResourcePatternType.LITERAL, None, None,
                                              AclOperation.ANY, AclPermissionType.DENY)])
    assert [len(f.result(30)) for f in deleted.values()] == [1]
    assert produce_error(conf(b, "alice"), secret) is None
    deleted = a.delete_acls([AclBindingFilter(ResourceType.TOPIC, "*", ResourcePatternType.LITERAL, "User:alice",
                                              None, AclOperation.ANY, AclPermissionType.ANY)])
    assert [len(f.result(30)) for f in deleted.values()] == [1]


def test_only_super_users_or_cluster_alter_manage_acls(acl_broker):
    bob = AdminClient(conf(acl_broker, "bob"))
    with pytest.raises(KafkaException) as e:
        for f in bob.create_acls([acl(ResourceType.TOPIC, "x", AclOperation.READ, "bob")]).values():
            f.result(30)
    assert e.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED


def test_transactional_ids_need_write(acl_broker):
    b = acl_broker
    topic = f"tx-{uuid.uuid4().hex[:6]}"
    create_topic(b, topic)
    grant(b, acl(ResourceType.TOPIC, topic, AclOperation.WRITE, "alice"),
          acl(ResourceType.TRANSACTIONAL_ID, "alice-tx", AclOperation.WRITE, "alice"))
    p = Producer(conf(b, "alice", **{"transactional.id": "alice-tx"}))
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, b"in a transaction")
    p.commit_transaction(30)
    p = Producer(conf(b, "alice", **{"transactional.id": "someone-elses"}))
    with pytest.raises(KafkaException) as e:
        p.init_transactions(30)
    assert e.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def test_steering_a_group_needs_alter_configs_on_it(acl_broker):
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry

    b = acl_broker
    grant(b, acl(ResourceType.GROUP, "steered", AclOperation.DESCRIBE_CONFIGS, "bob"))
    a = AdminClient(conf(b, "bob"))
    res = ConfigResource(ResourceType.GROUP if hasattr(ResourceType, "GROUP") else 32, "steered",
                         incremental_configs=[ConfigEntry("gregor.assignment.frozen", "true",
                                                          incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as e:
        for f in a.incremental_alter_configs([res]).values():
            f.result(30)
    assert e.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED


def test_kafka_python_and_aiokafka_are_refused_too(acl_broker):
    import asyncio

    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import TopicAuthorizationFailedError as AioDenied
    from kafka import KafkaProducer
    from kafka.errors import TopicAuthorizationFailedError

    b = acl_broker
    topic = f"closed-{uuid.uuid4().hex[:6]}"
    create_topic(b, topic)
    kp = {"bootstrap_servers": f"127.0.0.1:{b.sasl_port}", "security_protocol": "SASL_PLAINTEXT",
          "sasl_mechanism": "PLAIN", "sasl_plain_username": "bob", "sasl_plain_password": "bob-secret"}
    p = KafkaProducer(**kp, max_block_ms=10000)
    with pytest.raises(TopicAuthorizationFailedError):
        p.send(topic, b"x").get(15)
    p.close()

    async def aio() -> None:
        p = AIOKafkaProducer(**kp)
        await p.start()
        try:
            await asyncio.wait_for(p.send_and_wait(topic, b"x"), 15)
        finally:
            await p.stop()

    with pytest.raises(AioDenied):
        asyncio.run(aio())


def test_acls_survive_a_restart(acl_broker):
    b = acl_broker
    grant(b, acl(ResourceType.GROUP, "kept", AclOperation.READ, "alice"))
    b.restart()
    a = admin(b)
    found = a.describe_acls(AclBindingFilter(ResourceType.GROUP, "kept", ResourcePatternType.LITERAL, None,
                                             None, AclOperation.ANY, AclPermissionType.ANY)).result(30)
    assert [(x.principal, x.operation) for x in found] == [("User:alice", AclOperation.READ)]
    # READ on the group implies DESCRIBE: alice may fetch its offsets; bob may not
    c = Consumer(conf(b, "alice", **{"group.id": "kept"}))
    assert c.committed([TopicPartition("nope", 0)], timeout=10)[0].offset < 0
    c.close()
    c = Consumer(conf(b, "bob", **{"group.id": "kept"}))
    with pytest.raises(KafkaException) as e:
        c.committed([TopicPartition("nope", 0)], timeout=10)
    c.close()
    # librdkafka keeps asking FindCoordinator, which answers GROUP_AUTHORIZATION_FAILED, until its timeout
    assert e.value.args[0].code() in (KafkaError.GROUP_AUTHORIZATION_FAILED, KafkaError._TIMED_OUT)
