"""The ``gregor`` data source (PySpark's Python data source API).

Batch reads plan one input partition per topic-partition offset range (split further with
``minPartitions``); streaming reads keep ``{"topic": {"partition": offset}}`` in the checkpoint
(Spark's Kafka source format) plus a ``__gregor`` entry naming the consumer group to commit to.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from gregor.spark import kafka_io
from gregor.spark.options import SourceOptions, parse_options, value_fields

SCHEMA = ("key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
          "timestampType int, headers array<struct<key: string, value: binary>>")
META = kafka_io.META


class RangePartition(InputPartition):
    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        super().__init__((topic, partition, start, end))
        self.topic, self.partition, self.start, self.end = topic, partition, start, end


def plan_ranges(starts: dict[kafka_io.TP, int], ends: dict[kafka_io.TP, int], min_partitions: int | None
                ) -> list[RangePartition]:
    ranges = [(tp, starts[tp], ends[tp]) for tp in sorted(ends) if ends[tp] > starts.get(tp, ends[tp])]
    total = sum(e - s for _tp, s, e in ranges)
    out: list[RangePartition] = []
    for (t, p), s, e in ranges:
        pieces = 1
        if min_partitions and total and len(ranges) < min_partitions:
            pieces = max(1, math.ceil(min_partitions * (e - s) / total))
        step = math.ceil((e - s) / pieces)
        for a in range(s, e, step):
            out.append(RangePartition(t, p, a, min(a + step, e)))
    return out


def _read_range(opts: SourceOptions, partition: InputPartition) -> Iterator[Any]:
    if not isinstance(partition, RangePartition):
        return iter(())  # nothing to read: Spark still runs one task with a placeholder partition
    if opts.value_fields is not None:
        return kafka_io.read_range_json(opts.client, partition.topic, partition.partition, partition.start,
                                        partition.end, opts.fail_on_data_loss, opts.value_fields)
    return kafka_io.read_range_arrow(opts.client, partition.topic, partition.partition, partition.start,
                                     partition.end, opts.fail_on_data_loss)


class GregorDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "gregor"

    def schema(self) -> str:
        fields = value_fields(self.options)
        return SCHEMA if fields is None else ", ".join(f"`{n}` {t}" for n, t in fields)

    def reader(self, schema: StructType) -> DataSourceReader:
        return BatchReader(parse_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StreamReader(parse_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return Writer(parse_options(self.options, streaming=False, writing=True))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return StreamWriter(parse_options(self.options, streaming=True, writing=True))


def _starting(opts: SourceOptions, tps: list[kafka_io.TP], marks: dict[kafka_io.TP, tuple[int, int]]
              ) -> dict[kafka_io.TP, int]:
    if opts.starting_timestamp is not None:
        return kafka_io.offsets_for_time(opts.client, tps, opts.starting_timestamp, marks)
    return kafka_io.resolve(opts.starting, tps, marks, "startingOffsets")


class BatchReader(DataSourceReader):
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts

    def partitions(self) -> list[RangePartition]:
        tps = kafka_io.discover(self.opts)
        marks = kafka_io.watermarks(self.opts.client, tps)
        starts = _starting(self.opts, tps, marks)
        ends = kafka_io.resolve(self.opts.ending, tps, marks, "endingOffsets")
        for tp in tps:
            lo = marks[tp][0]
            if starts[tp] < lo and self.opts.fail_on_data_loss:
                raise kafka_io.DataLossError(f"{tp[0]}-{tp[1]}: starting offset {starts[tp]} is below the log start "
                                             f"{lo}; set failOnDataLoss=false to skip")
            starts[tp] = max(starts[tp], lo)
        return plan_ranges(starts, ends, self.opts.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read_range(self.opts, partition)


class StreamReader(DataSourceStreamReader):
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts

    def _meta(self) -> dict[str, Any]:
        return {"groupId": self.opts.group_id or "", "bootstrap": self.opts.client["bootstrap.servers"]}

    def initialOffset(self) -> dict[str, Any]:
        tps = kafka_io.discover(self.opts)
        marks = kafka_io.watermarks(self.opts.client, tps)
        return {**kafka_io.to_json(_starting(self.opts, tps, marks)), META: self._meta()}

    def getDefaultReadLimit(self) -> Any:
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

        if self.opts.max_offsets_per_trigger:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any], limit: Any) -> dict[str, Any]:
        tps = kafka_io.discover(self.opts)
        marks = kafka_io.watermarks(self.opts.client, tps)
        begin = kafka_io.from_json(start)
        latest = {tp: marks[tp][1] for tp in tps}
        for tp in tps:
            begin.setdefault(tp, marks[tp][0])  # a new partition is read from its beginning
        max_rows = getattr(limit, "max_rows", None)
        if max_rows:
            available = {tp: max(latest[tp] - begin[tp], 0) for tp in tps}
            total = sum(available.values())
            if total > max_rows:
                # share the limit in proportion to what each partition has, as Spark's Kafka source
                latest = {tp: begin[tp] + math.floor(max_rows * available[tp] / total) for tp in tps}
        return {**kafka_io.to_json(latest), META: self._meta()}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[RangePartition]:
        begin, stop = kafka_io.from_json(start), kafka_io.from_json(end)
        marks = kafka_io.watermarks(self.opts.client, list(stop))
        for tp in stop:
            lo = marks[tp][0]
            s = begin.get(tp, lo)
            if s < lo:
                if self.opts.fail_on_data_loss:
                    raise kafka_io.DataLossError(f"{tp[0]}-{tp[1]}: offsets {s}..{lo} were deleted before they were "
                                                 "read; set failOnDataLoss=false to skip them")
                s = lo
            begin[tp] = s
        gone = [tp for tp in begin if tp not in stop]
        if gone and self.opts.fail_on_data_loss:
            raise kafka_io.DataLossError(f"partitions disappeared (topic deleted?): {sorted(gone)}; "
                                         "set failOnDataLoss=false to continue without them")
        return plan_ranges(begin, stop, self.opts.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read_range(self.opts, partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Spark calls this only when it plans the next batch; group commits happen in
        GroupCommitListener when each batch completes (the last one included)."""


class Count(WriterCommitMessage):
    def __init__(self, rows: int) -> None:
        self.rows = rows


class Writer(DataSourceWriter):
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[Any]) -> Count:
        return Count(kafka_io.produce_rows(self.opts.client, self.opts.topic, iterator))


class StreamWriter(DataSourceStreamWriter):
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[Any]) -> Count:
        return Count(kafka_io.produce_rows(self.opts.client, self.opts.topic, iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        pass  # rows are acknowledged by the cluster in write(); nothing to finalise

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        pass  # Kafka has no way to take produced records back (at-least-once, like Spark's Kafka sink)
