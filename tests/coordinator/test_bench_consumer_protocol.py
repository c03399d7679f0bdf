"""bench/coordinator.py's consumer-group-protocol (KIP-848) parts run at tiny sizes: steady
heartbeats, a join and a leave to Stable in process, and the same over sockets against a broker."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NUMBER = r"[0-9.]+"


def bench(*args: str) -> str:
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "coordinator.py"), *args],
                          capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_bench_heartbeats_and_stabilize_parts_run_at_tiny_sizes():
    out = bench("--only", "heartbeats,stabilize", "--cg-heartbeat-members", "12", "--cg-stabilize-members", "4,12",
                "--cg-rounds", "2", "--cg-runs", "2", "--cg-interval-ms", "1000", "--cg-ack-delay-ms", "5")
    for mode in ("runtime, owned sent", "runtime, owned omitted", "handler only, owned sent"):
        assert re.search(rf"12 members, {re.escape(mode)} *: +{NUMBER}/s +p50 +{NUMBER} ms +p99 +{NUMBER} ms", out), \
            (mode, out)
    assert "group of 12 members x 120 partitions Stable" in out, out
    for n in (4, 12):
        for what in ("join", "leave"):
            for mode in ("acks after 5 ms", "interval only"):
                pattern = (rf"stabilize +{n} members, {what} +\({mode}\): decision to Stable +{NUMBER} ms "
                           rf"\(max +{NUMBER}\) = interval +[-+]{NUMBER} ms; rounds \d+")
                assert re.search(pattern, out), (pattern, out)
    # every member must heartbeat once after the decision: about one interval with acknowledgments
    # sent at once, about two when revocations wait for the next interval
    joins = {m: float(t) for m, t in re.findall(r"12 members, join +\((.+?)\): decision to Stable +([0-9.]+) ms",
                                                 out)}
    assert 900 < joins["acks after 5 ms"] < 1100, out
    assert 1900 < joins["interval only"] < 2100, out
    assert re.search(r"12 members, join .* the joiner got 10 partitions", out), out


def test_bench_parts_are_named_with_commas_and_unknown_ones_refused():
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "coordinator.py"), "--only", "heartbeats,nope"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode != 0
    assert "unknown part(s) nope" in proc.stderr


def test_bench_heartbeats_wire_part_runs_at_tiny_sizes():
    out = bench("--only", "heartbeats-wire", "--cg-wire-members", "6", "--cg-wire-partitions", "12",
                "--cg-wire-interval-ms", "300", "--seconds", "0.5", "--cg-wire-joins", "1")
    assert "group of 5 members x 12 partitions Stable over sockets" in out, out
    assert re.search(rf"5 members paced \(each once per 300 ms\): +{NUMBER}/s offered +p50 +{NUMBER} ms +p99", out), out
    assert re.search(rf"5 members saturating: +{NUMBER}/s", out), out
    m = re.search(r"join to Stable: median ([0-9.]+) ms", out)
    assert m, out
    assert 250 < float(m.group(1)) < 2000, out
