"""The lag-report Spark job: reads ``__gregor_telemetry`` and ``__consumer_offsets`` with the
connector's reading code and writes the report's Parquet tables.

How it runs: each telemetry partition holds whole groups (the broker's layout), so one task per
partition reads, parses and evaluates it in the Python worker that fetched it
(:mod:`gregor.lagreport.sources`, :mod:`gregor.lagreport.windows`); the JVM receives finished
rows once. When a group's telemetry spans partitions the samples are evaluated after a shuffle
by group instead (same code, same result). The commits are decoded in their reader, in a Spark
job that runs beside the others. The aggregate tables are Spark SQL over the written samples.

Tables (under ``<out>/tables/``):

- ``samples``: every telemetry sample with its rates and its sliding-window status
  (group, topic, partition, ts, committed, log_end, lag, time_lag_s, state, members,
  messages_per_s, bytes_per_s, last_commit_ts, window_samples, status, latest: the newest sample
  of its group/topic/partition);
- ``commits``: every offset commit still in ``__consumer_offsets`` (group, topic, partition,
  offset, commit_ts, metadata): the commit history, which compaction thins out over time (the
  statuses use the newest commit time each telemetry sample carries);
- ``group_timeline``: per group and sample time, the group status, total lag, largest time lag,
  consumption rate and the count of partitions per status;
- ``partition_throughput``: per topic-partition and sample time, messages/s and bytes/s read by
  all groups together;
- ``partition_status`` and ``group_status``: the newest evaluation of each partition / group;
- ``top_lagging``: the groups with the most lag at their newest sample.

Timestamps are epoch milliseconds (``long``) in every table.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gregor.lagreport import rules
from gregor.lagreport.fields import TELEMETRY_SCHEMA
from gregor.protocol.consumer_offsets import OFFSETS_TOPIC
from gregor.protocol.telemetry_records import TELEMETRY_TOPIC

log = logging.getLogger(__name__)
KEY = ["group", "topic", "partition"]
STATUS_RANK = {rules.OK: 0, rules.WARNING: 1, rules.STALL: 2, rules.STOP: 3, rules.REWIND: 4}
TABLES = ("samples", "commits", "group_timeline", "partition_throughput", "partition_status", "group_status",
          "top_lagging")


@dataclass(frozen=True)
class JobOptions:
    bootstrap: str
    out: Path
    window: int = rules.DEFAULT_WINDOW
    top: int = 10
    since_ms: int | None = None
    until_ms: int | None = None
    telemetry_topic: str = TELEMETRY_TOPIC
    offsets_topic: str = OFFSETS_TOPIC


def _read_topic(spark: Any, opts: JobOptions, topic: str, **extra: str) -> Any:
    parallelism = 4 * max(1, spark.sparkContext.defaultParallelism)  # more ranges than cores: measured faster
    return (spark.read.format("gregor").option("bootstrap.servers", opts.bootstrap).option("subscribe", topic)
            .option("startingOffsets", "earliest").option("failOnDataLoss", "false")
            .option("minPartitions", str(parallelism)).options(**extra).load())


def load_telemetry(spark: Any, opts: JobOptions) -> Any:
    from pyspark.sql import functions as F

    # parsed in the connector's reader with Arrow's JSON reader: measured 84 -> 48 s for 10M records
    # against Spark's from_json, and faster again than parsing in a second Python step
    tel = _read_topic(spark, opts, opts.telemetry_topic, valueFormat="json", valueSchema=TELEMETRY_SCHEMA)
    tel = tel.where(F.col("group").isNotNull() & F.col("ts").isNotNull())
    if opts.since_ms is not None:
        tel = tel.where(F.col("ts") >= opts.since_ms)
    if opts.until_ms is not None:
        tel = tel.where(F.col("ts") <= opts.until_ms)
    return tel


def load_samples(spark: Any, opts: JobOptions) -> Any:
    """The evaluated samples, read, parsed and evaluated partition by partition (no shuffle; see
    :mod:`gregor.lagreport.sources`); fails with SplitGroupError when a group spans partitions."""
    from gregor.lagreport import sources

    sources.register(spark)
    bounds = {name: str(v) for name, v in (("since", opts.since_ms), ("until", opts.until_ms)) if v is not None}
    return (spark.read.format(sources.SAMPLES_SOURCE).option("bootstrap.servers", opts.bootstrap)
            .option("topic", opts.telemetry_topic).option("window", str(opts.window)).options(**bounds).load())


def load_commits(spark: Any, opts: JobOptions) -> Any:
    from gregor.lagreport import sources

    sources.register(spark)
    parallelism = 4 * max(1, spark.sparkContext.defaultParallelism)
    until = {"until": str(opts.until_ms)} if opts.until_ms is not None else {}
    return (spark.read.format(sources.COMMITS_SOURCE).option("bootstrap.servers", opts.bootstrap)
            .option("topic", opts.offsets_topic).option("minPartitions", str(parallelism)).options(**until).load())


def evaluate(samples: Any, window: int, partitions: int | None = None) -> Any:
    """Telemetry samples (any DataFrame with the telemetry columns) -> evaluated samples: the rules
    of :mod:`gregor.lagreport.rules` (see :mod:`gregor.lagreport.windows`) over each group's
    samples, which a shuffle by group into ``partitions`` partitions brings together (each is
    evaluated in memory at once)."""
    import functools

    from gregor.lagreport import windows

    if window < 2:
        raise ValueError("the window needs at least 2 samples")
    parallelism = 4 * max(1, samples.sparkSession.sparkContext.defaultParallelism)
    return samples.repartition(max(parallelism, partitions or 0), "group").mapInArrow(
        functools.partial(windows.evaluate_batches, window=window), windows.OUTPUT_SCHEMA)


def _group_status_col(rank_col: Any) -> Any:
    from pyspark.sql import functions as F

    return (F.when(rank_col >= STATUS_RANK[rules.STALL], rules.ERROR)
            .when(rank_col == STATUS_RANK[rules.WARNING], rules.WARNING).otherwise(rules.OK))


def status_rank(col: Any) -> Any:
    """A partition status column as its rank in STATUS_RANK (worse is higher)."""
    from pyspark.sql import functions as F

    expr = F.lit(0)
    for name, rank in STATUS_RANK.items():
        expr = F.when(col == name, rank).otherwise(expr)
    return expr


def _save(spark: Any, df: Any, path: Path) -> Any:
    """Write a table and continue from its columnar copy (nothing upstream is computed twice)."""
    df.write.mode("overwrite").parquet(str(path))
    return spark.read.parquet(str(path))


def derive(spark: Any, samples: Any, paths: dict[str, Path], top: int) -> None:
    """The aggregate tables, from the evaluated samples, each written to its path. The two that
    do not depend on each other run as Spark jobs beside the group timeline."""
    from concurrent.futures import ThreadPoolExecutor

    from pyspark.sql import Window
    from pyspark.sql import functions as F

    per_status = [F.sum(F.when(F.col("status") == s, 1).otherwise(0)).alias(f"partitions_{s.lower()}")
                  for s in rules.PARTITION_STATUSES]
    with ThreadPoolExecutor(2, thread_name_prefix="lag-report-derive") as pool:
        throughput = pool.submit(_save, spark, samples.groupBy("topic", "partition", "ts").agg(
            F.sum("messages_per_s").alias("messages_per_s"), F.sum("bytes_per_s").alias("bytes_per_s"),
            F.max("log_end").alias("log_end")), paths["partition_throughput"])
        newest_samples = pool.submit(_save, spark, samples.where(F.col("latest")).drop("latest"),
                                     paths["partition_status"])
        timeline = _save(spark, samples.groupBy("group", "ts")
                         .agg(F.max(status_rank(F.col("status"))).alias("_worst"), F.count("*").alias("partitions"),
                              F.sum("lag").alias("total_lag"), F.max("time_lag_s").alias("max_time_lag_s"),
                              F.sum("messages_per_s").alias("messages_per_s"),
                              F.sum("bytes_per_s").alias("bytes_per_s"), F.max("members").alias("members"),
                              *per_status)
                         .withColumn("status", _group_status_col(F.col("_worst"))).drop("_worst"),
                         paths["group_timeline"])
        partition_status = newest_samples.result()
        newest = partition_status.groupBy("group").agg(F.max("ts").alias("ts"), F.max("last_commit_ts").alias(
            "last_commit_ts"), F.max("state").alias("state"))
        latest = timeline.join(F.broadcast(newest.select("group", "ts")), ["group", "ts"])
        worst = (partition_status.where(F.col("status").isNotNull())
                 .withColumn("_r", status_rank(F.col("status")))
                 .withColumn("_n", F.row_number().over(Window.partitionBy("group").orderBy(
                     F.col("_r").desc(), F.col("lag").desc_nulls_last(), "topic", "partition")))
                 .where(F.col("_n") == 1)
                 .select("group", F.concat_ws("-", "topic", F.col("partition").cast("string")).alias("worst_partition"),
                         F.col("status").alias("worst_partition_status")))
        last_commit = newest.select("group", "last_commit_ts", "state")
        group_status = _save(spark, latest.withColumnRenamed("ts", "last_seen").join(worst, "group", "left")
                             .join(last_commit, "group", "left"), paths["group_status"])
        _save(spark, group_status.where(F.col("total_lag") > 0)
              .orderBy(F.col("total_lag").desc(), F.col("max_time_lag_s").desc_nulls_last(), "group").limit(top),
              paths["top_lagging"])
        throughput.result()


def run(spark: Any, opts: JobOptions) -> dict[str, Path]:
    """Read, evaluate, write every table as Parquet; returns table name -> path. The commits
    table is written by a second Spark job that runs beside the others (measured 60 -> 55 s for
    10M samples on 2 cores: it fills the gaps of the samples job)."""
    from concurrent.futures import ThreadPoolExecutor

    from gregor.lagreport import sources

    sources.register(spark)  # before the threads
    tables_dir = opts.out / "tables"
    paths = {name: tables_dir / name for name in TABLES}
    with ThreadPoolExecutor(1, thread_name_prefix="lag-report-commits") as pool:
        commits = pool.submit(lambda: load_commits(spark, opts).write.mode("overwrite").parquet(str(paths["commits"])))
        try:
            samples = _save(spark, load_samples(spark, opts), paths["samples"])
        except Exception as e:  # noqa: BLE001 - Spark wraps the reader's error; only this one is handled
            if sources.SPLIT_GROUP not in str(e):
                raise
            log.warning("a group's telemetry spans partitions (%s); evaluating through a shuffle by group",
                        str(e).split(sources.SPLIT_GROUP, 1)[1].split("\n", 1)[0].lstrip(": "))
            records = sum(e - s for _p, s, e in sources.topic_ranges({"bootstrap.servers": opts.bootstrap},
                                                                     opts.telemetry_topic, opts.since_ms))
            partitions = -(-records // sources.EVALUATION_CHUNK_ROWS)  # about a chunk's worth each
            samples = _save(spark, evaluate(load_telemetry(spark, opts), opts.window, partitions), paths["samples"])
        derive(spark, samples, paths, opts.top)
        commits.result()
    return paths
