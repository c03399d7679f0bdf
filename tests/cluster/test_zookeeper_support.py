"""The cluster tests' infrastructure: a real ZooKeeper server (tests/support/zookeeper.py), N
brokers over it (tests/support/cluster.py) and ``python -m gregor.devcluster`` (make cluster).

These check the processes' lifecycle, not the brokers' cluster behaviour (tests/cluster/ and
tests/integration/ do that)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from kazoo.client import KazooClient, KazooState

from gregor import devcluster
from tests.support.broker_process import free_port
from tests.support.cluster import BrokerCluster
from tests.support.zookeeper import process_state


def wait_until(condition, timeout: float = 20, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def client(connect: str, timeout: float = 10) -> KazooClient:
    c = KazooClient(hosts=connect, timeout=timeout)
    c.start(timeout)
    return c


def dead(pid: int) -> bool:
    return process_state(pid) in (None, "Z")


def started_at(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc/<pid>/stat), None once it is gone:
    with the pid, it names one process, where a pid alone may name a later one (or a thread of a
    pytest worker) once the first is reaped."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def children_of(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(d.name))
    return out


def cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]


# -- the ZooKeeper server -------------------------------------------------------------------------

def test_zookeeper_serves_and_kazoo_reads_what_it_wrote(zookeeper_factory):
    zk = zookeeper_factory()
    assert zk.alive() and devcluster.zookeeper_serving(zk.port)
    assert zk.connect_string() == f"127.0.0.1:{zk.port}"
    assert zk.connect_string("gregor-x") == zk.connect_string("/gregor-x") == f"127.0.0.1:{zk.port}/gregor-x"
    c = client(zk.connect_string())
    try:
        c.create("/a/b", b"hello", makepath=True)
        assert c.get("/a/b")[0] == b"hello"
    finally:
        c.stop()
    assert zk.log_path == zk.data_dir.parent / f"{zk.data_dir.name}.log"
    assert "binding to port" in zk.output()


@pytest.mark.parametrize("how", ["restart", "kill"])
def test_zookeeper_data_survives_restart_and_kill(zookeeper_factory, how):
    zk = zookeeper_factory()
    port = zk.port
    c = client(zk.connect_string())
    c.create("/kept", b"v1")
    c.create("/gone", b"", ephemeral=True)
    c.stop()
    if how == "restart":
        zk.restart()
    else:
        zk.kill()
        assert not zk.alive() and not devcluster.zookeeper_serving(port)
        zk.start()
    assert zk.port == port
    c = client(zk.connect_string())
    try:
        assert c.get("/kept")[0] == b"v1"
        assert c.exists("/gone") is None  # the ephemeral node ended with its (closed) session
    finally:
        c.stop()


def test_zookeeper_stop_ends_the_process(zookeeper_factory):
    zk = zookeeper_factory()
    zk.stop()
    assert not zk.alive() and not devcluster.zookeeper_serving(zk.port)


def test_paused_zookeeper_suspends_a_client_which_reconnects_after_resume(zookeeper_factory):
    zk = zookeeper_factory()
    c = KazooClient(hosts=zk.connect_string(), timeout=2)
    states: list[str] = []
    suspended, connected_again = threading.Event(), threading.Event()

    def listener(state: str) -> None:
        states.append(state)
        if state == KazooState.SUSPENDED:
            suspended.set()
        elif state == KazooState.CONNECTED and suspended.is_set():
            connected_again.set()

    c.add_listener(listener)
    c.start(10)
    try:
        c.create("/before", b"x")
        zk.pause()
        assert process_state(zk.proc.pid) == "T"
        assert suspended.wait(10), states
        zk.resume()
        assert connected_again.wait(20), states
        assert c.get("/before")[0] == b"x"
    finally:
        c.stop()
        c.close()


# -- brokers over it ------------------------------------------------------------------------------

def test_broker_cluster_lifecycle(tmp_path, zookeeper):
    cluster = BrokerCluster(tmp_path, zookeeper, size=2, racks=["r1", "r2"],
                            overrides={"offsets.topic.replication.factor": "1", "num.partitions": "2"})
    other = BrokerCluster(tmp_path / "other", zookeeper, size=1)
    assert cluster.chroot != other.chroot and cluster.chroot.startswith("/gregor-")
    try:
        cluster.start()
        assert cluster.bootstrap == f"{cluster.broker(1).bootstrap},{cluster.broker(2).bootstrap}"
        assert cluster.alive_ids() == [1, 2]
        for i, rack in [(1, "r1"), (2, "r2")]:
            b = cluster.broker(i)
            assert b.overrides["broker.id"] == str(i)
            assert b.overrides["zookeeper.connect"] == f"127.0.0.1:{zookeeper.port}{cluster.chroot}"
            assert b.overrides["broker.rack"] == rack
            assert b.overrides["num.partitions"] == "2"
            assert f"broker.id={i}" in cmdline(b.proc.pid)
        with pytest.raises(KeyError):
            cluster.broker(3)

        cluster.pause(2)
        assert process_state(cluster.broker(2).proc.pid) == "T"
        cluster.resume(2)
        assert process_state(cluster.broker(2).proc.pid) != "T"

        port = cluster.broker(1).port
        assert cluster.stop(1) == 0
        assert cluster.alive_ids() == [2]
        cluster.restart(1)
        assert cluster.broker(1).port == port and cluster.alive_ids() == [1, 2]

        cluster.kill(2)
        assert cluster.alive_ids() == [1]
        cluster.pause(1)
        cluster.stop_all()  # a paused broker is resumed to stop
        assert cluster.alive_ids() == []
    finally:
        cluster.kill_all()


def test_cluster_factory_starts_brokers_that_the_test_end_kills(cluster_factory):
    cluster = cluster_factory(size=1, overrides={"offsets.topic.replication.factor": "1"})
    b = cluster.broker(1)
    with socket.create_connection(("127.0.0.1", b.port), timeout=2):
        pass
    assert b.overrides["zookeeper.connect"].endswith(cluster.chroot)


# -- gregor.devcluster: arguments -----------------------------------------------------------------

@pytest.mark.parametrize("argv, message", [
    (["--brokers", "0"], "between 1 and 100 brokers"),
    (["--brokers", "three"], "'three' is not a number"),
    (["--base-port", "70000"], "70000 is not a port number"),
    (["--zookeeper-port", "x"], "'x' is not a port number"),
    (["--base-port", "65534", "--brokers", "3"], "goes past port 65535"),
    (["--zookeeper-port", "9093"], "--zookeeper-port 9093 is one of the brokers' ports 9092-9094"),
    (["--override", "no-equals-sign"], "expected KEY=VALUE"),
    (["--override", "=1"], "expected KEY=VALUE"),
    (["--override", "broker.id=7"], "--override broker.id: devcluster sets it for each broker"),
    (["--override", "log.dirs=/tmp/x"], "--override log.dirs: devcluster sets it"),
    (["--override", "broker.rack=a"], "(use --racks)"),
    (["--override", "no.such.key=1"], "unknown configuration key 'no.such.key'"),
    (["--override", "num.partitions=many"], "invalid value 'many' for num.partitions"),
    (["--racks", "a,,b"], "a rack name is empty"),
    (["--brokers", "2", "--racks", "a,b,c"], "names 3 racks for 2 brokers"),
    (["--no-such-option"], "unrecognized arguments"),
])
def test_devcluster_refuses_bad_arguments(capsys, argv, message):
    with pytest.raises(SystemExit) as e:
        devcluster.main(argv)
    assert e.value.code == 2
    assert message in capsys.readouterr().err


def test_devcluster_plan_gives_each_broker_its_settings(tmp_path):
    plan = devcluster.parse_plan(["--brokers", "4", "--zookeeper-port", "3000", "--base-port", "4000",
                                  "--data-dir", str(tmp_path / "cd"), "--racks", "a,b",
                                  "--override", "min.insync.replicas=2"])
    assert plan.bootstrap == "127.0.0.1:4000,127.0.0.1:4001,127.0.0.1:4002,127.0.0.1:4003"
    assert plan.zookeeper_connect == "127.0.0.1:3000/gregor"
    assert plan.zookeeper_dir == tmp_path / "cd" / "zookeeper"
    assert [b.rack for b in plan.brokers] == ["a", "b", "a", "b"]
    b3 = plan.brokers[2]
    assert b3.overrides == {"broker.id": "3", "listeners": "PLAINTEXT://127.0.0.1:4002",
                            "log.dirs": str((tmp_path / "cd" / "broker-3").resolve()),
                            "zookeeper.connect": "127.0.0.1:3000/gregor", "broker.rack": "a",
                            "min.insync.replicas": "2"}
    assert b3.log_path == tmp_path / "cd" / "broker-3.log"
    cmd = b3.command()
    assert cmd[:4] == [sys.executable, "-m", "gregor", "serve"]
    assert cmd[4:6] == ["--override", "broker.id=3"]
    assert "zookeeper.connect=127.0.0.1:3000/gregor" in cmd
    assert [b.rack for b in devcluster.parse_plan([]).brokers] == [None, None, None]


@pytest.mark.parametrize("which", ["zookeeper", "broker"])
def test_devcluster_says_which_port_is_in_use_and_exits_2(tmp_path, capsys, which):
    zk_port, base = free_port(), free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", zk_port if which == "zookeeper" else base))
        s.listen()
        rc = devcluster.main(["--brokers", "1", "--zookeeper-port", str(zk_port), "--base-port", str(base),
                              "--data-dir", str(tmp_path / "cd")])
    out = capsys.readouterr().err
    assert rc == 2
    busy = f"port {zk_port} (ZooKeeper)" if which == "zookeeper" else f"port {base} (broker-1)"
    assert f"devcluster: {busy} is in use on 127.0.0.1" in out
    assert not (tmp_path / "cd").exists()  # nothing started


def test_log_watch_finds_text_written_in_pieces_after_its_offset(tmp_path):
    log = tmp_path / "b.log"
    log.write_bytes(b"gregor: broker 1 ready on port 1\n")  # an earlier run's
    watch = devcluster.LogWatch(log, log.stat().st_size)
    assert not watch.seen(devcluster.broker_ready_text(1))
    with open(log, "ab") as f:
        for piece in [b"starting\ngregor: bro", b"ker 1 ready on ", b"port 9092\n"]:
            assert not watch.seen(devcluster.broker_ready_text(1))
            f.write(piece)
            f.flush()
    assert watch.seen(devcluster.broker_ready_text(1))
    assert not devcluster.LogWatch(tmp_path / "missing.log").seen("x")


# -- gregor.devcluster: the processes -------------------------------------------------------------

class DevClusterRun:
    """``python -m gregor.devcluster --brokers 1`` on free ports in tmp_path, in a process group
    of its own (as a shell runs it), its output collected."""

    def __init__(self, tmp_path: Path) -> None:
        self.zk_port, self.base_port = free_port(), free_port()
        self.data_dir = tmp_path / "cd"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gregor.devcluster", "--brokers", "1", "--zookeeper-port", str(self.zk_port),
             "--base-port", str(self.base_port), "--data-dir", str(self.data_dir),
             "--override", "offsets.topic.replication.factor=1"],
            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        self.lines: list[str] = []
        self.children: list[tuple[int, int | None]] = []  # (pid, started_at)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.lines.append(raw.decode(errors="replace").rstrip("\n"))

    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_ready(self) -> tuple[int, int]:
        """(ZooKeeper's pid, the broker's pid) once the bootstrap line is out."""
        wait_until(lambda: any("bootstrap servers:" in x for x in self.lines) or self.proc.poll() is not None,
                   timeout=60, what="devcluster to start")
        assert self.proc.poll() is None, self.output()
        kids = children_of(self.proc.pid)
        zk = [p for p in kids if devcluster.ZOOKEEPER_MAIN in cmdline(p)]
        brokers = [p for p in kids if "gregor" in cmdline(p) and "serve" in cmdline(p)]
        assert len(zk) == 1 and len(brokers) == 1, (kids, self.output())
        self.children = [(pid, started_at(pid)) for pid in (zk[0], brokers[0])]
        return zk[0], brokers[0]

    def finish(self, timeout: float = 60) -> int:
        rc = self.proc.wait(timeout)
        self.reader.join(5)
        return rc

    def kill(self) -> None:
        """After a failure: devcluster and its children (in process groups of their own), each only
        if it is still the process seen at the start (devcluster reaps its children, and a reaped
        pid is soon another process's: killing it took a pytest worker down once)."""
        if self.proc.poll() is None:
            self.proc.kill()
        for pid, started in self.children:
            if started is not None and started_at(pid) == started and not dead(pid):
                os.kill(pid, signal.SIGKILL)
        self.proc.wait()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_devcluster_starts_zookeeper_and_brokers_and_a_signal_stops_brokers_then_zookeeper(tmp_path, sig):
    run = DevClusterRun(tmp_path)
    try:
        zk_pid, broker_pid = run.wait_ready()
        assert devcluster.zookeeper_serving(run.zk_port)
        cmd = cmdline(broker_pid)
        assert cmd[cmd.index("-m") + 1:cmd.index("-m") + 3] == ["gregor", "serve"]
        for setting in ["broker.id=1", f"listeners=PLAINTEXT://127.0.0.1:{run.base_port}",
                        f"zookeeper.connect=127.0.0.1:{run.zk_port}/gregor",
                        f"log.dirs={(run.data_dir / 'broker-1').resolve()}", "offsets.topic.replication.factor=1"]:
            assert setting in cmd
        with socket.create_connection(("127.0.0.1", run.base_port), timeout=2):
            pass
        # the children are in a process group of their own: a terminal's Ctrl-C reaches devcluster only
        assert os.getpgid(zk_pid) != run.proc.pid and os.getpgid(broker_pid) != run.proc.pid
        # ZooKeeper is stopped only after the broker has exited: a stopped broker holds it up
        os.kill(broker_pid, signal.SIGSTOP)
        wait_until(lambda: process_state(broker_pid) == "T", what="the broker to stop")
        os.killpg(run.proc.pid, sig)
        wait_until(lambda: any("stopping the brokers" in x for x in run.lines), what="devcluster to stop")
        time.sleep(1)
        assert not dead(broker_pid) and devcluster.zookeeper_serving(run.zk_port)
        os.kill(broker_pid, signal.SIGCONT)  # it now takes the SIGTERM devcluster sent
        assert run.finish() == 0, run.output()
        assert dead(broker_pid) and dead(zk_pid)
    finally:
        run.kill()
    out = run.output()
    assert "devcluster: stopping the brokers (controlled shutdown), then ZooKeeper" in out
    assert "devcluster: stopped" in out
    assert f"devcluster: bootstrap servers: 127.0.0.1:{run.base_port}" in out
    assert "[zk] " in out and "[broker-1] " in out
    broker_log = (run.data_dir / "broker-1.log").read_text()
    assert "shutting down" in broker_log  # SIGTERM's clean stop, not a kill
    assert (run.data_dir / "zookeeper" / "zoo.cfg").exists() and (run.data_dir / "zookeeper" / "version-2").is_dir()
    assert (run.data_dir / "zookeeper.log").read_text()
    assert not devcluster.zookeeper_serving(run.zk_port)


def test_devcluster_stops_the_brokers_and_exits_1_when_zookeeper_dies(tmp_path):
    run = DevClusterRun(tmp_path)
    try:
        zk_pid, broker_pid = run.wait_ready()
        os.kill(zk_pid, signal.SIGKILL)
        assert run.finish() == 1, run.output()
        assert dead(broker_pid)
    finally:
        run.kill()
    assert "devcluster: ZooKeeper exited with code" in run.output()
    assert "shutting down" in (run.data_dir / "broker-1.log").read_text()


def test_devcluster_second_signal_kills_what_is_left(tmp_path):
    run = DevClusterRun(tmp_path)
    try:
        zk_pid, broker_pid = run.wait_ready()
        os.kill(broker_pid, signal.SIGSTOP)  # it would wait for this broker for a minute
        wait_until(lambda: process_state(broker_pid) == "T", what="the broker to stop")
        os.killpg(run.proc.pid, signal.SIGINT)
        wait_until(lambda: any("stopping the brokers" in x for x in run.lines), what="devcluster to stop")
        os.killpg(run.proc.pid, signal.SIGINT)
        assert run.finish(timeout=15) == 0, run.output()
        assert dead(broker_pid) and dead(zk_pid)
    finally:
        run.kill()
    assert "shutting down" not in (run.data_dir / "broker-1.log").read_text()  # killed, not stopped
