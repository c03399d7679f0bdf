"""The status rules: the plain statement (rules.classify) on hand-made windows, and the Spark
job's evaluation (numpy over each group, after a shuffle by group) held to it on many random
histories in one Spark job."""

from __future__ import annotations

import random

from gregor.lagreport import rules
from gregor.lagreport.job import TELEMETRY_SCHEMA, evaluate
from gregor.lagreport.rules import Sample, classify


def window(committed: list[int], lag: list[int], members: int = 1, commits_at: list[int] | None = None,
           step: int = 1000) -> list[Sample]:
    out, last = [], None
    for i, (c, g) in enumerate(zip(committed, lag, strict=True)):
        ts = i * step
        if commits_at is None or i in commits_at:
            last = ts
        out.append(Sample(ts, c, g, members, last))
    return out


def test_lag_zero_anywhere_is_ok():
    assert classify(window([5, 5, 5], [3, 0, 9], members=0, commits_at=[])) == rules.OK


def test_rewind_comes_first():
    assert classify(window([10, 4, 4], [2, 8, 9], members=0, commits_at=[])) == rules.REWIND


def test_stop_needs_no_commit_and_no_members():
    assert classify(window([5, 5, 5], [1, 2, 3], members=0, commits_at=[])) == rules.STOP
    assert classify(window([5, 5, 5], [1, 2, 3], members=2, commits_at=[])) == rules.STALL  # alive, stuck
    assert classify(window([5, 5, 5], [1, 2, 3], members=0)) == rules.STALL  # still committing, same offset


def test_slow_consumer_is_a_warning_and_catching_up_is_ok():
    assert classify(window([1, 2, 3], [5, 6, 6])) == rules.WARNING
    assert classify(window([1, 2, 3], [5, 6, 4])) == rules.OK


def test_one_sample_is_ok():
    assert classify(window([5], [7], members=0, commits_at=[])) == rules.OK


def test_group_status_is_the_worst_partition():
    assert rules.group_status([rules.OK, rules.WARNING]) == rules.WARNING
    assert rules.group_status([rules.WARNING, rules.STOP]) == rules.ERROR
    assert rules.group_status([rules.OK]) == rules.OK


def random_history(rng: random.Random, n: int) -> tuple[list[dict], list[int]]:
    """Telemetry samples (every 1000 ms) and commit times for one partition."""
    committed, log_end, members = rng.randint(0, 5), rng.randint(5, 10), rng.choice([0, 0, 1, 3])
    rows, commits = [], []
    for i in range(n):
        ts = 1_000_000 + i * 1000
        log_end += rng.choice([0, 0, 1, 3, 10])
        move = rng.random()
        if move < 0.1:
            committed = max(0, committed - rng.randint(1, 5))
        elif move < 0.55:
            committed = min(log_end, committed + rng.randint(0, 8))
        if rng.random() < 0.5:
            commits.append(ts - rng.randint(0, 999))
        if rng.random() < 0.1:
            members = rng.choice([0, 1, 2])
        rows.append({"ts": ts, "committed": committed, "log_end": log_end, "lag": log_end - committed,
                     "members": members})
    return rows, commits


def test_spark_evaluation_matches_the_rules(spark):
    rng = random.Random(7)
    w = 4
    samples, expected = [], {}
    for g in range(300):
        rows, commits = random_history(rng, rng.randint(1, 9))
        group = f"g{g}"
        for i, r in enumerate(rows):
            last = max((c for c in commits if c <= r["ts"]), default=None)
            sample = Sample(r["ts"], r["committed"], r["lag"], r["members"], last)
            expected[(group, r["ts"])] = sample
            samples.append((r["ts"], 0, 1, group, "t", 0, i, i * 10, r["committed"], r["log_end"], r["lag"], 0.0,
                            "Stable", r["members"], last))
    tel = spark.createDataFrame(samples, TELEMETRY_SCHEMA)
    got = {(r["group"], r["ts"]): r["status"] for r in evaluate(tel, w).collect()}
    by_group: dict[str, list[Sample]] = {}
    for (group, _ts), s in sorted(expected.items(), key=lambda kv: kv[0][1]):
        by_group.setdefault(group, []).append(s)
    mismatches = []
    seen = set()
    for group, history in by_group.items():
        for i, s in enumerate(history):
            want = classify(history[max(0, i - w + 1) : i + 1])
            seen.add(want)
            if got[(group, s.ts)] != want:
                mismatches.append((group, s.ts, got[(group, s.ts)], want))
    assert not mismatches, mismatches[:5]
    assert seen == set(rules.PARTITION_STATUSES)  # the random histories reach every status


def test_telemetry_values_that_are_not_records_are_skipped():
    import json

    from gregor.lagreport.job import TELEMETRY_FIELDS
    from gregor.spark.kafka_io import arrow_schema_of, json_batches

    def parse(values):
        return [r for b in json_batches([v for v in values if v is not None], arrow_schema_of(TELEMETRY_FIELDS))
                for r in b.to_pylist()]

    good = {"ts": 5, "broker": 0, "broker_start": 1, "group": "g", "topic": "t", "partition": 2, "messages": 9,
            "bytes": 90, "committed": 7, "log_end": 9, "lag": 2, "time_lag_s": 0.5, "state": "Stable", "members": 1,
            "commit_ts": 4, "added_later": True}
    older = {k: v for k, v in good.items() if k not in ("members", "commit_ts", "added_later")}
    rows = parse([json.dumps(good).encode(), None, json.dumps(older).encode()])
    assert rows[0] == {k: v for k, v in good.items() if k != "added_later"}
    assert rows[1]["members"] is None and rows[1]["commit_ts"] is None and rows[1]["lag"] == 2
    rows = parse([b"not json", json.dumps(good).encode(), b'{"ts": "soon"}', b"[1]"])
    assert [r["group"] for r in rows] == ["g"]
