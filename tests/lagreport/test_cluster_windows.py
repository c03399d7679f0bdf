"""The numpy evaluation (lagreport.windows) on telemetry written by three brokers, against the plain
statement of how the brokers' rows combine (tests/lagreport/cluster_telemetry.py), row by row:
rates within each broker's series, a new series' first counter when the key is established,
the status series across leadership moves, the members a status is judged by; and chunk by
chunk as a reader evaluates a long partition."""

from __future__ import annotations

import random
from collections import Counter

import pyarrow as pa
import pytest

from gregor.lagreport import rules, windows
from gregor.lagreport.fields import TELEMETRY_FIELDS
from gregor.spark.kafka_io import arrow_schema_of
from tests.lagreport.cluster_telemetry import cluster_history, reference

FIELDS = ("served_since", "served_messages", "served_bytes", "messages_per_s", "bytes_per_s", "members", "status",
          "window_samples", "latest", "next_series_ts", "next_status_ts")


def table_of(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=arrow_schema_of(TELEMETRY_FIELDS)).select(list(windows.INPUT_FIELDS))


def histories(rng: random.Random, keys: int, longest: int) -> list[dict]:
    rows = []
    for k in range(keys):
        rows += [{**r, "group": f"g{k % 7}", "topic": f"t{k % 3}", "partition": k}
                 for r in cluster_history(rng, rng.randint(1, longest))]
    return rows


@pytest.mark.parametrize("seed", range(6))
def test_numpy_evaluation_matches_the_cluster_statement(seed):
    rng = random.Random(seed)
    w = rng.choice([2, 3, 5, 10])
    rows = histories(rng, 40, 60)
    rng.shuffle(rows)
    want = reference(rows, w)
    got_rows = windows.evaluate_table(table_of(rows), w).to_pylist()
    assert len(got_rows) == len(rows)
    got = {(r["group"], r["topic"], r["partition"], r["broker"], r["ts"]): r for r in got_rows}
    assert got.keys() == want.keys()
    mismatches = [(k, name, got[k][name], e[name]) for k, e in want.items() for name in FIELDS
                  if got[k][name] != e[name]]
    assert not mismatches, mismatches[:5]
    statuses = Counter(e["status"] for e in want.values())
    assert set(statuses) == {None, *rules.PARTITION_STATUSES}, statuses
    # what the histories exercise: rows outside the status series, new series counted from their
    # first sample, members raised from another broker's row
    assert any(e["window_samples"] is None for e in want.values())
    firsts = {}
    for k in sorted(want, key=lambda k: k[-1]):
        firsts.setdefault(k[:4], k)
    assert any(want[k]["served_messages"] for k in firsts.values())
    assert any(got[k]["members"] != r["members"] for r in rows
               for k in [(r["group"], r["topic"], r["partition"], r["broker"], r["ts"])])


@pytest.mark.parametrize("seed", range(4))
def test_chunked_cluster_evaluation_equals_the_whole(seed):
    """A reader evaluates a partition a chunk at a time; with three brokers' series per key the
    carried rows (newest of each series, undecided rows, windows) give the whole-history result,
    whatever the chunk size, when rows arrive in ts order."""
    rng = random.Random(100 + seed)
    w = rng.choice([2, 3, 5, 10])
    rows = histories(rng, 12, 80)
    rows.sort(key=lambda r: r["ts"])  # arrival order
    table = table_of(rows)
    whole = Counter(tuple(r.values()) for r in windows.evaluate_table(table, w).to_pylist())
    for size in (1, 7, rng.randint(20, 200), len(rows)):
        chunks = [table.slice(i, size) for i in range(0, len(rows), size)]
        got = Counter(tuple(r.values()) for t in windows.evaluate_stream(iter(chunks), w) for r in t.to_pylist())
        assert got == whole, (size, (got - whole).most_common(2), (whole - got).most_common(2))


def test_one_broker_is_one_series():
    """Rows of one broker are one series: the same result with any broker id, and with none."""
    rng = random.Random(5)
    rows = [{**r, "broker": 0, "group": "g", "topic": "t", "partition": 0} for r in cluster_history(rng, 50)]
    base = windows.evaluate_table(table_of(rows), 4).drop_columns(["broker"]).to_pylist()
    for broker in (7, None):
        other = windows.evaluate_table(table_of([{**r, "broker": broker} for r in rows]), 4)
        assert other.drop_columns(["broker"]).to_pylist() == base
