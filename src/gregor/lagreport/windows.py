"""The status rules of :mod:`gregor.lagreport.rules` evaluated over whole Arrow tables with numpy:
no Python work per sample, so the Spark job runs them in its Python workers over the samples of
whole groups (the job clusters the samples by group first, see ``job.evaluate``).

Semantics, the same as the SQL window definition they replaced (and as ``rules.classify``): the
samples of one group/topic/partition ordered by ``ts``; each sample is evaluated over the window
of its last ``window`` samples; the previous sample gives the rates (a new ``broker_start`` or a
counter that went down means the broker restarted, so the counter itself is the delta); a sample
without a committed offset gets no status; nulls are skipped by the window's min/max/count.
``latest`` marks the newest sample of each group/topic/partition.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from gregor.lagreport import rules

KEY = ("group", "topic", "partition")
INPUT_FIELDS = (*KEY, "ts", "broker_start", "messages", "bytes", "committed", "log_end", "lag", "time_lag_s",
                "state", "members", "commit_ts")
OUTPUT_FIELDS = (("group", "string"), ("topic", "string"), ("partition", "int"), ("ts", "long"),
                 ("committed", "long"), ("log_end", "long"), ("lag", "long"), ("time_lag_s", "double"),
                 ("state", "string"), ("members", "int"), ("messages", "long"), ("bytes", "long"),
                 ("messages_per_s", "double"), ("bytes_per_s", "double"), ("last_commit_ts", "long"),
                 ("window_samples", "long"), ("status", "string"), ("latest", "boolean"))
OUTPUT_SCHEMA = ", ".join(f"{name} {kind}" for name, kind in OUTPUT_FIELDS)
_STATUS_CODES = (rules.OK, rules.WARNING, rules.STALL, rules.STOP, rules.REWIND)


def _int_column(table: Any, name: str) -> tuple[Any, Any]:
    """(int64 values with nulls as 0, validity mask) of a column."""
    import numpy as np
    import pyarrow.compute as pc

    col = table.column(name)
    values = pc.fill_null(col, 0).to_numpy().astype(np.int64, copy=False)
    valid = col.is_valid().to_numpy(zero_copy_only=False) if col.null_count else np.ones(len(col), dtype=bool)
    return values, valid


def _sliding(values: Any, start: Any, op: Callable[[Any, Any], Any]) -> Any:
    """``op`` (np.minimum / np.maximum) over ``values[start[i] .. i]`` for every ``i``, with a
    sparse table: O(n log w) for windows of up to w rows, however the rows split into keys."""
    import numpy as np

    n = len(values)
    index = np.arange(n)
    length = index - start + 1
    levels = [values]
    span = 1
    while span * 2 <= int(length.max(initial=1)):
        last = levels[-1]
        wider = last.copy()
        wider[span:] = op(last[span:], last[:-span])  # wider[i] covers [i - 2*span + 1, i]
        levels.append(wider)
        span *= 2
    table = np.stack(levels)
    level = np.frexp(length)[1] - 1  # floor(log2(length)), exact for integers
    return op(table[level, index], table[level, start + (1 << level) - 1])


def _count(flags: Any, start: Any) -> Any:
    """How many of ``flags[start[i] .. i]`` are set, for every ``i``."""
    import numpy as np

    sums = np.concatenate(([0], np.cumsum(flags, dtype=np.int64)))
    return sums[np.arange(1, len(flags) + 1)] - sums[start]


def evaluate_table(table: Any, window: int) -> Any:
    """Telemetry samples (an Arrow table with INPUT_FIELDS) -> the evaluated samples (OUTPUT_FIELDS),
    ordered by group, topic, partition and ts."""
    return _evaluate(table, window)[0]


def _evaluate(table: Any, window: int) -> tuple[Any, Any, Any]:
    """(evaluated samples in key and time order, the input row of each, whether each starts a key)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from gregor.spark.kafka_io import arrow_schema_of

    if window < 2:
        raise ValueError("the window needs at least 2 samples")
    n = table.num_rows
    schema = arrow_schema_of(OUTPUT_FIELDS)
    if n == 0:
        return schema.empty_table(), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool)
    codes = [pc.dictionary_encode(table.column(c), null_encoding="encode").combine_chunks().indices.to_numpy(
        zero_copy_only=False) for c in ("group", "topic")]
    part = pc.fill_null(table.column("partition").cast(pa.int64()), -(1 << 40)).to_numpy()
    ts_in = table.column("ts").to_numpy().astype(np.int64, copy=False)
    order = np.lexsort((ts_in, part, codes[1], codes[0]))
    t = table.take(pa.array(order))
    index = np.arange(n)
    g, tp, p = codes[0][order], codes[1][order], part[order]
    first = np.ones(n, dtype=bool)
    first[1:] = (g[1:] != g[:-1]) | (tp[1:] != tp[:-1]) | (p[1:] != p[:-1])
    key_start = np.maximum.accumulate(np.where(first, index, 0))
    has_prev = ~first

    def prev(values: Any) -> Any:
        out = np.empty_like(values)
        out[1:] = values[:-1]
        out[:1] = values[:1]
        return out

    ts = ts_in[order]
    start, start_ok = _int_column(t, "broker_start")
    secs = (ts - prev(ts)) / 1000.0
    timed = has_prev & (secs > 0)
    same_start = has_prev & start_ok & prev(start_ok) & (start == prev(start))

    def rate(counter: str) -> Any:
        c, ok = _int_column(t, counter)
        since = same_start & ok & prev(ok) & (c >= prev(c))
        delta = np.where(since, c - prev(c), c)
        valid = timed & ok
        return pa.array(np.where(valid, delta / np.where(valid, secs, 1.0), 0.0), mask=~valid)

    committed, c_ok = _int_column(t, "committed")
    lag, lag_ok = _int_column(t, "lag")
    steps_back = has_prev & prev(c_ok) & c_ok
    rewind_step = steps_back & (committed < prev(committed))
    lag_down_step = has_prev & prev(lag_ok) & lag_ok & (lag < prev(lag))

    w_start = np.maximum(index - (window - 1), key_start)
    s_start = np.maximum(index - (window - 2), key_start)
    window_samples = _count(c_ok, w_start)
    big, small = np.iinfo(np.int64).max, np.iinfo(np.int64).min
    min_lag = _sliding(np.where(lag_ok, lag, big), w_start, np.minimum)
    lag_zero = min_lag == 0  # all-null windows keep the sentinel
    min_c = _sliding(np.where(c_ok, committed, big), w_start, np.minimum)
    max_c = _sliding(np.where(c_ok, committed, small), w_start, np.maximum)
    rewound = _count(rewind_step, s_start) > 0
    lag_went_down = _count(lag_down_step, s_start) > 0
    commit_ts, commit_ok = _int_column(t, "commit_ts")
    committed_in_window = commit_ok & (commit_ts >= ts[w_start])
    members, _members_ok = _int_column(t, "members")  # null members count as none

    code = np.select([(window_samples < 2) | lag_zero, rewound, ~committed_in_window & (members == 0),
                      min_c == max_c, ~lag_went_down], [0, 4, 3, 2, 1], default=0)
    status = pa.DictionaryArray.from_arrays(pa.array(code.astype(np.int8), mask=~c_ok),
                                            pa.array(_STATUS_CODES)).cast(pa.string())
    columns = {name: t.column(name) for name in ("group", "topic", "partition", "ts", "committed", "log_end", "lag",
                                                  "time_lag_s", "state", "members", "messages", "bytes")}
    latest = np.ones(n, dtype=bool)
    latest[:-1] = first[1:]  # the next row starts another key
    columns.update(messages_per_s=rate("messages"), bytes_per_s=rate("bytes"), last_commit_ts=t.column("commit_ts"),
                   window_samples=pa.array(window_samples), status=status, latest=pa.array(latest))
    return pa.Table.from_arrays([columns[name].cast(schema.field(name).type) for name, _ in OUTPUT_FIELDS],
                                schema=schema), order, first


def evaluate_stream(chunks: Iterable[Any], window: int) -> Iterator[Any]:
    """Evaluate one reader's samples chunk by chunk (Arrow tables with INPUT_FIELDS, in arrival
    order) in memory bounded by a chunk plus ``window`` samples per key: every key carries its
    last ``window`` samples into the next chunk, the newest of them not yet emitted (it is
    emitted by a later chunk, or at the end flagged ``latest``), the others as the window's
    context. Each sample is so evaluated with the samples that arrived before it, which is the
    whole-history result when each key's samples arrive in ``ts`` order (the broker writes them
    so)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    carry = None  # INPUT_FIELDS + _context: the carried samples
    for chunk in chunks:
        if not chunk.num_rows:
            continue
        rows = chunk.append_column("_context", pa.array(np.zeros(chunk.num_rows, dtype=bool)))
        if carry is not None:
            rows = pa.concat_tables([carry, rows])
        out, order, first = _evaluate(rows.select(list(INPUT_FIELDS)), window)
        n = len(order)
        last = np.ones(n, dtype=bool)
        last[:-1] = first[1:]
        key_end = np.flatnonzero(last)[np.cumsum(first) - 1]
        from_end = key_end - np.arange(n)
        context = rows.column("_context").to_numpy(zero_copy_only=False)[order]
        pending = from_end == 0
        emit = ~context & ~pending
        if emit.any():
            yield out.filter(pa.array(emit))
        kept = from_end < window
        carry = rows.take(pa.array(order[kept]))
        carry = carry.set_column(carry.schema.get_field_index("_context"), "_context", pa.array(~pending[kept]))
    if carry is not None:  # the newest sample of every key, with its window as context
        out, order, _first = _evaluate(carry.select(list(INPUT_FIELDS)), window)
        context = carry.column("_context").to_numpy(zero_copy_only=False)[order]
        yield out.filter(pc.invert(pa.array(context)))


def evaluate_batches(batches: Iterable[Any], window: int) -> Iterator[Any]:
    """mapInArrow body: every batch of one Spark partition (whole groups) -> evaluated batches."""
    import pyarrow as pa

    tables = [pa.Table.from_batches([b]) for b in batches if b.num_rows]
    if tables:
        table = pa.concat_tables(tables).select(list(INPUT_FIELDS))
        yield from evaluate_table(table, window).to_batches(max_chunksize=100_000)
