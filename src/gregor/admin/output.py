"""Tables for people, JSON for scripts."""

from __future__ import annotations

import argparse
import json
from typing import Any


def emit(args: argparse.Namespace, data: Any, columns: list[str]) -> None:
    if getattr(args, "json", False):
        print(json.dumps(data, indent=2, default=str))
        return
    rows = data if isinstance(data, list) else [data]
    if not rows:
        print("(none)")
        return
    cells = [[("-" if r.get(c) is None else str(r.get(c))) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    print("  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip())
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
