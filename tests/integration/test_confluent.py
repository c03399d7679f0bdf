"""confluent-kafka (librdkafka) against a real Gregor broker."""

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic


def consume_all(bootstrap, topic, partitions, expected, timeout=30):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False,
                  "fetch.message.max.bytes": 2_000_000})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out = []
    import time

    deadline = time.monotonic() + timeout
    while len(out) < expected and time.monotonic() < deadline:
        m = c.poll(1)
        if m is None:
            continue
        assert m.error() is None, m.error()
        out.append(m)
    c.close()
    return out


def read_to(bootstrap, topic, last_offset, timeout=20):
    """Partition 0 from its start until the record at ``last_offset``."""
    import time

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    out = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not (out and out[-1].offset() >= last_offset):
        m = c.poll(1)
        if m is not None:
            assert m.error() is None, m.error()
            out.append(m)
    c.close()
    return out


def create(bootstrap, name, partitions=1, config=None):
    a = AdminClient({"bootstrap.servers": bootstrap})
    a.create_topics([NewTopic(name, partitions, config=config or {})])[name].result(10)


def test_round_trip_keys_headers_many_partitions(broker):
    create(broker.bootstrap, "orders", 12)
    p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 5})
    sent = {}
    for i in range(3000):
        key = f"key-{i}".encode()
        p.produce("orders", key=key, value=f"value-{i}".encode(), headers=[("n", str(i).encode()), ("e", b"")],
                  partition=i % 12)
        sent[key] = i
    assert p.flush(30) == 0
    msgs = consume_all(broker.bootstrap, "orders", 12, 3000)
    assert len(msgs) == 3000
    for m in msgs:
        i = sent[m.key()]
        assert m.value() == f"value-{i}".encode()
        assert m.partition() == i % 12
        assert dict(m.headers())["n"] == str(i).encode()
    # offsets per partition are contiguous from 0
    by_part = {}
    for m in msgs:
        by_part.setdefault(m.partition(), []).append(m.offset())
    assert all(offs == list(range(len(offs))) for offs in by_part.values())


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compression_codecs_pass_through(broker, codec):
    create(broker.bootstrap, f"c-{codec}")
    p = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": codec, "linger.ms": 20})
    for i in range(500):
        p.produce(f"c-{codec}", key=b"k", value=(b"%d " % i) * 50)
    assert p.flush(30) == 0
    msgs = consume_all(broker.bootstrap, f"c-{codec}", 1, 500)
    assert [m.value() for m in msgs] == [(b"%d " % i) * 50 for i in range(500)]


def test_large_messages_up_to_message_max_bytes(broker_factory):
    b = broker_factory(**{"message.max.bytes": "1500000"})
    create(b.bootstrap, "big")
    p = Producer({"bootstrap.servers": b.bootstrap, "message.max.bytes": 2_000_000})
    payload = bytes(range(256)) * (1_400_000 // 256)
    p.produce("big", value=payload)
    assert p.flush(30) == 0
    too_big = []
    p.produce("big", value=b"x" * 1_600_000, on_delivery=lambda err, msg: too_big.append(err))
    p.flush(30)
    assert too_big and too_big[0] is not None and "MSG_SIZE_TOO_LARGE" in too_big[0].name()
    msgs = consume_all(b.bootstrap, "big", 1, 1)
    assert msgs[0].value() == payload


def test_data_survives_clean_restart(broker):
    create(broker.bootstrap, "durable", 3)
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    for i in range(300):
        p.produce("durable", value=b"%d" % i, partition=i % 3)
    assert p.flush(30) == 0
    assert broker.stop() == 0
    assert (broker.data_dir / ".kafka_cleanshutdown").exists()
    broker.start()
    msgs = consume_all(broker.bootstrap, "durable", 3, 300)
    assert sorted(int(m.value()) for m in msgs) == list(range(300))
    p = Producer({"bootstrap.servers": broker.bootstrap})
    p.produce("durable", value=b"after", partition=0)
    p.flush(10)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "x"})
    lo, hi = c.get_watermark_offsets(TopicPartition("durable", 0), timeout=10)
    assert (lo, hi) == (0, 101)
    c.close()


def test_admin_topics_partitions_configs(broker):
    a = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = NewTopic("adm", 2, config={"retention.ms": "1000", "cleanup.policy": "compact"})
    a.create_topics([topic])["adm"].result(10)
    with pytest.raises(KafkaException) as e:
        a.create_topics([NewTopic("adm", 2)])["adm"].result(10)
    assert "TOPIC_ALREADY_EXISTS" in str(e.value)
    with pytest.raises(KafkaException) as e:
        a.create_topics([NewTopic("bad name!", 1)])["bad name!"].result(10)
    assert "TOPIC_EXCEPTION" in str(e.value) and "bad name!" in str(e.value)
    with pytest.raises(KafkaException) as e:
        a.create_topics([NewTopic("cfg", 1, config={"retention.ms": "soon"})])["cfg"].result(10)
    assert "retention.ms" in str(e.value)
    a.create_partitions([NewPartitions("adm", 5)])["adm"].result(10)
    md = a.list_topics(timeout=10)
    assert len(md.topics["adm"].partitions) == 5
    from confluent_kafka.admin import ConfigResource

    res = ConfigResource(ConfigResource.Type.TOPIC, "adm")
    cfg = a.describe_configs([res])[res].result(10)
    assert cfg["retention.ms"].value == "1000" and cfg["cleanup.policy"].value == "compact"
    assert cfg["segment.bytes"].value == "1073741824" and cfg["segment.bytes"].is_default
    a.delete_topics(["adm"])["adm"].result(10)
    assert "adm" not in a.list_topics(timeout=10).topics
    with pytest.raises(KafkaException) as e:
        a.delete_topics(["adm"])["adm"].result(10)
    assert "UNKNOWN_TOPIC" in str(e.value)


def test_offsets_for_times_and_watermarks(broker):
    create(broker.bootstrap, "times")
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(10):
        p.produce("times", value=b"v", timestamp=1_000_000 + i * 1000)
        p.flush(10)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "t"})
    got = c.offsets_for_times([TopicPartition("times", 0, 1_004_500)], timeout=10)
    assert got[0].offset == 5
    assert c.get_watermark_offsets(TopicPartition("times", 0), timeout=10) == (0, 10)
    c.close()


def test_auto_create_on_metadata_and_disabled(broker_factory):
    b = broker_factory()
    p = Producer({"bootstrap.servers": b.bootstrap})
    p.produce("auto-made", value=b"x")
    assert p.flush(20) == 0
    off = broker_factory(**{"auto.create.topics.enable": "false"})
    errs = []
    p = Producer({"bootstrap.servers": off.bootstrap, "message.timeout.ms": 3000})
    p.produce("nope", value=b"x", on_delivery=lambda err, msg: errs.append(err))
    p.flush(10)
    assert errs and errs[0] is not None
    assert "nope" not in AdminClient({"bootstrap.servers": off.bootstrap}).list_topics(timeout=10).topics


def test_compacted_topic_keeps_latest_value_per_key(broker):
    import time

    create(broker.bootstrap, "compacted", 1, {"cleanup.policy": "compact", "segment.bytes": "2048",
                                              "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "0"})
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(400):
        p.produce("compacted", key=b"k%d" % (i % 10), value=b"v%d" % i)
        p.flush(10)
    p.produce("compacted", key=b"k3", value=None)  # tombstone
    p.flush(10)
    p.produce("compacted", key=b"last", value=b"x" * 3000)  # rolls the tombstone's segment
    p.flush(10)
    # the cleaner works segment by segment as they roll: read the whole log (to offset 401) until
    # it is compacted down to one record per key (+ the tail), or 150 s passed
    deadline = time.monotonic() + 150
    while True:
        upto = read_to(broker.bootstrap, "compacted", 401)
        if len(upto) <= 12 or time.monotonic() > deadline:
            break
        time.sleep(1)
    msgs = upto
    latest = {m.key(): m.value() for m in msgs}
    assert len(msgs) <= 12  # 400 writes compacted down to one per key (+ the tail)
    assert latest[b"k5"] == b"v395" and b"k3" not in latest
    offsets = [m.offset() for m in msgs]
    assert offsets == sorted(offsets) and offsets[-1] == 401
