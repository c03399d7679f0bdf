"""Talking to the cluster with a real client (confluent-kafka): topic-partition discovery,
offset resolution on the driver, range reads and writes in the executors. The client handles
compressed batches, transaction markers and offset gaps of compacted topics.

Isolation: every consumer here reads with the client settings' ``isolation.level`` (the Spark
options set it, read_uncommitted unless ``kafka.isolation.level`` says otherwise; callers that
give none get librdkafka's read_committed). Under read_committed the high offset of
``watermarks`` is the last stable offset (ListOffsets with the isolation level), the client drops
aborted records, and its end-of-partition signal comes at the last stable offset; markers are
never delivered. The offsets they leave out are gaps, never data loss: only an offset below the
log start is (as in Spark's KafkaDataConsumer)."""

from __future__ import annotations

import datetime
import itertools
import time
from array import array
from collections.abc import Iterator
from typing import Any

from gregor.spark.options import EARLIEST, LATEST, OptionError, SourceOptions

TP = tuple[str, int]
UTC = datetime.UTC
READ_IDLE_TIMEOUT_S = 60.0
READ_CHUNK = 5000
# fetch.queue.backoff.ms: with librdkafka's default (1 s) a reader that holds a chunk while
# building its Arrow batch trips the fetch-queue threshold and stalls a second at a time (measured
# 167 MB/s against 950+ MB/s, bench/spark_read.py); with 0 librdkafka's fetcher thread spins while
# the queue is full and took a third of a lag-report reader's CPU; 5 ms costs neither.
READER_CONFIG = {"enable.partition.eof": True, "auto.offset.reset": "error", "fetch.max.bytes": 52428800,
                 "max.partition.fetch.bytes": 10485760, "queued.min.messages": 200000,
                 "fetch.queue.backoff.ms": 5}


class DataLossError(RuntimeError):
    pass


def _consumer(client: dict[str, str], **extra: Any) -> Any:
    from confluent_kafka import Consumer

    conf = {"group.id": "gregor-spark", "enable.auto.commit": False, "log_level": 3, **client, **extra}
    return Consumer(conf)


def discover(opts: SourceOptions) -> list[TP]:
    """The topic-partitions the options select, now (new partitions appear here)."""
    c = _consumer(opts.client)
    try:
        if opts.assign is not None:
            return sorted((t, p) for t, ps in opts.assign.items() for p in ps)
        md = c.list_topics(timeout=30)
        if opts.subscribe is not None:
            names = [t for t in opts.subscribe if t in md.topics and md.topics[t].error is None]
        else:
            assert opts.subscribe_pattern is not None
            names = [t for t in md.topics if opts.subscribe_pattern.fullmatch(t) and md.topics[t].error is None]
        return sorted((t, p) for t in names for p in md.topics[t].partitions)
    finally:
        c.close()


def watermarks(client: dict[str, str], tps: list[TP]) -> dict[TP, tuple[int, int]]:
    """(log start, latest) of each partition; latest is the high watermark, or the last stable
    offset for a read_committed client."""
    from confluent_kafka import TopicPartition

    c = _consumer(client)
    try:
        return {tp: c.get_watermark_offsets(TopicPartition(*tp), timeout=30, cached=False) for tp in tps}
    finally:
        c.close()


def offsets_for_time(client: dict[str, str], tps: list[TP], ts: int,
                     marks: dict[TP, tuple[int, int]]) -> dict[TP, int]:
    """The offset of each partition's first record stamped at or after ``ts``; its high watermark
    (from ``marks``) where there is none."""
    from confluent_kafka import TopicPartition

    c = _consumer(client)
    try:
        found = c.offsets_for_times([TopicPartition(t, p, ts) for t, p in tps], timeout=30)
        return {(f.topic, f.partition): f.offset if f.offset >= 0 else marks[(f.topic, f.partition)][1]
                for f in found}
    finally:
        c.close()


def resolve(spec: str | dict[str, dict[str, int]], tps: list[TP], marks: dict[TP, tuple[int, int]],
            name: str) -> dict[TP, int]:
    """Absolute offsets from 'earliest' / 'latest' / per-partition JSON (-2 earliest, -1 latest)."""
    out: dict[TP, int] = {}
    for tp in tps:
        lo, hi = marks[tp]
        if spec == "earliest":
            out[tp] = lo
        elif spec == "latest":
            out[tp] = hi
        else:
            assert isinstance(spec, dict)
            off = spec.get(tp[0], {}).get(str(tp[1]))
            if off is None:
                if tp[0] in spec:
                    raise OptionError(f"option {name}: partition {tp[1]} of {tp[0]} is missing")
                off = LATEST if name == "endingOffsets" else EARLIEST
            out[tp] = lo if off == EARLIEST else hi if off == LATEST else off
    return out


def to_json(offsets: dict[TP, int]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (t, p), o in sorted(offsets.items()):
        out.setdefault(t, {})[str(p)] = o
    return out


META = "__gregor"  # the checkpoint entry that is not a topic (the consumer group to commit to)


def from_json(data: dict[str, Any]) -> dict[TP, int]:
    return {(t, int(p)): int(o) for t, parts in data.items() if t != META for p, o in parts.items()}


def arrow_schema() -> Any:
    import pyarrow as pa

    return pa.schema([
        ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()),
        ("offset", pa.int64()), ("timestamp", pa.timestamp("us", tz="UTC")), ("timestampType", pa.int32()),
        ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
    ])


def read_range_arrow(client: dict[str, str], topic: str, partition: int, start: int, end: int,
                     fail_on_data_loss: bool) -> Iterator[Any]:
    """The same rows as Arrow record batches, one per chunk the client hands over: Spark takes
    them without converting row by row (measured in bench/spark_read.py)."""
    import pyarrow as pa

    schema = arrow_schema()
    header_type = schema.field("headers").type
    for msgs in message_chunks(client, topic, partition, start, end, fail_on_data_loss):
        n = len(msgs)
        stamps = [m.timestamp() for m in msgs]
        headers = [m.headers() for m in msgs]
        header_col = (pa.nulls(n, header_type) if not any(headers) else
                      pa.array([[{"key": k, "value": v} for k, v in h] if h else None for h in headers],
                               type=header_type))
        yield pa.RecordBatch.from_arrays([
            _binary_column([m.key() for m in msgs]),
            _binary_column([m.value() for m in msgs]),
            pa.array([topic] * n, pa.string()),
            pa.array([partition] * n, pa.int32()),
            pa.array([m.offset() for m in msgs], pa.int64()),
            pa.array([ts * 1000 if ts >= 0 else None for _t, ts in stamps], pa.timestamp("us", tz="UTC")),
            pa.array([0 if t == 1 else 1 if t == 2 else -1 for t, _ts in stamps], pa.int32()),
            header_col,
        ], schema=schema)


def arrow_schema_of(fields: tuple[tuple[str, str], ...]) -> Any:
    """An Arrow schema from (name, Spark type name) pairs: long, int, double, string, boolean."""
    import pyarrow as pa

    types = {"long": pa.int64(), "int": pa.int32(), "double": pa.float64(), "string": pa.string(),
             "boolean": pa.bool_()}
    return pa.schema([(name, types[kind]) for name, kind in fields])


def json_batches(values: list[bytes], schema: Any) -> Iterator[Any]:
    """JSON object values -> record batches of ``schema`` with Arrow's JSON reader (fields the
    schema lacks are ignored, missing ones are null). A value that is not such an object is
    skipped, as Spark's from_json would null it."""
    import json

    import pyarrow as pa
    import pyarrow.json as pj

    if not values:
        return
    parse = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    try:
        yield from pj.read_json(pa.BufferReader(b"\n".join(values)), parse_options=parse,
                                read_options=pj.ReadOptions(block_size=1 << 26, use_threads=False)).to_batches()
        return
    except (pa.ArrowInvalid, pa.ArrowTypeError):  # a bad value (or a raw newline): one value at a time
        pass
    good = []
    for v in values:
        try:
            row = json.loads(v)
            good.append(pa.Table.from_pylist([{k: row.get(k) for k in schema.names}], schema))
        except (ValueError, TypeError, AttributeError, pa.ArrowInvalid, pa.ArrowTypeError):
            continue
    if good:
        yield from pa.concat_tables(good).to_batches()


def read_range_json(client: dict[str, str], topic: str, partition: int, start: int, end: int,
                    fail_on_data_loss: bool, fields: tuple[tuple[str, str], ...]) -> Iterator[Any]:
    """valueFormat=json: the range's values parsed into the columns of ``fields`` in the reader
    itself (no key, timestamp or header columns built, no second trip through Python)."""
    schema = arrow_schema_of(fields)
    for msgs in message_chunks(client, topic, partition, start, end, fail_on_data_loss):
        yield from json_batches([v for v in (m.value() for m in msgs) if v is not None], schema)


def _binary_column(values: list[bytes | None]) -> Any:
    """An Arrow binary array built from its buffers: offsets and one joined data buffer.
    (pyarrow's own conversion of a list of bytes took 16 us per 1 KiB value here, 40x slower.)"""
    import pyarrow as pa

    n = len(values)
    nulls = values.count(None)
    if nulls == n:
        return pa.nulls(n, pa.binary())
    if not nulls:
        offsets = array("i", itertools.accumulate(map(len, values), initial=0))  # type: ignore[arg-type]
        return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets),
                                                      pa.py_buffer(b"".join(values))])  # type: ignore[arg-type]
    offsets = array("i", itertools.accumulate((0 if v is None else len(v) for v in values), initial=0))
    validity = pa.array([v is not None for v in values], pa.bool_()).buffers()[1]
    data = b"".join(v for v in values if v is not None)
    return pa.Array.from_buffers(pa.binary(), n, [validity, pa.py_buffer(offsets), pa.py_buffer(data)])


def message_chunks(client: dict[str, str], topic: str, partition: int, start: int, end: int,
                    fail_on_data_loss: bool) -> Iterator[list[Any]]:
    """Lists of messages with offsets in [start, end), as the client delivers them. Offsets it
    does not deliver (markers; aborted records under read_committed; compacted away) are skipped:
    the range is done at the first message at or past ``end`` or at the end of the partition."""
    from confluent_kafka import KafkaError, Message, TopicPartition

    if start >= end:
        return
    error_of = Message.error
    c = _consumer(client, **READER_CONFIG)
    try:
        c.assign([TopicPartition(topic, partition, start)])
        last_progress = time.monotonic()
        expected = start
        while True:
            msgs = c.consume(max(1, min(READ_CHUNK, end - expected)), 1.0)  # never wait for more than is left
            if not msgs:
                if time.monotonic() - last_progress > READ_IDLE_TIMEOUT_S:
                    raise TimeoutError(f"no data from {topic}-{partition} at offset {expected} for "
                                       f"{READ_IDLE_TIMEOUT_S:.0f} s (range {start}..{end})")
                continue
            last_progress = time.monotonic()
            last = msgs[-1]
            if last.error() is None and last.offset() < end and not any(map(error_of, msgs)):
                yield msgs  # the common case, without a Python step per message
                expected = last.offset() + 1
                if expected >= end:
                    return
                continue
            chunk = []
            done = False
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        done = True  # reached the high watermark: nothing below `end` is left
                        break
                    if err.code() == KafkaError._AUTO_OFFSET_RESET or err.code() == KafkaError.OFFSET_OUT_OF_RANGE:
                        if fail_on_data_loss:
                            raise DataLossError(f"{topic}-{partition}: offset {expected} is no longer available "
                                                "(deleted by retention?); set failOnDataLoss=false to skip")
                        lo, _hi = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
                        if lo >= end:
                            done = True
                            break
                        c.assign([TopicPartition(topic, partition, lo)])
                        break
                    raise RuntimeError(f"reading {topic}-{partition}: {err}")
                off = m.offset()
                if off >= end:
                    done = True
                    break
                chunk.append(m)
                expected = off + 1
                if off >= end - 1:
                    done = True
                    break
            if chunk:
                yield chunk
            if done:
                return
    finally:
        c.close()


def produce_rows(client: dict[str, str], default_topic: str | None, rows: Iterator[Any]) -> int:
    from confluent_kafka import Producer

    p = Producer({"linger.ms": 5, "enable.idempotence": True, "log_level": 3, **client})
    errors: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    n = 0
    for row in rows:
        d = row.asDict() if hasattr(row, "asDict") else dict(row)
        topic = d.get("topic") or default_topic
        if not topic:
            raise OptionError("a row has no topic: give a topic column or the option topic")
        kw: dict[str, Any] = {"on_delivery": on_delivery}
        if d.get("partition") is not None:
            kw["partition"] = int(d["partition"])
        if d.get("headers"):
            kw["headers"] = [(h["key"] if isinstance(h, dict) else h[0], h["value"] if isinstance(h, dict) else h[1])
                             for h in d["headers"]]
        value = d.get("value")
        key = d.get("key")
        while True:
            try:
                p.produce(topic, value=_bytes(value), key=_bytes(key), **kw)
                break
            except BufferError:
                p.poll(0.1)
        n += 1
        if n % 10000 == 0:
            p.poll(0)
    if p.flush(120):
        raise RuntimeError("timed out delivering rows")
    if errors:
        raise RuntimeError(f"{len(errors)} rows were not delivered: {errors[0]}")
    return n


def _bytes(v: Any) -> bytes | None:
    if v is None or isinstance(v, bytes):
        return v
    if isinstance(v, bytearray | memoryview):
        return bytes(v)
    return str(v).encode()


def commit_group(client: dict[str, str], group_id: str, offsets: dict[TP, int]) -> None:
    """Commit offsets to a consumer group as an assign-mode consumer would (generation -1)."""
    from confluent_kafka import TopicPartition

    c = _consumer(client, **{"group.id": group_id})
    try:
        c.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())], asynchronous=False)
    finally:
        c.close()
