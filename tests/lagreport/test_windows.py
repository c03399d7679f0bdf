"""The numpy evaluation of the status rules (lagreport.windows) against a plain statement of the
same window semantics, sample by sample, on random histories with what real telemetry has:
missing values (a partition without a commit, an older broker's records), broker restarts
that reset the counters, repeated timestamps, several keys interleaved in any order; and
against rules.classify wherever a window has no missing values."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from gregor.lagreport import rules, windows
from gregor.lagreport.fields import TELEMETRY_FIELDS
from gregor.spark.kafka_io import arrow_schema_of
from tests.support.lag_histories import expected_status, history


def expected_rate(h: list[dict], i: int, counter: str) -> float | None:
    if i == 0:
        return None
    a, b = h[i - 1], h[i]
    secs = (b["ts"] - a["ts"]) / 1000
    delta = b[counter] - a[counter] if a["broker_start"] == b["broker_start"] and b[counter] >= a[counter] \
        else b[counter]
    return delta / secs if secs > 0 else None


@pytest.mark.parametrize("seed", range(8))
def test_numpy_evaluation_matches_the_rules(seed):
    rng = random.Random(seed)
    w = rng.choice([2, 3, 4, 7, 10])
    rows = []
    for g in range(120):
        for p in range(rng.randint(1, 3)):
            rows += [{**r, "group": f"g{g % 40}", "topic": f"t{g // 40}", "partition": p}
                     for r in history(rng, rng.randint(1, 25))]
    rng.shuffle(rows)
    out = windows.evaluate_table(pa.Table.from_pylist(rows, schema=arrow_schema_of(TELEMETRY_FIELDS))
                                 .select(list(windows.INPUT_FIELDS)), w)
    by_key: dict[tuple, list[dict]] = {}
    for r in sorted(rows, key=lambda r: (r["group"], r["topic"], r["partition"], r["ts"])):
        by_key.setdefault((r["group"], r["topic"], r["partition"]), []).append(r)
    seen, mismatches = set(), []
    got_rows = out.to_pylist()
    got_by_key: dict[tuple, list[dict]] = {}
    for r in got_rows:
        got_by_key.setdefault((r["group"], r["topic"], r["partition"]), []).append(r)
    assert sorted(got_by_key) == sorted(by_key) and len(got_rows) == len(rows)
    for key, h in by_key.items():
        evaluated = got_by_key[key]
        assert [r["ts"] for r in evaluated] == [r["ts"] for r in h]  # each key in time order
        for i, r in enumerate(evaluated):
            want = (expected_status(h, i, w), expected_rate(h, i, "messages"), expected_rate(h, i, "bytes"),
                    sum(x["committed"] is not None for x in h[max(0, i - w + 1) : i + 1]), h[i]["commit_ts"],
                    i == len(h) - 1)
            have = (r["status"], r["messages_per_s"], r["bytes_per_s"], r["window_samples"], r["last_commit_ts"],
                    r["latest"])
            seen.add(want[0])
            if have != want:
                mismatches.append((key, i, have, want))
    assert not mismatches, mismatches[:3]
    assert seen == {None, *rules.PARTITION_STATUSES}


def test_empty_and_too_small_windows():
    empty = arrow_schema_of(TELEMETRY_FIELDS).empty_table().select(list(windows.INPUT_FIELDS))
    assert windows.evaluate_table(empty, 5).num_rows == 0
    with pytest.raises(ValueError):
        windows.evaluate_table(empty, 1)


@pytest.mark.parametrize("seed", range(4))
def test_chunked_evaluation_equals_the_whole(seed):
    """A reader evaluates a long partition a chunk at a time, carrying each key's last samples:
    the result equals evaluating the whole history at once, whatever the chunk sizes (from one
    sample up to all), when samples arrive in time order as the broker writes them."""
    from collections import Counter

    rng = random.Random(seed)
    w = rng.choice([2, 3, 5, 10])
    rows = []
    for g in range(30):
        for p in range(rng.randint(1, 2)):
            rows += [{**r, "group": f"g{g}", "topic": "t", "partition": p} for r in history(rng, rng.randint(1, 40))]
    rows.sort(key=lambda r: r["ts"])  # arrival order
    table = pa.Table.from_pylist(rows, schema=arrow_schema_of(TELEMETRY_FIELDS)).select(list(windows.INPUT_FIELDS))
    whole = Counter(tuple(r.values()) for r in windows.evaluate_table(table, w).to_pylist())
    for size in (1, 7, rng.randint(20, 200), len(rows)):
        chunks = [table.slice(i, size) for i in range(0, len(rows), size)]
        got = Counter(tuple(r.values()) for t in windows.evaluate_stream(iter(chunks), w) for r in t.to_pylist())
        assert got == whole, (size, (got - whole).most_common(2), (whole - got).most_common(2))


def test_share_rows_count_redeliveries_per_broker_series_and_keep_their_columns():
    """A share-partition's ``redelivered`` counter becomes served_redelivered like ``messages``
    (a delta within a broker series, the counter itself after a restart); the share columns
    pass through."""
    base = {"group": "q", "topic": "t", "partition": 0, "broker": 1, "bytes": None, "log_end": 100, "lag": 10,
            "time_lag_s": 0.0, "state": "Stable", "members": 2, "commit_ts": None, "kind": "share", "stuck": 3,
            "in_flight": 4, "archived": 1, "dead_lettered": 1}
    rows = [{**base, "ts": 1000, "broker_start": 0, "messages": 10, "redelivered": 0, "committed": 80},
            {**base, "ts": 2000, "broker_start": 0, "messages": 30, "redelivered": 5, "committed": 85},
            {**base, "ts": 3000, "broker_start": 0, "messages": 50, "redelivered": 12, "committed": 90},
            {**base, "ts": 4000, "broker_start": 3500, "messages": 6, "redelivered": 2, "committed": 95}]
    table = pa.Table.from_pylist(rows, schema=arrow_schema_of(TELEMETRY_FIELDS)).select(list(windows.INPUT_FIELDS))
    out = windows.evaluate_table(table, 3).to_pylist()
    assert [r["served_redelivered"] for r in out] == [None, 5, 7, 2]
    assert [r["served_messages"] for r in out] == [None, 20, 20, 6]
    assert all((r["kind"], r["stuck"], r["in_flight"], r["archived"], r["dead_lettered"]) == ("share", 3, 4, 1, 1)
               for r in out)
