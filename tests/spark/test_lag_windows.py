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
from gregor.lagreport.rules import Sample, classify
from gregor.spark.kafka_io import arrow_schema_of


def history(rng: random.Random, n: int) -> list[dict]:
    committed, log_end, members = rng.randint(0, 5), rng.randint(5, 10), rng.choice([0, 0, 1, 3])
    start, consumed, last_commit = 1, 0, None
    rows = []
    for i in range(n):
        ts = 1_000_000 + i * 1000 - (1000 if i and rng.random() < 0.05 else 0)  # now and then a repeated ts
        log_end += rng.choice([0, 0, 1, 3, 10])
        move = rng.random()
        if move < 0.1:
            committed = max(0, committed - rng.randint(1, 5))
        elif move < 0.55:
            committed = min(log_end, committed + rng.randint(0, 8))
        if rng.random() < 0.5:
            last_commit = ts - rng.randint(0, 999)
        if rng.random() < 0.1:
            members = rng.choice([0, 1, 2])
        if rng.random() < 0.05:
            start, consumed = start + 1, 0  # the broker restarted: counters begin again
        consumed += rng.randint(0, 50)
        c = committed if rng.random() > 0.05 else None
        rows.append({"ts": ts, "broker": 0, "broker_start": start, "messages": consumed, "bytes": consumed * 10,
                     "committed": c, "log_end": log_end,
                     "lag": log_end - committed if c is not None and rng.random() > 0.05 else None,
                     "time_lag_s": 0.0, "state": "Stable", "members": members if rng.random() > 0.05 else None,
                     "commit_ts": last_commit})
    return rows


def expected_status(h: list[dict], i: int, w: int) -> str | None:
    win = h[max(0, i - w + 1) : i + 1]
    row = h[i]
    if row["committed"] is None:
        return None
    pairs = list(zip(win, win[1:], strict=False))
    lags = [x["lag"] for x in win if x["lag"] is not None]
    offsets = [x["committed"] for x in win if x["committed"] is not None]
    committed_in_window = row["commit_ts"] is not None and row["commit_ts"] >= win[0]["ts"]
    if len(offsets) < 2 or (lags and min(lags) == 0):
        status = rules.OK
    elif any(a["committed"] is not None and b["committed"] is not None and b["committed"] < a["committed"]
             for a, b in pairs):
        status = rules.REWIND
    elif not committed_in_window and not row["members"]:
        status = rules.STOP
    elif min(offsets) == max(offsets):
        status = rules.STALL
    elif not any(a["lag"] is not None and b["lag"] is not None and b["lag"] < a["lag"] for a, b in pairs):
        status = rules.WARNING
    else:
        status = rules.OK
    if all(x["committed"] is not None and x["lag"] is not None for x in win) and row["members"] is not None:
        assert status == classify([Sample(x["ts"], x["committed"], x["lag"], row["members"], row["commit_ts"])
                                   for x in win])
    return status


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
