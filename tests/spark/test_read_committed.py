"""``kafka.isolation.level`` as Spark's Kafka source reads it: read_committed offset ranges end at
the last stable offset, aborted records never reach the DataFrame, and the offsets of control
markers and aborted records are gaps, not data loss; read_uncommitted (the default) reads every
data record. Written with confluent-kafka transactional producers against a real broker."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from gregor.spark.options import OptionError, parse_options

TOPIC = "sp-txn"


def transactional(bootstrap: str, tid: str) -> Producer:
    # the open transaction must outlive the test's Spark jobs (librdkafka's default timeout is 60 s)
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 5,
                  "transaction.timeout.ms": 600000})
    p.init_transactions(30)
    return p


def transaction(p: Producer, values: list[str], partitions: int, commit: bool | None) -> None:
    """One transaction over ``partitions``: committed, aborted, or left open (None)."""
    p.begin_transaction()
    for i, v in enumerate(values):
        p.produce(TOPIC, v.encode(), partition=i % partitions)
    if commit is None:
        assert p.flush(20) == 0  # in the log, undecided
    elif commit:
        p.commit_transaction(30)
    else:
        assert p.flush(20) == 0  # the aborted records are in the log
        p.abort_transaction(30)


def ends(bootstrap: str, isolation: str) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "ends", "isolation.level": isolation})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10, cached=False)[1] for p in (0, 1)}
    finally:
        c.close()


def read(spark, bootstrap: str, isolation: str | None, **options: str) -> list[tuple[int, int, str]]:
    r = (spark.read.format("gregor").option("bootstrap.servers", bootstrap).option("subscribe", TOPIC)
         .option("minPartitions", "7"))  # ranges split inside transactions and at their markers
    if isolation is not None:
        r = r.option("kafka.isolation.level", isolation)
    for k, v in options.items():
        r = r.option(k, v)
    return sorted((row.partition, row.offset, bytes(row.value).decode()) for row in r.load().collect())


def test_isolation_level_option_is_checked_on_the_driver():
    assert parse_options({"bootstrap.servers": "x", "subscribe": "t"}, streaming=False).client[
        "isolation.level"] == "read_uncommitted"  # Spark's (the Java client's) default, not librdkafka's
    so = parse_options({"bootstrap.servers": "x", "subscribe": "t", "kafka.isolation.level": "READ_COMMITTED"},
                       streaming=True)
    assert so.isolation_level == so.client["isolation.level"] == "read_committed"
    with pytest.raises(OptionError, match="kafka.isolation.level"):
        parse_options({"bootstrap.servers": "x", "subscribe": "t", "kafka.isolation.level": "committed"},
                      streaming=False)


def test_read_committed_batch_and_stream(spark, broker, tmp_path):
    b = broker.bootstrap
    admin = AdminClient({"bootstrap.servers": b})
    admin.create_topics([NewTopic(TOPIC, 2)])[TOPIC].result(10)
    p1, p2 = transactional(b, "sp-txn-1"), transactional(b, "sp-txn-2")
    committed: list[str] = []
    aborted: list[str] = []
    for t in range(12):  # committed and aborted transactions of several sizes, interleaved
        values = [f"t{t}-{i}" for i in range(1 + t % 5)]
        commit = t % 3 != 1
        transaction(p1, values, 2, commit)
        (committed if commit else aborted).extend(values)
    open_values = [f"open-{i}" for i in range(4)]
    transaction(p2, open_values, 2, None)  # holds the last stable offset of both partitions back
    later = [f"later-{i}" for i in range(6)]
    transaction(p1, later, 2, True)  # committed, but above the last stable offset

    lso, hw = ends(b, "read_committed"), ends(b, "read_uncommitted")
    assert all(lso[p] < hw[p] for p in (0, 1))

    # read_committed: every committed record below the last stable offset, exactly once
    rows = read(spark, b, "read_committed")
    assert [v for _p, _o, v in rows if not v.startswith("t")] == []  # nothing of or after the open transaction
    assert sorted(v for _p, _o, v in rows) == sorted(committed)
    assert all(o < lso[p] for p, o, _v in rows)
    # read_uncommitted (also the default): every data record up to the high watermark, markers excepted
    everything = sorted(committed + aborted + open_values + later)
    assert sorted(v for _p, _o, v in read(spark, b, "read_uncommitted")) == everything
    assert sorted(v for _p, _o, v in read(spark, b, None)) == everything
    # an explicit end at the last stable offset (-1: latest) reads the same under read_committed
    ending = json.dumps({TOPIC: {"0": -1, "1": lso[1]}})
    assert read(spark, b, "read_committed", endingOffsets=ending) == rows

    # streaming, three offsets a batch: batches made only of markers and aborted records, ranges
    # starting and ending inside them; failOnDataLoss stays true (gaps are not data loss)
    out, chk = str(tmp_path / "out"), str(tmp_path / "chk")

    def stream() -> None:
        q = (spark.readStream.format("gregor").option("bootstrap.servers", b).option("subscribe", TOPIC)
             .option("kafka.isolation.level", "read_committed").option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", "3").load().selectExpr("partition", "offset", "CAST(value AS STRING) v")
             .writeStream.format("json").option("path", out).option("checkpointLocation", chk)
             .trigger(availableNow=True).start())
        q.awaitTermination(240)
        assert q.exception() is None
        return q

    q = stream()
    streamed = spark.read.schema("partition int, offset long, v string").json(out).collect()
    assert sorted(r.v for r in streamed) == sorted(committed)  # once each, nothing aborted or above the LSO
    end = json.loads(q.lastProgress["sources"][0]["endOffset"])
    assert {int(p): o for p, o in end[TOPIC].items()} == lso  # the last batch ends at the last stable offset

    p2.commit_transaction(30)  # the open transaction commits: everything after it becomes readable
    stream()
    streamed = spark.read.schema("partition int, offset long, v string").json(out).collect()
    assert sorted(r.v for r in streamed) == sorted(committed + open_values + later)
    assert len({(r.partition, r.offset) for r in streamed}) == len(streamed)
