"""bench/cluster.py runs end to end in its smallest form (a few thousand messages, one leader kill
per session timeout) and reports every figure; the figures themselves are not judged here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(240)

ROOT = Path(__file__).resolve().parents[2]


def test_bench_cluster_quick_run_prints_throughput_and_failover_figures():
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "cluster.py"), "--quick", "--messages", "3000",
                           "--kills", "1", "--json"], capture_output=True, text=True, timeout=200, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout)
    text = proc.stderr

    throughput = result["throughput"]
    assert throughput["messages"] == 3000 and throughput["rounds"] == 1
    assert sorted(r["target"] for r in throughput["runs"]) == ["rf1", "rf3", "single-node"]
    for target in ("single-node", "rf1", "rf3"):
        assert throughput["median"][target]["mb_s"] > 0 and throughput["median"][target]["msg_s"] > 0
        assert f"median  {target}" in text
    assert set(throughput["ratios"]) == {"rf3/single-node", "rf3/rf1", "rf1/single-node"}
    assert "ratios: rf3/single-node" in text

    assert [f["session_timeout_ms"] for f in result["failover"]] == [6000, 4000]
    for f in result["failover"]:
        assert len(f["kills"]) == 1
        kill = f["kills"][0]
        # the parts come in the order they happen
        assert 0 < kill["session_expired"] <= kill["elected"] <= kill["first_ack"]
        assert kill["new_leader"] not in (-1, kill["killed"])
        assert f["median_s"] == f["max_s"] == kill["first_ack"]
        assert f["failed_deliveries"] == 0, f["failed_examples"]
        assert f"zookeeper.session.timeout.ms={f['session_timeout_ms']}:" in text
    assert text.count("kill to first ack on the new leader: median") == 2
    assert "page cache: a new file written at" in text
