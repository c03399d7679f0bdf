"""A real Gregor broker in a subprocess on 127.0.0.1, for tests with real clients (the fixtures
``broker`` and ``broker_factory`` in tests/conftest.py start them)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class BrokerProcess:
    def __init__(self, data_dir: Path, overrides: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.overrides = {"log.dirs": str(data_dir), "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
                          "log.cleaner.backoff.ms": "500"}
        self.overrides.update(overrides or {})
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir.parent / f"broker-{self.port}.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "gregor", "serve"]
        for k, v in self.overrides.items():
            cmd += ["--override", f"{k}={v}"]
        return cmd

    def start(self, timeout: float = 30, wait: bool = True) -> BrokerProcess:
        """Start the broker and (``wait``) wait until it serves clients: a broker of a cluster
        does once it has joined."""
        self.log = open(self.log_path, "ab")  # noqa: SIM115 - kept open for the process lifetime
        self.proc = subprocess.Popen(self.command(), stdout=self.log, stderr=self.log)
        if not wait:
            return self
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{self.output()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"broker did not start:\n{self.output()}")

    def output(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, timeout: float = 30) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout)
        self.log.close()
        return rc

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self.log.close()

    def restart(self) -> BrokerProcess:
        self.stop()
        return self.start()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None
