"""``gregor acls`` and ``gregor users`` against a broker with SASL and Kafka's authorizer, through
``--command-config`` (Kafka's client properties), as an operator runs them: kafka-acls.sh's
flags and listing, JSON, refusals with exit code 1, bad arguments with 2; and ``gregor topics``
over SASL_SSL with a trust store."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.broker_process import BrokerProcess, free_port
from tests.support.tls import KEY_PASSWORD, make_pki

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required user_admin="admin-secret" '
        'user_alice="alice-secret";')


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    pki = make_pki(d / "pki")
    plain, sasl = free_port(), free_port()
    b = BrokerProcess(d / "data", {
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_SSL://127.0.0.1:{sasl}",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512", "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.server_encrypted),
        "ssl.key.password": KEY_PASSWORD,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin"})
    b.port = plain
    b.start()
    admin = d / "admin.properties"
    admin.write_text("security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\nssl.truststore.type=PEM\n"
                     f"ssl.truststore.location={pki.ca}\n"
                     "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
                     'username="admin" password="admin-secret";\n')
    alice = d / "alice.properties"
    alice.write_text(admin.read_text().replace('"admin"', '"alice"').replace("admin-secret", "alice-secret"))
    yield {"bootstrap": f"127.0.0.1:{sasl}", "admin": admin, "alice": alice, "pki": pki}
    b.stop()


def gregor(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gregor", *args], capture_output=True, text=True, timeout=60)


def test_acls_add_list_remove_as_kafka_acls(setup):
    common = ["--bootstrap-server", setup["bootstrap"], "--command-config", str(setup["admin"])]
    r = gregor("acls", *common, "--add", "--allow-principal", "User:alice", "--operation", "Read",
               "--operation", "Describe", "--topic", "payments-", "--resource-pattern-type", "prefixed")
    assert r.returncode == 0, r.stderr
    assert "ResourcePattern(resourceType=TOPIC, name=payments-, patternType=PREFIXED)" in r.stdout
    assert "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)" in r.stdout
    r = gregor("acls", *common, "--add", "--allow-principal", "User:alice", "--consumer", "--topic", "t",
               "--group", "g")
    assert r.returncode == 0, r.stderr
    r = gregor("acls", *common, "--list", "--principal", "User:alice", "--json")
    rows = json.loads(r.stdout)
    assert {(x["resource_type"], x["resource_name"], x["operation"]) for x in rows} == {
        ("TOPIC", "payments-", "READ"), ("TOPIC", "payments-", "DESCRIBE"), ("TOPIC", "t", "READ"),
        ("TOPIC", "t", "DESCRIBE"), ("GROUP", "g", "READ")}
    r = gregor("acls", *common, "--remove", "--allow-principal", "User:alice", "--topic", "t", "--force")
    assert r.returncode == 0 and "Removed 2 ACL(s)." in r.stdout
    r = gregor("acls", *common, "--add", "--topic", "x")  # no principal
    assert r.returncode == 2


def test_a_principal_without_cluster_alter_is_refused_and_users_are_managed(setup):
    r = gregor("acls", "--bootstrap-server", setup["bootstrap"], "--command-config", str(setup["alice"]),
               "--add", "--allow-principal", "User:alice", "--operation", "All", "--cluster")
    assert r.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in r.stderr
    common = ["--bootstrap-server", setup["bootstrap"], "--command-config", str(setup["admin"])]
    assert gregor("users", *common, "add", "dave", "--password", "dave-pw", "--mechanism",
                  "SCRAM-SHA-512").returncode == 0
    listed = json.loads(gregor("users", *common, "list", "--json").stdout)
    assert listed == [{"user": "dave", "mechanisms": "SCRAM-SHA-512(iterations=4096)"}]
    dave = setup["admin"].with_name("dave.properties")
    dave.write_text(f"security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\nssl.truststore.location="
                    f"{setup['pki'].ca}\nsasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule "
                    'required username="dave" password="dave-pw";\n')
    # dave authenticates with SCRAM; with no ACL he sees no topic, and may not create one
    r = gregor("topics", "--bootstrap-server", setup["bootstrap"], "--command-config", str(dave), "list", "--json")
    assert r.returncode == 0 and json.loads(r.stdout) == []
    r = gregor("topics", "--bootstrap-server", setup["bootstrap"], "--command-config", str(dave), "create", "nope")
    assert r.returncode == 1 and "TOPIC_AUTHORIZATION_FAILED" in r.stderr
    bad = setup["admin"].with_name("bad.properties")
    bad.write_text(dave.read_text().replace("dave-pw", "wrong"))
    r = gregor("topics", "--bootstrap-server", setup["bootstrap"], "--command-config", str(bad), "list")
    assert r.returncode == 1 and "invalid credentials with SASL mechanism SCRAM-SHA-512" in r.stderr
    assert gregor("users", *common, "remove", "dave").returncode == 0
