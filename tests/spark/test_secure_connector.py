"""The Spark connector over SASL_SSL with Spark's own Kafka security options (Java client
properties: kafka.security.protocol, kafka.sasl.mechanism, kafka.sasl.jaas.config,
kafka.ssl.truststore.location), reading and writing as a SCRAM user."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from tests.support.security import secure_broker
from tests.support.tls import make_pki


@pytest.fixture
def secure(tmp_path):
    b = secure_broker(tmp_path / "data", make_pki(tmp_path / "pki"))
    admin = AdminClient({"bootstrap.servers": b.bootstrap("PLAINTEXT")})
    for f in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
            "spark", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"spark-secret")]).values():
        f.result(30)
    admin.create_topics([NewTopic("secure-sp", 2, 1)])["secure-sp"].result(30)
    yield b
    b.process.stop()


def test_read_and_write_over_sasl_ssl_with_sparks_options(spark, secure):
    opts = {"kafka.bootstrap.servers": secure.bootstrap("SASL_SSL"), "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": "SCRAM-SHA-512",
            "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                                      'username="spark" password="spark-secret";',
            "kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": str(secure.pki.ca)}
    rows = [(f"k{i}".encode(), f"v{i}".encode()) for i in range(100)]
    spark.createDataFrame(rows, "key binary, value binary").write.format("gregor").options(**opts) \
        .option("topic", "secure-sp").mode("append").save()
    got = spark.read.format("gregor").options(**opts).option("subscribe", "secure-sp").load().collect()
    assert sorted(bytes(r.value) for r in got) == sorted(v for _, v in rows)
