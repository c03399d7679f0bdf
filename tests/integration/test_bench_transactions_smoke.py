"""bench/transactions.py runs end to end in its smallest form (--quick: a few thousand records per
produce mode, 30 commits per size, 10,000 fetched records) and reports every figure; the figures
themselves are not judged here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(240)

ROOT = Path(__file__).resolve().parents[2]


def test_bench_transactions_quick_run_prints_every_figure():
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "transactions.py"), "--quick", "--records", "2000",
                           "--commits", "10", "--fetch-records", "3000", "--json"],
                          capture_output=True, text=True, timeout=200, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout)
    text = proc.stderr

    produce = result["produce"]
    assert produce["records"] == 2000 and produce["rounds"] == 1
    assert sorted(r["mode"] for r in produce["runs"]) == ["idempotent", "txn-100", "txn-1000"]
    assert [r["transactions"] for r in produce["runs"] if r["mode"] == "txn-100"] == [20]
    for mode in ("idempotent", "txn-100", "txn-1000"):
        assert produce["median"][mode]["records_s"] > 0
    assert set(produce["ratios"]) == {"txn-100", "txn-1000"}

    commit = result["commit"]
    assert commit["commits"] == 10 and set(commit["sizes"]) == {"100", "1"}
    for fig in commit["sizes"].values():
        assert 0 < fig["commit_p50_ms"] <= fig["commit_p99_ms"] <= fig["commit_max_ms"]

    fetch = result["fetch"]
    # 30 transactions of 100, every 10th aborted; a marker after each
    assert (fetch["committed"], fetch["aborted"], fetch["offsets"]) == (2700, 300, 3030)
    delivered = {r["mode"]: r["delivered"] for r in fetch["runs"]}
    assert delivered == {"read_committed": 2700, "read_uncommitted": 3000}
    assert fetch["ratio"] > 0

    assert "ratios: txn-100/idempotent" in text and "read_committed/read_uncommitted" in text
    assert "produce, 1,000-record transactions" in text
