"""bench/cluster.py runs end to end in its smallest form (a few thousand messages, one leader kill
per session timeout; 20 groups and one broker kill; one short commit round per replication factor)
and reports every figure; the figures themselves are not judged here."""

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
                           "--kills", "1", "--only", "throughput,failover", "--json"],
                          capture_output=True, text=True, timeout=200, cwd=ROOT)
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


def test_bench_cluster_groups_failover_and_commit_throughput_print_their_figures():
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "cluster.py"), "--only", "coordinator-failover,commits",
                           "--groups", "20", "--kills", "1", "--rounds", "1", "--commit-seconds", "1", "--json"],
                          capture_output=True, text=True, timeout=200, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout)
    text = proc.stderr
    assert "throughput" not in result and "failover" not in result

    groups = result["coordinator_failover"]
    assert groups["groups"] == 20 and groups["offsets_partitions"] == 50
    (kill,) = groups["kills"]
    assert kill["killed"] == 1 and 0 < kill["groups_affected"] < 20
    assert kill["never_served"] == [] and kill["wrong_offsets"] == {}
    # the parts come in the order they happen (the election and the load are seen by different
    # observers, this process's ZooKeeper client and the new leader's log, so only each against the end)
    assert 0 < kill["session_expired"] <= kill["last_elected"] <= kill["last_served"]
    assert kill["session_expired"] <= kill["last_loaded"] <= kill["last_served"]
    assert groups["last_served_median_s"] == groups["last_served_max_s"] == kill["last_served"]
    assert "kill  1: broker 1" in text and "every group served again after a kill: median" in text
    assert "goal 'every group served again within 10 s with the defaults':" in text
    assert "median of each stage: session expiry" in text

    commits = result["commits"]
    assert sorted(r["target"] for r in commits["runs"]) == ["rf1", "rf3"]
    for r in commits["runs"]:
        assert r["commits"] > 0 and r["errors"] == 0 and r["median_ms"] > 0 and r["lone_median_ms"] > 0
    for target in ("rf1", "rf3"):
        assert commits["median"][target]["commits_s"] > 0
        assert f"median  {target}:" in text
    assert commits["ratio_rf3_rf1"] > 0 and "ratio rf3/rf1:" in text
