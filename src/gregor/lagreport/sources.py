"""The lag report's two Spark data sources, built on the connector's reading code
(:mod:`gregor.spark.kafka_io`), which do their work in the Python worker that reads the records,
so that the JVM receives finished rows once:

- ``gregor_lag_samples`` reads ``__gregor_telemetry`` one whole topic partition per task, parses
  the JSON values with Arrow and evaluates the status rules (:mod:`gregor.lagreport.windows`) right
  there. That is correct because the broker writes every record of a group to the group's home
  partition (``murmur2(group) % partitions``, see :mod:`gregor.protocol.telemetry_records`). A group found
  outside its home partition (the topic's partition count was changed) fails the read with
  :class:`SplitGroupError`; the job then evaluates through a shuffle by group instead.
- ``gregor_lag_commits`` reads ``__consumer_offsets`` in offset ranges and decodes the commit
  records in Kafka's formats (group metadata records and tombstones are skipped).

Options (strings): ``bootstrap.servers``, ``topic``; samples: ``window``, ``since``, ``until``
(epoch ms), ``chunkRows`` (samples evaluated at a time per reader); commits: ``until``,
``minPartitions``.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from gregor.lagreport import rules, windows
from gregor.lagreport.fields import COMMITS_FIELDS, COMMITS_SCHEMA, TELEMETRY_FIELDS
from gregor.spark import kafka_io
from gregor.spark.source import RangePartition, plan_ranges

SAMPLES_SOURCE = "gregor_lag_samples"
COMMITS_SOURCE = "gregor_lag_commits"
SPLIT_GROUP = "SplitGroupError"
EVALUATION_CHUNK_ROWS = 1_000_000  # samples evaluated at a time in a reader (about 250 MB of Arrow)


class SplitGroupError(RuntimeError):
    """A group's telemetry is not all in its home partition: evaluate through a shuffle."""

    def __init__(self, group: str, partition: int, home: int) -> None:
        super().__init__(f"{SPLIT_GROUP}: telemetry of group {group!r} found in partition {partition}, "
                         f"its home is {home}")


def _int_option(options: dict[str, str], name: str) -> int | None:
    value = options.get(name)
    return None if value is None or value == "" else int(value)


class TelemetryPartition(InputPartition):
    def __init__(self, topic: str, partition: int, start: int, end: int, partitions: int) -> None:
        super().__init__((topic, partition, start, end, partitions))
        self.topic, self.partition, self.start, self.end, self.partitions = topic, partition, start, end, partitions


def topic_ranges(client: dict[str, str], topic: str, since_ms: int | None) -> list[tuple[int, int, int]]:
    """(partition, start, end) of every partition of ``topic``, from ``since_ms`` when given
    (records are never stamped before their ``ts``, so no sample at or after it is skipped)."""
    from confluent_kafka.admin import AdminClient

    md = AdminClient({**client, "log_level": 0}).list_topics(topic, timeout=30)
    meta = md.topics.get(topic)
    if meta is None or meta.error is not None:
        raise RuntimeError(f"topic {topic} is not available: {meta.error if meta else 'unknown topic'}")
    tps = [(topic, p) for p in sorted(meta.partitions)]
    marks = kafka_io.watermarks(client, tps)
    starts = ({tp: lo for tp, (lo, _hi) in marks.items()} if since_ms is None
              else kafka_io.offsets_for_time(client, tps, since_ms, marks))
    return [(p, max(starts[(t, p)], marks[(t, p)][0]), marks[(t, p)][1]) for t, p in tps]


def _check_homes(table: Any, partition: int, partitions: int) -> None:
    import pyarrow.compute as pc

    from gregor.protocol.telemetry_records import home_partition

    if partitions == 1:
        return
    for group in pc.unique(table.column("group")).to_pylist():
        home = home_partition(group, partitions)
        if home != partition:
            raise SplitGroupError(group, partition, home)


def read_samples(client: dict[str, str], part: TelemetryPartition, window: int, since_ms: int | None,
                 until_ms: int | None, chunk_rows: int = EVALUATION_CHUNK_ROWS) -> Iterator[Any]:
    """One whole telemetry partition -> its evaluated samples (Arrow batches), evaluated in chunks
    of about ``chunk_rows`` samples (memory stays bounded however long the history)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    schema = kafka_io.arrow_schema_of(TELEMETRY_FIELDS)

    def chunks() -> Iterator[Any]:
        pending: list[Any] = []
        rows = 0
        batches = kafka_io.read_range_json(client, part.topic, part.partition, part.start, part.end, False,
                                           TELEMETRY_FIELDS)
        for batch in itertools.chain(batches, [None]):
            if batch is not None:
                pending.append(batch)
                rows += batch.num_rows
            if pending and (batch is None or rows >= chunk_rows):
                table = pa.Table.from_batches(pending, schema)
                pending, rows = [], 0
                keep = pc.and_(table.column("group").is_valid(), table.column("ts").is_valid())
                if since_ms is not None:
                    keep = pc.and_(keep, pc.greater_equal(table.column("ts"), since_ms))
                if until_ms is not None:
                    keep = pc.and_(keep, pc.less_equal(table.column("ts"), until_ms))
                table = table.filter(keep)
                _check_homes(table, part.partition, part.partitions)
                yield table.select(list(windows.INPUT_FIELDS))

    for table in windows.evaluate_stream(chunks(), window):
        yield from table.to_batches(max_chunksize=100_000)


class SamplesSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return SAMPLES_SOURCE

    def schema(self) -> str:
        return windows.OUTPUT_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return SamplesReader(dict(self.options))


class SamplesReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.client = client_settings(options)
        self.topic = options["topic"]
        self.window = int(options.get("window", str(rules.DEFAULT_WINDOW)))
        self.since_ms, self.until_ms = _int_option(options, "since"), _int_option(options, "until")
        self.chunk_rows = _int_option(options, "chunkRows") or EVALUATION_CHUNK_ROWS

    def partitions(self) -> list[InputPartition]:
        ranges = topic_ranges(self.client, self.topic, self.since_ms)
        return [TelemetryPartition(self.topic, p, s, e, len(ranges)) for p, s, e in ranges if e > s]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if not isinstance(partition, TelemetryPartition):
            return iter(())  # no data: Spark still runs one task with a placeholder partition
        return read_samples(self.client, partition, self.window, self.since_ms, self.until_ms, self.chunk_rows)


def decode_commits(pairs: Iterator[tuple[bytes | None, bytes | None]]) -> dict[str, list[Any]]:
    """``__consumer_offsets`` (key, value) pairs -> columns of the offset commits among them."""
    from gregor.protocol import consumer_offsets as records

    cols: dict[str, list[Any]] = {name: [] for name, _kind in COMMITS_FIELDS}
    group, topic, partition, offset = cols["group"], cols["topic"], cols["partition"], cols["offset"]
    commit_ts, metadata = cols["commit_ts"], cols["metadata"]
    for k, v in pairs:
        if k is None or v is None:
            continue
        try:
            key = records.decode_key(k)
            if not isinstance(key, records.OffsetCommitKey):
                continue
            value = records.decode_value(key, v)
        except records.RecordFormatError:
            continue
        assert isinstance(value, records.OffsetCommitValue)
        group.append(key.group)
        topic.append(key.topic)
        partition.append(key.partition)
        offset.append(value.offset)
        commit_ts.append(value.commit_timestamp)
        metadata.append(value.metadata)
    return cols


def read_commits(client: dict[str, str], part: RangePartition, until_ms: int | None) -> Iterator[Any]:
    import pyarrow as pa
    import pyarrow.compute as pc

    schema = kafka_io.arrow_schema_of(COMMITS_FIELDS)
    for msgs in kafka_io.message_chunks(client, part.topic, part.partition, part.start, part.end, False):
        batch = pa.RecordBatch.from_pydict(decode_commits((m.key(), m.value()) for m in msgs), schema=schema)
        if until_ms is not None:
            batch = batch.filter(pc.less_equal(batch.column("commit_ts"), until_ms))
        yield batch


class CommitsSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return COMMITS_SOURCE

    def schema(self) -> str:
        return COMMITS_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return CommitsReader(dict(self.options))


class CommitsReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.client = client_settings(options)
        self.topic = options["topic"]
        self.until_ms = _int_option(options, "until")
        self.min_partitions = _int_option(options, "minPartitions")

    def partitions(self) -> list[InputPartition]:
        ranges = topic_ranges(self.client, self.topic, None)
        starts = {(self.topic, p): s for p, s, _e in ranges}
        ends = {(self.topic, p): e for p, _s, e in ranges}
        return list(plan_ranges(starts, ends, self.min_partitions))

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if not isinstance(partition, RangePartition):
            return iter(())
        return read_commits(self.client, partition, self.until_ms)


_registering = threading.Lock()


def register(spark: Any) -> None:
    """Register both sources with the session, once (the job's threads may ask at the same time)."""
    with _registering:
        if getattr(spark, "_gregor_lag_sources", False):
            return
        spark.dataSource.register(SamplesSource)
        spark.dataSource.register(CommitsSource)
        spark._gregor_lag_sources = True


def client_settings(options: dict[str, str]) -> dict[str, str]:
    """The reader's client settings: the bootstrap servers and the ``kafka.*`` options (security)."""
    return {"bootstrap.servers": options["bootstrap.servers"],
            **{k[len("kafka."):]: v for k, v in options.items() if k.startswith("kafka.")}}
