"""The status rules: the plain statement (rules.classify) on hand-made windows, and the Spark
job's evaluation (numpy over each group, after a shuffle by group) held to it on many random
histories in one Spark job."""

from __future__ import annotations

import random

from gregor.lagreport import rules
from gregor.lagreport.fields import TELEMETRY_SCHEMA
from gregor.lagreport.job import evaluate
from gregor.lagreport.rules import Sample, classify
from tests.spark.test_lag_windows import expected_status, history


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


def test_spark_evaluation_matches_the_rules(spark):
    """The job's shuffle path (evaluate) in Spark on 300 random histories with missing values and
    broker restarts, sample by sample against the window semantics (held to classify)."""
    rng = random.Random(7)
    w = 4
    samples, histories = [], {}
    for g in range(300):
        group = f"g{g}"
        # distinct times: the order of equal ones is not defined after a shuffle
        histories[group] = [{**r, "ts": r["ts"] + i} for i, r in enumerate(history(rng, rng.randint(1, 9)))]
        samples += [(r["ts"], r["broker"], r["broker_start"], group, "t", 0, r["messages"], r["bytes"], r["committed"],
                     r["log_end"], r["lag"], r["time_lag_s"], r["state"], r["members"], r["commit_ts"])
                    for r in histories[group]]
    tel = spark.createDataFrame(samples, TELEMETRY_SCHEMA)
    got: dict[str, list] = {}
    for r in sorted(evaluate(tel, w).collect(), key=lambda r: r["ts"]):
        got.setdefault(r["group"], []).append(r["status"])
    seen, mismatches = set(), []
    for group, h in histories.items():
        want = [expected_status(h, i, w) for i in range(len(h))]
        seen.update(want)
        if got[group] != want:
            mismatches.append((group, got[group], want))
    assert not mismatches, mismatches[:5]
    assert seen == {None, *rules.PARTITION_STATUSES}  # the random histories reach every status


def test_telemetry_values_that_are_not_records_are_skipped():
    import json

    from gregor.lagreport.fields import TELEMETRY_FIELDS
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
