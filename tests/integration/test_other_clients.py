"""kafka-python, aiokafka and kcat against a real Gregor broker."""

import asyncio
import shutil
import subprocess

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as AioTP
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTP
from kafka.admin import NewTopic


def kp_consume(bootstrap, topic, partitions, expected, timeout_ms=10000):
    c = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=timeout_ms,
                      enable_auto_commit=False)
    c.assign([KpTP(topic, p) for p in range(partitions)])
    out = []
    for m in c:
        out.append(m)
        if len(out) >= expected:
            break
    c.close()
    return out


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_kafka_python_defaults_idempotent_round_trip(broker, codec):
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic("kp", num_partitions=4, replication_factor=1)])
    admin.close()
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, compression_type=codec)  # defaults: idempotent, acks=all
    futures = [p.send("kp", key=b"k%d" % i, value=b"v%d" % i, headers=[("h", b"%d" % i)], partition=i % 4)
               for i in range(400)]
    p.flush()
    metas = [f.get(timeout=10) for f in futures]
    assert sorted(m.offset for m in metas if m.partition == 0) == list(range(100))
    p.close()
    msgs = kp_consume(broker.bootstrap, "kp", 4, 400)
    assert len(msgs) == 400
    assert {m.value for m in msgs} == {b"v%d" % i for i in range(400)}
    assert all(m.headers == [("h", m.value[1:])] for m in msgs)


def test_kafka_python_list_offsets_and_metadata(broker):
    p = KafkaProducer(bootstrap_servers=broker.bootstrap)
    for i in range(5):
        p.send("kpm", value=b"x", timestamp_ms=10_000 + i)
    p.flush()
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap)
    tp = KpTP("kpm", 0)
    assert c.beginning_offsets([tp]) == {tp: 0}
    assert c.end_offsets([tp]) == {tp: 5}
    assert c.offsets_for_times({tp: 10_003})[tp].offset == 3
    assert c.partitions_for_topic("kpm") == {0}
    c.close()




@pytest.mark.parametrize("codec", [None, "gzip", "lz4", "zstd", "snappy"])
def test_aiokafka_produce_consume(broker, codec):
    async def run():
        p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, compression_type=codec, enable_idempotence=True)
        await p.start()
        try:
            for i in range(200):
                await p.send("aio", value=b"v%d" % i, key=b"k", headers=[("a", b"b")])
            await p.flush()
        finally:
            await p.stop()
        c = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest")
        await c.start()
        try:
            c.assign([AioTP("aio", 0)])
            got = []
            while len(got) < 200:
                batch = await c.getmany(timeout_ms=5000)
                if not batch:
                    break
                for msgs in batch.values():
                    got += msgs
            return got
        finally:
            await c.stop()

    got = asyncio.run(run())
    assert [m.value for m in got] == [b"v%d" % i for i in range(200)]
    assert got[0].headers == (("a", b"b"),)


kcat = shutil.which("kcat") or shutil.which("kafkacat")


@pytest.mark.skipif(kcat is None, reason="kcat is installed by `make setup`")
@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_kcat_produce_consume_metadata(broker, codec):
    lines = "".join(f"key{i}:value{i}\n" for i in range(100))
    subprocess.run([kcat, "-b", broker.bootstrap, "-P", "-t", "kc", "-K:", "-z", codec], input=lines.encode(),
                   check=True, timeout=30)
    out = subprocess.run([kcat, "-b", broker.bootstrap, "-C", "-t", "kc", "-e", "-f", "%k=%s@%o\n"],
                         check=True, timeout=30, capture_output=True).stdout.decode().splitlines()
    assert out == [f"key{i}=value{i}@{i}" for i in range(100)]
    md = subprocess.run([kcat, "-b", broker.bootstrap, "-L", "-t", "kc"], check=True, timeout=30,
                        capture_output=True).stdout.decode()
    assert 'topic "kc" with 1 partitions' in md
