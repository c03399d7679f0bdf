"""Random telemetry histories of one partition of a group, as real telemetry has them (missing
values, broker restarts that reset the counters, repeated timestamps), and the plain statement
of the window semantics they are evaluated against (held to ``rules.classify``)."""

from __future__ import annotations

import random

from gregor.lagreport import rules
from gregor.lagreport.rules import Sample, classify


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
