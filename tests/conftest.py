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
