"""A real ZooKeeper server in a subprocess on 127.0.0.1, for the cluster tests (the fixtures
``zookeeper`` and ``zookeeper_factory`` in tests/conftest.py start them).

It runs what ``make cluster`` runs (gregor.devcluster: the Debian package's jar over a generated
zoo.cfg, tickTime 500 ms, sessions of 1 to 60 s), with fsync off to keep the tests fast. Its data
and zoo.cfg are in ``data_dir``, its output in ``<data_dir>.log`` beside it.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path
from typing import IO

from gregor.devcluster import HOST, write_zoo_cfg, zookeeper_command, zookeeper_serving
from tests.support.broker_process import free_port


def process_state(pid: int) -> str | None:
    """The state letter in /proc/<pid>/stat (R running, S sleeping, T stopped, Z zombie); None
    when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    return stat.rsplit(")", 1)[1].split()[0]


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 10) -> None:
    """SIGSTOP, and wait until every thread has stopped (the signal is delivered asynchronously)."""
    proc.send_signal(signal.SIGSTOP)
    deadline = time.monotonic() + timeout
    while process_state(proc.pid) != "T":
        if time.monotonic() > deadline:
            raise RuntimeError(f"process {proc.pid} did not stop")
        time.sleep(0.005)


class ZooKeeperServer:
    def __init__(self, data_dir: Path, port: int | None = None) -> None:
        self.data_dir = data_dir
        self.port = port if port is not None else free_port()
        self.cfg_path = data_dir / "zoo.cfg"
        self.log_path = data_dir.parent / f"{data_dir.name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def connect_string(self, chroot: str = "") -> str:
        """``127.0.0.1:<port>`` followed by ``chroot`` (``/gregor-x`` or ``gregor-x``), as
        zookeeper.connect takes it."""
        if chroot and not chroot.startswith("/"):
            chroot = "/" + chroot
        return f"{HOST}:{self.port}{chroot}"

    def start(self, timeout: float = 30) -> ZooKeeperServer:
        """Start the server and wait until it serves requests."""
        if self.alive():
            raise RuntimeError(f"ZooKeeper on port {self.port} is already running")
        write_zoo_cfg(self.cfg_path, self.data_dir, self.port, {"forceSync": "no"})
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - kept open for the process lifetime
        self.proc = subprocess.Popen(zookeeper_command(self.cfg_path), stdin=subprocess.DEVNULL,
                                     stdout=self._log, stderr=self._log)
        deadline = time.monotonic() + timeout
        while not zookeeper_serving(self.port, timeout=0.5):
            if self.proc.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited with {self.proc.returncode}:\n{self.output()}")
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"ZooKeeper did not serve on port {self.port} within {timeout} s:\n{self.output()}")
            time.sleep(0.05)
        return self

    def output(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM (resumed first if paused) and wait; the exit code."""
        assert self.proc is not None
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            self.proc.send_signal(signal.SIGCONT)
        rc = self.proc.wait(timeout)
        self._close_log()
        return rc

    def kill(self) -> None:
        """SIGKILL and wait: no clean shutdown (what it wrote to its transaction log stays)."""
        assert self.proc is not None
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self._close_log()

    def pause(self) -> None:
        """SIGSTOP: the server holds its connections but answers nothing (clients see their
        connection time out, then reconnect attempts fail, as with a hung server)."""
        assert self.proc is not None and self.alive()
        stop_process(self.proc)

    def resume(self) -> None:
        """SIGCONT after pause()."""
        assert self.proc is not None and self.alive()
        self.proc.send_signal(signal.SIGCONT)

    def restart(self, timeout: float = 30) -> ZooKeeperServer:
        """Stop (if running) and start again on the same port over the same data."""
        if self.alive():
            self.stop()
        return self.start(timeout)

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None
