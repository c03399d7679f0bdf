"""Telemetry of a cluster for the lag report's tests: random histories of one group/topic/partition
as three brokers write them (each on its own timer, leadership moves, follower reads, restarts,
leaders without a commit to report, brokers that report no members), and the plain statement
of how the report combines them (the docstring of gregor.lagreport.windows), row by row."""

from __future__ import annotations

import random
from typing import Any

from tests.support.lag_histories import expected_status

BROKERS = (0, 1, 2)


def cluster_history(rng: random.Random, intervals: int, interval: int = 1000, t0: int = 1_000_000) -> list[dict]:
    """The rows the brokers write for one key over ``intervals`` intervals, in ts order."""
    phase = {b: rng.randrange(interval) for b in BROKERS}
    start = {b: 1 + b for b in BROKERS}
    served: dict[int, int | None] = dict.fromkeys(BROKERS)  # counter since the broker's start, None: not served
    leader = rng.choice(BROKERS)
    server = leader
    committed = rng.randint(0, 5)
    log_end = committed + rng.randint(0, 10)
    last_commit, members = None, rng.choice([0, 1, 3])
    jitter = interval // 20
    events = sorted((t0 + i * interval + phase[b] + rng.randint(-jitter, jitter), b)
                    for i in range(intervals) for b in BROKERS)
    rows = []
    for ts, b in events:
        r = rng.random()
        if r < 0.03:  # leadership moves
            leader = rng.choice([x for x in BROKERS if x != leader])
            server = leader
        elif r < 0.06:  # follower reads from another replica, or back to the leader
            server = rng.choice(BROKERS)
        elif r < 0.07:  # a broker restarts: counters begin again; a leader hands over
            x = rng.choice(BROKERS)
            served[x], start[x] = None, ts - rng.randint(0, interval)
            if x == leader:
                leader = server = rng.choice([y for y in BROKERS if y != x])
        n = rng.choice([0, 0, 1, 5, 20])
        log_end += rng.choice([0, 1, 5, 20])
        if n:
            served[server] = (served[server] or 0) + n
        move = rng.random()
        if move < 0.08:
            committed = max(0, committed - rng.randint(1, 5))
        elif move < 0.5:
            committed = min(log_end, committed + rng.randint(0, 10))
        if rng.random() < 0.4:
            last_commit = ts - rng.randint(0, 300)
        if rng.random() < 0.05:
            members = rng.choice([0, 1, 2])
        if served[b] is None and b != leader:
            continue  # a broker writes the keys it served since its start, and those it leads
        lead = b == leader and rng.random() > 0.03  # now and then the leader has no commit to report
        count = served[b] or 0
        rows.append({"ts": ts, "broker": b, "broker_start": start[b], "messages": count, "bytes": count * 10,
                     "committed": committed if lead else None, "log_end": log_end if lead else None,
                     "lag": log_end - committed if lead else None, "time_lag_s": 0.0 if lead else None,
                     "state": "Stable", "members": members if rng.random() > 0.1 else 0,
                     "commit_ts": last_commit if lead else None})
    return rows


def reference(rows: list[dict], window: int) -> dict[tuple, dict[str, Any]]:
    """(group, topic, partition, broker, ts) -> the evaluated fields of that row, as the docstring
    of gregor.lagreport.windows states them (rows of one key sorted by ts, ties in input order)."""
    keys: dict[tuple, list[dict]] = {}
    for r in rows:
        keys.setdefault((r["group"], r["topic"], r["partition"]), []).append(r)
    out = {}
    for key, rs in keys.items():
        h = sorted(rs, key=lambda r: r["ts"])
        n = len(h)
        series: dict[int, list[int]] = {}
        for i, r in enumerate(h):
            series.setdefault(r["broker"], []).append(i)
        prev_in_series: list[int | None] = [None] * n
        next_in_series: list[int | None] = [None] * n
        spacing: list[int | None] = [None] * n
        for idxs in series.values():
            for j, i in enumerate(idxs):
                if j:
                    prev_in_series[i] = idxs[j - 1]
                    next_in_series[idxs[j - 1]] = i
                gap = h[i]["ts"] - h[idxs[j - 1]]["ts"]
                if j >= 2 and gap > 0:
                    spacing[i] = gap  # a series seen three times: the key's interval
        latest_spacing, spacing_so_far = None, []
        for i in range(n):
            latest_spacing = spacing[i] if spacing[i] is not None else latest_spacing
            spacing_so_far.append(latest_spacing)
        committed_at = [i for i in range(n) if h[i]["committed"] is not None]
        member = []
        for i, r in enumerate(h):
            if r["committed"] is not None:
                member.append(True)
                continue
            after = [j for j in committed_at if j > i]
            before = [j for j in committed_at if j < i]
            if after and after[0] - i <= window:
                status_broker = h[after[0]]["broker"]
            elif before:
                status_broker = h[before[-1]]["broker"]
            else:
                status_broker = r["broker"]
            member.append(r["broker"] == status_broker)
        members = []
        for i, r in enumerate(h):
            own = r["members"] or 0
            if r["committed"] is None:
                members.append(own)
                continue
            before = [j for j in committed_at if j < i]
            lo = max(before[-1] + 1 if before else 0, i - window + 1, 0)
            members.append(max([own] + [h[j]["members"] or 0 for j in range(lo, i) if h[j]["broker"] != r["broker"]]))
        status_series = [i for i in range(n) if member[i]]
        evaluated = [{**h[i], "members": members[i]} for i in status_series]
        place = {i: j for j, i in enumerate(status_series)}
        for i, r in enumerate(h):
            e: dict[str, Any] = {}
            p = prev_in_series[i]
            for counter in ("messages", "bytes"):
                c = r[counter]
                if p is not None:
                    a = h[p]
                    secs = (r["ts"] - a["ts"]) / 1000.0
                    delta = c - a[counter] if a["broker_start"] == r["broker_start"] and c >= a[counter] else c
                    e[f"served_{counter}"] = delta
                    e[f"{counter}_per_s"] = delta / secs if secs > 0 else None
                    e["served_since"] = a["ts"]
                else:
                    est = spacing_so_far[i - 1] if i else None
                    if est:
                        since_start = r["ts"] - r["broker_start"]
                        span = min(est, since_start) if since_start > 0 else est
                        e[f"served_{counter}"] = c
                        e[f"{counter}_per_s"] = c / (span / 1000.0)
                        e["served_since"] = r["ts"] - span
                    else:
                        e[f"served_{counter}"] = e[f"{counter}_per_s"] = e["served_since"] = None
            e["next_series_ts"] = h[next_in_series[i]]["ts"] if next_in_series[i] is not None else None
            e["members"] = members[i] if members[i] != (r["members"] or 0) else r["members"]
            if member[i]:
                j = place[i]
                e["status"] = expected_status(evaluated, j, window)
                e["window_samples"] = sum(x["committed"] is not None for x in evaluated[max(0, j - window + 1) : j + 1])
                e["latest"] = j == len(evaluated) - 1
                e["next_status_ts"] = evaluated[j + 1]["ts"] if j + 1 < len(evaluated) else None
            else:
                e.update(status=None, window_samples=None, latest=False, next_status_ts=None)
            out[(*key, r["broker"], r["ts"])] = e
    return out
