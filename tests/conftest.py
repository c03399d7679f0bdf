"""Fixtures every test folder may use: real brokers in subprocesses (tests/integration, tests/spark).
Helpers that are not fixtures are in tests/support."""

from __future__ import annotations

import os

import pytest

from tests.support.broker_process import BrokerProcess

os.environ.setdefault("PYTHONUNBUFFERED", "1")  # broker subprocesses write their output unbuffered


@pytest.fixture
def broker_factory(tmp_path):
    """Starts brokers with ``--override`` settings given as keywords (``log_segment_bytes="1000"``
    for log.segment.bytes); each is killed at the end of the test if still running."""
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
