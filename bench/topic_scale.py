"""How a broker copes with one topic of many partitions (issue 10, item 9).

Starts a broker subprocess on a fresh data directory, then prints:
- the time CreateTopics takes for N partitions (confluent-kafka AdminClient),
- the latency of Metadata requests sent on another connection meanwhile (max and median), which
  is what a consumer group's heartbeats would see,
- the file descriptors the broker holds afterwards (/proc/<pid>/fd),
- the time a clean stop (SIGTERM) takes, and a restart until the first Metadata answer,
- the descriptors after the restart, and the same after a SIGKILL and restart (recovery).

    .venv/bin/python bench/topic_scale.py --partitions 10000
    PYTHONPATH=/tmp/before/src .venv/bin/python bench/topic_scale.py   # another checkout's code

No assertion here: figures only (tests/integration/test_topic_scale.py checks behaviour).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def metadata_request(corr: int) -> bytes:
    client = b"bench"
    body = struct.pack(">hhih", 3, 1, corr, len(client)) + client + struct.pack(">i", 0)  # Metadata v1, no topics
    return struct.pack(">i", len(body)) + body


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return buf


def metadata_round_trip(sock: socket.socket, corr: int) -> float:
    t = time.perf_counter()
    sock.sendall(metadata_request(corr))
    (size,) = struct.unpack(">i", recv_exact(sock, 4))
    recv_exact(sock, size)
    return time.perf_counter() - t


class Prober(threading.Thread):
    """Metadata requests back to back on one connection, with their latencies."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.latencies: list[float] = []
        self.stop_flag = threading.Event()

    def run(self) -> None:
        corr = 0
        while not self.stop_flag.is_set():
            corr += 1
            self.latencies.append(metadata_round_trip(self.sock, corr))
            time.sleep(0.01)


class Broker:
    def __init__(self, data: Path, port: int, extra: list[str]) -> None:
        self.data, self.port, self.extra = data, port, extra
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> float:
        t = time.perf_counter()
        cmd = [sys.executable, "-m", "gregor", "serve", "--override", f"log.dirs={self.data}",
               "--override", f"listeners=PLAINTEXT://127.0.0.1:{self.port}", *self.extra]
        with open(self.data.parent / "broker.log", "ab") as err:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited: see {self.data.parent / 'broker.log'}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    metadata_round_trip(s, 1)
                    return time.perf_counter() - t
            except OSError:
                time.sleep(0.02)

    def fds(self) -> int:
        assert self.proc is not None
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def stop(self) -> float:
        assert self.proc is not None
        t = time.perf_counter()
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(300)
        return time.perf_counter() - t

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--dir", default=None, help="parent of the data directory (default: a temporary one)")
    ap.add_argument("--override", action="append", default=[], help="extra broker key=value")
    args = ap.parse_args()
    from confluent_kafka.admin import AdminClient, NewTopic

    parent = Path(args.dir or tempfile.mkdtemp(prefix="topic-scale-"))
    data = parent / "data"
    extra = [x for kv in args.override for x in ("--override", kv)]
    broker = Broker(data, free_port(), extra)
    print(f"data in {data}; broker code from {os.environ.get('PYTHONPATH') or 'the installed package'}")
    print(f"start (empty):                 {broker.start():7.2f} s, {broker.fds()} fds")
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{broker.port}"})
    created, during = probed(broker.port, lambda: admin.create_topics(
        [NewTopic("scale", args.partitions, 1)], request_timeout=600, operation_timeout=600)["scale"].result())
    print(f"create {args.partitions} partitions:   {created:7.2f} s")
    print(f"Metadata latency meanwhile:    max {max(during) * 1000:8.1f} ms, median "
          f"{statistics.median(during) * 1000:6.1f} ms ({len(during)} requests)")
    print(f"fds after creation:            {broker.fds()}")
    print(f"clean stop:                    {broker.stop():7.2f} s")
    print(f"restart after clean stop:      {broker.start():7.2f} s, {broker.fds()} fds")
    broker.kill()
    print(f"restart after SIGKILL:         {broker.start():7.2f} s, {broker.fds()} fds")
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{broker.port}"})
    deleted, during = probed(broker.port, lambda: admin.delete_topics(
        ["scale"], request_timeout=600, operation_timeout=600)["scale"].result())
    print(f"delete the topic:              {deleted:7.2f} s; Metadata meanwhile max {max(during) * 1000:.1f} ms")
    print(f"clean stop:                    {broker.stop():7.2f} s")


def probed(port: int, action: Callable[[], object]) -> tuple[float, list[float]]:
    """Run ``action`` while a prober sends Metadata requests: (its duration, their latencies)."""
    prober = Prober(port)
    prober.start()
    time.sleep(0.3)
    before = len(prober.latencies)
    t = time.perf_counter()
    action()
    took = time.perf_counter() - t
    time.sleep(0.2)
    prober.stop_flag.set()
    prober.join()
    return took, prober.latencies[before:] or [0.0]


if __name__ == "__main__":
    main()
