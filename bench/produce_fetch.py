"""Produce and fetch throughput of 1 KiB messages with the confluent-kafka client, against Gregor
and, in the same run with the same client settings, against librdkafka's mock cluster and Tansu,
plus a raw loopback-socket baseline. Prints MB/s, messages/s and ratios, and for Gregor the broker's
CPU seconds (user + system, every thread) per GB produced and fetched: on a shared machine whose
load moves, the CPU figure says what the broker spends even when the wall clock does not.

    python bench/produce_fetch.py [--messages 300000] [--size 1024] [--partitions 1]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

import peers  # noqa: E402

PRODUCER = {"linger.ms": 5, "batch.size": 1_000_000, "acks": "all", "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 2_000_000, "enable.idempotence": False, "compression.type": "none"}
CONSUMER = {"fetch.max.bytes": 52_428_800, "max.partition.fetch.bytes": 10_485_760, "fetch.wait.max.ms": 100,
            "queued.min.messages": 200_000, "enable.auto.commit": False, "group.id": "bench",
            "fetch.queue.backoff.ms": 0}  # librdkafka's default (1 s) stalls a fast reader: see docs/spark.md


CLK_TCK = os.sysconf("SC_CLK_TCK")


def process_cpu(pid: int | None) -> float:
    """CPU seconds a process has used (0 when unknown)."""
    if pid is None:
        return 0.0
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def create_topic(bootstrap: str, topic: str, partitions: int) -> int:
    """Create the topic; returns its partition count (the mock cluster auto-creates topics with
    its own default count and answers no CreateTopics)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)], request_timeout=5)[topic].result(10)
    except Exception:  # noqa: BLE001
        Producer({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    time.sleep(0.2)
    return len(admin.list_topics(topic, timeout=10).topics[topic].partitions)


def produce(bootstrap: str, topic: str, n: int, size: int) -> float:
    p = Producer({"bootstrap.servers": bootstrap, **PRODUCER})
    payload = os.urandom(size)
    p.produce(topic, payload)  # warm the connection and metadata
    p.flush(30)
    start = time.perf_counter()
    for _ in range(n):
        try:
            p.produce(topic, payload)
        except BufferError:
            p.poll(0.01)
            p.produce(topic, payload)
    remaining = p.flush(120)
    elapsed = time.perf_counter() - start
    if remaining:
        raise RuntimeError(f"{remaining} messages not delivered")
    return elapsed


def fetch(bootstrap: str, topic: str, partitions: int) -> tuple[float, int, int]:
    """Read every retained message from the beginning; returns (seconds, messages, bytes).
    (The mock cluster keeps only the newest part of a long partition, so the count can be lower
    than what was produced.)"""
    c = Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest", **CONSUMER})
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    expected = 0
    for tp in tps:
        lo, hi = c.get_watermark_offsets(tp, timeout=10)
        expected += hi - lo
        tp.offset = lo
    c.assign(tps)
    got = nbytes = 0
    start = time.perf_counter()
    deadline = start + 120
    while got < expected and time.perf_counter() < deadline:
        # ask for no more than what is left: consume() waits its whole timeout for a full batch
        for m in c.consume(min(10_000, expected - got), 1.0):
            if m.error() is None:
                got += 1
                nbytes += len(m.value())
    elapsed = time.perf_counter() - start
    c.close()
    if got < expected:
        raise RuntimeError(f"consumed {got} of {expected}")
    return elapsed, got, nbytes


def loopback(total: int, chunk: int = 1 << 20) -> float:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]

    def sink() -> None:
        conn, _ = srv.accept()
        left = total
        while left > 0:
            left -= len(conn.recv(1 << 20))
        conn.close()

    t = threading.Thread(target=sink)
    t.start()
    c = socket.create_connection(("127.0.0.1", port))
    buf = os.urandom(chunk)
    start = time.perf_counter()
    sent = 0
    while sent < total:
        part = buf[: min(chunk, total - sent)]
        c.sendall(part)
        sent += len(part)
    t.join()
    elapsed = time.perf_counter() - start
    c.close()
    srv.close()
    return elapsed


def _no_pid(target: Any) -> Any:
    """A peer whose process is not ours to measure: (bootstrap, None)."""
    @contextlib.contextmanager
    def run() -> Iterator[tuple[str | None, None]]:
        with target() as bootstrap:
            yield bootstrap, None
    return run


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=300_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--only", choices=["gregor", "gregor-no-metrics", "mock", "tansu"], action="append")
    args = ap.parse_args()
    n, size = args.messages, args.size
    mb = n * size / 1e6
    results: dict[str, tuple[float, float]] = {}

    mport = peers.free_port()
    # "gregor": defaults plus the Prometheus endpoint (consumption counted per group);
    # "gregor-no-metrics": endpoint and telemetry off, nothing counted: the ratio is their cost
    targets = [("gregor-no-metrics", lambda: peers.gregor_process("telemetry.interval.ms=0")),
               ("gregor", lambda: peers.gregor_process(f"metrics.listener=http://127.0.0.1:{mport}")),
               ("mock", _no_pid(peers.mock_cluster)), ("tansu", _no_pid(peers.tansu))]
    for name, ctx in targets:
        if args.only and name not in args.only:
            continue
        with ctx() as (bootstrap, proc):
            if bootstrap is None:
                print(f"{name}: not available, skipped")
                continue
            pid = proc.pid if proc is not None else None
            topic = f"bench-{name}"
            partitions = create_topic(bootstrap, topic, args.partitions)
            c0 = process_cpu(pid)
            tp = produce(bootstrap, topic, n, size)
            c1 = process_cpu(pid)
            tf, fetched, fbytes = fetch(bootstrap, topic, partitions)
            c2 = process_cpu(pid)
            results[name] = (mb / tp, fbytes / 1e6 / tf)
            cpu = (f" | broker CPU: produce {(c1 - c0) / (mb / 1000):.2f} s/GB, fetch "
                   f"{(c2 - c1) / (fbytes / 1e9):.2f} s/GB" if pid is not None else "")
            print(f"{name:17s} produce {mb / tp:8.1f} MB/s {n / tp:10.0f} msg/s | "
                  f"fetch {fbytes / 1e6 / tf:8.1f} MB/s {fetched / tf:10.0f} msg/s ({fetched} messages){cpu}",
                  flush=True)
    lb = loopback(int(mb * 1e6))
    print(f"loopback socket {mb / lb:8.1f} MB/s (one connection, 1 MiB sends)")
    if "gregor" in results:
        g = results["gregor"]
        for peer in ("gregor-no-metrics", "mock", "tansu"):
            if peer in results:
                r = results[peer]
                print(f"gregor/{peer}: produce {g[0] / r[0]:.2f}x  fetch {g[1] / r[1]:.2f}x")
        print(f"gregor/loopback: produce {g[0] / (mb / lb):.3f}x  fetch {g[1] / (mb / lb):.3f}x")


if __name__ == "__main__":
    main()
