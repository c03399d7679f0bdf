"""The status rules: the plain statement (rules.classify) on hand-made windows. The numpy
evaluation is held to it in test_windows.py, the Spark job's in tests/spark/test_lag_job.py."""

from __future__ import annotations

from gregor.lagreport import rules
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
