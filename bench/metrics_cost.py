"""What metrics and telemetry cost the broker, measured as the broker's own CPU time (far steadier
than throughput on a shared machine), metrics on against off, in alternating order, round after
round.

Each run: a fresh broker; one producer writes N messages of 1 KiB to a 4-partition topic; then
a consumer group member (subscribe, auto-commit; joined before the clock starts) reads them
all, so every fetch goes through group attribution. Measured: the broker process's user+system CPU seconds from after
start-up to the end of the workload (from /proc), and the produce and fetch wall times.

"on": the Prometheus endpoint and telemetry every second (more often than the 10 s default);
"off": neither (nothing is counted on the hot paths).

On a shared 2-core machine a run's CPU time varies by +-25%, more than a few percent of cost.
``--profile`` therefore also samples the broker of one "on" run with py-spy (1000 samples/s)
and reports the share of the broker's busy samples that are in metrics code
(every frame under gregor/metrics/: attribution, counters, request timing, telemetry writing,
offset sampling), which noise does not move; once for the bulk workload above and once for a
live one (a producer sending one 100-byte message at a time while the member reads at the
tail: small fetches, the most requests per message).

    python bench/metrics_cost.py --messages 1000000 --rounds 6 --profile
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


def metrics_share(raw: Path) -> tuple[int, int]:
    """(samples, samples with a frame in gregor/metrics/) from py-spy's raw output (py-spy leaves
    out a thread that waits in select(), so every sample is the broker at work)."""
    busy = in_metrics = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        busy += int(count)
        if "gregor/metrics/" in stack:
            in_metrics += int(count)
    return busy, in_metrics


def produce_live(bootstrap: str, topic: str, n: int, size: int) -> None:
    """One message at a time with no linger, as a live service produces: the consumer at the
    tail then fetches small batches, the most requests per message metrics can see."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": 1})
    payload = os.urandom(size)
    for i in range(n):
        while True:
            try:
                p.produce(topic, payload, partition=i % PARTITIONS)
                break
            except BufferError:  # the broker is behind (a loaded machine): wait for deliveries
                p.poll(0.05)
        p.poll(0)
        if i % 200 == 0:
            time.sleep(0.001)
    p.flush(60)


def profile(n: int, size: int, live: bool = False) -> None:
    import shutil
    import signal
    import subprocess
    import tempfile

    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    overrides = ["group.initial.rebalance.delay.ms=0", f"metrics.listener=http://127.0.0.1:{peers.free_port()}",
                 "telemetry.interval.ms=1000"]
    raw = Path(tempfile.mkdtemp()) / "broker.txt"
    with peers.gregor_process(*overrides) as (bootstrap, proc):
        create_topic(bootstrap, "cost", PARTITIONS)
        member = join_group(bootstrap, "cost")
        rec = subprocess.Popen([spy, "record", "--pid", str(proc.pid), "--format", "raw", "--output", str(raw),
                                "--rate", "1000"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
        time.sleep(1.0)
        if live:
            import threading

            reader = threading.Thread(target=consume, args=(member, n))
            reader.start()
            produce_live(bootstrap, "cost", n, size)
            reader.join()
        else:
            produce(bootstrap, "cost", n, size)
            consume(member, n + 1)
        rec.send_signal(signal.SIGINT)
        rec.wait(30)
    busy, in_metrics = metrics_share(raw)
    print(f"py-spy on the broker (metrics on, {'live tail' if live else 'bulk'}, {n:,} x {size} B): "
          f"{in_metrics} of {busy} samples in gregor/metrics/ "
          f"= {100 * in_metrics / max(busy, 1):.2f}% of the broker's work")


def run(mode: str, n: int, size: int, pin: bool) -> tuple[float, float, float]:
    overrides = ["group.initial.rebalance.delay.ms=0"]
    overrides += ([f"metrics.listener=http://127.0.0.1:{peers.free_port()}", "telemetry.interval.ms=1000"]
                  if mode == "on" else ["telemetry.interval.ms=0"])
    with peers.gregor_process(*overrides) as (bootstrap, proc):
        if pin:
            os.sched_setaffinity(proc.pid, {1})  # the broker on one core, the clients on the other
            os.sched_setaffinity(0, {0})
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
    ap.add_argument("--pin", action="store_true", help="broker on CPU 1, clients on CPU 0")
    ap.add_argument("--profile", action="store_true", help="also the share of the broker's samples in metrics code")
    args = ap.parse_args()
    results: dict[str, list[tuple[float, float, float]]] = {"on": [], "off": []}
    for r in range(args.rounds):
        order = ("on", "off") if r % 2 == 0 else ("off", "on")
        for mode in order:
            results[mode].append(run(mode, args.messages, args.size, args.pin))
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
    if args.profile:
        profile(args.messages, args.size)
        profile(min(args.messages, 200_000), 100, live=True)


if __name__ == "__main__":
    main()
