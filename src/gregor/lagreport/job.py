"""The lag-report Spark job: reads ``__gregor_telemetry`` and ``__consumer_offsets`` with the
connector's reading code and writes the report's Parquet tables.

How it runs: each telemetry partition holds whole groups (the broker's layout), so one task per
partition reads, parses and evaluates it in the Python worker that fetched it
(:mod:`gregor.lagreport.sources`, :mod:`gregor.lagreport.windows`); the JVM receives finished
rows once. When a group's telemetry spans partitions the samples are evaluated after a shuffle
by group instead (same code, same result). The commits are decoded in their reader, in a Spark
job that runs beside the others. The aggregate tables are Spark SQL over the written samples.

Tables (under ``<out>/tables/``):

- ``samples``: every telemetry sample (of every broker) with its rates and its sliding-window
  status (group, topic, partition, broker, ts, committed, log_end, lag, time_lag_s, state,
  members, messages, bytes, served_messages, served_bytes, messages_per_s, bytes_per_s,
  last_commit_ts, window_samples, status, latest: the newest sample of its group/topic/partition's
  status series, next_series_ts, next_status_ts; see :mod:`gregor.lagreport.windows`);
- ``commits``: every offset commit still in ``__consumer_offsets`` (group, topic, partition,
  offset, commit_ts, metadata): the commit history, which compaction thins out over time (the
  statuses use the newest commit time each telemetry sample carries);
- ``group_timeline``: per group and time bucket, the group status, total lag, largest time lag,
  consumption rate over all brokers and the count of partitions per status;
- ``partition_throughput``: per topic-partition and time bucket, messages/s and bytes/s read by
  all groups from all brokers together;
- ``partition_status`` and ``group_status``: the newest evaluation of each partition / group;
- ``top_lagging``: the groups with the most lag at their newest sample;
- ``broker_serving``: per group/topic/partition and broker, what that broker served in the
  period and when it served;
- ``share_partitions``: share groups (KIP-932), per group/topic/partition at its newest sample:
  the start offset, lag, time lag and status (the rules above, the start offset standing for the
  committed offset), records in flight and ``stuck`` (delivered more than once and not done),
  ``archived`` and ``dead_lettered`` (counters of its current leader), and over the period the
  records ``delivered``, ``redelivered`` and the ``redelivery_rate`` (redelivered / delivered).

The timeline tables are on a grid of ``bucket_ms`` (``--bucket``, default the telemetry interval
inferred from the data): brokers write on timers of their own, so their samples are never at
the same times. The row of a bucket (``ts`` its end, the bucket ``(ts - bucket_ms, ts]``) holds,
of every partition's status series, the newest sample at or before ``ts`` (a sample stands until
the next one, for at most CARRY_BUCKETS more buckets), and of every broker series what it served
in the bucket: each sample's rate over the part of the bucket its span covers. Summed over the
brokers, a handover from one broker to another neither doubles nor drops consumption.

Timestamps are epoch milliseconds (``long``) in every table.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
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
          "top_lagging", "broker_serving", "share_partitions")
DEFAULT_BUCKET_MS = 10_000  # the broker's default telemetry.interval.ms, when the data shows none
CARRY_BUCKETS = 2  # how many buckets past its own a sample may stand for when its successor is late


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
    bucket_ms: int | None = None  # the timeline's grid; None: the telemetry interval found in the data
    client: dict[str, str] = field(default_factory=dict)  # security settings (librdkafka's names; --command-config)

    @property
    def kafka_options(self) -> dict[str, str]:
        """The client settings as the readers' ``kafka.*`` options."""
        return {f"kafka.{k}": v for k, v in self.client.items()}


def _read_topic(spark: Any, opts: JobOptions, topic: str, **extra: str) -> Any:
    parallelism = 4 * max(1, spark.sparkContext.defaultParallelism)  # more ranges than cores: measured faster
    return (spark.read.format("gregor").option("bootstrap.servers", opts.bootstrap).option("subscribe", topic)
            .option("startingOffsets", "earliest").option("failOnDataLoss", "false")
            .option("minPartitions", str(parallelism)).options(**opts.kafka_options).options(**extra).load())


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
            .option("topic", opts.telemetry_topic).option("window", str(opts.window)).options(**bounds)
            .options(**opts.kafka_options).load())


def load_commits(spark: Any, opts: JobOptions) -> Any:
    from gregor.lagreport import sources

    sources.register(spark)
    parallelism = 4 * max(1, spark.sparkContext.defaultParallelism)
    until = {"until": str(opts.until_ms)} if opts.until_ms is not None else {}
    return (spark.read.format(sources.COMMITS_SOURCE).option("bootstrap.servers", opts.bootstrap)
            .option("topic", opts.offsets_topic).option("minPartitions", str(parallelism)).options(**until)
            .options(**opts.kafka_options).load())


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


def bucket_of(samples: Any, bucket_ms: int | None) -> int:
    """The timeline's grid: ``bucket_ms`` when given, else the median time between consecutive
    samples of one broker series (telemetry.interval.ms, timer jitter rounded off to two
    significant digits), else DEFAULT_BUCKET_MS."""
    from pyspark.sql import functions as F

    if bucket_ms:
        return bucket_ms
    row = (samples.where(F.col("next_series_ts").isNotNull())
           .select(F.percentile_approx(F.col("next_series_ts") - F.col("ts"), 0.5).alias("interval")).first())
    interval = row["interval"] if row is not None else None
    if not interval or interval <= 0:
        return DEFAULT_BUCKET_MS
    unit = 10 ** max(len(str(int(interval))) - 2, 0)
    return max(1, round(interval / unit) * unit)


def coverage(rows: Any, next_col: str, ends: Any, step: int) -> Any:
    """Each sample once per bucket it stands for, as column ``k`` (bucket end = k * step): from the
    bucket it falls in up to the bucket before its successor's (``next_col``), at most
    CARRY_BUCKETS further; a sample without a successor stands until its group's last bucket
    (``ends``: group, _end) if it is within CARRY_BUCKETS of it, else for its own bucket only."""
    from pyspark.sql import functions as F

    def bucket(col: str) -> Any:
        return F.expr(f"({col} + {step - 1}) div {step}")

    kb = bucket("ts")
    followed = rows.where(F.col(next_col).isNotNull()).withColumn(
        "_last", F.least(bucket(next_col) - 1, kb + CARRY_BUCKETS))
    newest = rows.where(F.col(next_col).isNull()).join(F.broadcast(ends), "group").withColumn(
        "_last", F.when(kb >= F.col("_end") - CARRY_BUCKETS, F.col("_end")).otherwise(kb)).drop("_end")
    both = followed.unionByName(newest).withColumn("_first", kb).where(F.col("_last") >= F.col("_first"))
    return both.withColumn("k", F.explode(F.sequence("_first", "_last"))).drop("_first", "_last")


def spread(rows: Any, ends: Any, step: int) -> Any:
    """Rates spread over the buckets their spans overlap (``served_since`` to ``ts``), as column
    ``k`` with ``messages_per_s``/``bytes_per_s`` weighted by the share of the bucket the span
    covers, so that summing over a bucket gives what all brokers served in it (per second); the
    newest sample of a series still writing at its group's last buckets stands until the end of
    its group's last bucket (``ends``: group, _end)."""
    from pyspark.sql import functions as F

    spans = rows.where(F.col("served_since").isNotNull() & (F.col("ts") > F.col("served_since")))
    kb = F.expr(f"(ts + {step - 1}) div {step}")
    followed = spans.where(F.col("next_series_ts").isNotNull()).withColumn("_e", F.col("ts"))
    newest = spans.where(F.col("next_series_ts").isNull()).join(F.broadcast(ends), "group").withColumn(
        "_e", F.when(kb >= F.col("_end") - CARRY_BUCKETS, F.greatest(F.col("ts"), F.col("_end") * step))
        .otherwise(F.col("ts"))).drop("_end")
    both = followed.unionByName(newest)
    both = both.withColumn("k", F.explode(F.sequence(F.expr(f"served_since div {step} + 1"),
                                                     F.expr(f"(_e + {step - 1}) div {step}"))))
    overlap = F.least(F.col("_e"), F.col("k") * step) - F.greatest(F.col("served_since"), (F.col("k") - 1) * step)
    share = overlap / step
    return both.withColumn("messages_per_s", F.col("messages_per_s") * share).withColumn(
        "bytes_per_s", F.col("bytes_per_s") * share).drop("_e")


def derive(spark: Any, samples: Any, paths: dict[str, Path], top: int, bucket_ms: int | None = None) -> int:
    """The aggregate tables, from the evaluated samples, each written to its path; returns the
    bucket width of the timelines. The tables that do not depend on each other run as Spark jobs
    beside the group timeline."""
    from concurrent.futures import ThreadPoolExecutor

    from pyspark.sql import Window
    from pyspark.sql import functions as F

    step = bucket_of(samples, bucket_ms)
    ends = samples.groupBy("group").agg(F.max(F.expr(f"(ts + {step - 1}) div {step}")).alias("_end"))
    nothing = F.lit(None)
    status_rows = coverage(samples.where(F.col("window_samples").isNotNull()), "next_status_ts", ends, step).select(
        "group", "topic", "partition", "k", F.lit(1).alias("_stat"), "status", "lag", "time_lag_s", "members",
        "log_end", nothing.cast("double").alias("messages_per_s"), nothing.cast("double").alias("bytes_per_s"))
    rate_rows = spread(samples.where(F.col("messages_per_s").isNotNull() | F.col("bytes_per_s").isNotNull()),
                       ends, step).select(
        "group", "topic", "partition", "k", F.lit(0).alias("_stat"), nothing.cast("string").alias("status"),
        nothing.cast("long").alias("lag"), nothing.cast("double").alias("time_lag_s"),
        nothing.cast("int").alias("members"), nothing.cast("long").alias("log_end"), "messages_per_s", "bytes_per_s")
    covered = status_rows.unionByName(rate_rows)
    at_end = (F.col("k") * step).alias("ts")
    status_counts = [f"partitions_{s.lower()}" for s in rules.PARTITION_STATUSES]
    per_status = [F.sum(F.when(F.col("status") == s, 1).otherwise(0)).alias(name)
                  for s, name in zip(rules.PARTITION_STATUSES, status_counts, strict=True)]
    with ThreadPoolExecutor(3, thread_name_prefix="lag-report-derive") as pool:
        throughput = pool.submit(_save, spark, covered.groupBy("topic", "partition", "k").agg(
            F.sum("messages_per_s").alias("messages_per_s"), F.sum("bytes_per_s").alias("bytes_per_s"),
            F.max("log_end").alias("log_end")).select("topic", "partition", at_end, "messages_per_s", "bytes_per_s",
                                                      "log_end"), paths["partition_throughput"])
        serving = pool.submit(_save, spark, samples.where(F.col("served_messages").isNotNull())
                              .groupBy("group", "topic", "partition", "broker").agg(
                                  F.sum("served_messages").alias("messages"), F.sum("served_bytes").alias("bytes"),
                                  F.min(F.when(F.col("served_messages") > 0, F.col("ts"))).alias("first_served_ts"),
                                  F.max(F.when(F.col("served_messages") > 0, F.col("ts"))).alias("last_served_ts"),
                                  F.count("*").alias("samples")), paths["broker_serving"])
        newest_samples = pool.submit(_save, spark, samples.where(F.col("latest")).drop("latest"),
                                     paths["partition_status"])
        timeline = _save(spark, covered.groupBy("group", "k")
                         .agg(F.max(status_rank(F.col("status"))).alias("_worst"), F.sum("_stat").alias("partitions"),
                              F.sum("lag").alias("total_lag"), F.max("time_lag_s").alias("max_time_lag_s"),
                              F.sum("messages_per_s").alias("messages_per_s"),
                              F.sum("bytes_per_s").alias("bytes_per_s"), F.max("members").alias("members"),
                              *per_status)
                         .withColumn("status", _group_status_col(F.col("_worst")))
                         .select("group", at_end, "partitions", "total_lag", "max_time_lag_s", "messages_per_s",
                                 "bytes_per_s", "members", *status_counts, "status", F.lit(step).alias("bucket_ms")),
                         paths["group_timeline"])
        partition_status = newest_samples.result()
        delivered = (samples.where(F.col("kind") == "share").groupBy("group", "topic", "partition")
                     .agg(F.sum("served_messages").alias("delivered"),
                          F.sum("served_redelivered").alias("redelivered")))
        shares = pool.submit(_save, spark, partition_status.where(F.col("kind") == "share").select(
            "group", "topic", "partition", "ts", F.col("committed").alias("start_offset"), "log_end", "lag",
            "time_lag_s", "status", "members", "in_flight", "stuck", "archived", "dead_lettered")
            .join(delivered, ["group", "topic", "partition"], "left")
            .withColumn("redelivery_rate", F.when(F.col("delivered") > 0, F.col("redelivered") / F.col("delivered"))),
            paths["share_partitions"])
        newest = partition_status.groupBy("group").agg(F.max("ts").alias("last_seen"), F.max("last_commit_ts").alias(
            "last_commit_ts"), F.max("state").alias("state"))
        newest_bucket = timeline.groupBy("group").agg(F.max("ts").alias("ts"))
        latest = timeline.join(F.broadcast(newest_bucket), ["group", "ts"]).drop("ts", "bucket_ms")
        worst = (partition_status.where(F.col("status").isNotNull())
                 .withColumn("_r", status_rank(F.col("status")))
                 .withColumn("_n", F.row_number().over(Window.partitionBy("group").orderBy(
                     F.col("_r").desc(), F.col("lag").desc_nulls_last(), "topic", "partition")))
                 .where(F.col("_n") == 1)
                 .select("group", F.concat_ws("-", "topic", F.col("partition").cast("string")).alias("worst_partition"),
                         F.col("status").alias("worst_partition_status")))
        group_status = _save(spark, latest.join(newest.select("group", "last_seen"), "group")
                             .select("group", "last_seen", *(c for c in latest.columns if c != "group"))
                             .join(worst, "group", "left")
                             .join(newest.select("group", "last_commit_ts", "state"), "group", "left"),
                             paths["group_status"])
        _save(spark, group_status.where(F.col("total_lag") > 0)
              .orderBy(F.col("total_lag").desc(), F.col("max_time_lag_s").desc_nulls_last(), "group").limit(top),
              paths["top_lagging"])
        throughput.result()
        serving.result()
        shares.result()
    return step


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
            client = {"bootstrap.servers": opts.bootstrap, **opts.client}
            records = sum(e - s for _p, s, e in sources.topic_ranges(client, opts.telemetry_topic, opts.since_ms))
            partitions = -(-records // sources.EVALUATION_CHUNK_ROWS)  # about a chunk's worth each
            samples = _save(spark, evaluate(load_telemetry(spark, opts), opts.window, partitions), paths["samples"])
        derive(spark, samples, paths, opts.top, opts.bucket_ms)
        commits.result()
    return paths
