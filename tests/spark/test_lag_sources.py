"""The lag report's own data sources against a real broker: evaluating each telemetry partition
in its reader (no shuffle) gives exactly what the shuffle by group gives; a group whose
telemetry spans partitions (the topic's partition count was changed) is detected and the job
falls back to the shuffle; --since starts the read at the right offsets."""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from gregor.lagreport import job
from gregor.lagreport.job import JobOptions
from gregor.protocol.partitioner import partition_for_key
from tests.support.lag_histories import history

PARTITIONS = 3


def produce_telemetry(bootstrap: str, topic: str, stray: str | None = None) -> list[dict]:
    """Random histories of 40 groups in their home partitions, stamped with their ts; ``stray``
    also gets a few samples in a partition that is not its home."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for t in (topic, f"{topic}-offsets"):
        admin.create_topics([NewTopic(t, PARTITIONS if t == topic else 1)])[t].result(10)
    rng = random.Random(11)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    rows = []
    for g in range(40):
        group = f"group-{g}"
        home = partition_for_key(group.encode(), PARTITIONS)
        for part in range(rng.randint(1, 3)):
            for r in history(rng, rng.randint(1, 30)):
                row = {**r, "group": group, "topic": "orders", "partition": part}
                where = (home + 1) % PARTITIONS if group == stray and r["ts"] > 1_010_000 else home
                p.produce(topic, json.dumps(row).encode(), f"{group}/orders/{part}".encode(), partition=where,
                          timestamp=row["ts"])
                rows.append(row)
    p.flush(10)
    return rows


def collect(df) -> Counter:
    return Counter(tuple(r) for r in df.drop("latest").collect())


def test_per_partition_evaluation_equals_the_shuffle(spark, broker):
    rows = produce_telemetry(broker.bootstrap, "tel")
    opts = JobOptions(broker.bootstrap, None, window=4, telemetry_topic="tel")  # type: ignore[arg-type]
    direct = job.load_samples(spark, opts)
    assert direct.rdd.getNumPartitions() == PARTITIONS  # one task per telemetry partition
    got = collect(direct)
    assert got.total() == len(rows)
    assert got == collect(job.evaluate(job.load_telemetry(spark, opts), 4))
    # evaluated 50 samples at a time, carrying each key's window: the same rows
    assert collect(direct.sparkSession.read.format("gregor_lag_samples").option("bootstrap.servers", broker.bootstrap)
                   .option("topic", "tel").option("window", "4").option("chunkRows", "50").load()) == got
    # --since: the read starts at the offsets of that time, and the windows start there
    since = JobOptions(broker.bootstrap, None, window=4, since_ms=1_012_000, telemetry_topic="tel")  # type: ignore
    got = collect(job.load_samples(spark, since))
    assert got and got == collect(job.evaluate(job.load_telemetry(spark, since), 4))
    assert got.total() == sum(r["ts"] >= 1_012_000 for r in rows)


def test_a_group_that_spans_partitions_falls_back_to_the_shuffle(spark, broker, tmp_path, caplog):
    produce_telemetry(broker.bootstrap, "split", stray="group-7")
    opts = JobOptions(broker.bootstrap, tmp_path, window=4, telemetry_topic="split", offsets_topic="split-offsets")
    with pytest.raises(Exception, match="SplitGroupError: telemetry of group 'group-7'"):
        job.load_samples(spark, opts).count()
    paths = job.run(spark, opts)
    assert "spans partitions" in caplog.text
    written = collect(spark.read.parquet(str(paths["samples"])))
    assert written == collect(job.evaluate(job.load_telemetry(spark, opts), 4))
    assert spark.read.parquet(str(paths["commits"])).count() == 0


def test_sources_register_once_per_session(spark):
    from gregor.lagreport import sources

    sources.register(spark)
    sources.register(spark)  # again, as the job's threads may: no DATA_SOURCE_ALREADY_EXISTS
