import pytest

from gregor.config import LONG_MAX, BrokerConfig, ConfigError, read_properties


def test_defaults():
    c = BrokerConfig.from_mapping({})
    (listener,) = c.listeners().bound
    assert (listener.name, listener.protocol, listener.host, listener.port) == ("PLAINTEXT", "PLAINTEXT", "127.0.0.1",
                                                                                9092)
    assert str(c.data_dir) == "gregor-data"
    assert c.retention_ms == 168 * 3600 * 1000
    assert c["log.flush.interval.messages"] == LONG_MAX
    assert c["offsets.topic.num.partitions"] == 50


def test_precedence_like_kafka():
    c = BrokerConfig.from_mapping({"log.retention.hours": "1", "log.retention.minutes": "5"})
    assert c.retention_ms == 5 * 60_000
    c = BrokerConfig.from_mapping({"log.retention.minutes": "5", "log.retention.ms": "42"})
    assert c.retention_ms == 42


def test_broker_id_alias():
    assert BrokerConfig.from_mapping({"broker.id": "7"})["node.id"] == 7
    with pytest.raises(ConfigError, match="contradicts"):
        BrokerConfig.from_mapping({"broker.id": "7", "node.id": "8"})


@pytest.mark.parametrize("key,value,msg", [
    ("num.partitions", "zero", "num.partitions"),
    ("num.partitions", "0", "between"),
    ("auto.create.topics.enable", "yes", "true or false"),
    ("listeners", "127.0.0.1:9092", "NAME://host:port"),
    ("log.cleanup.policy", "shred", "delete"),
    ("no.such.key", "1", "unknown configuration key 'no.such.key'"),
    ("zookeeper.connect", "localhost", "host:port"),
    ("zookeeper.connect", "a:1,b:x/gregor", "'b:x' is not host:port"),
    ("zookeeper.connect", "a:1/gregor/", "chroot"),
    ("zookeeper.session.timeout.ms", "10", "between"),
    ("min.insync.replicas", "0", "between"),
])
def test_invalid_values_name_the_key(key, value, msg):
    with pytest.raises(ConfigError, match=msg):
        BrokerConfig.from_mapping({key: value})


def test_stock_kafka_keys_are_accepted_and_listed(tmp_path):
    p = tmp_path / "server.properties"
    p.write_text("# comment\nnum.network.threads=3\nzookeeper.connect=localhost:2181\n"
                 "offsets.topic.replication.factor: 1\nlog.dirs=/tmp/x\nlisteners=PLAINTEXT://:9092\n")
    c = BrokerConfig.from_sources(p, ["num.partitions=3"])
    assert "num.network.threads" in c.ignored
    assert c["zookeeper.connect"] == "localhost:2181" and c["offsets.topic.replication.factor"] == 1
    assert c["num.partitions"] == 3 and str(c.data_dir) == "/tmp/x"
    assert [(x.host, x.port) for x in c.listeners().bound] == [("", 9092)]


def test_override_syntax():
    with pytest.raises(ConfigError, match="key=value"):
        BrokerConfig.from_sources(None, ["num.partitions"])


def test_properties_continuation(tmp_path):
    p = tmp_path / "a.properties"
    p.write_text("listeners=PLAINTEXT://127.0.0.1:1,\\\n  PLAINTEXT://127.0.0.1:2\n")
    assert read_properties(p)["listeners"] == "PLAINTEXT://127.0.0.1:1,PLAINTEXT://127.0.0.1:2"
