"""The status rules of :mod:`gregor.lagreport.rules` evaluated over whole Arrow tables with numpy:
no Python work per sample, so the Spark job runs them in its Python workers over the samples of
whole groups (the job clusters the samples by group first, see ``job.evaluate``).

Telemetry comes from every broker of a cluster (see :mod:`gregor.metrics.telemetry`), so one
group/topic/partition (a *key*) has one series of samples per writing broker, with unaligned
times. Each sample is evaluated twice:

- **Rates** within its *broker series* (the key's samples from one broker, in ``ts`` order): the
  delta of ``messages``/``bytes`` to the previous sample of the same series over the time between
  them; a new ``broker_start`` or a counter that went down means that broker restarted, so the
  counter itself is the delta. The delta is ``served_messages``/``served_bytes``: what that broker
  served the group since its previous sample. A series' first sample has no rate, except when the
  key is *established* (some series of it has already been seen three times): then the broker
  began serving the key inside the history (a broker writes every key it has served at every
  interval), its counter is all new, and it covers one interval (the key's latest spacing between
  samples, or less if the broker started since). ``served_since`` is where the span a sample's
  deltas and rates cover begins.
- **Status** within the key's *status series*: the samples that carry a committed offset (only the
  partition's leader writes it, so leadership moves do not break the series), plus the samples
  without one written by the *status broker*: the broker of the next committed sample when one
  follows within ``window`` samples of the key, else of the previous one, else the sample's own
  (with one broker: every sample). Over the status series ordered by ``ts``, as before: each
  sample is evaluated over the window of its last ``window`` samples; a sample without a
  committed offset gets no status; nulls are skipped by the window's min/max/count. The
  ``members`` a committed sample is judged by is the most any broker reported for the key since
  the previous committed sample (within the last ``window`` samples of the key): a broker that
  does not know the group reports 0. Samples outside the status series get no status and no
  ``window_samples``. ``latest`` marks the newest sample of each status series.

``next_series_ts`` (the next sample of the same broker series) and ``next_status_ts`` (the next
sample of the status series) let the job place each sample on a time grid without a sort.
With one broker the result is the same as evaluating each key's samples as one series.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from gregor.lagreport import rules

KEY = ("group", "topic", "partition")
INPUT_FIELDS = (*KEY, "broker", "ts", "broker_start", "messages", "bytes", "committed", "log_end", "lag",
                "time_lag_s", "state", "members", "commit_ts", "kind", "redelivered", "stuck", "in_flight", "archived",
                "dead_lettered")
# share groups' columns (see gregor.metrics.telemetry), passed through as read
SHARE_FIELDS = (("kind", "string"), ("stuck", "long"), ("in_flight", "long"), ("archived", "long"),
                ("dead_lettered", "long"))
OUTPUT_FIELDS = (("group", "string"), ("topic", "string"), ("partition", "int"), ("broker", "int"), ("ts", "long"),
                 ("committed", "long"), ("log_end", "long"), ("lag", "long"), ("time_lag_s", "double"),
                 ("state", "string"), ("members", "int"), ("messages", "long"), ("bytes", "long"),
                 ("served_since", "long"), ("served_messages", "long"), ("served_bytes", "long"),
                 ("messages_per_s", "double"), ("bytes_per_s", "double"), ("last_commit_ts", "long"),
                 ("window_samples", "long"), ("status", "string"), ("latest", "boolean"),
                 ("next_series_ts", "long"), ("next_status_ts", "long"), ("served_redelivered", "long"),
                 *SHARE_FIELDS)
OUTPUT_SCHEMA = ", ".join(f"{name} {kind}" for name, kind in OUTPUT_FIELDS)
_STATUS_CODES = (rules.OK, rules.WARNING, rules.STALL, rules.STOP, rules.REWIND)
# what a sample's evaluation fixes, carried with it between chunks (evaluate_stream): the series
# part once the sample has been seen, the status part once its membership is decided
_SERIES_FIXED = ("has_prev", "spacing", "members", "served_since", "served_since_ok", "messages_per_s",
                 "messages_per_s_ok", "bytes_per_s", "bytes_per_s_ok", "served_messages", "served_messages_ok",
                 "served_bytes", "served_bytes_ok", "served_redelivered", "served_redelivered_ok")
_STATUS_FIXED = ("member", "window_samples", "code")
_NEXT_FIXED = ("next_series", "next_series_ok", "next_status", "next_status_ok")
_FIXED = (*_SERIES_FIXED, *_STATUS_FIXED, *_NEXT_FIXED)


def _int_column(table: Any, name: str, fill: int = 0) -> tuple[Any, Any]:
    """(int64 values with nulls as ``fill``, validity mask) of a column."""
    import numpy as np
    import pyarrow.compute as pc

    col = table.column(name)
    values = pc.fill_null(col, fill).to_numpy().astype(np.int64, copy=False)
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


def _shift(values: Any) -> Any:
    """``values`` moved one row down (row 0 keeps its own value)."""
    import numpy as np

    out = np.empty_like(values)
    out[1:] = values[:-1]
    out[:1] = values[:1]
    return out


def _window_codes(first: Any, ts: Any, committed: Any, c_ok: Any, lag: Any, lag_ok: Any, commit_ts: Any,
                  commit_ok: Any, members: Any, window: int) -> tuple[Any, Any]:
    """The rules over series already in key and time order (``first`` starts a series): (status
    code per sample, index in _STATUS_CODES; committed samples in each window)."""
    import numpy as np

    n = len(ts)
    index = np.arange(n)
    key_start = np.maximum.accumulate(np.where(first, index, 0))
    has_prev = ~first
    steps_back = has_prev & _shift(c_ok) & c_ok
    rewind_step = steps_back & (committed < _shift(committed))
    lag_down_step = has_prev & _shift(lag_ok) & lag_ok & (lag < _shift(lag))

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
    committed_in_window = commit_ok & (commit_ts >= ts[w_start])
    code = np.select([(window_samples < 2) | lag_zero, rewound, ~committed_in_window & (members == 0),
                      min_c == max_c, ~lag_went_down], [0, 4, 3, 2, 1], default=0)
    return code.astype(np.int8), window_samples


def evaluate_table(table: Any, window: int) -> Any:
    """Telemetry samples (an Arrow table with INPUT_FIELDS) -> the evaluated samples (OUTPUT_FIELDS),
    ordered by group, topic, partition and ts."""
    return _evaluate(table, window)[0]


def _evaluate(table: Any, window: int, final: bool = True,
              fixed: dict[str, Any] | None = None) -> tuple[Any, Any, dict[str, Any]]:
    """(evaluated samples in key and time order, the input row of each, facts about each row in
    that order). ``fixed`` (from evaluate_stream, arrays in input order) holds what earlier
    evaluations fixed for carried rows: ``seen`` rows keep their series part, ``decided`` rows
    their status part. With ``final`` false, rows whose status membership depends on samples not
    yet read are marked undecided (they are all at the end of their key)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from gregor.spark.kafka_io import arrow_schema_of

    if window < 2:
        raise ValueError("the window needs at least 2 samples")
    n = table.num_rows
    schema = arrow_schema_of(OUTPUT_FIELDS)
    if n == 0:
        return schema.empty_table(), np.zeros(0, dtype=np.int64), {}
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
    last = np.ones(n, dtype=bool)
    last[:-1] = first[1:]
    key_id = np.cumsum(first) - 1
    key_start = np.flatnonzero(first)[key_id]
    key_end = np.flatnonzero(last)[key_id]
    ts = ts_in[order]
    broker, _broker_ok = _int_column(t, "broker", fill=-1)
    fx = {name: values[order] for name, values in fixed.items()} if fixed is not None else None
    seen = fx["seen"] if fx is not None else np.zeros(n, dtype=bool)

    # -- rates, within each broker series: a stable sort keeps each series in time order
    so = np.lexsort((broker, key_id))
    sk, sb = key_id[so], broker[so]
    s_first = np.ones(n, dtype=bool)
    s_first[1:] = (sk[1:] != sk[:-1]) | (sb[1:] != sb[:-1])
    s_last = np.ones(n, dtype=bool)
    s_last[:-1] = s_first[1:]
    has_prev = ~s_first
    ts_s = ts[so]
    gap = ts_s - _shift(ts_s)
    secs = gap / 1000.0
    timed = has_prev & (secs > 0)
    start, start_ok = _int_column(t, "broker_start")
    start, start_ok = start[so], start_ok[so]
    same_start = has_prev & start_ok & _shift(start_ok) & (start == _shift(start))
    # the key's spacing between samples, from series seen at least three times (carried rows: as fixed)
    had_prev = has_prev if fx is None else np.where(seen[so], fx["has_prev"][so], has_prev)
    own = np.full(n, -1, dtype=np.int64)
    own[so] = np.where(has_prev & _shift(had_prev) & (gap > 0), gap, -1)  # a series' third sample or later
    if fx is not None:
        own = np.where(seen, fx["spacing"], own)
    known = np.maximum.accumulate(np.where(own >= 0, index, -1))
    spacing = np.where(known >= key_start, own[np.maximum(known, 0)], -1)  # at or before each row
    spacing_before = np.where(first, -1, _shift(spacing))[so]
    new_series = s_first & (spacing_before > 0)
    span = np.where(start_ok & (ts_s - start > 0), np.minimum(spacing_before, ts_s - start), spacing_before)

    def counter(name: str) -> tuple[Any, Any, Any, Any]:
        """(served, served valid, rate, rate valid) in key order."""
        c, ok = _int_column(t, name)
        c, ok = c[so], ok[so]
        since = same_start & ok & _shift(ok) & (c >= _shift(c))
        delta = np.where(since, c - _shift(c), c)
        rate_secs = np.where(has_prev, secs, span / 1000.0)
        rate_ok = ok & (timed | (new_series & (span > 0)))
        rate = np.where(rate_ok, delta / np.where(rate_ok, rate_secs, 1.0), 0.0)
        out = [np.empty_like(a) for a in (delta, ok, rate, rate_ok)]
        for o, a in zip(out, (delta, ok & (has_prev | new_series), rate, rate_ok), strict=True):
            o[so] = a
        return out[0], out[1], out[2], out[3]

    served_messages, served_messages_ok, messages_per_s, messages_per_s_ok = counter("messages")
    served_bytes, served_bytes_ok, bytes_per_s, bytes_per_s_ok = counter("bytes")
    served_redelivered, served_redelivered_ok, _rate, _rate_ok = counter("redelivered")  # share groups
    served_since = np.empty(n, dtype=np.int64)  # where the span the deltas and rates cover begins
    served_since[so] = np.where(has_prev, _shift(ts_s), ts_s - span)
    served_since_ok = np.empty(n, dtype=bool)
    served_since_ok[so] = has_prev | (new_series & (span > 0))
    has_prev_k = np.empty(n, dtype=bool)
    has_prev_k[so] = has_prev

    # -- the members a committed sample is judged by: what other brokers reported since the last one
    committed, c_ok = _int_column(t, "committed")
    members, members_ok = _int_column(t, "members")  # null members count as none
    last_c = np.maximum.accumulate(np.where(c_ok, index, -1))
    prev_c = np.where(first, -1, _shift(last_c))
    lo = np.maximum(np.maximum(prev_c + 1, index - (window - 1)), key_start)
    members_eff = members.copy()
    if len(np.unique(broker)) > 1:
        for b in np.unique(broker[c_ok]):
            others = _sliding(np.where(broker != b, members, -1), lo, np.maximum)
            members_eff = np.where(c_ok & (broker == b), np.maximum(members_eff, others), members_eff)

    series = {"has_prev": has_prev_k, "spacing": spacing, "members": members_eff, "served_since": served_since,
              "served_since_ok": served_since_ok,
              "messages_per_s": messages_per_s, "messages_per_s_ok": messages_per_s_ok, "bytes_per_s": bytes_per_s,
              "bytes_per_s_ok": bytes_per_s_ok, "served_messages": served_messages,
              "served_messages_ok": served_messages_ok, "served_bytes": served_bytes,
              "served_bytes_ok": served_bytes_ok, "served_redelivered": served_redelivered,
              "served_redelivered_ok": served_redelivered_ok}
    if fx is not None:
        series = {name: np.where(seen, fx[name], values) for name, values in series.items()}

    # -- the status series: committed samples and the status broker's samples without a commit
    nxt = np.minimum.accumulate(np.where(c_ok, index, n)[::-1])[::-1]
    next_ok = (nxt <= key_end) & (nxt - index <= window)
    status_broker = np.where(next_ok, broker[np.minimum(nxt, n - 1)],
                             np.where(last_c >= key_start, broker[np.maximum(last_c, 0)], broker))
    member = c_ok | (broker == status_broker)
    decided = np.ones(n, dtype=bool) if final else c_ok | next_ok | (key_end - index >= window)
    if fx is not None:
        member = np.where(fx["decided"], fx["member"], member)
        decided = decided | fx["decided"]

    mi = np.flatnonzero(member)
    mk = key_id[mi]
    m_first = np.ones(len(mi), dtype=bool)
    m_first[1:] = mk[1:] != mk[:-1]
    m_last = np.ones(len(mi), dtype=bool)
    m_last[:-1] = m_first[1:]
    lag, lag_ok = _int_column(t, "lag")
    commit_ts, commit_ok = _int_column(t, "commit_ts")
    m_code, m_window = _window_codes(m_first, ts[mi], committed[mi], c_ok[mi], lag[mi], lag_ok[mi], commit_ts[mi],
                                     commit_ok[mi], series["members"][mi], window)
    code = np.zeros(n, dtype=np.int8)
    code[mi] = m_code
    window_samples = np.zeros(n, dtype=np.int64)
    window_samples[mi] = m_window
    if fx is not None:
        code = np.where(fx["decided"], fx["code"], code)
        window_samples = np.where(fx["decided"], fx["window_samples"], window_samples)

    latest = np.zeros(n, dtype=bool)
    latest[mi[m_last]] = True
    # what follows a sample, once known, stays fixed: the rows that follow it may not be carried
    next_status = np.zeros(n, dtype=np.int64)
    next_status_ok = np.zeros(n, dtype=bool)
    next_status_known = np.zeros(n, dtype=bool)
    next_status[mi[:-1]] = ts[mi[1:]]
    next_status_ok[mi] = ~m_last
    next_status_known[mi[:-1]] = ~m_last[:-1] & decided[mi[:-1]] & decided[mi[1:]]
    next_series = np.zeros(n, dtype=np.int64)
    next_series[so[:-1]] = ts_s[1:]
    next_series_ok = np.empty(n, dtype=bool)
    next_series_ok[so] = ~s_last
    if fx is not None:
        next_series = np.where(fx["next_series_ok"], fx["next_series"], next_series)
        next_series_ok = next_series_ok | fx["next_series_ok"]
        next_status = np.where(fx["next_status_ok"], fx["next_status"], next_status)
        next_status_ok = next_status_ok | fx["next_status_ok"]
        next_status_known = next_status_known | fx["next_status_ok"]

    def masked(values: Any, valid: Any) -> Any:
        return pa.array(values, mask=~valid)

    status = pa.DictionaryArray.from_arrays(pa.array(code, mask=~(c_ok & member)),
                                            pa.array(_STATUS_CODES)).cast(pa.string())
    columns = {name: t.column(name) for name in ("group", "topic", "partition", "broker", "ts", "committed",
                                                  "log_end", "lag", "time_lag_s", "state", "messages", "bytes")}
    columns.update(
        members=masked(series["members"], members_ok | (series["members"] != members)),
        served_since=masked(series["served_since"], series["served_since_ok"]),
        served_messages=masked(series["served_messages"], series["served_messages_ok"]),
        served_bytes=masked(series["served_bytes"], series["served_bytes_ok"]),
        messages_per_s=masked(series["messages_per_s"], series["messages_per_s_ok"]),
        bytes_per_s=masked(series["bytes_per_s"], series["bytes_per_s_ok"]),
        last_commit_ts=t.column("commit_ts"), window_samples=masked(window_samples, member), status=status,
        latest=pa.array(latest), next_series_ts=masked(next_series, next_series_ok),
        next_status_ts=masked(next_status, next_status_ok),
        served_redelivered=masked(series["served_redelivered"], series["served_redelivered_ok"]),
        **{name: t.column(name) for name, _ in SHARE_FIELDS})
    out = pa.Table.from_arrays([columns[name].cast(schema.field(name).type) for name, _ in OUTPUT_FIELDS],
                               schema=schema)
    info = {**series, "member": member, "decided": decided, "window_samples": window_samples, "code": code,
            "next_series": next_series, "next_series_ok": next_series_ok, "next_status": next_status,
            "next_status_ok": next_status_known, "first": first, "key_end": key_end, "c_ok": c_ok,
            "series_last": ~next_series_ok}
    return out, order, info


def evaluate_stream(chunks: Iterable[Any], window: int) -> Iterator[Any]:
    """Evaluate one reader's samples chunk by chunk (Arrow tables with INPUT_FIELDS, in arrival
    order) in memory bounded by a chunk plus a few samples per key and per broker series. Rows
    carried into the next chunk: those whose result is not known yet (the newest sample of each
    broker series and of each status series, samples whose status membership waits for later
    samples), and as context the last ``window`` samples of each key and of its status series and
    its last committed sample. A carried row keeps what its first evaluation fixed (rates, spacing,
    members) and, once decided, its status. Each sample is so evaluated as in the whole history
    when each key's samples arrive in ``ts`` order (each broker writes its samples so; samples of
    brokers whose clocks or writes are out of step can arrive out of ``ts`` order across a chunk
    boundary, every million samples, and are then evaluated with the samples that arrived before
    them)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    carry: Any = None  # INPUT_FIELDS of the carried rows
    kept: dict[str, Any] = {}  # what is fixed about them (arrays in the carry's row order), and "context"
    for chunk in chunks:
        if not chunk.num_rows:
            continue
        k = chunk.num_rows
        blank = {"seen": np.zeros(k, dtype=bool), "decided": np.zeros(k, dtype=bool),
                 "context": np.zeros(k, dtype=bool)}
        rows = chunk.select(list(INPUT_FIELDS))
        if carry is None:
            fixed = {**blank, **{name: np.zeros(k, dtype=_dtype(name)) for name in _FIXED}}
        else:
            rows = pa.concat_tables([carry, rows])
            fixed = {name: np.concatenate([values, blank.get(name, np.zeros(k, dtype=values.dtype))])
                     for name, values in kept.items()}
        out, order, info = _evaluate(rows, window, final=False, fixed=fixed)
        n = len(order)
        index = np.arange(n)
        key_end, decided, member = info["key_end"], info["decided"], info["member"]
        context = fixed["context"][order]
        key_start = np.maximum.accumulate(np.where(info["first"], index, 0))
        dm = decided & member
        newest_dm = np.maximum.accumulate(np.where(dm, index, -1))[key_end]
        pending = ~decided | info["series_last"]
        pending[newest_dm[newest_dm >= key_start]] = True
        emit = ~context & ~pending
        if emit.any():
            yield out.filter(pa.array(emit))
        dm_total = np.cumsum(dm)
        recent_dm = dm & (dm_total[key_end] - dm_total < window)
        last_c = np.maximum.accumulate(np.where(info["c_ok"], index, -1))[key_end]
        keep = pending | recent_dm | (key_end - index < window)
        keep[last_c[last_c >= key_start]] = True
        carry = rows.take(pa.array(order[keep]))
        kept = {name: info[name][keep] for name in _FIXED}
        kept.update(seen=np.ones(int(keep.sum()), dtype=bool), decided=decided[keep], context=(context | emit)[keep])
    if carry is not None:  # everything still carried is decided now; emit what was not emitted
        out, order, _info = _evaluate(carry, window, final=True, fixed=kept)
        yield out.filter(pc.invert(pa.array(kept["context"][order])))


def _dtype(name: str) -> Any:
    import numpy as np

    if name in ("messages_per_s", "bytes_per_s"):
        return np.float64
    if name == "code":
        return np.int8
    if name in ("has_prev", "member") or name.endswith("_ok"):
        return bool
    return np.int64


def evaluate_batches(batches: Iterable[Any], window: int) -> Iterator[Any]:
    """mapInArrow body: every batch of one Spark partition (whole groups) -> evaluated batches."""
    import pyarrow as pa

    tables = [pa.Table.from_batches([b]) for b in batches if b.num_rows]
    if tables:
        table = pa.concat_tables(tables).select(list(INPUT_FIELDS))
        yield from evaluate_table(table, window).to_batches(max_chunksize=100_000)
