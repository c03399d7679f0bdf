"""N Gregor brokers in subprocesses over one ZooKeeper server, for the cluster tests (the fixture
``cluster_factory`` in tests/conftest.py starts them).

Broker i (1..size) runs with ``broker.id=i``, ``zookeeper.connect`` to the server under a chroot
of its own (``/gregor-<random>``, so clusters share a server without seeing each other),
``broker.rack`` from ``racks`` (round-robin) and the ``overrides`` given; listeners and data
directories are BrokerProcess's (a free port each, ``<tmp_path>/broker-<i>``).
"""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from kazoo.client import KazooClient

from gregor.admin.wire_client import WireClient
from gregor.devcluster import LogWatch, broker_ready_text
from gregor.protocol.api_keys import ApiKey
from tests.support.broker_process import BrokerProcess
from tests.support.zookeeper import ZooKeeperServer, stop_process


class BrokerCluster:
    def __init__(self, tmp_path: Path, zk: ZooKeeperServer, size: int = 3,
                 overrides: dict[str, str] | None = None, racks: list[str] | None = None) -> None:
        if size < 1:
            raise ValueError("a cluster has at least one broker")
        self.zk = zk
        tmp_path.mkdir(parents=True, exist_ok=True)  # the brokers' log files go beside their data
        self.chroot = f"/gregor-{uuid.uuid4().hex[:12]}"
        self.zookeeper_connect = zk.connect_string(self.chroot)
        self.brokers: list[BrokerProcess] = []
        for i in range(1, size + 1):
            settings = {"broker.id": str(i), "zookeeper.connect": self.zookeeper_connect}
            if racks:
                settings["broker.rack"] = racks[(i - 1) % len(racks)]
            settings.update(overrides or {})
            self.brokers.append(BrokerProcess(tmp_path / f"broker-{i}", settings))

    @property
    def ids(self) -> list[int]:
        return list(range(1, len(self.brokers) + 1))

    @property
    def bootstrap(self) -> str:
        """Every broker's host:port, comma-separated (bootstrap.servers)."""
        return ",".join(b.bootstrap for b in self.brokers)

    def broker(self, broker_id: int) -> BrokerProcess:
        if not 1 <= broker_id <= len(self.brokers):
            raise KeyError(f"no broker {broker_id} in a cluster of {len(self.brokers)}")
        return self.brokers[broker_id - 1]

    def start(self, timeout: float = 30) -> BrokerCluster:
        """Start every broker at once and wait until each is ready (see start_broker)."""
        with ThreadPoolExecutor(len(self.brokers)) as pool:
            for f in [pool.submit(self.start_broker, i, timeout) for i in self.ids]:
                f.result()
        self.wait_formed(timeout=timeout)
        return self

    def brokers_seen(self, broker_id: int) -> list[int]:
        """The broker ids ``broker_id``'s Metadata lists (none while it is still joining: it
        serves clients once it has joined)."""
        try:
            wire = WireClient(self.broker(broker_id).bootstrap)
        except OSError:
            return []
        try:
            md = wire.call(ApiKey.METADATA, 9, {
                "topics": [], "allow_auto_topic_creation": False,
                "include_cluster_authorized_operations": False, "include_topic_authorized_operations": False})
        finally:
            wire.close()
        return sorted(b.node_id for b in md.brokers)

    def wait_formed(self, timeout: float = 30) -> None:
        """Wait until every running broker lists every running broker: a broker is ready before it
        has seen the others register (its watch fires a moment later), and refuses a replication
        factor larger than the brokers it has seen."""
        want = self.alive_ids()
        deadline = time.monotonic() + timeout
        for i in want:
            while self.brokers_seen(i) != want:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"broker {i} sees brokers {self.brokers_seen(i)}, not {want}")
                time.sleep(0.05)

    def start_broker(self, broker_id: int, timeout: float = 30) -> BrokerProcess:
        """Start one broker and wait until it says it is ready: it serves clients and handles
        SIGTERM as a clean stop once it has joined the cluster."""
        b = self.broker(broker_id)
        watch = LogWatch(b.log_path, b.log_path.stat().st_size if b.log_path.exists() else 0)
        deadline = time.monotonic() + timeout
        b.start(timeout)
        while not watch.seen(broker_ready_text(broker_id)):
            if not b.alive():
                raise RuntimeError(f"broker {broker_id} exited with {b.proc.returncode if b.proc else None}:\n"
                                   f"{b.output()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"broker {broker_id} was not ready within {timeout} s:\n{b.output()}")
            time.sleep(0.02)
        return b

    def stop(self, broker_id: int, timeout: float = 30) -> int:
        """SIGTERM (a controlled shutdown) and wait; the exit code."""
        b = self.broker(broker_id)
        if b.proc is not None and b.alive():
            b.proc.send_signal(signal.SIGCONT)  # in case it was paused
        return b.stop(timeout)

    def kill(self, broker_id: int) -> None:
        self.broker(broker_id).kill()

    def restart(self, broker_id: int, timeout: float = 30) -> BrokerProcess:
        """Stop (if running) and start again: same id, port and data directory."""
        if self.broker(broker_id).alive():
            self.stop(broker_id)
        return self.start_broker(broker_id, timeout)

    def pause(self, broker_id: int) -> None:
        """SIGSTOP: the broker stops answering and stops heartbeating its ZooKeeper session."""
        b = self.broker(broker_id)
        assert b.proc is not None and b.alive()
        stop_process(b.proc)

    def resume(self, broker_id: int) -> None:
        b = self.broker(broker_id)
        assert b.proc is not None and b.alive()
        b.proc.send_signal(signal.SIGCONT)

    def alive_ids(self) -> list[int]:
        return [i for i, b in zip(self.ids, self.brokers, strict=True) if b.alive()]

    def stop_all(self, timeout: float = 30) -> None:
        """Stop every running broker, one after the other (each a controlled shutdown)."""
        for i in self.alive_ids():
            self.stop(i, timeout)

    def kill_all(self) -> None:
        for i in self.alive_ids():
            self.kill(i)

    @contextmanager
    def zk_client(self, timeout: float = 10) -> Iterator[KazooClient]:
        """A started kazoo client inside this cluster's chroot (to read or write its znodes)."""
        client = KazooClient(hosts=self.zookeeper_connect, timeout=timeout)
        client.start(timeout)
        try:
            yield client
        finally:
            client.stop()
            client.close()

    def wait_registered(self, broker_ids: list[int] | None = None, timeout: float = 30) -> None:
        """Wait until exactly ``broker_ids`` (default: every running broker) are registered under
        /brokers/ids (each broker's ephemeral znode)."""
        want = sorted(self.alive_ids() if broker_ids is None else broker_ids)
        deadline = time.monotonic() + timeout
        with self.zk_client() as zk:
            while True:
                ids = sorted(int(c) for c in zk.get_children("/brokers/ids")) if zk.exists("/brokers/ids") else []
                if ids == want:
                    return
                if time.monotonic() > deadline:
                    raise TimeoutError(f"registered brokers {ids}, expected {want}")
                time.sleep(0.05)
