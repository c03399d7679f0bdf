"""The lag report job's evaluation in Spark (numpy over each group, after a shuffle by group) held
to the plain statement of the rules on many random histories in one Spark job."""

from __future__ import annotations

import random

from gregor.lagreport import rules
from gregor.lagreport.fields import TELEMETRY_SCHEMA
from gregor.lagreport.job import evaluate
from tests.support.lag_histories import expected_status, history


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
                     r["log_end"], r["lag"], r["time_lag_s"], r["state"], r["members"], r["commit_ts"],
                     "consumer", None, None, None, None, None)
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
