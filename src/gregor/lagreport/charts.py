"""The report's plots, drawn with matplotlib as inline SVG (no files, no scripts, no network)."""

from __future__ import annotations

import io
import re
from typing import Any

from gregor.lagreport import rules

STATUS_COLORS = {rules.OK: "#2e9e5b", rules.WARNING: "#e8a317", rules.STALL: "#e06c1f", rules.STOP: "#c62828",
                 rules.REWIND: "#7b3fb5", rules.ERROR: "#c62828"}
NO_DATA = "#d9d9d9"
PALETTE = ["#1f6fb2", "#d1495b", "#00798c", "#edae49", "#66a182", "#8d5a97", "#3d405b", "#f28f3b", "#6c757d",
           "#2a9d8f"]


def _figure(width: float = 10, height: float = 3.6) -> tuple[Any, Any]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(width, height), dpi=96)
    ax.spines[["top", "right"]].set_visible(False)
    ax.grid(axis="y", color="#e5e5e5", linewidth=0.8)
    ax.set_axisbelow(True)
    return fig, ax


def _svg(fig: Any) -> str:
    import matplotlib.pyplot as plt

    buf = io.StringIO()
    fig.tight_layout()
    fig.savefig(buf, format="svg")
    plt.close(fig)
    text = buf.getvalue()
    text = text[text.index("<svg"):]  # drop the XML prolog and doctype: the SVG is inlined in HTML
    return re.sub(r"<metadata>.*?</metadata>", "", text, flags=re.S)


def _time_axis(ax: Any) -> None:
    import matplotlib.dates as mdates

    locator = mdates.AutoDateLocator()
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))


def _dates(ms: Any) -> Any:
    import pandas as pd

    return pd.to_datetime(ms, unit="ms")


def lines(frame: Any, series: str, value: str, title: str, ylabel: str) -> str:
    """One line per value of ``series`` over ``ts`` (epoch ms)."""
    fig, ax = _figure()
    if frame.empty:
        ax.text(0.5, 0.5, "no data in this period", ha="center", va="center", transform=ax.transAxes)
    for i, (name, part) in enumerate(frame.sort_values("ts").groupby(series, sort=False)):
        ax.plot(_dates(part["ts"]), part[value], label=str(name), color=PALETTE[i % len(PALETTE)], linewidth=1.8)
    ax.set_title(title, loc="left", fontsize=12, fontweight="bold")
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=0)
    _time_axis(ax)
    if not frame.empty:
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False, fontsize=9)
    return _svg(fig)


def status_timeline(frame: Any, t0: int, t1: int) -> str:
    """One row per group, coloured by its worst partition status in each time bucket."""
    import matplotlib.dates as mdates
    from matplotlib.patches import Patch

    groups = list(dict.fromkeys(frame["group"])) if not frame.empty else []
    fig, ax = _figure(height=max(1.6, 0.42 * len(groups) + 1.1))
    ax.grid(False)
    # a cell lasts until the next sample time (buckets are finer than samples in short reports)
    starts_ms = sorted(set(frame["start"])) if not frame.empty else []
    gaps = sorted(b - a for a, b in zip(starts_ms, starts_ms[1:], strict=False))
    width_days = (gaps[len(gaps) // 2] if gaps else max(t1 - t0, 1)) / 86_400_000
    for row, group in enumerate(groups):
        part = frame[frame["group"] == group]
        for status, cells in part.groupby("worst"):
            starts = [mdates.date2num(d) for d in _dates(cells["start"])]
            ax.broken_barh([(s, width_days) for s in starts], (row - 0.38, 0.76),
                           facecolors=STATUS_COLORS.get(status, NO_DATA), edgecolor="none")
    if groups:
        ax.set_yticks(range(len(groups)), labels=groups)
        ax.set_ylim(len(groups) - 0.5, -0.5)
    else:
        ax.set_yticks([])
        ax.text(0.5, 0.5, "no data in this period", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlim(mdates.date2num(_dates(t0)), mdates.date2num(_dates(t1)) + width_days)
    ax.xaxis_date()
    _time_axis(ax)
    ax.set_title("Status timeline (worst partition per group)", loc="left", fontsize=12, fontweight="bold")
    handles = [Patch(color=STATUS_COLORS[s], label=s) for s in rules.PARTITION_STATUSES]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False, fontsize=9)
    return _svg(fig)
