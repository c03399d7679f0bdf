"""Read N messages of 1 KiB from Gregor into ``df.count()`` and into a Parquet write with Spark
on both local cores, and the same data with one plain confluent-kafka consumer process, in the
same run; prints MB/s for each and the ratios.

    python bench/spark_read.py [--messages 1000000] [--partitions 4]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

import peers  # noqa: E402
import produce_fetch  # noqa: E402

PLAIN = r"""
import sys, time
from confluent_kafka import Consumer, TopicPartition
bs, topic, parts, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
c = Consumer({"bootstrap.servers": bs, "group.id": "plain", "enable.auto.commit": False,
              "fetch.max.bytes": 52428800, "max.partition.fetch.bytes": 10485760, "queued.min.messages": 200000,
              "fetch.queue.backoff.ms": 0})  # the connector's reader settings: a fair baseline
c.assign([TopicPartition(topic, p, 0) for p in range(parts)])
got = nbytes = 0
t = time.perf_counter()
while got < n:
    for m in c.consume(min(10000, n - got), 1.0):
        if m.error() is None:
            got += 1
            nbytes += len(m.value())
print(time.perf_counter() - t, nbytes)
"""


def synthetic_ceiling(spark, n: int) -> float:  # type: ignore[no-untyped-def]
    """Seconds for df.count() over a Python data source that yields the connector's Arrow batches
    from memory: the ceiling of Spark's Python data-source path on this machine."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from gregor.spark import kafka_io
    from gregor.spark.source import SCHEMA

    class Reader(DataSourceReader):
        def partitions(self):  # type: ignore[no-untyped-def]
            return [InputPartition(i) for i in range(4)]

        def read(self, partition):  # type: ignore[no-untyped-def]
            import pyarrow as pa

            schema = kafka_io.arrow_schema()
            rows = 5000
            batch = pa.RecordBatch.from_arrays([
                kafka_io._binary_column([None] * rows), kafka_io._binary_column([b"x" * 1024] * rows),
                pa.array(["t"] * rows), pa.array([0] * rows, pa.int32()), pa.array(list(range(rows)), pa.int64()),
                pa.array([1000] * rows, pa.timestamp("us", tz="UTC")), pa.array([0] * rows, pa.int32()),
                pa.nulls(rows, schema.field("headers").type)], schema=schema)
            for _ in range(n // 4 // rows):
                yield batch

    class Synthetic(DataSource):
        @classmethod
        def name(cls):  # type: ignore[no-untyped-def]
            return "gregor_synthetic"

        def schema(self):  # type: ignore[no-untyped-def]
            return SCHEMA

        def reader(self, schema):  # type: ignore[no-untyped-def]
            return Reader()

    spark.dataSource.register(Synthetic)
    df = spark.read.format("gregor_synthetic").load()
    df.count()  # warm the Python workers
    t = time.perf_counter()
    df.count()
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    args = ap.parse_args()
    n = args.messages
    with peers.gregor() as bs:
        produce_fetch.create_topic(bs, "spark-bench", args.partitions)
        produce_fetch.produce(bs, "spark-bench", n - 1, 1024)  # + the warm-up message = n
        mb = n * 1024 / 1e6

        out = subprocess.run([sys.executable, "-c", PLAIN, bs, "spark-bench", str(args.partitions), str(n)],
                             capture_output=True, text=True, check=True).stdout.split()
        plain_s = float(out[0])
        print(f"plain consumer (1 process)     {mb / plain_s:8.1f} MB/s  ({plain_s:.2f} s)", flush=True)

        from pyspark.sql import SparkSession

        import gregor.spark

        spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
                 .config("spark.driver.host", "127.0.0.1").config("spark.driver.memory", "2g").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        gregor.spark.register(spark)
        df = (spark.read.format("gregor").option("bootstrap.servers", bs).option("subscribe", "spark-bench")
              .option("minPartitions", "2").load())
        t = time.perf_counter()
        count = df.count()
        cold_s = time.perf_counter() - t
        assert count == n, count
        print(f"spark local[2] df.count(), 1st {mb / cold_s:8.1f} MB/s  ({cold_s:.2f} s, includes Python worker "
              "start-up)", flush=True)
        t = time.perf_counter()
        assert df.count() == n
        count_s = time.perf_counter() - t
        print(f"spark local[2] df.count()      {mb / count_s:8.1f} MB/s  ({count_s:.2f} s)", flush=True)
        with tempfile.TemporaryDirectory() as d:
            t = time.perf_counter()
            df.write.parquet(os.path.join(d, "out"))
            parquet_s = time.perf_counter() - t
        print(f"spark local[2] parquet write   {mb / parquet_s:8.1f} MB/s  ({parquet_s:.2f} s)", flush=True)
        ceiling_s = synthetic_ceiling(spark, n)
        print(f"spark local[2] ceiling         {mb / ceiling_s:8.1f} MB/s  ({ceiling_s:.2f} s: the same Arrow batches "
              "made in memory, no Kafka: what the Python data-source path itself can carry)", flush=True)
        spark.stop()
        print(f"spark/plain: count {plain_s / count_s:.2f}x, parquet {plain_s / parquet_s:.2f}x, "
              f"ceiling {plain_s / ceiling_s:.2f}x")


if __name__ == "__main__":
    main()
