"""A development cluster on this machine: a ZooKeeper server and N ``gregor serve`` processes.

``python -m gregor.devcluster [--brokers 3] [--zookeeper-port 2181] [--base-port 9092]
[--data-dir ./cluster-data] [--override KEY=VALUE ...] [--racks a,b,c] [--quiet]`` (``make cluster``).

ZooKeeper is the Debian package's jar run in the foreground (``ZooKeeperServerMain`` over a
generated ``zoo.cfg``, 127.0.0.1 only, admin server off), never a system service. Broker N gets
``broker.id=N``, ``listeners=PLAINTEXT://127.0.0.1:<base-port + N - 1>``,
``log.dirs=<data-dir>/broker-N`` and ``zookeeper.connect=127.0.0.1:<zookeeper-port>/gregor``;
the bootstrap servers are printed once every broker has said it is ready (started and, as a
cluster member, joined).
Under the data directory: ``zookeeper/`` (ZooKeeper's data and its ``zoo.cfg``), ``broker-N/``,
and one log file per process (``zookeeper.log``, ``broker-N.log``); the logs are also shown on
the terminal line by line, prefixed ``[zk]``/``[broker-N]`` (``--quiet``: not shown).

SIGINT (Ctrl-C), SIGTERM or SIGHUP stop the brokers with SIGTERM (each does its controlled
shutdown), wait for them, then stop ZooKeeper, and exit 0; a second signal kills what is left.
The children run in their own process group, so Ctrl-C on the terminal reaches this process
only and ZooKeeper outlives the brokers' shutdown; they get SIGTERM if this process dies.
Exit codes: 0 after a stop by signal, 2 for bad arguments or a port in use, 1 when ZooKeeper or
a broker fails to start, ZooKeeper dies, or Java or ZooKeeper is not installed.

The ZooKeeper parts (``zoo_cfg``, ``zookeeper_command``, ``zookeeper_serving``) are also what
the tests' ZooKeeper server (tests/support/zookeeper.py) runs; ``build_plan`` and
``DevCluster.start``/``kill_broker``/``restart_broker``/``kill_all`` are how bench/cluster.py
runs its clusters.
"""

from __future__ import annotations

import argparse
import ctypes
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import FrameType
from typing import IO

from gregor.config import BrokerConfig, ConfigError

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")  # Debian package zookeeper (libzookeeper-java)
# a logging backend for ZooKeeper's slf4j (Debian's libslf4j-java, a dependency of the package);
# without it ZooKeeper logs nothing
SLF4J_SIMPLE_JAR = Path("/usr/share/java/slf4j-simple.jar")
ZOOKEEPER_MAIN = "org.apache.zookeeper.server.ZooKeeperServerMain"
HOST = "127.0.0.1"
CHROOT = "/gregor"
# keys devcluster sets per broker: an --override of one of them would contradict it
PER_BROKER_KEYS = ("broker.id", "node.id", "listeners", "advertised.listeners", "log.dirs", "log.dir",
                   "zookeeper.connect", "broker.rack")
START_TIMEOUT_S = 30.0
BROKER_STOP_TIMEOUT_S = 60.0  # controlled shutdown retries included
BROKER_STOP_WITHOUT_ZOOKEEPER_S = 10.0  # no controlled shutdown is possible: only the local stop
ZOOKEEPER_STOP_TIMEOUT_S = 10.0


class SetupError(Exception):
    """Java or ZooKeeper is not installed."""


class StartError(Exception):
    """A port is in use, or ZooKeeper or a broker did not start (the message says which and why)."""


# -- ZooKeeper ----------------------------------------------------------------------------------

def zoo_cfg(data_dir: Path, port: int, extra: Mapping[str, str] | None = None) -> str:
    """A standalone server's zoo.cfg: 127.0.0.1 only, admin server off, ``srvr`` and ``ruok``
    answered, sessions of 1 to 60 s (tickTime 500 ms)."""
    settings = {
        "tickTime": "500",
        "dataDir": str(data_dir.resolve()),
        "clientPort": str(port),
        "clientPortAddress": HOST,
        "admin.enableServer": "false",
        "minSessionTimeout": "1000",
        "maxSessionTimeout": "60000",
        "4lw.commands.whitelist": "srvr,ruok",
        **(extra or {}),
    }
    return "".join(f"{k}={v}\n" for k, v in settings.items())


def write_zoo_cfg(path: Path, data_dir: Path, port: int, extra: Mapping[str, str] | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(zoo_cfg(data_dir, port, extra))
    return path


def zookeeper_command(cfg_path: Path) -> list[str]:
    """The java command line of a ZooKeeper server over ``cfg_path``; SetupError when Java or the
    Debian package is missing."""
    java = shutil.which("java")
    if java is None:
        raise SetupError("java not found: ZooKeeper needs a Java runtime (make cluster installs it)")
    if not ZOOKEEPER_JAR.exists():
        raise SetupError(f"{ZOOKEEPER_JAR} not found: install the Debian package zookeeper (make cluster does)")
    classpath = [str(ZOOKEEPER_JAR)] + ([str(SLF4J_SIMPLE_JAR)] if SLF4J_SIMPLE_JAR.exists() else [])
    return [java, "-Dorg.slf4j.simpleLogger.showDateTime=true",
            "-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd HH:mm:ss,SSS",
            "-cp", ":".join(classpath), ZOOKEEPER_MAIN, str(cfg_path.resolve())]


def zookeeper_serving(port: int, host: str = HOST, timeout: float = 1.0) -> bool:
    """True when the server on ``port`` serves requests (its ``srvr`` answer names its mode; a
    server still loading its data answers that it is not serving)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(b"srvr")
            reply = b""
            while chunk := s.recv(4096):
                reply += chunk
    except OSError:
        return False
    return b"Mode:" in reply


def broker_ready_text(broker_id: int) -> str:
    """What ``gregor serve`` writes once its broker has started (for a cluster member: joined the
    cluster) and handles SIGTERM as a clean stop; the listener opens earlier."""
    return f"gregor: broker {broker_id} ready on port"


class LogWatch:
    """Looks for a text in what a log file gets from ``offset`` on, reading only what is new."""

    def __init__(self, path: Path, offset: int = 0) -> None:
        self.path, self.offset = path, offset
        self.tail = b""

    def seen(self, text: str) -> bool:
        needle = text.encode()
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                new = f.read()
        except FileNotFoundError:
            return False
        self.offset += len(new)
        window = self.tail + new
        if needle in window:
            return True
        self.tail = window[-len(needle):]
        return False


def port_in_use(port: int, host: str = HOST) -> bool:
    """True when something listens on host:port (a bind as a server would do it fails)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


# -- the plan: what runs where -------------------------------------------------------------------

@dataclass(frozen=True)
class BrokerSpec:
    broker_id: int
    port: int
    data_dir: Path
    rack: str | None
    overrides: dict[str, str]  # everything passed with --override, devcluster's keys first

    @property
    def name(self) -> str:
        return f"broker-{self.broker_id}"

    @property
    def log_path(self) -> Path:
        return self.data_dir.parent / f"{self.name}.log"

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "gregor", "serve"]
        for k, v in self.overrides.items():
            cmd += ["--override", f"{k}={v}"]
        return cmd


@dataclass(frozen=True)
class Plan:
    data_dir: Path
    zookeeper_port: int
    brokers: list[BrokerSpec]
    quiet: bool = False

    @property
    def zookeeper_dir(self) -> Path:
        return self.data_dir / "zookeeper"

    @property
    def zookeeper_log(self) -> Path:
        return self.data_dir / "zookeeper.log"

    @property
    def zookeeper_connect(self) -> str:
        return f"{HOST}:{self.zookeeper_port}{CHROOT}"

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{HOST}:{b.port}" for b in self.brokers)


def _port(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 1 <= v <= 65535:
        raise argparse.ArgumentTypeError(f"{v} is not a port number (1-65535)")
    return v


def _broker_count(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 1 <= v <= 100:
        raise argparse.ArgumentTypeError(f"{v}: between 1 and 100 brokers")
    return v


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m gregor.devcluster",
        description="Run ZooKeeper and N Gregor brokers on this machine (127.0.0.1) until Ctrl-C.")
    p.add_argument("--brokers", type=_broker_count, default=3, metavar="N", help="number of brokers (default 3)")
    p.add_argument("--zookeeper-port", type=_port, default=2181, metavar="PORT",
                   help="ZooKeeper's client port (default 2181)")
    p.add_argument("--base-port", type=_port, default=9092, metavar="PORT",
                   help="broker N listens on PORT + N - 1 (default 9092)")
    p.add_argument("--data-dir", type=Path, default=Path("cluster-data"), metavar="DIR",
                   help="ZooKeeper's and the brokers' data and logs (default ./cluster-data)")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="a broker config key for every broker (Kafka's names), may be repeated")
    p.add_argument("--racks", metavar="A,B,...",
                   help="broker.rack of each broker, in order; repeated round-robin when there are fewer racks")
    p.add_argument("--quiet", action="store_true", help="do not show the processes' logs on the terminal")
    return p


def parse_plan(argv: list[str] | None = None) -> Plan:
    """The plan from the command line; argparse's exit 2 with a message for anything wrong."""
    parser = build_parser()
    args = parser.parse_args(argv)
    n = args.brokers
    if args.base_port + n - 1 > 65535:
        parser.error(f"--base-port {args.base_port} with {n} brokers goes past port 65535")
    if args.base_port <= args.zookeeper_port < args.base_port + n:
        parser.error(f"--zookeeper-port {args.zookeeper_port} is one of the brokers' ports "
                     f"{args.base_port}-{args.base_port + n - 1}")
    overrides: dict[str, str] = {}
    for item in args.override:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            parser.error(f"--override {item!r}: expected KEY=VALUE")
        if key in PER_BROKER_KEYS:
            parser.error(f"--override {key}: devcluster sets it for each broker"
                         + (" (use --racks)" if key == "broker.rack" else ""))
        overrides[key] = value
    racks: list[str | None] = [None]
    if args.racks is not None:
        names = [r.strip() for r in args.racks.split(",")]
        if not all(names):
            parser.error(f"--racks {args.racks!r}: a rack name is empty")
        if len(names) > n:
            parser.error(f"--racks names {len(names)} racks for {n} brokers")
        racks = list(names)
    try:
        return build_plan(args.data_dir, args.zookeeper_port, list(range(args.base_port, args.base_port + n)),
                          overrides, racks, args.quiet)
    except ConfigError as e:
        parser.error(f"--override: {e}")


def build_plan(data_dir: Path, zookeeper_port: int, broker_ports: list[int], overrides: Mapping[str, str] | None = None,
               racks: list[str | None] | None = None, quiet: bool = False) -> Plan:
    """The plan of a cluster with one broker per port in ``broker_ports`` (broker ids 1, 2, ...),
    ``racks`` given round-robin, ``overrides`` for every broker after devcluster's own keys;
    ConfigError when a broker's settings are not valid."""
    racks = racks or [None]
    plan = Plan(data_dir, zookeeper_port, [], quiet)
    for i, port in enumerate(broker_ports):
        broker_id, rack = i + 1, racks[i % len(racks)]
        data = data_dir / f"broker-{broker_id}"
        settings = {"broker.id": str(broker_id), "listeners": f"PLAINTEXT://{HOST}:{port}",
                    "log.dirs": str(data.resolve()), "zookeeper.connect": plan.zookeeper_connect}
        if rack is not None:
            settings["broker.rack"] = rack
        settings.update(overrides or {})
        BrokerConfig.from_mapping(settings)
        plan.brokers.append(BrokerSpec(broker_id, port, data, rack, settings))
    return plan


# -- running it ----------------------------------------------------------------------------------

class Output:
    """The terminal (standard output, errors to standard error), written by one thread at a time."""

    def __init__(self, stream: IO[str], errors: IO[str]) -> None:
        self.stream, self.errors = stream, errors
        self.lock = threading.Lock()

    def say(self, line: str) -> None:
        self.line(f"devcluster: {line}")

    def error(self, line: str) -> None:
        self.line(f"devcluster: {line}", self.errors)

    def line(self, line: str, stream: IO[str] | None = None) -> None:
        stream = stream or self.stream
        with self.lock:
            try:
                stream.write(line + "\n")
                stream.flush()
            except (OSError, ValueError):
                pass  # the terminal went away: the processes keep their log files


class LogFollower(threading.Thread):
    """Shows the lines appended to a log file from ``offset`` on, prefixed, until ``finish()`` and
    the end of the file."""

    def __init__(self, path: Path, prefix: str, offset: int, out: Output) -> None:
        super().__init__(name=f"follow {path.name}", daemon=True)
        self.path, self.prefix, self.offset, self.out = path, prefix, offset, out
        self.finishing = threading.Event()

    def run(self) -> None:
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            pending = b""
            while True:
                finishing = self.finishing.is_set()  # read once more after finish() was called
                chunk = f.read(65536)
                if chunk:
                    pending += chunk
                    *lines, pending = pending.split(b"\n")
                    for raw in lines:
                        self.out.line(f"{self.prefix} {raw.decode(errors='replace')}")
                elif finishing:
                    if pending:
                        self.out.line(f"{self.prefix} {pending.decode(errors='replace')}")
                    return
                else:
                    time.sleep(0.1)

    def finish(self) -> None:
        self.finishing.set()
        self.join(5)


def _die_with_parent() -> Callable[[], None] | None:
    """A preexec function that has the child get SIGTERM when this process dies (Linux); None
    elsewhere. (Linux sends it when the thread that spawned the child ends: children are spawned
    from the main thread, ``make cluster``'s before any other thread starts.)"""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1

    def preexec() -> None:
        prctl(pr_set_pdeathsig, int(signal.SIGTERM), 0, 0, 0)

    return preexec


@dataclass
class Child:
    name: str
    prefix: str
    command: list[str]
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    offset: int = 0
    follower: LogFollower | None = None
    reported: bool = False

    def spawn(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"---- devcluster {time.strftime('%Y-%m-%d %H:%M:%S')}: {' '.join(self.command)}\n".encode())
            log.flush()
            self.offset = log.tell()
            self.proc = subprocess.Popen(self.command, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                         start_new_session=True, preexec_fn=_die_with_parent())

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            assert self.proc is not None
            try:
                self.proc.send_signal(sig)
            except ProcessLookupError:
                pass

    def follow(self, out: Output) -> None:
        self.follower = LogFollower(self.log_path, self.prefix, self.offset, out)
        self.follower.start()

    def tail(self, lines: int = 20) -> str:
        text = self.log_path.read_bytes()[self.offset:].decode(errors="replace")
        return "\n".join(text.splitlines()[-lines:])


class DevCluster:
    """The processes of a plan. ``run()`` is ``make cluster``: start, show, stop on a signal.
    Programs that drive a cluster themselves (bench/cluster.py) call ``start()``, then
    ``kill_broker``/``restart_broker`` as they need, and ``kill_all()`` or ``stop()`` at the end."""

    def __init__(self, plan: Plan, out: IO[str], err: IO[str]) -> None:
        self.plan = plan
        self.out = Output(out, err)
        self.stop_requested = threading.Event()
        self.signals = 0
        self.failure = ""  # why the last start failed, as said on the terminal
        self.cfg_path = plan.zookeeper_dir / "zoo.cfg"
        self.zookeeper = Child("ZooKeeper", "[zk]", [], plan.zookeeper_log)
        self.brokers = [Child(b.name, f"[{b.name}]", b.command(), b.log_path) for b in plan.brokers]

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.signals += 1
        self.stop_requested.set()
        if self.signals > 1:  # a second Ctrl-C: no more waiting
            for c in [*self.brokers, self.zookeeper]:
                c.signal(signal.SIGKILL)

    def _busy_ports(self) -> list[tuple[int, str]]:
        return [(p, what) for p, what in [(self.plan.zookeeper_port, "ZooKeeper")]
                + [(b.port, b.name) for b in self.plan.brokers] if port_in_use(p)]

    def run(self) -> int:
        busy = self._busy_ports()
        if busy:
            for p, what in busy:
                self.out.error(f"port {p} ({what}) is in use on {HOST}: stop what listens there "
                             "or choose other ports (--zookeeper-port, --base-port)")
            return 2
        try:
            self.zookeeper.command = zookeeper_command(self.cfg_path)
        except SetupError as e:
            self.out.error(str(e))
            return 1
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, self._on_signal)
        try:
            return self._run()
        finally:
            self._stop_all()

    def _run(self) -> int:
        plan = self.plan
        if not self._start(follow=not plan.quiet):
            return 0 if self.stop_requested.is_set() else 1
        self._summary()
        while not self.stop_requested.wait(0.2):
            if not self.zookeeper.alive():
                assert self.zookeeper.proc is not None
                self.out.error(f"ZooKeeper exited with code {self.zookeeper.proc.returncode} "
                               f"(log {plan.zookeeper_log}); stopping the brokers (killed after "
                               f"{BROKER_STOP_WITHOUT_ZOOKEEPER_S:.0f} s: no controlled shutdown without ZooKeeper)")
                return 1
            for c in self.brokers:
                if not c.alive() and not c.reported:
                    assert c.proc is not None
                    c.reported = True
                    self.out.error(f"{c.name} exited with code {c.proc.returncode} (log {c.log_path})")
        self.out.say("stopping the brokers (controlled shutdown), then ZooKeeper")
        return 0

    def _start(self, follow: bool) -> bool:
        """Spawn ZooKeeper, wait until it serves, spawn the brokers (then, with ``follow``, show
        the logs) and wait until each is ready; False when something did not start."""
        plan = self.plan
        write_zoo_cfg(self.cfg_path, plan.zookeeper_dir, plan.zookeeper_port)
        for spec in plan.brokers:
            spec.data_dir.mkdir(parents=True, exist_ok=True)
        self.zookeeper.spawn()
        if not self._wait(self.zookeeper, lambda: zookeeper_serving(plan.zookeeper_port)):
            return False
        for b in self.brokers:
            b.spawn()
        # threads only from here on: every child has been forked
        if follow:
            for c in [self.zookeeper, *self.brokers]:
                c.follow(self.out)
        return all(self._wait_ready(spec.broker_id) for spec in plan.brokers)

    def _wait_ready(self, broker_id: int) -> bool:
        child = self.broker(broker_id)
        watch = LogWatch(child.log_path, child.offset)
        return self._wait(child, partial(watch.seen, broker_ready_text(broker_id)))

    def _wait(self, child: Child, ready: Callable[[], bool]) -> bool:
        """Wait until ``ready()``; False (with the reason said) when the child exits, the start
        times out or a stop is requested."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while not ready():
            if self.stop_requested.is_set():
                self.failure = "a stop was requested"
                return False
            if not child.alive():
                assert child.proc is not None
                child.reported = True
                self._fail(f"{child.name} exited with code {child.proc.returncode} while starting; "
                           f"the end of {child.log_path}:\n{child.tail()}")
                return False
            if time.monotonic() > deadline:
                self._fail(f"{child.name} did not start within {START_TIMEOUT_S:.0f} s (log {child.log_path})")
                return False
            time.sleep(0.05)
        return True

    def _fail(self, why: str) -> None:
        self.failure = why
        self.out.error(why)

    def _summary(self) -> None:
        p = self.plan
        self.out.say(f"ZooKeeper on {HOST}:{p.zookeeper_port} (data {p.zookeeper_dir}, log {p.zookeeper_log})")
        for b in p.brokers:
            rack = f", rack {b.rack}" if b.rack is not None else ""
            self.out.say(f"broker {b.broker_id} on {HOST}:{b.port} (data {b.data_dir}, log {b.log_path}{rack})")
        self.out.say(f"zookeeper.connect={p.zookeeper_connect}")
        self.out.say(f"bootstrap servers: {p.bootstrap}")
        if p.quiet:
            self.out.say(f"logs: tail -F {p.data_dir}/*.log")
        self.out.say("Ctrl-C stops the brokers (controlled shutdown), then ZooKeeper")

    # -- driven by a program ------------------------------------------------------------------------

    def start(self) -> None:
        """Start ZooKeeper and every broker and wait until each broker is ready, with no signal
        handling and no log shown: the caller stops everything (``kill_all()`` or ``stop()``,
        also after a failed start). StartError when a port is in use or a process did not
        start; SetupError when Java or ZooKeeper is missing."""
        busy = self._busy_ports()
        if busy:
            raise StartError(", ".join(f"port {p} ({what}) is in use on {HOST}" for p, what in busy))
        self.zookeeper.command = zookeeper_command(self.cfg_path)
        if not self._start(follow=False):
            raise StartError(self.failure)

    def broker(self, broker_id: int) -> Child:
        if not 1 <= broker_id <= len(self.brokers):
            raise KeyError(f"no broker {broker_id} in a cluster of {len(self.brokers)}")
        return self.brokers[broker_id - 1]

    def kill_broker(self, broker_id: int) -> None:
        """SIGKILL one broker and wait until it is gone (its ZooKeeper session stays until it expires)."""
        child = self.broker(broker_id)
        child.signal(signal.SIGKILL)
        if child.proc is not None:
            child.proc.wait()

    def restart_broker(self, broker_id: int) -> None:
        """Start a broker that is not running (same id, port and data) and wait until it is ready;
        StartError when it does not start."""
        child = self.broker(broker_id)
        if child.alive():
            raise StartError(f"{child.name} is running")
        child.reported = False
        child.spawn()
        if not self._wait_ready(broker_id):
            raise StartError(self.failure)

    def stop(self) -> None:
        """Stop the brokers with SIGTERM (controlled shutdown), then ZooKeeper, as ``make cluster`` does."""
        self._stop_all()

    def kill_all(self) -> None:
        """SIGKILL the brokers and ZooKeeper and wait for them: the quick end of a throwaway cluster."""
        for c in [*self.brokers, self.zookeeper]:
            c.signal(signal.SIGKILL)
        for c in [*self.brokers, self.zookeeper]:
            if c.proc is not None:
                c.proc.wait()
            if c.follower is not None:
                c.follower.finish()

    def _stop_all(self) -> None:
        for c in self.brokers:
            c.signal(signal.SIGTERM)
        zookeeper_up = self.zookeeper.proc is None or self.zookeeper.alive()
        self._wait_exit(self.brokers, BROKER_STOP_TIMEOUT_S if zookeeper_up else BROKER_STOP_WITHOUT_ZOOKEEPER_S)
        self.zookeeper.signal(signal.SIGTERM)
        self._wait_exit([self.zookeeper], ZOOKEEPER_STOP_TIMEOUT_S)
        for c in [*self.brokers, self.zookeeper]:
            if c.follower is not None:
                c.follower.finish()
        self.out.say("stopped")

    def _wait_exit(self, children: list[Child], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for c in children:
            if c.proc is None:
                continue
            try:
                c.proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.out.error(f"{c.name} did not stop within {timeout:.0f} s: killing it")
                c.signal(signal.SIGKILL)
                c.proc.wait()


def main(argv: list[str] | None = None, out: IO[str] | None = None, err: IO[str] | None = None) -> int:
    plan = parse_plan(argv)
    return DevCluster(plan, out or sys.stdout, err or sys.stderr).run()


if __name__ == "__main__":
    sys.exit(main())
