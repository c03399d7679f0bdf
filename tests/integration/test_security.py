"""Listeners with TLS and SASL against real clients (docs/security.md): confluent-kafka,
kafka-python and aiokafka authenticate with SCRAM and PLAIN over SASL_SSL and SASL_PLAINTEXT and
with client certificates over SSL; wrong credentials, unknown mechanisms, requests before
authentication, garbage instead of a TLS handshake and expired sessions get Kafka's answers; the
broker keeps serving everyone else."""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from gregor.protocol.api_keys import ApiKey
from gregor.protocol.errors import ErrorCode
from tests.support.security import ADMIN, ADMIN_PASSWORD, call, closed, raw_connection, secure_broker
from tests.support.tls import make_pki

BOB, BOB_PASSWORD = "bob", "bob-secret"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def secure(tmp_path_factory, pki):
    b = secure_broker(tmp_path_factory.mktemp("secure") / "data", pki)
    admin = AdminClient({"bootstrap.servers": b.bootstrap("PLAINTEXT")})
    for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):
        for f in admin.alter_user_scram_credentials(
                [UserScramCredentialUpsertion(BOB, ScramCredentialInfo(mechanism, 4096), BOB_PASSWORD.encode())]
        ).values():
            f.result(30)
    yield b
    b.process.stop()


def new_topic(b, partitions: int = 1) -> str:
    topic = f"sec-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": b.bootstrap("PLAINTEXT")})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    return topic


def confluent_round_trip(conf: dict, topic: str, value: bytes) -> list[bytes]:
    p = Producer({**conf, "log_level": 3})
    p.produce(topic, value)
    assert p.flush(20) == 0
    c = Consumer({**conf, "group.id": f"g-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest", "log_level": 3})
    c.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not got:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append(m.value())
    c.close()
    return got


def test_confluent_kafka_with_scram_over_sasl_ssl_and_client_certificates_over_ssl(secure):
    tls = {"ssl.ca.location": str(secure.pki.ca)}
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        conf = {"bootstrap.servers": secure.bootstrap("SASL_SSL"), "security.protocol": "SASL_SSL",
                "sasl.mechanism": mechanism, "sasl.username": BOB, "sasl.password": BOB_PASSWORD, **tls}
        assert confluent_round_trip(conf, new_topic(secure), mechanism.encode()) == [mechanism.encode()]
    conf = {"bootstrap.servers": secure.bootstrap("SSL"), "security.protocol": "SSL",
            "ssl.certificate.location": str(secure.pki.client_cert), "ssl.key.location": str(secure.pki.client_key),
            **tls}
    assert confluent_round_trip(conf, new_topic(secure), b"ssl") == [b"ssl"]
    conf = {"bootstrap.servers": secure.bootstrap("SASL_PLAINTEXT"), "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": ADMIN, "sasl.password": ADMIN_PASSWORD}
    assert confluent_round_trip(conf, new_topic(secure), b"plain") == [b"plain"]


def test_oauthbearer_with_librdkafkas_unsecured_jwt(secure):
    conf = {"bootstrap.servers": secure.bootstrap("SASL_SSL"), "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(secure.pki.ca), "sasl.mechanism": "OAUTHBEARER",
            "sasl.oauthbearer.config": "principal=carol lifeSeconds=600", "enable.sasl.oauthbearer.unsecure.jwt": True}
    assert confluent_round_trip(conf, new_topic(secure), b"jwt") == [b"jwt"]
    # a token that expired is refused with Kafka's challenge-then-failure
    import base64
    import json

    def part(obj: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")

    expired = f"{part({'alg': 'none'})}.{part({'sub': 'carol', 'exp': 1000, 'iat': 900})}."
    with raw_connection(secure.ports["SASL_PLAINTEXT"]) as sock:
        assert call(sock, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "OAUTHBEARER"}).error_code == ErrorCode.none
        r = call(sock, ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": f"n,,\x01auth=Bearer {expired}\x01\x01".encode()},
                 corr=2)
        assert r.error_code == ErrorCode.none and json.loads(bytes(r.auth_bytes)) == {"status": "invalid_token"}
        r = call(sock, ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": b"\x01"}, corr=3)
        assert r.error_code == ErrorCode.sasl_authentication_failed and "expired" in r.error_message


def test_metadata_answers_with_the_listener_the_client_came_in_on(secure):
    for listener, conf in (
            ("PLAINTEXT", {}),
            ("SASL_PLAINTEXT", {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
                                "sasl.username": BOB, "sasl.password": BOB_PASSWORD}),
            ("SSL", {"security.protocol": "SSL", "ssl.ca.location": str(secure.pki.ca),
                     "ssl.certificate.location": str(secure.pki.client_cert),
                     "ssl.key.location": str(secure.pki.client_key)})):
        admin = AdminClient({"bootstrap.servers": secure.bootstrap(listener), **conf})
        md = admin.list_topics(timeout=20)
        assert [(b.host, b.port) for b in md.brokers.values()] == [("127.0.0.1", secure.ports[listener])]


def test_kafka_python_with_scram_over_sasl_ssl(secure):
    from kafka import KafkaConsumer, KafkaProducer

    topic = new_topic(secure)
    ctx = ssl.create_default_context(cafile=str(secure.pki.ca))
    conf = {"bootstrap_servers": secure.bootstrap("SASL_SSL"), "security_protocol": "SASL_SSL",
            "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": BOB, "sasl_plain_password": BOB_PASSWORD,
            "ssl_context": ctx}
    p = KafkaProducer(**conf)
    p.send(topic, b"kafka-python").get(30)
    p.close()
    c = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=15000, group_id="kp", **conf)
    assert [m.value for m in c][:1] == [b"kafka-python"]
    c.close()


def test_aiokafka_with_plain_over_sasl_ssl(secure):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context

    topic = new_topic(secure)

    async def run() -> list[bytes]:
        conf = {"bootstrap_servers": secure.bootstrap("SASL_SSL"), "security_protocol": "SASL_SSL",
                "sasl_mechanism": "PLAIN", "sasl_plain_username": "alice", "sasl_plain_password": "alice-secret",
                "ssl_context": create_ssl_context(cafile=str(secure.pki.ca))}
        p = AIOKafkaProducer(**conf)
        await p.start()
        await p.send_and_wait(topic, b"aiokafka")
        await p.stop()
        c = AIOKafkaConsumer(topic, auto_offset_reset="earliest", group_id="aio", **conf)
        await c.start()
        try:
            m = await asyncio.wait_for(c.getone(), 20)
            return [m.value]
        finally:
            await c.stop()

    assert asyncio.run(run()) == [b"aiokafka"]


def test_a_wrong_password_is_refused_with_kafkas_error_after_the_delay(secure):
    errors: list[KafkaError] = []
    p = Producer({"bootstrap.servers": secure.bootstrap("SASL_SSL"), "security.protocol": "SASL_SSL",
                  "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": BOB, "sasl.password": "wrong",
                  "ssl.ca.location": str(secure.pki.ca), "log_level": 0, "error_cb": errors.append})
    deadline = time.monotonic() + 20
    while not errors and time.monotonic() < deadline:
        p.poll(0.2)
    assert errors and errors[0].code() == KafkaError._AUTHENTICATION
    assert "invalid credentials with SASL mechanism SCRAM-SHA-512" in errors[0].str()
    # raw: the answer comes after connection.failed.authentication.delay.ms (100), then the close
    with raw_connection(secure.ports["SASL_PLAINTEXT"]) as sock:
        assert call(sock, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}).error_code == ErrorCode.none
        started = time.monotonic()
        r = call(sock, ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": b"\0admin\0wrong"})
        assert time.monotonic() - started >= 0.09
        assert r.error_code == ErrorCode.sasl_authentication_failed
        assert r.error_message == "Authentication failed: Invalid username or password"
        assert closed(sock)


def test_nothing_but_api_versions_and_sasl_is_served_before_authentication(secure):
    with raw_connection(secure.ports["SASL_PLAINTEXT"]) as sock:
        versions = call(sock, ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
        assert versions.error_code == ErrorCode.none
        with pytest.raises(ConnectionError):
            call(sock, ApiKey.METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                                             "include_topic_authorized_operations": False}, corr=2)
    with raw_connection(secure.ports["SASL_PLAINTEXT"]) as sock:
        r = call(sock, ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": b"x"})  # no handshake first
        assert r.error_code == ErrorCode.illegal_sasl_state
        assert closed(sock)


def test_an_unknown_mechanism_is_answered_with_the_enabled_ones_then_closed(secure):
    with raw_connection(secure.ports["SASL_PLAINTEXT"]) as sock:
        r = call(sock, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "GSSAPI"})
        assert r.error_code == ErrorCode.unsupported_sasl_mechanism
        assert list(r.mechanisms) == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]
        assert closed(sock)


def test_sasl_apis_on_a_plaintext_listener_are_illegal(secure):
    with raw_connection(secure.ports["PLAINTEXT"]) as sock:
        assert call(sock, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}).error_code == ErrorCode.illegal_sasl_state


def test_an_oversized_token_before_authentication_closes_the_connection(secure):
    with raw_connection(secure.ports["SASL_PLAINTEXT"]) as sock:
        assert call(sock, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}).error_code == ErrorCode.none
        sock.sendall(struct_size(600_000) + b"\0" * 1000)  # beyond sasl.server.max.receive.size (524288)
        assert closed(sock)


def struct_size(n: int) -> bytes:
    return n.to_bytes(4, "big")


def test_garbage_instead_of_a_tls_handshake_and_a_client_without_certificate(secure):
    for _ in range(3):
        with socket.create_connection(("127.0.0.1", secure.ports["SSL"]), timeout=10) as sock:
            sock.sendall(os.urandom(2000))
            assert closed(sock)
    # ssl.client.auth=required: a client without a certificate does not get in
    ctx = ssl.create_default_context(cafile=str(secure.pki.ca))
    with pytest.raises((ssl.SSLError, ConnectionError)), raw_connection(secure.ports["SSL"], ctx) as sock:
        call(sock, ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
    # a client trusting another CA refuses the broker's certificate
    other = ssl.create_default_context(cafile=str(secure.pki.other_ca))
    with pytest.raises(ssl.SSLError):
        raw_connection(secure.ports["SASL_SSL"], other)
    # and everyone else is still served
    with raw_connection(secure.ports["PLAINTEXT"]) as sock:
        assert call(sock, ApiKey.API_VERSIONS, 3, {"client_software_name": "t",
                                                   "client_software_version": "1"}).error_code == 0


def test_a_session_that_expired_without_reauthentication_is_closed(tmp_path, pki):
    b = secure_broker(tmp_path / "data", pki, **{"connections.max.reauth.ms": "1500"})
    try:
        with raw_connection(b.ports["SASL_PLAINTEXT"]) as sock:
            assert call(sock, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}).error_code == ErrorCode.none
            r = call(sock, ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": b"\0admin\0admin-secret"}, corr=2)
            assert r.error_code == ErrorCode.none and 0 < r.session_lifetime.total_seconds() * 1000 <= 1500
            md = {"topics": None, "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}
            assert call(sock, ApiKey.METADATA, 12, md, corr=3).brokers
            time.sleep(1.7)
            with pytest.raises(ConnectionError):
                call(sock, ApiKey.METADATA, 12, md, corr=4)
        # librdkafka re-authenticates (KIP-368) before its sessions end and keeps producing
        topic = new_topic(b)
        p = Producer({"bootstrap.servers": b.bootstrap("SASL_SSL"), "security.protocol": "SASL_SSL",
                      "sasl.mechanism": "PLAIN", "sasl.username": ADMIN, "sasl.password": ADMIN_PASSWORD,
                      "ssl.ca.location": str(pki.ca), "log_level": 3})
        failed: list[str] = []
        end = time.monotonic() + 5
        n = 0
        while time.monotonic() < end:
            p.produce(topic, b"r", on_delivery=lambda err, _m: failed.append(str(err)) if err else None)
            n += 1
            p.poll(0.05)
        assert p.flush(20) == 0 and not failed and n > 20
    finally:
        b.process.stop()


@pytest.mark.parametrize("settings, message", [
    ({"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0"}, "needs a key store"),
    ({"listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0"}, "sasl.enabled.mechanisms"),
    ({"listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN"},
     "has no users"),
    ({"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0", "ssl.keystore.type": "PEM",
      "ssl.keystore.location": "/nonexistent.pem"}, "cannot read"),
    ({"listeners": "FOO://127.0.0.1:0"}, "has no security protocol"),
    ({"listeners": "PLAINTEXT://127.0.0.1:0", "authorizer.class.name": "com.example.MyAuthorizer"},
     "one of Kafka's authorizers"),
    ({"listeners": "PLAINTEXT://127.0.0.1:0", "zookeeper.connect": "127.0.0.1:1",
      "listener.security.protocol.map": "PLAINTEXT:SASL_PLAINTEXT", "sasl.enabled.mechanisms": "PLAIN",
      "listener.name.plaintext.plain.sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule '
                                                        'required user_a="b";',
      "sasl.mechanism.inter.broker.protocol": "PLAIN"}, "username and password"),
])
def test_bad_security_settings_stop_the_broker_with_a_clear_error(tmp_path, settings, message):
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "gregor", "serve", "--override", f"log.dirs={tmp_path}"]
    for k, v in settings.items():
        cmd += ["--override", f"{k}={v}"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and message in r.stderr, r.stderr


def test_fuzzed_sasl_exchanges_and_tls_garbage_leave_the_broker_serving(secure):
    """Seeded random tokens for every mechanism, random frames before authentication, random
    bytes at the TLS listener, a flood of failed logins: each ends its own connection with
    Kafka's answers and the broker keeps serving (and its memory stays bounded)."""
    import random

    rng = random.Random(20261127)
    rss_before = _rss(secure.process.proc.pid)
    for i in range(60):
        mechanism = rng.choice(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"])
        with raw_connection(secure.ports["SASL_PLAINTEXT"]) as sock:
            if i % 3 == 0:  # garbage frames before any handshake
                sock.sendall(rng.randbytes(rng.randint(4, 600)))
                assert closed(sock, 10)
                continue
            assert call(sock, ApiKey.SASL_HANDSHAKE, 1, {"mechanism": mechanism}).error_code == ErrorCode.none
            for corr in range(2, 5):
                try:
                    r = call(sock, ApiKey.SASL_AUTHENTICATE, rng.randint(0, 2),
                             {"auth_bytes": rng.randbytes(rng.randint(0, 2000))}, corr=corr)
                except ConnectionError:
                    break
                if r.error_code:
                    assert r.error_code in (ErrorCode.sasl_authentication_failed, ErrorCode.illegal_sasl_state)
                    assert closed(sock, 10)
                    break
    for _ in range(20):
        with socket.create_connection(("127.0.0.1", secure.ports["SSL"]), timeout=10) as sock:
            sock.sendall(b"\x16\x03\x01" + rng.randbytes(rng.randint(0, 3000)))
            assert closed(sock, 15)
    with raw_connection(secure.ports["PLAINTEXT"]) as sock:
        assert call(sock, ApiKey.API_VERSIONS, 3, {"client_software_name": "t",
                                                   "client_software_version": "1"}).error_code == 0
    assert _rss(secure.process.proc.pid) - rss_before < 64 * 1024 * 1024


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def test_kcat_with_scram_over_sasl_ssl(secure):
    import shutil
    import subprocess

    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    if kcat is None:
        pytest.skip("kcat is installed by `make setup`")
    topic = new_topic(secure)
    security = ["-X", "security.protocol=SASL_SSL", "-X", "sasl.mechanisms=SCRAM-SHA-256", "-X",
                f"sasl.username={BOB}", "-X", f"sasl.password={BOB_PASSWORD}", "-X",
                f"ssl.ca.location={secure.pki.ca}"]
    b = ["-b", secure.bootstrap("SASL_SSL")]
    produced = subprocess.run([kcat, *b, *security, "-P", "-t", topic, "-K", ":"], input=b"k1:v1\nk2:v2\n",
                              capture_output=True, timeout=60)
    assert produced.returncode == 0, produced.stderr
    out = subprocess.run([kcat, *b, *security, "-C", "-t", topic, "-e", "-f", "%k=%s\n"], capture_output=True,
                         check=True, timeout=60).stdout
    assert out.decode().splitlines() == ["k1=v1", "k2=v2"]
    bad = subprocess.run([kcat, *b, *security[:-4], "-X", "sasl.password=wrong", "-X",
                          f"ssl.ca.location={secure.pki.ca}", "-L", "-m", "5"], capture_output=True, timeout=60)
    assert bad.returncode != 0 and b"invalid credentials with SASL mechanism SCRAM-SHA-256" in bad.stderr
