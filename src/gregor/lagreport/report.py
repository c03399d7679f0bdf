"""The report over the job's tables: a self-contained HTML page with plots, and a summary.

The report reads the job's small tables (one row per group, per partition, per group and broker,
or per group and time bucket; of the samples only the Parquet footers) straight from Parquet, with
no further Spark jobs, and downsamples the plot data to at most ``BUCKETS`` points per line, so
the page stays small whatever the volume of telemetry.
"""

from __future__ import annotations

import datetime as dt
import html
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gregor.admin.output import format_table
from gregor.lagreport import charts, rules
from gregor.lagreport.job import STATUS_RANK, JobOptions

BUCKETS = 240
FOCUS_GROUPS = 8
TIMELINE_GROUPS = 20
FOCUS_PARTITIONS = 8
TABLE_ROWS = 200
GROUP_RANK = {rules.OK: 0, rules.WARNING: 1, rules.ERROR: 2}


@dataclass
class Summary:
    t0: int | None
    t1: int | None
    samples: int
    window: int
    groups: list[dict[str, Any]] = field(default_factory=list)  # worst first; served_by: brokers, first first
    top_lagging: list[dict[str, Any]] = field(default_factory=list)
    partitions: list[dict[str, Any]] = field(default_factory=list)  # not OK, worst first
    serving: list[dict[str, Any]] = field(default_factory=list)  # per group and broker, in the groups' order
    bucket_ms: int | None = None  # the timeline's grid
    shares: list[dict[str, Any]] = field(default_factory=list)  # share-partitions, worst first

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(rules.GROUP_STATUSES, 0)
        for g in self.groups:
            out[g["status"]] = out.get(g["status"], 0) + 1
        return out

    def as_json(self) -> dict[str, Any]:
        return {"from_ms": self.t0, "to_ms": self.t1, "samples": self.samples, "window": self.window,
                "bucket_ms": self.bucket_ms, "brokers": self.brokers(), "status_counts": self.counts(),
                "groups": self.groups, "top_lagging": self.top_lagging, "partitions_not_ok": self.partitions,
                "serving": self.serving, "share_partitions": self.shares}

    def brokers(self) -> list[int]:
        """The brokers that served consumption in the period."""
        return sorted({s["broker"] for s in self.serving if s["broker"] is not None})


def _read(path: Path, columns: list[str] | None = None) -> Any:
    """A table the job wrote, as Arrow (the report's inputs are small: one row per group, per
    partition, per group and broker, or per group and time bucket)."""
    import pyarrow.parquet as pq

    return pq.read_table(str(path), columns=columns)


def _ranked(table: Any, ranks: dict[str, int], *then: tuple[str, str]) -> Any:
    """Rows worst status first, then by ``then`` ((column, ascending|descending)), nulls last."""
    import pyarrow as pa
    import pyarrow.compute as pc

    rank = pa.array([ranks.get(s, 0) if s is not None else 0 for s in table.column("status").to_pylist()],
                    pa.int8())
    keyed = table.append_column("_r", rank)
    order = pc.sort_indices(keyed, sort_keys=[("_r", "descending", "at_end"), *((c, o, "at_end") for c, o in then)])
    return keyed.take(order).drop_columns(["_r"])


def _extent(path: Path) -> tuple[int, int | None, int | None]:
    """(rows, first ts, last ts) of the samples table, from the Parquet footers (Spark writes the
    column statistics), reading the ts column only where a footer lacks them."""
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    rows, lows, highs = 0, [], []
    for fragment in ds.dataset(str(path), format="parquet").get_fragments():
        groups = fragment.row_groups
        stats = [g.statistics.get("ts") if g.statistics else None for g in groups]
        if all(st is not None and "min" in st for st in stats):
            rows += sum(g.num_rows for g in groups)
            lows += [st["min"] for st in stats if st is not None]
            highs += [st["max"] for st in stats if st is not None]
        else:
            ts = fragment.to_table(columns=["ts"]).column("ts")
            rows += len(ts)
            if len(ts):
                bounds = pc.min_max(ts).as_py()
                lows.append(bounds["min"])
                highs.append(bounds["max"])
    return rows, min(lows, default=None), max(highs, default=None)


def serving_by_broker(path: Path, order: list[str]) -> list[dict[str, Any]]:
    """What each broker served each group (over its partitions), groups in ``order`` (others
    after), then brokers by when they began serving; brokers that served nothing are left out."""
    import pyarrow.compute as pc

    table = _read(path, ["group", "broker", "messages", "bytes", "first_served_ts", "last_served_ts"])
    table = table.filter(pc.or_(pc.greater(table.column("messages"), 0), pc.greater(table.column("bytes"), 0)))
    per = table.group_by(["group", "broker"]).aggregate([("messages", "sum"), ("bytes", "sum"),
                                                         ("first_served_ts", "min"), ("last_served_ts", "max")])
    rows = [{"group": r["group"], "broker": r["broker"], "messages": r["messages_sum"], "bytes": r["bytes_sum"],
             "first_served_ts": r["first_served_ts_min"], "last_served_ts": r["last_served_ts_max"]}
            for r in per.to_pylist()]
    totals: dict[str, int] = {}
    for r in rows:
        totals[r["group"]] = totals.get(r["group"], 0) + (r["messages"] or 0)
    for r in rows:
        r["share"] = (r["messages"] or 0) / totals[r["group"]] if totals[r["group"]] else None
    rank = {g: i for i, g in enumerate(order)}
    return sorted(rows, key=lambda r: (rank.get(r["group"], len(rank)), r["group"],
                                       r["first_served_ts"] if r["first_served_ts"] is not None else 1 << 62,
                                       r["broker"] if r["broker"] is not None else -1))


def summarise(paths: dict[str, Path], opts: JobOptions) -> Summary:
    import pyarrow.compute as pc

    samples, first_ts, last_ts = _extent(paths["samples"])
    bounds = {"min": first_ts, "max": last_ts}
    steps = _read(paths["group_timeline"], ["bucket_ms"]).column("bucket_ms")
    bucket_ms = steps[0].as_py() if len(steps) else None
    keep = ["group", "status", "partitions", "total_lag", "max_time_lag_s", "messages_per_s", "members", "state",
            "worst_partition", "worst_partition_status", "last_seen", "last_commit_ts"]
    groups = _ranked(_read(paths["group_status"], keep), GROUP_RANK, ("total_lag", "descending"),
                     ("group", "ascending"))
    partitions = _read(paths["partition_status"], ["group", "topic", "partition", "status", "committed", "log_end",
                                                   "lag", "time_lag_s", "members", "ts", "last_commit_ts"])
    partitions = partitions.filter(pc.not_equal(partitions.column("status"), rules.OK))
    partitions = _ranked(partitions, STATUS_RANK, ("lag", "descending")).slice(0, TABLE_ROWS)
    top = _read(paths["top_lagging"], keep)
    top = top.take(pc.sort_indices(top, sort_keys=[("total_lag", "descending", "at_end"),
                                                   ("max_time_lag_s", "descending", "at_end"),
                                                   ("group", "ascending", "at_end")]))
    group_rows = groups.to_pylist()
    serving = serving_by_broker(paths["broker_serving"], [g["group"] for g in group_rows])
    served_by: dict[str, list[int]] = {}
    for r in serving:
        served_by.setdefault(r["group"], []).append(r["broker"])
    for g in group_rows:
        g["served_by"] = served_by.get(g["group"], [])
    shares = _ranked(_read(paths["share_partitions"]), STATUS_RANK, ("lag", "descending"), ("group", "ascending"),
                     ("topic", "ascending"), ("partition", "ascending")).slice(0, TABLE_ROWS)
    return Summary(bounds["min"], bounds["max"], samples, opts.window, group_rows, top.to_pylist(),
                   partitions.to_pylist(), serving, bucket_ms, shares.to_pylist())


def chart_frames(paths: dict[str, Path], summary: Summary) -> dict[str, Any]:
    """Downsampled pandas frames for the plots (at most BUCKETS points per line)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    t0, t1 = summary.t0 or 0, summary.t1 or 0
    step = max((t1 - t0) // BUCKETS + 1, 1)
    focus = [g["group"] for g in summary.groups[:FOCUS_GROUPS]]
    timeline_groups = [g["group"] for g in summary.groups[:TIMELINE_GROUPS]]
    wanted = set(focus) | set(timeline_groups)
    counts = [f"partitions_{s.lower()}" for s in STATUS_RANK]
    tl = _read(paths["group_timeline"], ["group", "ts", "total_lag", "max_time_lag_s", "messages_per_s", *counts])
    tl = tl.filter(pc.is_in(tl.column("group"), value_set=pa.array(sorted(wanted), pa.string()))).to_pandas()
    tl["bucket"] = (tl["ts"] - t0) // step
    lag = (tl[tl["group"].isin(focus)].groupby(["group", "bucket"], as_index=False)
           .agg(total_lag=("total_lag", "max"), max_time_lag_s=("max_time_lag_s", "max"),
                messages_per_s=("messages_per_s", "mean")))
    lag["ts"] = lag["bucket"] * step + t0
    worst = np.zeros(len(tl), dtype=np.int64)  # the worst status with a partition in it, as its rank
    for status, rank in STATUS_RANK.items():
        worst = np.where(tl[f"partitions_{status.lower()}"].fillna(0).to_numpy() > 0, np.maximum(worst, rank), worst)
    tl["_w"] = worst
    names = {rank: status for status, rank in STATUS_RANK.items()}
    timeline = tl[tl["group"].isin(timeline_groups)].groupby(["group", "bucket"], as_index=False).agg(_w=("_w", "max"))
    timeline["worst"] = timeline["_w"].map(names)
    timeline["start"] = timeline["bucket"] * step + t0
    order = {g: i for i, g in enumerate(timeline_groups)}
    timeline = timeline.sort_values(by="group", key=lambda s: s.map(order), kind="stable") if not timeline.empty \
        else timeline
    thr = _read(paths["partition_throughput"], ["topic", "partition", "ts", "messages_per_s", "bytes_per_s"])
    thr = thr.to_pandas()
    thr["name"] = thr["topic"] + "-" + thr["partition"].astype(str)
    busiest = thr.groupby("name")["bytes_per_s"].sum().sort_values(ascending=False).index[:FOCUS_PARTITIONS]
    thr = thr[thr["name"].isin(busiest)]
    thr = thr.assign(bucket=(thr["ts"] - t0) // step)
    throughput = thr.groupby(["name", "bucket"], as_index=False).agg(messages_per_s=("messages_per_s", "mean"))
    throughput["ts"] = throughput["bucket"] * step + t0
    return {"lag": lag, "timeline": timeline, "throughput": throughput}


def _when(ms: int | None) -> str:
    if ms is None:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _num(v: Any, digits: int = 0) -> str:
    if v is None:
        return "-"
    return f"{v:,.{digits}f}"


def _badge(status: str | None) -> str:
    color = charts.STATUS_COLORS.get(status or "", charts.NO_DATA)
    return f'<span class="badge" style="background:{color}">{html.escape(status or "-")}</span>'


def _table(headers: list[str], rows: list[list[str]], empty: str) -> str:
    if not rows:
        return f'<p class="empty">{html.escape(empty)}</p>'
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _brokers(ids: list[int]) -> str:
    return " → ".join(str(b) for b in ids) if ids else "-"


def _group_rows(groups: list[dict[str, Any]]) -> list[list[str]]:
    e = html.escape
    return [[e(g["group"]), _badge(g["status"]), _num(g["partitions"]), _num(g["total_lag"]),
             _num(g["max_time_lag_s"], 1), _num(g["messages_per_s"], 1), _num(g["members"]), e(g["state"] or "-"),
             f'{e(g["worst_partition"] or "-")} {_badge(g["worst_partition_status"])}', _when(g["last_commit_ts"]),
             e(_brokers(g.get("served_by", [])))]
            for g in groups[:TABLE_ROWS]]


def _share_rows(shares: list[dict[str, Any]]) -> list[list[str]]:
    e = html.escape
    return [[e(s["group"]), e(f'{s["topic"]}-{s["partition"]}'), _badge(s["status"]), _num(s["start_offset"]),
             _num(s["lag"]), _num(s["time_lag_s"], 1), _num(s["members"]), _num(s["delivered"]),
             f'{s["redelivery_rate"] * 100:.1f}%' if s["redelivery_rate"] is not None else "-", _num(s["in_flight"]),
             _num(s["stuck"]), _num(s["archived"]), _num(s["dead_lettered"])] for s in shares]


SHARE_HEADERS = ["share group", "partition", "status", "start offset", "lag", "time lag (s)", "members",
                 "delivered", "redelivered", "in flight", "stuck", "archived", "dead-lettered"]


def _serving_rows(serving: list[dict[str, Any]]) -> list[list[str]]:
    e = html.escape
    return [[e(r["group"]), e(str(r["broker"])), _num(r["messages"]), _num(r["bytes"]),
             f'{r["share"] * 100:.0f}%' if r["share"] is not None else "-", _when(r["first_served_ts"]),
             _when(r["last_served_ts"])] for r in serving[:TABLE_ROWS]]


GROUP_HEADERS = ["group", "status", "partitions", "lag", "time lag (s)", "msg/s", "members", "state",
                 "worst partition", "last commit", "served by"]
SERVING_HEADERS = ["group", "broker", "messages", "bytes", "share", "first served", "last served"]
STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;background:#f6f7f9;color:#1d2330}
header{background:#1d2330;color:#fff;padding:20px 32px}header h1{margin:0 0 4px;font-size:22px}
header p{margin:0;color:#c5cad3;font-size:14px}main{padding:20px 32px;max-width:1280px}
section{background:#fff;border-radius:8px;padding:16px 20px;margin:0 0 18px;box-shadow:0 1px 3px rgba(0,0,0,.08)}
h2{font-size:16px;margin:0 0 12px}.cards{display:flex;gap:14px;margin-bottom:18px}
.card{flex:1;background:#fff;border-radius:8px;padding:14px 18px;box-shadow:0 1px 3px rgba(0,0,0,.08);
border-top:4px solid var(--c)}.card b{display:block;font-size:28px}.card span{color:#5b6270;font-size:13px}
table{border-collapse:collapse;width:100%;font-size:13px}th{text-align:left;color:#5b6270;font-weight:600;
border-bottom:2px solid #e5e7eb;padding:6px 8px}td{border-bottom:1px solid #eef0f3;padding:6px 8px}
.badge{color:#fff;border-radius:10px;padding:2px 8px;font-size:11px;font-weight:700;letter-spacing:.3px}
.plot svg{width:100%;height:auto}.empty,.note{color:#5b6270}.note{font-size:13px;margin:0 0 10px}
ol{font-size:14px;line-height:1.5}
"""
RULES_HTML = """<ol>
<li><b>OK</b> when the lag was zero in any sample of the window, or fewer than two samples exist.</li>
<li><b>REWIND</b> when the committed offset went down between two consecutive samples.</li>
<li><b>STOP</b> when nothing was committed during the window and the group has no live members.</li>
<li><b>STALL</b> when the committed offset did not move over the window while there is lag.</li>
<li><b>WARNING</b> when offsets move but the lag never went down between two samples.</li>
<li><b>OK</b> otherwise. A group is <b>ERROR</b> when any partition is STALL, STOP or REWIND,
<b>WARNING</b> when any partition is WARNING.</li></ol>"""


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _seconds(ms: int | None) -> str:
    if ms is None:
        return "-"
    return f"{ms / 1000:g} s"


def render_html(summary: Summary, frames: dict[str, Any], opts: JobOptions) -> str:
    e = html.escape
    counts = summary.counts()
    cards = "".join(f'<div class="card" style="--c:{charts.STATUS_COLORS[s]}"><b>{counts[s]}</b>'
                    f'<span>groups {s}</span></div>' for s in rules.GROUP_STATUSES)
    lag_svg = charts.lines(frames["lag"], "group", "total_lag", "Lag over time per group", "messages behind")
    tlag_svg = charts.lines(frames["lag"], "group", "max_time_lag_s", "Time lag per group", "seconds behind")
    thr_svg = charts.lines(frames["throughput"], "name", "messages_per_s", "Consumption throughput per partition",
                           "messages/s (all groups)")
    status_svg = charts.status_timeline(frames["timeline"], summary.t0 or 0, summary.t1 or 0)
    top_rows = [[e(g["group"]), _num(g["total_lag"]), _num(g["max_time_lag_s"], 1), _badge(g["status"])]
                for g in summary.top_lagging]
    part_rows = [[e(p["group"]), e(f'{p["topic"]}-{p["partition"]}'), _badge(p["status"]), _num(p["committed"]),
                  _num(p["log_end"]), _num(p["lag"]), _num(p["time_lag_s"], 1), _num(p["members"]),
                  _when(p["last_commit_ts"])] for p in summary.partitions]
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Gregor lag report</title>
<meta name="viewport" content="width=device-width, initial-scale=1"><style>{STYLE}</style></head>
<body><header><h1>Consumer lag report</h1>
<p>{e(opts.bootstrap)} · {_when(summary.t0)} to {_when(summary.t1)} · {summary.samples:,} samples ·
window {summary.window} samples · {_plural(len(summary.brokers()), "broker")} serving ·
time buckets {_seconds(summary.bucket_ms)} · generated {_when(int(dt.datetime.now(dt.UTC).timestamp() * 1000))}</p>
</header>
<main><div class="cards">{cards}</div>
<section><h2>Groups</h2>{_table(GROUP_HEADERS, _group_rows(summary.groups), "No consumer groups in this period.")}
</section>
<section class="plot" id="status-timeline">{status_svg}</section>
<section class="plot" id="lag-over-time">{lag_svg}</section>
<section class="plot" id="time-lag">{tlag_svg}</section>
<section class="plot" id="throughput">{thr_svg}</section>
<section><h2>Top lagging groups</h2>{_table(["group", "lag", "time lag (s)", "status"], top_rows,
                                            "No group has lag.")}</section>
<section id="serving"><h2>Serving brokers</h2><p class="note">What each broker served each group in this period
(fetches are served by a partition's leader, or a follower with follower reads): a failover shows as one broker
ending and another beginning.</p>{_table(SERVING_HEADERS, _serving_rows(summary.serving),
                                        "No broker served consumption in this period.")}</section>
<section><h2>Partitions not OK</h2>{_table(["group", "partition", "status", "committed", "log end", "lag",
                                             "time lag (s)", "members", "last commit"], part_rows,
                                            "Every partition is OK.")}</section>
<section id="share-groups"><h2>Share groups</h2><p class="note">Share-partitions (KIP-932) at their newest sample:
the start offset stands for the committed offset in the statuses; redelivered is the share of deliveries in the period
that were not a record's first; stuck counts in-flight records delivered more than once and not done; archived and
dead-lettered count what the partition's current leader gave up on.</p>{_table(SHARE_HEADERS,
                                                                                _share_rows(summary.shares),
                                                                                "No share groups in this period.")}
</section>
<section><h2>How statuses are decided</h2>{RULES_HTML}</section>
</main></body></html>
"""


def terminal_summary(summary: Summary, html_path: Path, tables_dir: Path) -> str:
    counts = summary.counts()
    lines = [f"Lag report {_when(summary.t0)} to {_when(summary.t1)}: {summary.samples:,} samples, "
             f"{len(summary.groups)} groups (" + ", ".join(f"{n} {s}" for s, n in counts.items()) + f"), "
             f"window {summary.window} samples", ""]
    if not summary.samples:
        lines.insert(0, "No telemetry samples in this period (the broker writes one every telemetry.interval.ms "
                        "for each group with committed offsets or fetches).")
    header = ["GROUP", "STATUS", "PARTS", "LAG", "TIME-LAG-S", "MSG/S", "WORST", "SERVED-BY"]
    rows = [[g["group"], g["status"], _num(g["partitions"]), _num(g["total_lag"]), _num(g["max_time_lag_s"], 1),
             _num(g["messages_per_s"], 1), f'{g["worst_partition"] or "-"} {g["worst_partition_status"] or ""}',
             ",".join(str(b) for b in g.get("served_by", [])) or "-"]
            for g in summary.groups[:20]]
    lines += format_table(header, rows)
    if len(summary.groups) > 20:
        lines.append(f"... {len(summary.groups) - 20} more groups in the report")
    if summary.shares:
        lines += ["", "Share groups:"]
        lines += format_table(["GROUP", "PARTITION", "STATUS", "LAG", "REDELIVERED", "STUCK", "DEAD-LETTERED"],
                              [[s["group"], f'{s["topic"]}-{s["partition"]}', s["status"] or "-", _num(s["lag"]),
                                f'{s["redelivery_rate"] * 100:.1f}%' if s["redelivery_rate"] is not None else "-",
                                _num(s["stuck"]), _num(s["dead_lettered"])] for s in summary.shares[:20]])
    if summary.top_lagging:
        lines += ["", "Top lagging: " + ", ".join(f'{g["group"]} ({_num(g["total_lag"])})'
                                                  for g in summary.top_lagging[:5])]
    lines += ["", f"HTML report: {html_path}", f"Parquet tables: {tables_dir}"]
    return "\n".join(lines)
