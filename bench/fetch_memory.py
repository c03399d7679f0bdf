"""What large Fetch responses cost the broker: CPU seconds per GB served and peak RSS, with
clients that read as fast as they can over raw sockets (no client library in the way).

    python bench/fetch_memory.py [--mib 200] [--readers 1 4] [--max-bytes 52428800] [--passes 3]

Each reader fetches the whole partition from offset 0 to its end, ``--passes`` times, with
max_bytes = partition_max_bytes = ``--max-bytes``. Set PYTHONPATH to another source tree to
measure another version of the broker with the same client side.
"""

from __future__ import annotations

import argparse
import os
import socket
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from confluent_kafka import Producer  # noqa: E402

import peers  # noqa: E402
from gregor.admin.wire_client import decode_response_frame, request_frame  # noqa: E402


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def fill(bootstrap: str, topic: str, mib: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 900_000,
                  "compression.type": "none", "queue.buffering.max.kbytes": 512 * 1024})
    value = os.urandom(1000)
    for _ in range(mib * 1024):
        while True:
            try:
                p.produce(topic, value)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(120) == 0


def fetch_request(corr: int, topic: str, offset: int, max_bytes: int) -> bytes:
    body = {"replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": max_bytes, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                                        "fetch_offset": offset, "log_start_offset": -1,
                                                        "partition_max_bytes": max_bytes}]}],
            "forgotten_topics_data": [], "rack_id": ""}
    return request_frame(1, 11, corr, body, "bench")


def recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = s.recv_into(view[got:], n - got)
        if not k:
            raise ConnectionError("closed")
        got += k
    return bytes(buf)


def read_all(port: int, topic: str, end: int, max_bytes: int, passes: int, out: list[int]) -> None:
    s = socket.create_connection(("127.0.0.1", port))
    total = 0
    corr = 0
    for _ in range(passes):
        offset = 0
        while offset < end:
            corr += 1
            s.sendall(fetch_request(corr, topic, offset, max_bytes))
            size = struct.unpack(">i", recv_exact(s, 4))[0]
            frame = recv_exact(s, size)
            _corr, resp = decode_response_frame(1, 11, frame)
            records = resp.responses[0].partitions[0].records or b""
            total += len(records)
            # next offset: walk the batch headers (base offset at 0, records count at 57)
            pos = 0
            while pos + 61 <= len(records):
                base, length = struct.unpack_from(">qi", records, pos)
                count = struct.unpack_from(">i", records, pos + 57)[0]
                offset = base + count
                pos += 12 + length
    s.close()
    out.append(total)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=200)
    ap.add_argument("--readers", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--max-bytes", type=int, default=50 * 1024 * 1024)
    ap.add_argument("--passes", type=int, default=3)
    args = ap.parse_args()
    with peers.gregor_process("telemetry.interval.ms=0") as (bootstrap, proc):
        fill(bootstrap, "fm", args.mib)
        end = args.mib * 1024
        port = int(bootstrap.rsplit(":", 1)[1])
        time.sleep(1)
        for n in args.readers:
            base_rss = rss_mib(proc.pid)
            peak = [base_rss]
            stop = threading.Event()

            def sample(stop: threading.Event = stop, peak: list[float] = peak) -> None:
                while not stop.is_set():
                    peak[0] = max(peak[0], rss_mib(proc.pid))
                    time.sleep(0.02)

            sampler = threading.Thread(target=sample)
            sampler.start()
            totals: list[int] = []
            c0, t0 = cpu_s(proc.pid), time.perf_counter()
            threads = [threading.Thread(target=read_all, args=(port, "fm", end, args.max_bytes, args.passes, totals))
                       for _ in range(n)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            wall, cpu = time.perf_counter() - t0, cpu_s(proc.pid) - c0
            stop.set()
            sampler.join()
            gb = sum(totals) / 1e9
            print(f"readers {n}: {gb:.2f} GB in {wall:.1f} s ({gb / wall * 1000:.0f} MB/s), broker CPU "
                  f"{cpu / gb:.2f} s/GB, RSS {base_rss:.0f} -> peak {peak[0]:.0f} MiB", flush=True)


if __name__ == "__main__":
    main()
