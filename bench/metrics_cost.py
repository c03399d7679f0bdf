"""What metrics and telemetry cost the broker, measured as the broker's own CPU time (far steadier
than throughput on a shared machine), metrics on against off, in alternating order, round after
round.

Each run: a fresh broker; one producer writes N messages of 1 KiB to a 4-partition topic; then
a consumer group member (subscribe, auto-commit; joined before the clock starts) reads them
all, so every fetch goes through group attribution. Measured: the broker process's user+system CPU seconds from after
start-up to the end of the workload (from /proc), and the produce and fetch wall times.

"on": the Prometheus endpoint and telemetry every second (more often than the 10 s default);
"off": neither (nothing is counted on the hot paths).

    python bench/metrics_cost.py --messages 300000 --rounds 6
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from confluent_kafka import Consumer  # noqa: E402

import peers  # noqa: E402
from produce_fetch import create_topic, produce  # noqa: E402

PARTITIONS = 4


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def join_group(bootstrap: str, topic: str) -> Consumer:
    """A group member that holds its assignment (so no rebalance happens while it is timed)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"cost-{uuid.uuid4().hex[:8]}",
                  "auto.offset.reset": "earliest", "fetch.queue.backoff.ms": 0, "client.id": "member"})
    c.subscribe([topic])
    deadline = time.monotonic() + 30
    while not c.assignment() and time.monotonic() < deadline:
        c.poll(0.1)
    return c


def consume(c: Consumer, expected: int) -> float:
    got = 0
    start = time.perf_counter()
    deadline = start + 180
    while got < expected and time.perf_counter() < deadline:
        got += sum(1 for m in c.consume(10_000, 0.2) if m.error() is None)
    elapsed = time.perf_counter() - start
    c.close()
    if got < expected:
        raise RuntimeError(f"consumed {got} of {expected}")
    return elapsed


def run(mode: str, n: int, size: int) -> tuple[float, float, float]:
    overrides = ["group.initial.rebalance.delay.ms=0"]
    overrides += ([f"metrics.listener=http://127.0.0.1:{peers.free_port()}", "telemetry.interval.ms=1000"]
                  if mode == "on" else ["telemetry.interval.ms=0"])
    with peers.gregor_process(*overrides) as (bootstrap, proc):
        create_topic(bootstrap, "cost", PARTITIONS)
        member = join_group(bootstrap, "cost")
        time.sleep(0.5)
        before = cpu_seconds(proc.pid)
        produce_s = produce(bootstrap, "cost", n, size)
        fetch_s = consume(member, n + 1)  # + the producer's warm-up message
        return cpu_seconds(proc.pid) - before, produce_s, fetch_s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=300_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=6)
    args = ap.parse_args()
    results: dict[str, list[tuple[float, float, float]]] = {"on": [], "off": []}
    for r in range(args.rounds):
        order = ("on", "off") if r % 2 == 0 else ("off", "on")
        for mode in order:
            results[mode].append(run(mode, args.messages, args.size))
        on, off = results["on"][-1], results["off"][-1]
        print(f"round {r + 1}: broker cpu on {on[0]:.2f} s, off {off[0]:.2f} s ({on[0] / off[0]:.3f}x); "
              f"produce {on[1]:.2f}/{off[1]:.2f} s, group fetch {on[2]:.2f}/{off[2]:.2f} s", flush=True)
    ratios = [on[0] / off[0] for on, off in zip(results["on"], results["off"], strict=True)]
    mb = args.messages * args.size / 1e6
    for mode in ("on", "off"):
        cpu = statistics.median(x[0] for x in results[mode])
        print(f"metrics {mode:3s}: broker cpu median {cpu:.2f} s ({cpu * 1e6 / args.messages:.2f} us per message "
              f"produced and fetched), produce {mb / statistics.median(x[1] for x in results[mode]):.0f} MB/s, "
              f"group fetch {mb / statistics.median(x[2] for x in results[mode]):.0f} MB/s")
    print(f"broker cpu on/off: median {statistics.median(ratios):.3f}x (pairs {min(ratios):.3f}x .. "
          f"{max(ratios):.3f}x over {len(ratios)} rounds)")


if __name__ == "__main__":
    main()
