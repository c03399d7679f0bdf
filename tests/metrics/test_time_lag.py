from gregor.metrics.time_lag import OffsetHistory


def test_time_lag_interpolates_between_samples():
    h = OffsetHistory()
    tp = ("t", 0)
    h.sample(tp, 0, 100.0)
    h.sample(tp, 100, 110.0)  # 10 messages a second
    h.sample(tp, 200, 120.0)
    assert h.time_lag(tp, 200, 200, 125.0) == 0.0  # caught up
    # committed 149: offset 150 was written about 115 s in; at 125 s it is ~10 s behind
    assert abs(h.time_lag(tp, 149, 200, 125.0) - 10.0) < 0.2
    # committed before the history began: at least as old as the first sample
    h2 = OffsetHistory()
    h2.sample(tp, 500, 50.0)
    h2.sample(tp, 600, 60.0)
    assert h2.time_lag(tp, 10, 600, 70.0) == 20.0


def test_idle_partitions_keep_bounded_history():
    h = OffsetHistory(size=10)
    tp = ("t", 0)
    for i in range(1000):
        h.sample(tp, 5, float(i))
    assert len(h._samples[tp]) == 2
    h.sample(tp, 6, 1000.0)
    assert h.time_lag(tp, 5, 6, 1001.0) == 1.0
