"""The Spark connector against a real broker, in local mode."""

import json
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def create(bootstrap, topic, partitions):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions)])[topic].result(10)


def produce(bootstrap, topic, start, n, partitions, codec="none"):
    p = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 5})
    for i in range(start, start + n):
        p.produce(topic, key=b"k%d" % i, value=b"v%d" % i, partition=i % partitions, headers=[("n", b"%d" % i)])
    assert p.flush(20) == 0


def plain_consume(bootstrap, topic, partitions, n):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "plain", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out = []
    deadline = time.monotonic() + 30
    while len(out) < n and time.monotonic() < deadline:
        out += [m for m in c.consume(1000, 0.5) if m.error() is None]
    c.close()
    return {(m.partition(), m.offset()): (m.key(), m.value()) for m in out}


def test_batch_read_equals_plain_consumer(spark, broker):
    create(broker.bootstrap, "sp-batch", 4)
    produce(broker.bootstrap, "sp-batch", 0, 2000, 4, codec="lz4")
    df = (spark.read.format("gregor").option("kafka.bootstrap.servers", broker.bootstrap)
          .option("subscribe", "sp-batch").option("minPartitions", "8").load())
    assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]
    rows = df.collect()
    got = {(r.partition, r.offset): (bytes(r.key), bytes(r.value)) for r in rows}
    assert got == plain_consume(broker.bootstrap, "sp-batch", 4, 2000)
    r0 = next(r for r in rows if r.value == b"v7")
    assert r0.topic == "sp-batch" and r0.headers[0].key == "n" and bytes(r0.headers[0].value) == b"7"
    assert r0.timestampType == 0 and r0.timestamp is not None
    # offsets ranges: startingOffsets / endingOffsets JSON
    part = (spark.read.format("gregor").option("bootstrap.servers", broker.bootstrap)
            .option("assign", '{"sp-batch":[1]}')
            .option("startingOffsets", '{"sp-batch":{"1":10}}').option("endingOffsets", '{"sp-batch":{"1":20}}')
            .load().select("offset").collect())
    assert sorted(r.offset for r in part) == list(range(10, 20))


def test_starting_timestamp_reads_from_the_first_record_at_that_time(spark, broker):
    create(broker.bootstrap, "sp-time", 2)
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(10):  # partition 0 stamped 1000..1009 s; partition 1 only before the start time
        p.produce("sp-time", value=b"%d" % i, partition=0, timestamp=1_000_000 + i * 1000)
        p.produce("sp-time", value=b"old", partition=1, timestamp=1_000_000)
    assert p.flush(10) == 0
    rows = (spark.read.format("gregor").option("bootstrap.servers", broker.bootstrap).option("subscribe", "sp-time")
            .option("startingTimestamp", "1006500").load().select("partition", "offset").collect())
    assert sorted((r.partition, r.offset) for r in rows) == [(0, 7), (0, 8), (0, 9)]  # none in partition 1


def test_batch_read_of_an_empty_topic_is_empty(spark, broker):
    create(broker.bootstrap, "sp-empty", 2)
    df = (spark.read.format("gregor").option("bootstrap.servers", broker.bootstrap)
          .option("subscribe", "sp-empty").load())
    assert df.count() == 0
    assert df.where("partition = 0").collect() == []


def test_json_values_parsed_in_the_reader(spark, broker):
    create(broker.bootstrap, "sp-json", 2)
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(300):
        p.produce("sp-json", value=json.dumps({"n": i, "name": f"x{i}", "ok": i % 2 == 0, "extra": [1]}).encode(),
                  partition=i % 2)
    p.produce("sp-json", value=b"not json", partition=0)
    p.produce("sp-json", value=b'{"n": 1000}', partition=1)
    assert p.flush(10) == 0
    df = (spark.read.format("gregor").option("bootstrap.servers", broker.bootstrap).option("subscribe", "sp-json")
          .option("valueFormat", "json").option("valueSchema", "n long, name string, ok boolean, missing double")
          .option("minPartitions", "4").load())
    assert df.columns == ["n", "name", "ok", "missing"]
    rows = {r.n: r for r in df.collect()}
    assert sorted(rows) == [*range(300), 1000]  # the value that is not JSON is skipped
    assert rows[7].name == "x7" and rows[7].ok is False and rows[7].missing is None
    assert rows[1000].name is None


def test_write_then_read_back_with_headers(spark, broker):
    create(broker.bootstrap, "sp-write", 2)
    rows = [(b"a", b"1", 0, [("h1", b"x")]), (b"b", b"2", 1, [("h2", b"y"), ("h3", None)]), (None, b"3", 0, None)]
    df = spark.createDataFrame(rows, "key binary, value binary, partition int, "
                                     "headers array<struct<key: string, value: binary>>")
    (df.write.format("gregor").mode("append").option("bootstrap.servers", broker.bootstrap)
     .option("topic", "sp-write").save())
    back = (spark.read.format("gregor").option("bootstrap.servers", broker.bootstrap).option("subscribe", "sp-write")
            .load().collect())
    by_value = {bytes(r.value): r for r in back}
    assert set(by_value) == {b"1", b"2", b"3"}
    assert by_value[b"2"].partition == 1 and bytes(by_value[b"2"].key) == b"b"
    assert [(h.key, None if h.value is None else bytes(h.value)) for h in by_value[b"2"].headers] == [
        ("h2", b"y"), ("h3", None)]
    assert by_value[b"3"].key is None


def test_streaming_restart_from_checkpoint_exactly_once_and_group_commits(spark, broker, tmp_path):
    create(broker.bootstrap, "sp-stream", 3)
    produce(broker.bootstrap, "sp-stream", 0, 300, 3)
    out, chk = str(tmp_path / "out"), str(tmp_path / "chk")

    def run_once():
        q = (spark.readStream.format("gregor").option("bootstrap.servers", broker.bootstrap)
             .option("subscribe", "sp-stream").option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", "120").option("groupId", "spark-pipeline").load()
             .selectExpr("CAST(value AS STRING) AS v", "partition", "offset")
             .writeStream.format("json").option("path", out).option("checkpointLocation", chk)
             .trigger(availableNow=True).start())
        q.awaitTermination(120)
        assert q.exception() is None
        return q

    run_once()
    produce(broker.bootstrap, "sp-stream", 300, 150, 3)
    run_once()
    rows = spark.read.json(out).collect()
    values = [r.v for r in rows]
    assert len(values) == 450 and len(set(values)) == 450  # no loss, no duplicates
    assert set(values) == {f"v{i}" for i in range(450)}
    # the final batch's end offsets reached the consumer group (Spark never calls commit() for it)
    deadline = time.monotonic() + 10
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "spark-pipeline"})
    committed = []
    while time.monotonic() < deadline:
        committed = c.committed([TopicPartition("sp-stream", p) for p in range(3)], timeout=10)
        if sum(tp.offset for tp in committed) == 450:
            break
        time.sleep(0.5)
    c.close()
    assert [tp.offset for tp in committed] == [150, 150, 150]
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    from confluent_kafka import ConsumerGroupTopicPartitions

    r = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("spark-pipeline")])["spark-pipeline"].result(10)
    assert sorted((tp.partition, tp.offset) for tp in r.topic_partitions) == [(0, 150), (1, 150), (2, 150)]


def test_streaming_picks_up_new_partitions(spark, broker, tmp_path):
    create(broker.bootstrap, "sp-grow", 1)
    produce(broker.bootstrap, "sp-grow", 0, 10, 1)
    out, chk = str(tmp_path / "out"), str(tmp_path / "chk")

    def run():
        q = (spark.readStream.format("gregor").option("bootstrap.servers", broker.bootstrap)
             .option("subscribe", "sp-grow").option("startingOffsets", "earliest").load()
             .selectExpr("CAST(value AS STRING) AS v").writeStream.format("json").option("path", out)
             .option("checkpointLocation", chk).trigger(availableNow=True).start())
        q.awaitTermination(120)

    run()
    from confluent_kafka.admin import NewPartitions

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_partitions([NewPartitions("sp-grow", 3)])["sp-grow"].result(10)
    produce(broker.bootstrap, "sp-grow", 10, 30, 3)
    run()
    assert sorted(r.v for r in spark.read.json(out).collect()) == sorted(f"v{i}" for i in range(40))


@pytest.mark.parametrize("options,message", [
    ({"subscribe": "t"}, "bootstrap.servers"),
    ({"bootstrap.servers": "x:1"}, "subscribe, subscribePattern, assign"),
    ({"bootstrap.servers": "x:1", "subscribe": "t", "startingOffsets": "yesterday"}, "startingOffsets"),
    ({"bootstrap.servers": "x:1", "subscribe": "t", "maxOffsetsPerTrigger": "-3"}, "maxOffsetsPerTrigger"),
    ({"bootstrap.servers": "x:1", "subscribe": "t", "failOnDataLoss": "maybe"}, "failOnDataLoss"),
    ({"bootstrap.servers": "x:1", "assign": "[1,2]"}, "assign"),
    ({"bootstrap.servers": "x:1", "subscribe": "t", "subscrbe": "u"}, "unknown option(s): subscrbe"),
    ({"bootstrap.servers": "x:1", "subscribe": "t", "valueFormat": "avro"}, "valueFormat"),
    ({"bootstrap.servers": "x:1", "subscribe": "t", "valueFormat": "json"}, "valueSchema is required"),
    ({"bootstrap.servers": "x:1", "subscribe": "t", "valueFormat": "json", "valueSchema": "a map<string,int>"},
     "valueSchema"),
    ({"bootstrap.servers": "x:1", "subscribe": "t", "valueSchema": "a long"}, "needs valueFormat=json"),
])
def test_bad_options_are_named_before_any_job(spark, options, message):
    reader = spark.read.format("gregor")
    for k, v in options.items():
        reader = reader.option(k, v)
    with pytest.raises(Exception) as e:
        reader.load().count()
    assert message in str(e.value)


def test_offsets_json_in_checkpoint_is_kafka_source_shaped(spark, broker, tmp_path):
    create(broker.bootstrap, "sp-chk", 2)
    produce(broker.bootstrap, "sp-chk", 0, 10, 2)
    chk = tmp_path / "chk"
    q = (spark.readStream.format("gregor").option("bootstrap.servers", broker.bootstrap).option("subscribe", "sp-chk")
         .option("startingOffsets", "earliest").load().writeStream.format("noop")
         .option("checkpointLocation", str(chk)).trigger(availableNow=True).start())
    q.awaitTermination(60)
    logs = [p for p in (chk / "offsets").iterdir() if p.name.isdigit()]
    last = max(logs, key=lambda p: int(p.name)).read_text().splitlines()[-1]
    offsets = json.loads(last)
    assert offsets["sp-chk"] == {"0": 5, "1": 5}


def test_max_offsets_per_trigger_limits_each_batch_in_proportion(broker):
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

    from gregor.spark.options import parse_options
    from gregor.spark.source import StreamReader

    create(broker.bootstrap, "sp-limit", 2)
    produce(broker.bootstrap, "sp-limit", 0, 100, 2)  # 50 per partition
    reader = StreamReader(parse_options({"bootstrap.servers": broker.bootstrap, "subscribe": "sp-limit",
                                         "startingOffsets": "earliest", "maxOffsetsPerTrigger": "30"},
                                        streaming=True))
    start = reader.initialOffset()
    assert start["sp-limit"] == {"0": 0, "1": 0}
    assert isinstance(reader.getDefaultReadLimit(), ReadMaxRows)
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    assert end["sp-limit"] == {"0": 15, "1": 15}
    assert reader.latestOffset(start, ReadAllAvailable())["sp-limit"] == {"0": 50, "1": 50}
    parts = reader.partitions(start, end)
    assert sorted((p.partition, p.start, p.end) for p in parts) == [(0, 0, 15), (1, 0, 15)]
