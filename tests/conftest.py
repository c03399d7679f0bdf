"""Fixtures every test folder may use: a broker without sockets whose services tests call in
process (tests/apis, tests/server), and real brokers in subprocesses (tests/integration,
tests/spark). Helpers that are not fixtures are in tests/support."""

from __future__ import annotations

import os

import pytest

from tests.support.broker_process import BrokerProcess

os.environ.setdefault("PYTHONUNBUFFERED", "1")  # broker subprocesses write their output unbuffered


@pytest.fixture
def in_process_broker_factory(tmp_path):
    """Opens brokers without sockets over data directories under tmp_path, with config settings
    given as a dict (``{"auto.create.topics.enable": "false"}``); each is closed at the end."""
    # imported here: the test folders that never open a broker do not load the whole of it
    from tests.support.in_process import InProcessBroker

    opened: list[InProcessBroker] = []

    def make(settings: dict[str, str] | None = None) -> InProcessBroker:
        b = InProcessBroker(tmp_path / f"node{len(opened)}", settings)
        opened.append(b)
        return b

    yield make
    for b in opened:
        b.close()


@pytest.fixture
def in_process_broker(in_process_broker_factory):
    return in_process_broker_factory()


@pytest.fixture
def broker_factory(tmp_path):
    """Starts brokers in subprocesses with ``--override`` settings given as keywords
    (``log_segment_bytes="1000"`` for log.segment.bytes); each is killed at the end of the test
    if still running."""
    started: list[BrokerProcess] = []

    def make(**overrides: str) -> BrokerProcess:
        b = BrokerProcess(tmp_path / f"data{len(started)}", {k.replace("_", "."): v for k, v in overrides.items()})
        started.append(b)
        return b.start()

    yield make
    for b in started:
        if b.alive():
            b.kill()


@pytest.fixture
def broker(broker_factory):
    return broker_factory()


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory):
    """One ZooKeeper server for the whole session (it starts in about a second); each cluster
    takes a chroot of its own on it. Tests must not stop, kill or pause it: those that do that to
    ZooKeeper start their own with ``zookeeper_factory``."""
    from tests.support.zookeeper import ZooKeeperServer

    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper") / "data").start()
    yield server
    if server.alive():
        server.stop()


@pytest.fixture
def zookeeper_factory(tmp_path):
    """Starts ZooKeeper servers of the test's own (``make()``, ``make(port=...)``), under tmp_path;
    each is killed at the end of the test if still running."""
    from tests.support.zookeeper import ZooKeeperServer

    started: list[ZooKeeperServer] = []

    def make(port: int | None = None) -> ZooKeeperServer:
        server = ZooKeeperServer(tmp_path / f"zookeeper{len(started)}", port)
        started.append(server)
        return server.start()

    yield make
    for server in started:
        if server.proc is not None and server.alive():
            server.kill()


@pytest.fixture
def cluster_factory(tmp_path, zookeeper):
    """Starts clusters of brokers in subprocesses: ``make(size=3, overrides=None, racks=None,
    zk=None)`` (zk: a server from ``zookeeper_factory``; default: the session's, under a chroot
    of the cluster's own). Brokers still running at the end of the test are killed."""
    from tests.support.cluster import BrokerCluster

    made: list[BrokerCluster] = []

    def make(size: int = 3, overrides: dict[str, str] | None = None, racks: list[str] | None = None,
             zk=None) -> BrokerCluster:
        cluster = BrokerCluster(tmp_path / f"cluster{len(made)}", zk or zookeeper, size, overrides, racks)
        made.append(cluster)
        return cluster.start()

    yield make
    for cluster in made:
        cluster.kill_all()  # SIGKILL ends a paused broker too


def pytest_configure(config):
    """The controller of a ``--dist loadgroup`` run gives its workers a folder where each writes
    the group of every test it collected (tests/support/xdist_scheduling.py reads it)."""
    if not hasattr(config, "workerinput") and config.getoption("dist", "no") == "loadgroup":
        from tests.support import xdist_scheduling

        xdist_scheduling.prepare_group_folder()


def test_group(item) -> str:
    """A test module runs on one worker (its module fixtures are started once), and every test
    that starts Spark runs on the same worker, one at a time: a Spark session per worker would be
    three JVMs competing for the machine's cores."""
    marker = item.get_closest_marker("xdist_group")
    if marker is not None:
        return str(marker.args[0] if marker.args else marker.kwargs.get("name", "default"))
    path = item.nodeid.split("::", 1)[0]
    uses_spark = ("spark" in getattr(item, "fixturenames", ())
                  or path.startswith(("tests/spark/", "tests/lagreport/")) or "lag_report" in path)
    return "spark" if uses_spark else path


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (``make test`` runs ``--dist loadgroup``) each test's group (test_group)
    is told to the controller's scheduler (tests/support/xdist_scheduling.py), and marked as
    xdist_group for pytest versions where xdist's own marking still works."""
    groups = {}
    for item in items:
        group = test_group(item)
        groups[item.nodeid] = group
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(group))
    if hasattr(config, "workerinput"):
        from tests.support import xdist_scheduling

        xdist_scheduling.write_groups(config.workerinput["workerid"], groups)


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadgroup`` that survives a crashed worker (tests/support/xdist_scheduling.py)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from tests.support.xdist_scheduling import CrashSafeLoadGroupScheduling

    return CrashSafeLoadGroupScheduling(config, log)
